"""Build the course as a Jupyter Book (1.x, Sphinx) from the notebooks ``make course`` executed.

    python -m tools.book                     # build/notebooks/ -> build/site/ (make site)
    python -m tools.book --serve 8000        # then serve it (search needs a server)
    python -m http.server --directory build/site 8000   # the same, by hand

Nothing is executed: the pages show the outputs of the last ``make course`` run. The book's
sources are staged in ``build/book/src``: the syllabus as the landing page (with each
module's status and headline figures), "working through the course" from the README, every
lecture in syllabus order (executed when ``build/notebooks`` has it, else the source with a
"not built" note), the labs as ``labs/`` has them (no solutions), and the run's scorecard.
Widgets need a kernel, so each widget output becomes a note (the static plot of its default
setting stays on the page); perfkit's own output types are dropped (each carries a Markdown
or HTML rendering beside it). Sphinx runs with warnings as errors, then
:func:`tools.book_check.check_site` checks every link offline.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import io
import json
import posixpath
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import yaml

from tools.book_check import check_site
from tools.book_pages import (
    Module,
    NotebookStatus,
    index_page,
    md_code,
    read_syllabus,
    readme_section,
    relink,
    scorecard_page,
    status_of,
)

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "book"
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"
LAB_GLOB = "lab[0-9][0-9]_*.ipynb"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
DROPPED_MIME_PREFIX = "application/vnd.perfkit."  # data for the tooling; a rendering sits beside it
PAPERMILL_ERROR_ID = "papermill-error-cell"  # papermill marks the cell that raised with it
WIDGET_NOTE = ("*Interactive widget: it needs a live kernel. Open this notebook in JupyterLab "
               "(`make lab`) to move its controls; the static plot of its default setting is on "
               "this page.*")
# Warnings Sphinx may print that do not fail the build (each with the reason); none so far.
ACCEPTED_WARNINGS: tuple[str, ...] = ()


class BookError(RuntimeError):
    """The book did not build cleanly: Sphinx warnings, or links that do not resolve."""


@dataclass
class BookResult:
    """What :func:`build_book` built."""

    index: Path
    lectures: list[str]  # notebook stems, page order
    labs: list[str]
    statuses: dict[str, NotebookStatus]
    seconds: float


def _status_note(status: NotebookStatus) -> str:
    """The admonition at the top of a lecture page (MyST)."""
    if status.state == "ran":
        return (f":::{{admonition}} Measured on the machine that built this site: {status.label()}\n"
                ":class: tip\nEvery figure, number and verdict below comes from that run. Run it "
                "on your machine with `make course`, or cell by cell in JupyterLab (`make lab`).\n:::")
    if status.state == "failed":
        return (f":::{{admonition}} This notebook failed here: {status.label()}\n:class: error\n"
                f"The first error: {md_code(status.error)}. The cells after "
                f'<a href="#{PAPERMILL_ERROR_ID}">the failing one</a> did not run; their outputs '
                "are missing.\n:::")
    return (":::{admonition} Not built on this machine\n:class: warning\nThis page shows the "
            "notebook's code without its outputs: run `make course`, then `make site`.\n:::")


def _insert_note(nb: nbformat.NotebookNode, note: str) -> None:
    """Put ``note`` right under the notebook's title (the first ``# `` heading), else on top."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        lines = cell.source.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("# "):
                cell.source = "\n".join(lines[:i + 1] + ["", note, ""] + lines[i + 1:])
                return
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(note))


def stage_notebook(nb: nbformat.NotebookNode, note: str) -> nbformat.NotebookNode:
    """A copy of ``nb`` as the book shows it: ``note`` under the title, widget outputs
    replaced by :data:`WIDGET_NOTE`, perfkit's own output types dropped, no widget state."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    # papermill's red banner above the title (the note says it, under the title)
    nb.cells = [c for c in nb.cells if not (c.cell_type == "markdown" and "An Exception was "
                                            "encountered" in c.source and "<span" in c.source)]
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data is None:
                outputs.append(out)
            elif WIDGET_MIME in data:
                outputs.append(nbformat.v4.new_output("display_data", {"text/markdown": WIDGET_NOTE}))
            else:
                out["data"] = {k: v for k, v in data.items() if not k.startswith(DROPPED_MIME_PREFIX)}
                outputs.append(out)
        cell.outputs = outputs
    _insert_note(nb, note)
    return nb


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def lecture_order(modules: list[Module], stems: set[str]) -> list[Module]:
    """The syllabus's modules and the notebooks it does not list yet (a new one), by number."""
    listed = {m.notebook for m in modules}
    extra = [Module(s[:2], s[3:].replace("_", " "), s, "-", "-") for s in sorted(stems - listed)]
    return sorted([*modules, *extra], key=lambda m: (m.number, m.notebook not in listed))


