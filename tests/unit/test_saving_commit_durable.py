"""The commit's rename survives a power loss: rank 0 fsyncs the parent directory after renaming
the ``.partial`` directory and before ``latest`` moves, and again after ``latest`` moves (a
rename is atomic against a kill, durable only once the directory holding the name is on disk)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfkit.saving import commit, latest, partial_dir, step_dir


@pytest.mark.skipif(not hasattr(os, "O_DIRECTORY"), reason="no directory fsync on this platform")
def test_commit_fsyncs_the_parent_directory_between_the_rename_and_latest(tmp_path, monkeypatch):
    part = partial_dir(tmp_path, 3)
    part.mkdir()
    (part / "rank0.distcp").write_bytes(b"\0" * 64)
    opened: dict[int, Path] = {}
    events: list[tuple[str, str]] = []
    real_open, real_close, real_fsync = os.open, os.close, os.fsync
    real_rename, real_replace = os.rename, os.replace

    def open_(path, flags, *a, **k):
        fd = real_open(path, flags, *a, **k)
        opened[fd] = Path(path)
        return fd

    def close(fd):
        opened.pop(fd, None)  # its number may come back for a file
        real_close(fd)

    def fsync(fd):
        if fd in opened:  # a directory: files are opened through open(), not os.open
            events.append(("fsync dir", opened[fd].name))
        real_fsync(fd)

    def rename(src, dst):
        events.append(("rename", Path(dst).name))
        real_rename(src, dst)

    def replace(src, dst):
        events.append(("replace", Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "close", close)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "replace", replace)
    final = commit(part, 3, world_size=1)
    root, name = tmp_path.name, final.name
    after_rename = events[events.index(("rename", name)):]
    assert after_rename == [("rename", name), ("fsync dir", root), ("replace", "latest"), ("fsync dir", root)]
    assert final == step_dir(tmp_path, 3) and latest(tmp_path) == final
