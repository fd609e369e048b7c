"""Checkpoint directories that are either complete or invisible: the atomic commit.

A save writes into ``step_000000010.partial`` (every rank its own DCP files, the coordinator
DCP's ``.metadata``). Only when every file is there does the coordinator (rank 0) write
``manifest.json`` (each file's size and sha256, the world size, the step, a description of
the layout), fsync the files and the directory, and ``os.rename`` the directory to
``step_000000010``: one rename, atomic on a POSIX filesystem, so a save killed at any
moment leaves either the whole checkpoint or a ``.partial`` that nothing loads. A rename is
atomic against a killed process; to survive a power loss as well, the new name must reach the
disk, so the parent directory is fsynced after the rename, before ``latest`` moves. Then the
``latest`` file is replaced (written to a temporary name, fsynced, renamed, the directory
fsynced again) and all but the last ``keep`` checkpoints are deleted. ``latest`` therefore
never names a partial save, after a kill or a power loss; a crash between the rename and the
update leaves ``latest`` on the previous complete one. (A platform that cannot open a
directory, Windows, skips the directory fsyncs: there the rename is atomic, not durable.)

This follows CheckFreq (Mohan et al., FAST 2021) and torchtitan's checkpointer: a
checkpoint counts only once it is complete and verified. The rank files must land on a
filesystem every rank and rank 0 see (DCP's ``FileSystemWriter`` needs that to load too).

Usage::

    path = commit(partial_dir(root, 10), step=10, world_size=2, layout={"kind": "ddp"})
    manifest = verify(latest(root))        # CheckpointError names a missing or corrupt file
    prune(root, keep=2)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfkit._checks import check_int, check_type

__all__ = ["CheckpointError", "Manifest", "check_layout", "commit", "complete_steps", "latest",
           "partial_dir", "prune", "remove_partials", "step_dir", "verify"]

MANIFEST = "manifest.json"
LATEST = "latest"
PARTIAL = ".partial"
_NAME = re.compile(r"^step_(\d{9,})$")
_CHUNK = 1 << 22  # bytes read per hash update


class CheckpointError(RuntimeError):
    """A checkpoint that must not be loaded: missing, partial, corrupt (a checksum or a size
    that does not match its manifest), or saved in a layout that cannot be resharded onto
    this job. The message names the directory and, where there is one, the file."""


@dataclass(frozen=True)
class Manifest:
    """What ``manifest.json`` records about one complete checkpoint.

    Attributes:
        step: the training step it holds.
        world_size: the number of ranks that wrote it.
        layout: the caller's description of how the state was laid out (JSON), e.g.
            ``{"kind": "zero3", "reshardable": False}``.
        files: file name -> ``{"bytes": int, "sha256": str}`` for every file but the manifest.
        created: seconds since the epoch when it was committed.
    """

    step: int
    world_size: int
    layout: Any
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    created: float = 0.0

    @property
    def bytes(self) -> int:
        """Total bytes of the checkpoint's files (the manifest excluded)."""
        return sum(f["bytes"] for f in self.files.values())


def _check_root(root: Any) -> Path:
    if not isinstance(root, str | os.PathLike) or not str(root):
        raise TypeError(f"root must be a directory path (str or os.PathLike), got {root!r}")
    return Path(root)


def step_dir(root: str | os.PathLike, step: int) -> Path:
    """The directory of the complete checkpoint of ``step`` under ``root`` (it may not exist).

    Raises:
        TypeError, ValueError: ``root`` not a path; ``step`` not an int >= 0.
    """
    return _check_root(root) / f"step_{check_int('step', step, 0):09d}"


def partial_dir(root: str | os.PathLike, step: int) -> Path:
    """Where a save of ``step`` writes before its commit: ``step_dir`` + ``.partial``.

    Raises:
        TypeError, ValueError: ``root`` not a path; ``step`` not an int >= 0.
    """
    d = step_dir(root, step)
    return d.with_name(d.name + PARTIAL)


