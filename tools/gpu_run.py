"""The course's GPU paths in one run that fits a short GPU slot: tests, notebooks, benchmarks.

    python -m tools.gpu_run                          # no CUDA here: print the plan, exit 0
    python -m tools.gpu_run --download-wheels build/wheels    # here: papermill & co. as wheels
    python -m tools.gpu_run --wheels build/wheels    # on the GPU machine (`make gpu-run`)

On a CUDA machine it runs, one part after another, each in a process of its own: the
``gpu``-marked tests (``pytest -m gpu``); notebooks 00, 01, 04, 06, 07 and 12 at QUICK size,
executed with papermill by :func:`tools.run_course.run_notebook`; and the GPU parts of
``benchmarks/attention.py`` (the Triton FlashAttention kernel against SDPA's flash backend),
``benchmarks/prefetch.py`` (a host-to-device copy hidden by the Prefetcher),
``benchmarks/compute.py`` (bf16 autocast and ``torch.compile`` on CUDA) and
``benchmarks/recompute.py`` (checkpointing's cost, and bf16 GEMM efficiency at the shapes of
the models ``perfkit plan`` is checked against). Each part has its own budget (seconds): a part
still running at the end of it is stopped, with every process it started, and recorded as
``timeout``; a part whose budget exceeds what is left of the total (default 8 minutes) is not
started and is recorded as ``skipped``, and the parts after it still get their chance.

Everything lands in one folder (``--out``, default ``build/gpu_run/``): ``gpu_run.json``
(rewritten after every part, so a run cut short keeps what it measured), the executed
notebooks with their kernels' stderr, ``logs/`` (each part's stdout and stderr) and
``cache/`` (the ceilings notebook 00 measures, which the later parts read). The GPU machine
has PyTorch, Triton and transformers but no Jupyter: ``--wheels DIR`` installs papermill,
nbformat, nbclient, ipykernel and ipywidgets from a folder of wheels, offline, before the run;
``--download-wheels DIR`` fills that folder here with ``pip download`` for the GPU machine's
Python (``--python-version``, default 3.12) and Linux x86-64.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOTAL_S = 480.0  # s: the whole run, inside a 10-minute command with the wheels' install
NOTEBOOKS = ("00_measure_your_machine", "06_compute", "12_attention", "04_memory_anatomy",
             "07_data_loading", "01_profiling")  # 00 first: it measures the ceilings the rest read
NOTEBOOK_BUDGET_S = {"00_measure_your_machine": 75.0, "01_profiling": 75.0, "04_memory_anatomy": 45.0,
                     "06_compute": 75.0, "07_data_loading": 60.0, "12_attention": 45.0}
# (script, its arguments, budget s): each prints one JSON object
BENCHMARKS = (("attention", ("--gpu",), 60.0), ("prefetch", ("--gpu",), 45.0),
              ("compute", ("--device", "cuda"), 75.0), ("recompute", ("--gemm",), 75.0))
PYTEST_BUDGET_S = 60.0
WHEELS = ("papermill", "nbformat", "nbclient", "ipykernel", "ipywidgets")
GPU_PYTHON = "3.12"  # the GPU machine's python3 (torch 2.11+cu130, Triton, transformers)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
STATUSES = ("ok", "failed", "timeout", "skipped")
ERROR_TAIL = 3000  # characters of a failed part's stderr kept in the JSON
GPU_MARK = re.compile(r"^\s*(@pytest\.mark\.gpu\b|pytestmark\s*=.*\bpytest\.mark\.gpu\b)", re.M)


@dataclass(frozen=True)
class Part:
    """One step of the run: a command line, the seconds it may take, and where its JSON is.

    ``junit`` names the JUnit XML file (in the output folder) a pytest part writes; other
    parts print one JSON object on stdout (the last one printed counts).
    """

    name: str
    kind: str  # "pytest", "notebook" or "benchmark"
    argv: tuple[str, ...]
    budget_s: float
    junit: str | None = None

    @property
    def command(self) -> str:
        """The command line as a person would type it (``python`` for this interpreter)."""
        return shlex.join(["python" if a == sys.executable else a for a in self.argv])


@dataclass
class PartResult:
    """What one part did: ``status`` is one of :data:`STATUSES`; ``output`` its own JSON."""

    name: str
    kind: str
    command: str
    budget_s: float
    status: str
    seconds: float = 0.0
    output: Any = None
    errors: str = ""


def gpu_test_files(root: Path = ROOT) -> list[str]:
    """Test files (relative to ``root``) that hold a ``gpu``-marked test (a ``@pytest.mark.gpu``
    decorator or a ``pytestmark`` naming it): pytest is pointed at these alone, so a module
    whose imports need what the GPU machine lacks (DeepSpeed, a browser) cannot stop the run
    at collection."""
    return sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py")
                  if GPU_MARK.search(p.read_text()))


def default_parts(out: Path, python: str = sys.executable) -> list[Part]:
    """The run's parts in order: the tests, notebook 00, the benchmarks, the other notebooks."""
    nb = {name: Part(f"notebook {name}", "notebook",
                     (python, "-m", "tools.gpu_run", "--run-notebook", f"notebooks/{name}.ipynb",
                      "--out", str(out), "--limit-s", str(NOTEBOOK_BUDGET_S[name])),
                     NOTEBOOK_BUDGET_S[name]) for name in NOTEBOOKS}
    parts = [Part("pytest -m gpu", "pytest",
                  (python, "-m", "pytest", "-q", "-rA", "-m", "gpu", "--junitxml",
                   str(out / "pytest_gpu.xml"), *gpu_test_files()), PYTEST_BUDGET_S, "pytest_gpu.xml"),
             nb[NOTEBOOKS[0]]]
    parts += [Part(f"benchmark {script}", "benchmark", (python, f"benchmarks/{script}.py", *args),
                   budget) for script, args, budget in BENCHMARKS]
    return parts + [nb[name] for name in NOTEBOOKS[1:]]