def stage(src: Path, notebooks_dir: Path, sources: Path, labs_dir: Path, syllabus: Path,
          readme: Path) -> BookResult:
    """Write the book's sources into ``src`` (emptied first) and return what they hold.

    The book mirrors the repository (``notebooks/``, ``labs/``, pages at the top, ``syllabus.md``
    the landing page), so relative links between notebooks keep working
    (:func:`tools.book_pages.relink`); the repository's top is ``syllabus``'s folder.
    """
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(CONFIG_DIR / "_static", src / "_static")
    root = Path(syllabus).parent
    executed = {p.stem: p for p in Path(notebooks_dir).glob(NOTEBOOK_GLOB)}
    written = {p.stem: p for p in Path(sources).glob(NOTEBOOK_GLOB)}
    modules = lecture_order(read_syllabus(syllabus), set(executed) | set(written))
    statuses = {m.notebook: status_of(executed.get(m.notebook), m.notebook in written) for m in modules}
    lectures = [m.notebook for m in modules if statuses[m.notebook].state != "planned"]
    labs = sorted(p.stem for p in Path(labs_dir).glob(LAB_GLOB))
    pages = {f"notebooks/{s}.ipynb" for s in lectures} | {f"labs/{s}.ipynb" for s in labs} | {
        "index.md", "scorecard.md", "working_through_the_course.md"}
    images: set[str] = set()

    def put(nb: nbformat.NotebookNode, path: str) -> None:
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source, shown = relink(cell.source, posixpath.dirname(path), pages, root)
                images.update(shown)
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, src / path)

    for stem in lectures:
        nb = nbformat.read(executed.get(stem) or written[stem], as_version=4)
        put(stage_notebook(nb, _status_note(statuses[stem])), f"notebooks/{stem}.ipynb")
    for stem in labs:
        note = (":::{note}\nA graded lab, without its solutions. Complete each "
                "`raise NotImplementedError()` in JupyterLab (`make lab`), then run "
                f"`make grade LAB=labs/{stem}.ipynb` for a score per question.\n:::")
        put(stage_notebook(nbformat.read(Path(labs_dir) / f"{stem}.ipynb", as_version=4), note),
            f"labs/{stem}.ipynb")
    built = (f"Built on {dt.datetime.now():%Y-%m-%d %H:%M} from `build/notebooks/` by `make site`; "
             "widgets need a live kernel (`make lab`), each page shows the static plot of a "
             "widget's default setting.")
    syllabus_text, shown = relink(Path(syllabus).read_text(encoding="utf-8"), "", pages, root)
    working, shown_too = relink(readme_section(readme, "Working through the course"), "", pages, root)
    for path in images | shown | shown_too:
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / path, src / path)
    _write(src / "index.md", index_page(modules, statuses, {s[3:5]: f"labs/{s}" for s in labs},
                                        syllabus_text, built))
    _write(src / "working_through_the_course.md", working)
    _write(src / "scorecard.md", scorecard_page({s: statuses[s] for s in lectures}, _chance(statuses)))
    toc = {"format": "jb-book", "root": "index", "parts": [
        {"caption": "Start here", "chapters": [{"file": "working_through_the_course"}]},
        {"caption": "Lectures", "chapters": [{"file": f"notebooks/{s}"} for s in lectures]},
        *([{"caption": "Labs", "chapters": [{"file": f"labs/{s}"} for s in labs]}] if labs else []),
        {"caption": "This run", "chapters": [{"file": "scorecard"}]}]}
    _write(src / "_toc.yml", yaml.safe_dump(toc, sort_keys=False))
    return BookResult(src / "index.md", lectures, labs, statuses, 0.0)


def _chance(statuses: dict[str, NotebookStatus]) -> float | None:
    """Misses chance alone would give if every prediction held (``perfkit.stats``)."""
    from perfkit.stats import chance_misses

    levels = [v["level"] for s in statuses.values() for v in s.verdicts if v.get("level") is not None]
    return sum(chance_misses(levels.count(lvl), lvl) for lvl in set(levels)) if levels else None


