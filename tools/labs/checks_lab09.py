"""Checks for lab 09 (an atomic commit with a manifest and its verify; a bit-exact comparison
of two states; Young's and Daly's intervals; the goodput model).

Q1 commits directories of random files in temporary folders with the student's
``atomic_commit`` while ``os.rename`` and ``os.fsync`` are wrapped: at the moment of the
rename the manifest must already list every file with its sha256 and size, and every file and
the manifest must have been fsynced. Then a forked child commits with ``os.rename`` replaced
by a SIGKILL of itself, and nothing may exist under the final name afterwards (a commit that
writes into the final directory first leaves a half checkpoint there). ``verify_checkpoint``
gets a correct checkpoint, one with a flipped bit (same size), one with a file missing and
one without a manifest. Q2 gets state dicts that differ in one unit in the last place, in
the sign of a zero, in dtype only, in shape only, in a name only one of them has, and two
equal ones holding the same NaN. Q3 and Q4 are held against Daly's published cases and
:mod:`perfkit.saving.interval`; a wrong answer is matched against the usual wrong formulas
so that the message names the mistake. Used by ``make grade`` and tests/labs/.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from perfkit.saving import interval
from tools.grade import require

FILES = ("__0_0.distcp", "__1_0.distcp", ".metadata")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def _partial() -> Iterator[tuple[Path, Path]]:
    """A fresh ``step_7.partial`` with three random files, and the final path beside it."""
    root = Path(tempfile.mkdtemp(prefix="lab09-"))
    try:
        part = root / "step_7.partial"
        part.mkdir()
        for i, name in enumerate(FILES):
            (part / name).write_bytes(os.urandom(1000 + 37 * i))
        yield part, root / "step_7"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _manifest_problem(d: Path, shas: dict[str, str]) -> str:
    """Why ``d``'s manifest does not describe ``shas`` (name -> sha256), or ""."""
    mf = d / "manifest.json"
    if not mf.is_file():
        return "there was no manifest.json in it"
    try:
        files = json.loads(mf.read_text())["files"]
    except (ValueError, KeyError, TypeError) as e:
        return f"its manifest.json is not {{\"files\": {{...}}}} JSON ({e!r})"
    for name, sha in shas.items():
        if name not in files:
            return f"the manifest does not list {name}"
        entry = files[name]
        if not isinstance(entry, dict) or "sha256" not in entry:
            return (f"the manifest's entry for {name} has no sha256 ({entry!r}): sizes alone do "
                    "not catch a flipped bit")
        if entry["sha256"] != sha:
            return f"the manifest's sha256 of {name} is not the file's"
        if entry.get("bytes") != (d / name).stat().st_size:
            return f"the manifest's bytes of {name} are {entry.get('bytes')!r}, not its size"
    return ""


def _commit_once(commit) -> None:
    with _partial() as (part, final):
        shas = {n: _sha(part / n) for n in FILES}
        seen: dict = {"renames": [], "fsynced": set()}
        real_rename, real_fsync = os.rename, os.fsync

        def rename(src, dst, *a, **k):
            if Path(src) == part:
                seen["renames"].append((_manifest_problem(part, shas), set(seen["fsynced"]),
                                        final.exists()))
            return real_rename(src, dst, *a, **k)

        def fsync(fd):
            with contextlib.suppress(OSError):
                seen["fsynced"].add(Path(os.readlink(f"/proc/self/fd/{fd}")).name)
            return real_fsync(fd)

        os.rename, os.fsync = rename, fsync
        try:
            got = commit(part, final)
        finally:
            os.rename, os.fsync = real_rename, real_fsync
        assert seen["renames"], (
            "atomic_commit never renamed the .partial directory to its final name with os.rename: "
            "one rename is what makes a checkpoint appear complete at once")
        problem, fsynced, existed = seen["renames"][0]
        assert not existed, (
            "the final directory existed before the rename: files written under the final name "
            "are a checkpoint that looks complete before it is")
        assert not problem, (
            f"at the moment of the rename {problem}: the manifest must be written (and fsynced) "
            "before the rename, or a kill right after the rename leaves a checkpoint without "
            "its manifest (renamed before the manifest was complete)")
        unsynced = sorted(set(FILES) - fsynced)
        assert not unsynced, (
            f"{unsynced} were not fsynced before the rename: after a power loss the rename can "
            "reach the disk before the data it names")
        assert "manifest.json" in fsynced, (
            "manifest.json was not fsynced before the rename: fsync it after writing it")
        assert got is not None and Path(got) == final, f"atomic_commit must return final, got {got!r}"
        assert final.is_dir() and not part.exists(), "after the commit, final must exist and partial not"
        assert not _manifest_problem(final, shas), _manifest_problem(final, shas)