def last_json(text: str) -> Any:
    """The JSON a part printed: the whole of ``text``, else its last line that parses."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        if line.lstrip().startswith(("{", "[")):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def junit_summary(path: Path) -> dict[str, Any] | None:
    """Counts and failures from a pytest JUnit XML file (``None`` if it is missing or broken)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    out: dict[str, Any] = {"passed": 0, "failed": 0, "skipped": 0, "tests": [], "problems": []}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            out["failed"] += 1
            out["problems"].append({"test": name, "message": (bad.get("message") or "")[:500]})
            status = "failed"
        elif case.find("skipped") is not None:
            out["skipped"] += 1
            status = "skipped"
        else:
            out["passed"] += 1
            status = "passed"
        out["tests"].append({"test": name, "status": status, "seconds": float(case.get("time", 0))})
    return out


def _tail(path: Path, n: int = ERROR_TAIL) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def run_part(part: Part, out: Path, env: dict[str, str]) -> PartResult:
    """Run one part in a process of its own under its budget; never raises.

    Its stdout and stderr go to ``out/logs/``; past ``part.budget_s`` the process and every
    descendant (torchrun's workers, notebook kernels) are ended.
    """
    from perfkit.dist import end_process_tree

    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stem = part.name.replace(" ", "_").replace("/", "_")
    so, se = logs / f"{stem}.stdout.log", logs / f"{stem}.stderr.log"
    res = PartResult(part.name, part.kind, part.command, part.budget_s, "failed")
    t0 = time.monotonic()
    try:
        with open(so, "wb") as fo, open(se, "wb") as fe:
            proc = subprocess.Popen(part.argv, cwd=ROOT, env=env, stdout=fo, stderr=fe,
                                    stdin=subprocess.DEVNULL)
            try:
                rc = proc.wait(timeout=part.budget_s)
                res.status = "ok" if rc == 0 else "failed"
            except subprocess.TimeoutExpired:
                end_process_tree(proc.pid, grace_s=5.0)
                proc.wait()
                res.status = "timeout"
                rc = None
    except OSError as e:  # the command could not start
        res.seconds = time.monotonic() - t0
        res.errors = f"could not start: {e}"
        return res
    res.seconds = round(time.monotonic() - t0, 2)
    res.output = (junit_summary(out / part.junit) if part.junit
                  else last_json(so.read_text(errors="replace")))
    if res.status != "ok":
        why = (f"stopped after its {part.budget_s:.0f} s budget" if res.status == "timeout"
               else f"exit status {rc}")
        res.errors = f"{why}\n{_tail(se)}".strip()
    return res


