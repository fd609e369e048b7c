"""The course in a real browser: widgets live in JupyterLab, and the course book works when served.

For every lecture notebook with a widget (a ``viz.build_widget`` call), JupyterLab (QUICK
sizes) runs all cells from the Run menu; the test then moves the first widget slider with
the keyboard (or, in a widget without sliders, picks the next option of its first
dropdown) and asserts that the widget's output changed and that no cell shows an error.
Screenshots of the widget's cell before and after go to ``build/screenshots/``. The book
test serves ``build/site`` (``make site``) over HTTP, follows every sidebar link, checks each
lecture's figures against its executed notebook, searches a word only one lecture uses, and
takes ``build/screenshots/site-page.png`` (README's picture of the site).

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
from lab_pages import move_first_control, notebook_state, open_notebook, run_all_cells
from site_pages import figures, page_images, search, serve, sidebar_links, unique_word

BUILD_NOTEBOOKS = ROOT / "build" / "notebooks"
SITE = ROOT / "build" / "site"


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
@pytest.mark.timeout(300)
def test_book_in_chromium(page: Any, screenshots: Path) -> None:
    """The site `make site` built: every sidebar link opens with its figures, the search box
    finds the lecture that uses a word, and nothing is fetched from another host."""
    if not (SITE / "index.html").exists():
        pytest.fail(f"no site in {SITE}: run `make site QUICK=1` first (make test does)")
    # the lectures the book was built from (notebooks/ may have grown since `make site`)
    stems = sorted(p.stem for p in (ROOT / "build" / "book" / "src" / "notebooks").glob("*.ipynb"))
    executed = sorted(p.stem for p in BUILD_NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert set(executed) <= set(stems), f"executed notebooks without a page: {set(executed) - set(stems)}"
    with serve(SITE) as base:
        elsewhere: list[str] = []
        page.route(lambda url: not url.startswith(base),
                   lambda route: (elsewhere.append(route.request.url), route.abort()))
        page.goto(base + "index.html")
        links = sidebar_links(page)
        lectures = [u for u in links if "/notebooks/" in u]
        assert lectures == [f"{base}notebooks/{s}.html" for s in stems], "sidebar lectures: " + str(links)
        assert base + "scorecard.html" in links and any("/labs/lab" in u for u in links), links
        for url in links:
            response = page.goto(url, wait_until="load")
            assert response is not None and response.ok, f"{url}: HTTP {response and response.status}"
            images = page_images(page)
            assert not images["broken"], f"{url}: images did not load: {images['broken']}"
            stem = url.rsplit("/", 1)[1].removesuffix(".html")
            if url in lectures and (BUILD_NOTEBOOKS / f"{stem}.ipynb").exists():
                want = figures(BUILD_NOTEBOOKS / f"{stem}.ipynb")
                assert images["count"] == want, f"{url}: {images['count']} figures, the run made {want}"
        word, stem = unique_word(ROOT / "build" / "book" / "src")
        found = search(page, base + "index.html", word)
        print(f"search for {word!r} (only {stem} uses it): {found}")
        assert f"{base}notebooks/{stem}.html" in [u.split("#")[0].split("?")[0] for u in found], found
        assert search(page, base + "index.html", "qqzxvjkw") == [], "a word no page uses found pages"
        page.goto(f"{base}notebooks/{stems[0]}.html")
        page.evaluate("() => { const i = document.querySelector('article img');"
                      " if (i) i.scrollIntoView({block: 'center'}); }")
        page.wait_for_timeout(300)  # the theme's scroll-spy updates the in-page contents
        page.screenshot(path=str(screenshots / "site-page.png"))
    assert not elsewhere, f"the site fetched from another host (it must work offline): {elsewhere[:5]}"


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_book_renders_math_offline(page: Any, tmp_path: Path) -> None:
    """A formula in a lecture's prose is typeset by the MathJax the site serves itself (no
    lecture has one yet, so a one-lecture book is built here)."""
    from nbformat.v4 import new_markdown_cell, new_notebook

    from tools.book import build_book

    (tmp_path / "notebooks").mkdir()
    (tmp_path / "syllabus.md").write_text("| # | m | n | l | t | s |\n|---|---|---|---|---|---|\n"
                                          "| 00 | Math | `00_math` | - | 1 min | ready |\n")
    (tmp_path / "README.md").write_text("## Working through the course\n\nRead.\n")
    nb = new_notebook(cells=[new_markdown_cell("# 00 · Math\n\nThe time is $t = \\alpha + n\\beta$.")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}})
    nbformat.write(nb, tmp_path / "notebooks" / "00_math.ipynb")
    build_book(tmp_path / "site", tmp_path / "run", tmp_path / "work", tmp_path / "notebooks",
               tmp_path / "labs", tmp_path / "syllabus.md", tmp_path / "README.md")
    with serve(tmp_path / "site") as base:
        elsewhere: list[str] = []
        page.route(lambda url: not url.startswith(base),
                   lambda route: (elsewhere.append(route.request.url), route.abort()))
        page.goto(base + "notebooks/00_math.html")
        page.wait_for_selector("mjx-container", timeout=30_000)
        assert "\\alpha" not in page.inner_text("article"), "the formula is still raw TeX"
    assert not elsewhere, f"the page fetched from another host: {elsewhere}"