def _killed_before_rename(commit) -> None:
    with _partial() as (part, final):
        pid = os.fork()
        if pid == 0:  # the child: dies where the rename would be
            try:
                os.rename = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
                commit(part, final)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status)
        assert not final.exists() or not any(final.iterdir()), (
            "a commit killed at its rename left files under the final name "
            f"({sorted(p.name for p in final.iterdir())}): a loader would take them for a "
            "complete checkpoint. Write everything under the .partial name; rename last")
        assert killed, ("atomic_commit never reached os.rename in a child process: rename the "
                        ".partial directory to final with os.rename")


def check_commit(ns: dict) -> None:
    commit = require(ns, "atomic_commit")
    verify = require(ns, "verify_checkpoint")
    _commit_once(commit)
    _killed_before_rename(commit)
    with _partial() as (part, final):
        commit(part, final)
        assert verify(final) is None, "verify_checkpoint must return None for a complete checkpoint"
        target = final / FILES[1]
        data = bytearray(target.read_bytes())
        data[500] ^= 0x04
        target.write_bytes(bytes(data))
        try:
            verify(final)
        except ValueError as e:
            assert FILES[1] in str(e), f"verify_checkpoint's message must name {FILES[1]}, got {e}"
        else:
            raise AssertionError(
                f"verify_checkpoint passed a checkpoint whose {FILES[1]} has one flipped bit and the "
                "same size: compare each file's sha256 with the manifest, not only its size")
        (final / FILES[0]).unlink()
        try:
            verify(final)
        except ValueError as e:
            assert FILES[0] in str(e), (
                f"verify_checkpoint's message must name the missing {FILES[0]}, got {e}")
        else:
            raise AssertionError(f"verify_checkpoint passed a checkpoint whose {FILES[0]} is missing")
        (final / "manifest.json").unlink()
        try:
            verify(final)
        except ValueError:
            pass
        else:
            raise AssertionError("verify_checkpoint passed a directory without manifest.json")


# --- Q2 ----------------------------------------------------------------------------------


def check_first_difference(ns: dict) -> None:
    f = require(ns, "first_difference")
    g = torch.Generator().manual_seed(3)
    w = torch.randn(8, 8, generator=g, dtype=torch.float64)
    b = torch.randn(8, generator=g, dtype=torch.float64)
    base = {"embed.weight": w, "head.bias": b, "step": torch.tensor(12)}

    def copy(**changed):
        return {**{k: v.clone() for k, v in base.items()}, **changed}

    got = f(base, copy())
    assert got is None, f"two identical states: first_difference must return None, got {got!r}"
    ulp = b.clone()
    ulp[3] = torch.nextafter(ulp[3], ulp[3] + 1)
    got = f(base, copy(**{"head.bias": ulp}))
    assert got == "head.bias", (
        f"head.bias differs by one unit in the last place in one entry and first_difference returned "
        f"{got!r}: allclose/isclose forgive that, a bit-exact check does not")
    zero = torch.zeros(4, dtype=torch.float64)
    got = f({"z": zero}, {"z": -zero})
    assert got == "z", (
        f"0.0 against -0.0 returned {got!r}: they compare equal (==, torch.equal) but differ in the "
        "sign bit; compare the bytes")
    nan = torch.tensor([1.0, math.nan], dtype=torch.float64)
    got = f({"x": nan}, {"x": nan.clone()})
    assert got is None, (
        f"two tensors with the same NaN at the same place returned {got!r}: NaN != NaN under == and "
        "torch.equal, but their bits are the same; compare the bytes")
    got = f({"x": torch.zeros(2, dtype=torch.float32)}, {"x": torch.zeros(2, dtype=torch.int32)})
    assert got == "x", (
        f"zeros in float32 and in int32 (the same bytes) returned {got!r}: compare dtypes too "
        "(torch.equal ignores them)")
    got = f({"x": torch.ones(2, 3)}, {"x": torch.ones(3, 2)})
    assert got == "x", f"shapes (2, 3) and (3, 2) returned {got!r}: compare shapes too"
    got = f(base, {k: v.clone() for k, v in base.items() if k != "step"})
    assert got == "step", (
        f"'step' missing from the second state returned {got!r}: a name only one has differs")
    got = f({k: v.clone() for k, v in base.items() if k != "step"}, base)
    assert got == "step", f"'step' only in the second state returned {got!r}: look at b's extra names too"
    two = copy(**{"embed.weight": -w, "head.bias": -b})
    got = f(base, two)
    assert got == "embed.weight", f"two names differ; the first in a's order is 'embed.weight', got {got!r}"


