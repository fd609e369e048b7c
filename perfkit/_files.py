"""Files that other processes read while this one writes them: written whole or not at all.

A cache (the machine's limits, cold compile costs, the measured link) may be read by a
notebook or a test in another process at the moment this one rewrites it; a reader of a
half-written JSON file would take it as unreadable and measure again. :func:`write_atomic`
writes a temporary file beside the target and renames it over the target, which POSIX
makes atomic within one file system.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace``; return the path.
    Internal: callers pass a path they built."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, p)
    return p