def _fsync_dir(path: Path) -> None:
    # a rename is durable only once the directory holding the name is on disk
    if not hasattr(os, "O_DIRECTORY"):  # Windows: a directory cannot be opened to fsync it
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):  # hashlib releases the GIL on large chunks
            h.update(chunk)
        os.fsync(f.fileno())  # the data is on disk before the rename makes it count
    return h.hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def commit(partial: str | os.PathLike, step: int, world_size: int, layout: Any = None) -> Path:
    """Make the finished save in ``partial`` a checkpoint: manifest, fsync, one rename, ``latest``.

    Call it on one process (rank 0) after every rank's files are written (``dcp.save`` has
    returned: its last collective follows every rank's writes).

    Args:
        partial: the ``.partial`` directory (:func:`partial_dir`).
        step: the step it holds (must match the directory's name).
        world_size: the number of ranks that wrote it, at least 1.
        layout: a JSON-serialisable description of the state's layout, or ``None``.

    Returns:
        The committed directory (:func:`step_dir`).

    Raises:
        TypeError, ValueError: a bad argument; ``layout`` not JSON-serialisable.
        CheckpointError: ``partial`` is missing, empty, or not the partial directory of ``step``.
    """
    if not isinstance(partial, str | os.PathLike) or not str(partial):
        raise TypeError(f"partial must be a directory path, got {partial!r}")
    partial = Path(partial)
    check_int("step", step, 0)
    check_int("world_size", world_size, 1)
    try:
        json.dumps(layout)
    except (TypeError, ValueError) as e:
        raise TypeError(f"layout must be JSON-serialisable (or None): {e}") from None
    if partial != partial_dir(partial.parent, step):
        raise ValueError(f"partial must be {partial_dir(partial.parent, step).name} for step "
                         f"{step}, got {partial.name}")
    if not partial.is_dir():
        raise CheckpointError(f"no partial save to commit at {partial}")
    files = {p.name: {"bytes": p.stat().st_size, "sha256": _hash(p)}
             for p in sorted(partial.iterdir()) if p.is_file() and p.name != MANIFEST}
    if not files:
        raise CheckpointError(f"the partial save {partial} holds no files")
    manifest = {"format": 1, "step": step, "world_size": world_size, "layout": layout,
                "created": time.time(), "files": files}
    _write_atomic(partial / MANIFEST, json.dumps(manifest, indent=1))
    _fsync_dir(partial)
    final = step_dir(partial.parent, step)
    if final.exists():  # a save of this step that a crash left uncommitted in `latest`
        shutil.rmtree(final)
    os.rename(partial, final)
    _fsync_dir(partial.parent)  # the new name is on disk before `latest` names it
    _write_atomic(partial.parent / LATEST, final.name + "\n")
    _fsync_dir(partial.parent)
    return final


def latest(root: str | os.PathLike) -> Path | None:
    """The checkpoint ``root/latest`` names, or ``None`` when nothing was ever committed.

    Raises:
        TypeError: ``root`` not a path.
        CheckpointError: ``latest`` names something that is not a complete checkpoint name.
    """
    root = _check_root(root)
    try:
        name = (root / LATEST).read_text().strip()
    except FileNotFoundError:
        return None
    if not _NAME.match(name):
        raise CheckpointError(f"{root / LATEST} names {name!r}, not a complete checkpoint "
                              f"(step_NNNNNNNNN)")
    return root / name


def complete_steps(root: str | os.PathLike) -> list[int]:
    """Steps of the committed checkpoints under ``root``, ascending (partial ones excluded).

    Raises:
        TypeError: ``root`` not a path.
    """
    root = _check_root(root)
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := _NAME.match(p.name))
                  and (p / MANIFEST).is_file())


def _read_manifest(path: Path) -> Manifest:
    """The manifest of the checkpoint at ``path``; :class:`CheckpointError` if it has none."""
    if path.name.endswith(PARTIAL) or (not path.is_dir() and path.with_name(path.name + PARTIAL).is_dir()):
        raise CheckpointError(f"{path} is a partial save (killed or still being written): "
                              f"it has no manifest and is never loaded")
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} is missing")
    try:
        raw = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path} has no {MANIFEST}: a partial save, never loaded") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path / MANIFEST} is not valid JSON ({e})") from None
    return Manifest(raw["step"], raw["world_size"], raw["layout"], raw["files"], raw["created"])