def run_plan(parts: Sequence[Part], total_s: float,
             run: Callable[[Part], PartResult],
             clock: Callable[[], float] = time.monotonic,
             done: Callable[[list[PartResult]], None] | None = None) -> list[PartResult]:
    """Run ``parts`` in order within ``total_s`` seconds; return one result per part.

    A part starts only if its whole budget fits in what is left of ``total_s`` (its budget is
    how long it may take, so that is what must fit); otherwise it is recorded as ``skipped``
    and the next, perhaps smaller, part is considered. ``done`` sees the results after each.
    """
    t0 = clock()
    results: list[PartResult] = []
    for part in parts:
        left = total_s - (clock() - t0)
        if part.budget_s > left:
            results.append(PartResult(part.name, part.kind, part.command, part.budget_s, "skipped",
                                      errors=f"skipped: its budget of {part.budget_s:.0f} s is more "
                                             f"than the {max(left, 0):.0f} s left of {total_s:.0f} s"))
        else:
            results.append(run(part))
        if done is not None:
            done(results)
    return results


def machine() -> dict[str, Any]:
    """The software and device the run measured on."""
    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "cuda": torch.version.cuda, "host": platform.node()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(device=props.name, sm_count=props.multi_processor_count,
                    memory_bytes=props.total_memory, capability=f"{props.major}.{props.minor}")
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


def merge_parts(earlier: Sequence[dict[str, Any]], results: Sequence[PartResult]) -> list[dict[str, Any]]:
    """An earlier report's parts with those run again replaced in place (``--only``), and the
    parts it did not have appended."""
    new = {r.name: asdict(r) for r in results}
    merged = [new.pop(p["name"], p) for p in earlier]
    return merged + list(new.values())


def write_report(path: Path, results: list[PartResult], total_s: float, started: str,
                 info: dict[str, Any], cache: Path,
                 earlier: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Write the run's one JSON file: the machine, the ceilings measured, every part (an
    ``earlier`` report's parts kept where this run did not run them again)."""
    limits = None
    for f in sorted(cache.glob("machine_limits*.json")) if cache.is_dir() else []:
        limits = json.loads(f.read_text())
    parts = merge_parts(earlier, results)
    report = {"schema": 1, "started_at": started, "total_budget_s": total_s,
              "seconds": round(sum(p["seconds"] for p in parts), 2), "machine": info,
              "limits": limits, "parts": parts,
              "counts": {s: sum(p["status"] == s for p in parts) for s in STATUSES}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1))
    os.replace(tmp, path)
    return report


def part_env(out: Path, extra_path: Sequence[str] = (), gpus: int = 1) -> dict[str, str]:
    """The parts' environment: perfkit importable from the checkout (notebook kernels too),
    QUICK sizes, native kernels (no CPU imitation), the ceilings cached in the output folder.

    With fewer than two GPUs, ``PERFKIT_BACKEND=gloo``: :func:`perfkit.dist.default_backend`
    picks NCCL whenever CUDA is present, and ``init_worker`` then binds rank 1 of the
    notebooks' two-process jobs to ``cuda:1``, which such a machine does not have (and NCCL
    refuses two ranks on one GPU). Single-rank NCCL is tested with ``backend="nccl"``.
    """
    paths = [*extra_path, str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1",
           "PERFKIT_QUICK": "1", "PERFKIT_TEST_IMITATE": "", "PERFKIT_CACHE": str(out / "cache")}
    if gpus < 2:
        env["PERFKIT_BACKEND"] = "gloo"
    return env


def download_argv(dest: Path, python_version: str = GPU_PYTHON) -> list[str]:
    """``pip download`` of :data:`WHEELS` and their dependencies, as binary wheels for the GPU
    machine's Python and Linux x86-64 (not this machine's)."""
    abi = "cp" + python_version.replace(".", "")
    argv = [sys.executable, "-m", "pip", "download", "--dest", str(dest), "--only-binary=:all:",
            "--python-version", python_version, "--implementation", "cp", "--abi", abi]
    for p in PLATFORMS:
        argv += ["--platform", p]
    return argv + list(WHEELS)


