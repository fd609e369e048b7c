"""The browser harness sees errors and leaves nothing running, even when a test fails.

A planted notebook (a widget whose slider starts at its maximum, an empty cell, then a
cell that raises) runs in its own JupyterLab and Chromium; the test body then fails on
purpose. Afterwards no server, kernel, browser or driver process may be alive. This
module runs on its own (not beside test_browser.py's module-scoped browser) because one
thread can drive only one synchronous Playwright at a time.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import psutil
import pytest
from browser_harness import alive, process_tree, processes_mentioning, running_browser, running_lab
from lab_pages import move_first_control, open_notebook, run_all_cells

PLANTED = [
    "import os\nQUICK = os.environ.get('PERFKIT_QUICK', '0') in ('1', 'true')",
    "# NBVAL_IGNORE_OUTPUT\nfrom perfkit import viz\n"
    "spec = viz.WidgetSpec(lambda n: f'**{n} squared is {n * n}**', {'n': viz.IntControl(1, 9, 9)})\n"
    "viz.build_widget(spec)",
    "",  # JupyterLab never runs an empty cell: it must not count as "did not run"
    "raise ValueError('planted failure')",
    "print('never runs: the queue stops at the error')",
]


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_errors_are_seen_and_nothing_is_left_running_after_a_failure(tmp_path: Path) -> None:
    root, home, profile = tmp_path / "root", tmp_path / "home", tmp_path / "profile"
    root.mkdir()
    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_code_cell(src) for src in PLANTED]
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(book, root / "planted.ipynb")
    started: list[psutil.Process] = []
    with pytest.raises(RuntimeError, match="planted failure in the test body"):
        with running_lab(root, home) as server, running_browser(profile) as session:
            page = session.new_page()
            open_notebook(page, server, "planted.ipynb")
            state = run_all_cells(page, server, "planted.ipynb")
            assert state["errors"] == ["cell 4: ValueError: planted failure"], state
            assert state["unrun"] == 1, state  # the cell after the error never ran
            moved = move_first_control(page)  # the slider starts at its maximum: moves left
            assert moved.kind == "slider" and moved.label == "n"
            assert float(moved.value_before) == 9 and float(moved.value_after) == 8, moved
            assert moved.before["text"] == "9 squared is 81", moved.before
            assert moved.after["text"] == "8 squared is 64", moved.after
            started = process_tree(psutil.Process(server.process.pid))
            started += [q for p in session.processes for q in process_tree(p)]
            names = [p.name() for p in started]
            assert any("ipykernel" in " ".join(p.cmdline()) for p in started), names
            assert any("chrom" in n for n in names), names
            raise RuntimeError("planted failure in the test body")
    assert server.process.returncode is not None, "the JupyterLab server is still running"
    left = [p for p in started if alive(p)] + processes_mentioning(str(tmp_path))
    assert not left, f"left running: {[p.cmdline() for p in left]}"