# --- Q3 and Q4 -----------------------------------------------------------------------------

CASES = ((300.0, 24 * 3600.0, 117.0), (300.0, 6 * 3600.0, 57.0), (300.0, 900.0, 9.1))  # Daly 2006


def check_young_daly(ns: dict) -> None:
    f = require(ns, "young_daly")
    for d, m, minutes in CASES:
        got = f(d, m)
        assert isinstance(got, tuple) and len(got) == 2, (
            f"young_daly must return (young_s, daly_s), got {got!r}")
        young, daly = got
        want = interval.young_interval(d, m)
        if math.isclose(young, math.sqrt(d * m), rel_tol=1e-9):
            raise AssertionError(f"young at δ={d:g} s, M={m:g} s is √(δM) = {young:.4g}: the factor 2 "
                                 "is missing, √(2δM)")
        assert math.isclose(young, want, rel_tol=1e-9), (
            f"Young's τ at δ={d:g}, M={m:g}: {young!r}, want √(2δM) = {want:.6g}")
        if math.isclose(daly, young, rel_tol=1e-9):
            raise AssertionError(f"daly equals young ({daly:.4g} s): Daly's interval adds the higher "
                                 "terms and subtracts δ")
        if math.isclose(daly, interval.daly_interval(d, m) + d, rel_tol=1e-9):
            raise AssertionError(f"daly is {daly:.4g} s, δ too long: Daly's interval ends with - δ")
        assert math.isclose(daly, interval.daly_interval(d, m), rel_tol=1e-9), (
            f"Daly's published case δ = 5 min, M = {m / 3600:g} h is about {minutes} min "
            f"({interval.daly_interval(d, m) / 60:.4g} min by the formula); got {daly / 60:.4g} min")
    young, daly = f(10.0, 4.0)
    assert math.isclose(daly, 4.0, rel_tol=1e-9), (
        f"for δ = 10 s ≥ 2M = 8 s Daly's interval is M = 4 s, got {daly!r}: beyond δ ≥ 2M the "
        "expansion no longer holds")


def check_goodput(ns: dict) -> None:
    f = require(ns, "goodput")
    points = [(t, d, r, m) for t in (30.0, 600.0, 3000.0) for d, r, m in
              ((20.0, 600.0, 3 * 3600.0), (5.0, 60.0, 3600.0))]
    for t, d, r, m in points:
        got, want = f(t, d, r, m), interval.goodput(t, d, r, m)
        if math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12):
            continue
        wrong = {"the restart R is missing: every failure also costs R, (τ/2 + R)/M":
                 1 - d / t - t / (2 * m),
                 "a failure loses the whole interval τ: on average it strikes halfway, τ/2":
                 1 - d / t - (t + r) / m,
                 "the saves' share δ/τ is missing": 1 - (t / 2 + r) / m}
        for why, v in wrong.items():
            if math.isclose(got, max(0.0, v), rel_tol=1e-9):
                raise AssertionError(f"goodput(τ={t:g}, δ={d:g}, R={r:g}, M={m:g}) = {got:.6g}: {why}")
        raise AssertionError(f"goodput(τ={t:g}, δ={d:g}, R={r:g}, M={m:g}) = {got!r}, want {want:.6g} "
                             "= 1 - δ/τ - (τ/2 + R)/M")
    got = f(1.0, 5.0, 60.0, 100.0)
    assert got == 0.0, (f"where the losses exceed the whole time (τ = 1 s, δ = 5 s) goodput is 0.0, "
                        f"got {got!r}: clamp at 0")


QUESTIONS = {"atomic_commit / verify_checkpoint": check_commit,
             "first_difference": check_first_difference,
             "young_daly": check_young_daly,
             "goodput": check_goodput}
TIMEOUT_S = {"atomic_commit / verify_checkpoint": 30, "first_difference": 20, "young_daly": 10,
             "goodput": 10}
