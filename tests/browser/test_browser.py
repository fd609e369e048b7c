"""The course in a real browser: widgets live in JupyterLab, and the static site has no broken link.

For every lecture notebook with a widget (a ``viz.build_widget`` call), JupyterLab (QUICK
sizes) runs all cells from the Run menu; the test then moves the first widget slider with
the keyboard (or, in a widget without sliders, picks the next option of its first
dropdown) and asserts that the widget's output changed and that no cell shows an error.
Screenshots of the widget's cell before and after go to ``build/screenshots/``. The site
test builds the site from ``build/notebooks/`` (``make course``), follows every link from
the index and checks every image.

    make browser-test        # or: .venv/bin/python -m pytest -m browser tests/browser
    PERFKIT_BROWSER_NOTEBOOKS=00,03 make browser-test     # only these notebooks
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from browser_harness import ROOT, LabServer
from lab_pages import crawl, move_first_control, notebook_state, open_notebook, run_all_cells, serve

BUILD_NOTEBOOKS = ROOT / "build" / "notebooks"


def widget_notebooks() -> list[Path]:
    """Lecture notebooks that build a widget, optionally only those named in
    ``$PERFKIT_BROWSER_NOTEBOOKS`` (comma-separated numbers or stems: ``00,03_gradient``)."""
    chosen = [s.strip() for s in os.environ.get("PERFKIT_BROWSER_NOTEBOOKS", "").split(",") if s.strip()]
    found = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if chosen and not any(path.stem.startswith(c) for c in chosen):
            continue
        cells = nbformat.read(path, as_version=4).cells
        if any(c.cell_type == "code" and "build_widget(" in c.source for c in cells):
            found.append(path)
    return found


@pytest.mark.browser
@pytest.mark.timeout(600)  # above open (90 s) + run all (360 s) + widget (60 s): the guards report first
@pytest.mark.parametrize("path", widget_notebooks(), ids=lambda p: p.stem)
def test_widget_responds_in_jupyterlab(lab_server: LabServer, page: Any, screenshots: Path,
                                       path: Path) -> None:
    rel = path.relative_to(ROOT).as_posix()
    committed = path.read_bytes()
    checkpoint = path.parent / ".ipynb_checkpoints" / f"{path.stem}-checkpoint.ipynb"
    had_checkpoint = checkpoint.exists()
    try:
        open_notebook(page, lab_server, rel)
        t0 = time.perf_counter()
        state = run_all_cells(page, lab_server, rel)
        print(f"{rel}: all {state['code']} code cells ran in {time.perf_counter() - t0:.0f} s")
        assert not state["errors"], f"{rel}: cells show errors in JupyterLab: {state['errors']}"
        assert state["unrun"] == 0, f"{rel}: {state['unrun']} code cells did not run"
        moved = move_first_control(page, (screenshots / f"{path.stem}-widget-before.png",
                                          screenshots / f"{path.stem}-widget-after.png"))
        print(f"{rel}: {moved.kind} {moved.label!r} {moved.value_before} -> {moved.value_after}: "
              "the widget's output changed")
        assert moved.after != moved.before
        errors = notebook_state(page, rel)["errors"]
        assert not errors, f"{rel}: errors after the widget changed: {errors}"
    except BaseException:
        with contextlib.suppress(Exception):
            page.screenshot(path=str(screenshots / f"{path.stem}-failure.png"))
        raise
    finally:
        with contextlib.suppress(Exception):
            lab_server.close_sessions(rel)  # free the kernel's CPU and memory for the next one
        written = path.read_bytes() != committed
        if written:  # put the committed notebook back before failing
            path.write_bytes(committed)
    assert not written, f"JupyterLab wrote {rel} during the test (autosave should be off)"
    assert had_checkpoint or not checkpoint.exists(), f"JupyterLab wrote {checkpoint} into the repository"


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_site_has_no_broken_link_or_missing_image(page: Any, tmp_path: Path) -> None:
    from tools import site

    built = sorted(BUILD_NOTEBOOKS.glob(site.PAGE_GLOB))
    if not built:
        pytest.fail(f"no rendered notebooks in {BUILD_NOTEBOOKS}: run `make course QUICK=1` "
                    "(or `make site`) first")
    site.build_site(BUILD_NOTEBOOKS, tmp_path / "site")
    with serve(tmp_path / "site") as base:
        seen, problems = crawl(page, base + "index.html")
    assert not problems, "broken site:\n" + "\n".join(problems)
    index = seen[base + "index.html"]
    for html in built:
        url = base + html.name
        assert url in index["links"], f"the index does not link {html.name}"
        assert seen[url]["images"] > 0, f"{html.name} shows no plot"
        assert base + "index.html" in seen[url]["links"], f"{html.name} has no link to the index"


BROKEN_SITE = {
    "index.html": '<a href="good.html">good</a> <a href="missing.html">gone</a>',
    "good.html": '<h1 id="top">ok</h1><a href="index.html">index</a> <a href="#top">top</a> '
                 '<a href="#nowhere">bad anchor</a> <img src="nothing.png"> '
                 '<a href="https://example.org/">external, not followed</a>',
}


@pytest.mark.browser
def test_site_check_finds_planted_breakage(page: Any, tmp_path: Path) -> None:
    for name, body in BROKEN_SITE.items():
        (tmp_path / name).write_text(f"<!DOCTYPE html><html><body>{body}</body></html>")
    with serve(tmp_path) as base:
        seen, problems = crawl(page, base + "index.html")
    assert set(seen) == {base + "index.html", base + "good.html", base + "missing.html"}
    assert problems == [
        f"{base}good.html: image did not load: {base}nothing.png",
        f"{base}good.html: link to {base}good.html#nowhere: no element with that id",
        f"{base}missing.html: HTTP 404",
    ], problems