def install_wheels(wheels: Path, target: Path,
                   run: Callable[[list[str]], int] = lambda a: subprocess.call(a)) -> list[str]:
    """Install :data:`WHEELS` from the folder ``wheels``, offline; return the paths to add to
    ``sys.path`` (none, or ``target`` where the environment could not be written to).

    Into the running environment first, where pip keeps what is installed and adds what is
    missing; failing that, into ``target`` (``pip --target``: every dependency from the folder).

    Raises:
        RuntimeError: if neither install works.
    """
    base = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
            str(wheels), "--no-compile", "--disable-pip-version-check"]
    if run(base + list(WHEELS)) == 0:
        return []
    if run(base + ["--target", str(target)] + list(WHEELS)) == 0:
        return [str(target)]
    raise RuntimeError(f"could not install {', '.join(WHEELS)} from {wheels}: see pip's output above")


def print_plan(parts: Sequence[Part], total_s: float, why: str) -> None:
    print(f"{why}: this is what `python -m tools.gpu_run` runs on a CUDA machine, in order, "
          f"within {total_s:.0f} s (a part whose budget exceeds the time left is skipped):\n")
    for i, p in enumerate(parts, 1):
        print(f"{i:>2}. {p.name:<34} budget {p.budget_s:>4.0f} s   {p.command}")
    print(f"\n    sum of budgets {sum(p.budget_s for p in parts):.0f} s; total budget {total_s:.0f} s")


def _stopped(signum: int, frame: Any) -> None:
    raise TimeoutError(f"stopped by signal {signum} at the end of the part's budget")


def _run_notebook(path: str, out: Path, limit_s: float) -> int:
    """The worker of a notebook part: one notebook through run_course, its record as JSON.

    SIGTERM (what ends a part past its budget) raises ``TimeoutError`` in the worker, which
    ``run_notebook`` records like any failure: the part's JSON still says what happened.
    """
    from tools.run_course import run_notebook

    signal.signal(signal.SIGTERM, _stopped)
    run = run_notebook(ROOT / path, out, quick=True, time_limit_s=limit_s)
    print(json.dumps(asdict(run)))
    return 1 if run.status == "failed" else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "gpu_run")
    ap.add_argument("--total-s", type=float, default=TOTAL_S, help="the whole run's budget, s")
    ap.add_argument("--only", nargs="+", metavar="NAME",
                    help="only the parts whose name contains one of these (e.g. 12_attention prefetch)")
    ap.add_argument("--wheels", type=Path, help="install papermill & co. from this folder first, offline")
    ap.add_argument("--download-wheels", type=Path, metavar="DIR",
                    help="pip download the wheels --wheels needs into DIR, then exit")
    ap.add_argument("--python-version", default=GPU_PYTHON,
                    help="the GPU machine's Python, for --download-wheels")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit, CUDA or not")
    ap.add_argument("--run-notebook", help=argparse.SUPPRESS)  # a notebook part's worker
    ap.add_argument("--limit-s", type=float, default=90.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.total_s <= 0:
        ap.error(f"--total-s must be > 0, got {args.total_s}")
    out = args.out.resolve()
    if args.run_notebook:
        return _run_notebook(args.run_notebook, out, args.limit_s)
    if args.download_wheels:
        args.download_wheels.mkdir(parents=True, exist_ok=True)
        return subprocess.call(download_argv(args.download_wheels, args.python_version))
    parts = default_parts(out)
    if args.only:
        parts = [p for p in parts if any(k in p.name for k in args.only)]
        if not parts:
            ap.error(f"--only {' '.join(args.only)} matches no part")
    import torch

    if args.dry_run or not torch.cuda.is_available():
        print_plan(parts, args.total_s, "dry run" if args.dry_run else "no CUDA device here")
        return 0
    extra = install_wheels(args.wheels, out / "site-packages") if args.wheels else []
    sys.path[:0] = extra
    env = part_env(out, extra, torch.cuda.device_count())
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    info, report = machine(), out / "gpu_run.json"
    # a part run again (--only) replaces its earlier record; the others stay
    earlier = json.loads(report.read_text())["parts"] if args.only and report.exists() else []

    def progress(results: list[PartResult]) -> None:
        r = results[-1]
        print(f"{r.name}: {r.status} in {r.seconds:.0f} s (budget {r.budget_s:.0f} s)", flush=True)
        write_report(report, results, args.total_s, started, info, out / "cache", earlier)

    results = run_plan(parts, args.total_s, lambda p: run_part(p, out, env), done=progress)
    counts = write_report(report, results, args.total_s, started, info, out / "cache", earlier)["counts"]
    print(f"\n{report}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if counts["failed"] or counts["timeout"] else 0


if __name__ == "__main__":
    sys.exit(main())