def _sphinx_warnings(log: str) -> list[str]:
    """The warning lines of a Sphinx log, less :data:`ACCEPTED_WARNINGS`."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", log)  # Sphinx colours its log when it thinks it may
    found = [line for line in plain.splitlines() if re.search(r"\bWARNING\b|\bERROR\b", line)]
    return [w for w in found if not any(a in w for a in ACCEPTED_WARNINGS)]


def build_book(out: Path = ROOT / "build" / "site", notebooks_dir: Path = ROOT / "build" / "notebooks",
               work: Path = ROOT / "build" / "book", sources: Path = ROOT / "notebooks",
               labs_dir: Path = ROOT / "labs", syllabus: Path = ROOT / "syllabus.md",
               readme: Path = ROOT / "README.md") -> BookResult:
    """Stage the sources, build the HTML book into ``out`` (replaced) and check its links.

    Args:
        out: the site folder (``index.html`` at its top).
        notebooks_dir: the executed notebooks (``make course`` writes them).
        work: staging folder: ``src/`` (the book's sources) and ``doctrees/``.
        sources: the lecture notebooks, for those not executed yet.
        labs_dir: the generated labs (no solutions).
        syllabus, readme: the module list and the README holding "Working through the course".

    Raises:
        FileNotFoundError: neither ``notebooks_dir`` nor ``sources`` holds a lecture.
        ValueError: the syllabus has no module table, or README lacks the section.
        BookError: Sphinx warned (each warning is in the message) or a link is broken.
    """
    from jupyter_book.sphinx import build_sphinx

    t0 = time.perf_counter()
    if not any(Path(notebooks_dir).glob(NOTEBOOK_GLOB)) and not any(Path(sources).glob(NOTEBOOK_GLOB)):
        raise FileNotFoundError(f"no notebooks ({NOTEBOOK_GLOB}) in {notebooks_dir} or {sources}: "
                                "run `make course` (or `make course QUICK=1`) first")
    out, work = Path(out), Path(work)
    result = stage(work / "src", Path(notebooks_dir), Path(sources), Path(labs_dir), Path(syllabus),
                   Path(readme))
    html = work / "html"  # myst-nb writes its images beside the output folder: keep them in work
    for stale in (html, work / "doctrees", work / "jupyter_execute"):  # Sphinx keeps removed pages
        shutil.rmtree(stale, ignore_errors=True)
    log = io.StringIO()
    with contextlib.redirect_stderr(log), contextlib.redirect_stdout(io.StringIO()):
        # the options `jupyter-book build --warningiserror --nitpick --keep-going` passes
        code = build_sphinx(work / "src", html, noconfig=True, path_config=str(CONFIG_DIR / "_config.yml"),
                            confoverrides={"external_toc_path": (work / "src" / "_toc.yml").as_posix(),
                                           "latex_individualpages": False, "nitpicky": True},
                            doctreedir=work / "doctrees", warningiserror=True, keep_going=True,
                            quiet=True, freshenv=True)
    warnings = _sphinx_warnings(log.getvalue())
    if isinstance(code, Exception) or warnings or code:
        raise BookError("the book did not build cleanly:\n" + "\n".join(
            warnings or [str(code), log.getvalue()[-3000:]]))
    broken = check_site(html)
    if broken:
        raise BookError("broken links in the built site:\n" + "\n".join(broken))
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(html, out)
    result.index, result.seconds = out / "index.html", time.perf_counter() - t0
    return result


def serve(site: Path, port: int) -> None:
    """Serve ``site`` on 127.0.0.1:``port`` until interrupted (search needs HTTP)."""
    import functools
    import http.server

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as httpd:
        print(f"serving {site} at http://127.0.0.1:{port}/ (Ctrl-C stops)")
        with contextlib.suppress(KeyboardInterrupt):
            httpd.serve_forever()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build the course book from build/notebooks.")
    ap.add_argument("--notebooks", default=str(ROOT / "build" / "notebooks"),
                    help="folder of executed notebooks (make course writes them)")
    ap.add_argument("--sources", default=str(ROOT / "notebooks"),
                    help="the lecture notebooks (pages for those not executed yet)")
    ap.add_argument("--out", default=str(ROOT / "build" / "site"), help="site folder")
    ap.add_argument("--serve", type=int, metavar="PORT", help="then serve the site on this port")
    args = ap.parse_args(argv)
    print(f"book: building {args.out} from {args.notebooks} (Sphinx, warnings are errors)", flush=True)
    try:
        result = build_book(Path(args.out), Path(args.notebooks), sources=Path(args.sources))
    except (FileNotFoundError, ValueError, BookError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    counts = {s: sum(st.state == s for st in result.statuses.values())
              for s in ("ran", "failed", "not built", "planned")}
    print(f"site: {len(result.lectures)} lectures ({json.dumps(counts)[1:-1]}), {len(result.labs)} "
          f"labs, built in {result.seconds:.0f} s -> {result.index}")
    print("search needs a web server (Chromium blocks it on file://): serve the site with\n"
          f"  python -m http.server --directory {Path(args.out)} 8000\n"
          "and open http://127.0.0.1:8000/ (or: python -m tools.book --serve 8000)")
    if args.serve:
        serve(Path(args.out), args.serve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
