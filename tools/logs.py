"""Where a notebook kernel's stderr goes: shared by ``tools.run_course`` and ``tools.notebooks``.

    from tools.logs import stderr_to
    with stderr_to(Path("build/notebooks/00.stderr.log")):
        papermill.execute_notebook(...)  # the kernel's warnings land in the file
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Send this process's file descriptor 2, and so every kernel it starts, to ``path``.

    A Jupyter kernel inherits its parent's stderr: without this, every notebook adds
    ipykernel's "Kernel is running over TCP without encryption" warning and the profiler's
    C++ start-up lines to the course's output. They are kept in ``path`` instead.

    Args:
        path: the log file, appended to (created if missing).
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