def verify(path: str | os.PathLike, files: list[str] | None = None) -> Manifest:
    """Check a checkpoint against its manifest: every file present, its size and its sha256.

    Args:
        path: a checkpoint directory (:func:`step_dir`, :func:`latest`).
        files: check only these of the manifest's files (ranks share the reading); ``None``:
            all of them, and no file the manifest does not list.

    Returns:
        The :class:`Manifest`.

    Raises:
        TypeError: ``path`` not a path, ``files`` not a list of names.
        CheckpointError: missing, partial, a file missing, of another size, with another
            checksum, or not in the manifest; the message names the file.
    """
    if not isinstance(path, str | os.PathLike) or not str(path):
        raise TypeError(f"path must be a checkpoint directory path, got {path!r}")
    if files is not None and not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
        raise TypeError(f"files must be None or a list of file names, got {files!r}")
    path = Path(path)
    manifest = _read_manifest(path)
    names = sorted(manifest.files) if files is None else files
    for name in names:
        want = manifest.files.get(name)
        f = path / name
        if want is None:
            raise CheckpointError(f"{f}: not listed in {path / MANIFEST}")
        if not f.is_file():
            raise CheckpointError(f"{f} is missing (listed in {MANIFEST})")
        if f.stat().st_size != want["bytes"]:
            raise CheckpointError(f"{f} holds {f.stat().st_size} bytes, the manifest says "
                                  f"{want['bytes']}: truncated or overwritten")
        if _hash(f) != want["sha256"]:
            raise CheckpointError(f"{f}: sha256 checksum mismatch against {MANIFEST} (corrupt)")
    if files is None:
        extra = sorted(p.name for p in path.iterdir() if p.name != MANIFEST and p.name not in manifest.files)
        if extra:
            raise CheckpointError(f"{path} holds files its manifest does not list: {extra}")
    return manifest


def check_layout(manifest: Manifest, world_size: int, layout: Any = None) -> None:
    """Refuse a checkpoint this job cannot load: a layout marked ``"reshardable": False``
    saved on another number of ranks, or another layout kind where the caller names one.

    Args:
        manifest: the checkpoint's :class:`Manifest`.
        world_size: this job's number of ranks.
        layout: this job's layout description (a dict with ``"kind"``), or ``None`` for no check.

    Raises:
        TypeError, ValueError: a bad argument.
        CheckpointError: the layout cannot be resharded onto ``world_size`` ranks, or its
            kind differs from ``layout``'s and the saved one is not reshardable.
    """
    check_type("manifest", manifest, Manifest)
    check_int("world_size", world_size, 1)
    saved = manifest.layout if isinstance(manifest.layout, dict) else {}
    reshardable = saved.get("reshardable", True)
    if not reshardable and manifest.world_size != world_size:
        raise CheckpointError(
            f"step {manifest.step} was saved in layout {saved.get('kind', '?')!r} on "
            f"{manifest.world_size} ranks, which cannot be resharded: load it on "
            f"{manifest.world_size} ranks, not {world_size}")
    want = layout.get("kind") if isinstance(layout, dict) else None
    if want is not None and not reshardable and saved.get("kind") != want:
        raise CheckpointError(f"step {manifest.step} was saved in layout {saved.get('kind')!r}, "
                              f"which cannot be resharded into {want!r}")


def _partial_step(name: str) -> int:
    m = _NAME.match(name.removesuffix(PARTIAL))
    return int(m.group(1)) if m else -1


def prune(root: str | os.PathLike, keep: int) -> list[int]:
    """Delete all but the ``keep`` newest complete checkpoints (never the one ``latest``
    names) and return the deleted steps.

    Raises:
        TypeError, ValueError: ``root`` not a path; ``keep`` not an int >= 1.
    """
    root = _check_root(root)
    check_int("keep", keep, 1)
    named = latest(root)
    gone = []
    for s in complete_steps(root)[:-keep]:
        if step_dir(root, s) != named:
            shutil.rmtree(step_dir(root, s), ignore_errors=True)
            gone.append(s)
    return gone


def remove_partials(root: str | os.PathLike, below: int | None = None) -> list[str]:
    """Delete the ``.partial`` directories under ``root`` (saves a crash or an error left
    behind) and return their names: all of them before any rank starts a new save, or only
    those of steps below ``below`` (after committing that step, while a later save may
    already be writing its own).

    Raises:
        TypeError, ValueError: ``root`` not a path; ``below`` not ``None`` or an int >= 0.
    """
    root = _check_root(root)
    if below is not None:
        check_int("below", below, 0)
    if not root.is_dir():
        return []
    gone = sorted(p.name for p in root.iterdir() if p.name.endswith(PARTIAL) and p.is_dir()
                  and (below is None or _partial_step(p.name) < below))
    for name in gone:
        shutil.rmtree(root / name, ignore_errors=True)
    return gone
