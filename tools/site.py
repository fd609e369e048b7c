"""Build the course as a static HTML site from the executed notebooks.

    python -m tools.site                                  # build/notebooks/ -> build/site/
    python -m tools.site --notebooks build/notebooks --out build/site

``make course`` executes every notebook and renders it to ``build/notebooks/NN_*.html``
(plots embedded as data URIs). This copies each page into the site with a navigation bar
(course index, previous and next module), points links between notebooks
(``NN_topic.ipynb``) at their pages, and writes ``index.html``: every module of
``syllabus.md`` in order, the rendered ones linked with their run status and headline
figures (from ``build/notebooks/summary.json``), the others listed as planned or not built.
Open ``build/site/index.html`` in a browser; no server is needed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COURSE_TITLE = "Performance optimization for (distributed) PyTorch training"
PAGE_GLOB = "[0-9][0-9]_*.html"
_ROW = re.compile(r"^\|\s*(\d\d)\s*\|(.*)\|\s*$")
_SECTION = re.compile(r"^##\s+(\d\d)\s+·\s+(.+?)\s*$")
_NOTEBOOK_LINK = re.compile(
    r'href="(?:\.\./notebooks/|notebooks/|\./)?(\d\d_[\w-]+)\.ipynb(#[^"]*)?"')
_IMG_SRC = re.compile(r'(<img\b[^>]*?\bsrc=")([^"]+)(")', re.IGNORECASE)

NAV_CSS = """
nav.perfkit-nav { display: flex; gap: 1.5em; align-items: baseline; flex-wrap: wrap;
  font: 14px/1.4 system-ui, sans-serif; padding: 8px 16px; margin: 0 0 1em 0;
  background: #f4f6f8; border-bottom: 1px solid #d0d7de; }
nav.perfkit-nav.bottom { border-top: 1px solid #d0d7de; border-bottom: none; margin: 2em 0 0 0; }
nav.perfkit-nav .here { font-weight: 600; }
nav.perfkit-nav .next { margin-left: auto; }
"""

INDEX_CSS = """
body { font: 16px/1.5 system-ui, sans-serif; max-width: 70em; margin: 2em auto; padding: 0 1em;
  color: #1f2328; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: 6px 10px; border-bottom: 1px solid #d0d7de; }
th { background: #f4f6f8; }
.status { white-space: nowrap; }
.ready { color: #1a7f37; } .planned { color: #6e7781; } .failed, .missing { color: #cf222e; }
.figures { margin: 0.3em 0 0 0; padding-left: 1.2em; font-size: 90%; color: #424a53; }
code { background: #f4f6f8; padding: 0 0.2em; border-radius: 3px; }
footer { margin-top: 2em; font-size: 90%; color: #6e7781; }
"""


@dataclass
class Module:
    """One row of the syllabus table, with its section's one-line summary."""

    number: str  # "00"
    title: str
    notebook: str  # stem: "00_measure_your_machine"
    lab: str
    time: str
    status: str  # the syllabus's word: ready or planned
    prerequisites: str = ""
    summary: str = ""


def _inline(text: str) -> str:
    """Syllabus markdown (backticks only) to escaped HTML."""
    parts = text.split("`")
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p)
                   for i, p in enumerate(parts))


def read_syllabus(path: Path) -> list[Module]:
    """The modules of ``syllabus.md`` in table order, with each section's summary.

    Raises:
        ValueError: the file has no module table (rows like ``| 00 | title | `stem` | ...``).
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    modules: list[Module] = []
    for line in lines:
        m = _ROW.match(line)
        if not m:
            continue
        cells = [c.strip() for c in m.group(2).split("|")]
        if len(cells) < 5:
            raise ValueError(f"{path}: syllabus row {line!r} has {len(cells) + 1} columns, expected 6 "
                             "(#, module, notebook, lab, time, status)")
        title, notebook, lab, time, status = cells[:5]
        modules.append(Module(m.group(1), title, notebook.strip("`"), lab, time, status.lower()))
    if not modules:
        raise ValueError(f"{path}: no module table found (rows like '| 00 | title | `stem` | ...')")
    by_number = {mod.number: mod for mod in modules}
    for i, line in enumerate(lines):
        m = _SECTION.match(line)
        if not m or m.group(1) not in by_number:
            continue
        paragraph = []
        for text in lines[i + 1:]:
            if text.startswith("#") or (not text.strip() and paragraph):
                break
            if text.strip():
                paragraph.append(text.strip())
        text = " ".join(paragraph)
        pre = re.match(r"\*Prerequisites:\s*(.*?)\.?\*\s*(.*)", text)
        mod = by_number[m.group(1)]
        mod.prerequisites, mod.summary = (pre.group(1), pre.group(2)) if pre else ("", text)
    return modules


def _read_runs(notebooks_dir: Path) -> dict[str, dict]:
    """``summary.json`` of the last ``make course`` run, by notebook stem ({} if absent)."""
    path = notebooks_dir / "summary.json"
    try:
        return {run["name"]: run for run in json.loads(path.read_text())}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _label(mod: Module) -> str:
    return f"{mod.number} · {mod.title}"


def nav_bar(mod: Module, prev: Module | None, nxt: Module | None, where: str = "top") -> str:
    """The navigation bar of a module page: index, this module, previous and next pages."""
    items = ['<a href="index.html">Course index</a>',
             f'<span class="here">{html.escape(_label(mod))}</span>']
    if prev:
        items.append(f'<a class="prev" rel="prev" href="{prev.notebook}.html">'
                     f"&larr; {html.escape(_label(prev))}</a>")
    if nxt:
        items.append(f'<a class="next" rel="next" href="{nxt.notebook}.html">'
                     f"{html.escape(_label(nxt))} &rarr;</a>")
    return f'<nav class="perfkit-nav {where}">{" ".join(items)}</nav>'


def _page(source: str, mod: Module, prev: Module | None, nxt: Module | None,
          on_site: set[str]) -> str:
    """A rendered notebook as a site page: title, style, navigation, links between notebooks."""
    def link(m: re.Match) -> str:
        stem, fragment = m.group(1), m.group(2) or ""
        if stem in on_site:
            return f'href="{stem}.html{fragment}"'
        return f'href="index.html#module-{stem[:2]}"'  # a planned module: its line on the index

    page = _NOTEBOOK_LINK.sub(link, source)
    page = re.sub(r"<title>.*?</title>", f"<title>{html.escape(_label(mod))} · {COURSE_TITLE}</title>",
                  page, count=1, flags=re.DOTALL)
    page = page.replace("</head>", f"<style>{NAV_CSS}</style></head>", 1)
    page, found = re.subn(r"(<body\b[^>]*>)", lambda m: m.group(1) + nav_bar(mod, prev, nxt), page,
                          count=1)
    if not found:
        raise ValueError(f"{mod.notebook}.html has no <body> tag: is it an nbconvert HTML page?")
    return page.replace("</body>", nav_bar(mod, prev, nxt, "bottom") + "</body>", 1)


def _copy_local_images(page: str, sources: list[Path], out_dir: Path) -> None:
    """Copy images a page references by relative path (not data URIs) into the site."""
    for m in _IMG_SRC.finditer(page):
        src = m.group(2)
        if re.match(r"^(data:|[a-z]+://|/)", src, re.IGNORECASE):
            continue
        for folder in sources:
            found = (folder / src).resolve()
            if found.is_file() and folder.resolve() in found.parents:
                target = out_dir / src
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(found, target)
                break


def _status_cell(mod: Module, run: dict | None, on_site: bool, written: bool) -> str:
    if on_site:
        if run and run.get("status") not in (None, "ok"):
            detail = html.escape(f"{run['status']}: {run.get('error', '')}"[:200])
            return f'<span class="failed">ran with a problem</span><br><small>{detail}</small>'
        seconds = f" in {run['seconds']:.0f} s" if run and "seconds" in run else ""
        return f'<span class="ready">ready</span><br><small>ran here{seconds}</small>'
    if written:
        return '<span class="missing">not built</span><br><small>run <code>make course</code></small>'
    return '<span class="planned">planned</span>'


def index_page(modules: list[Module], on_site: set[str], runs: dict[str, dict],
               written: set[str]) -> str:
    """``index.html``: every module in syllabus order, rendered ones linked."""
    rows = []
    for mod in modules:
        title = html.escape(mod.title)
        if mod.notebook in on_site:
            title = f'<a href="{mod.notebook}.html">{title}</a>'
        figures = (runs.get(mod.notebook) or {}).get("headlines") or {}
        figure_list = "".join(f"<li>{html.escape(k)}: {html.escape(str(v))}</li>"
                              for k, v in figures.items()) if mod.notebook in on_site else ""
        verdicts = (runs.get(mod.notebook) or {}).get("verdicts") or []
        if verdicts and mod.notebook in on_site:
            held = sum(v["outcome"] == "held" for v in verdicts)
            figure_list += (f'<li class="scorecard">predictions held: {held} of {len(verdicts)}'
                            + "".join(f"<br><small>{html.escape(v['outcome'])}: "
                                      f"{html.escape(v['prediction']['what'])}</small>"
                                      for v in verdicts if v["outcome"] != "held") + "</li>")
        pre = f"<br><small>Prerequisites: {html.escape(mod.prerequisites)}</small>" \
            if mod.prerequisites else ""
        status = _status_cell(mod, runs.get(mod.notebook), mod.notebook in on_site,
                              mod.notebook in written)
        rows.append(
            f'<tr id="module-{mod.number}"><td>{mod.number}</td>'
            f"<td><strong>{title}</strong>{pre}</td>"
            f"<td>{_inline(mod.summary)}"
            + (f'<ul class="figures">{figure_list}</ul>' if figure_list else "")
            + f"</td><td>{_inline(mod.lab)}</td><td>{html.escape(mod.time)}</td>"
            f'<td class="status">{status}</td></tr>')
    ready = sum(m.notebook in on_site for m in modules)
    stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{COURSE_TITLE}</title><style>{INDEX_CSS}</style></head>
<body>
<h1>{COURSE_TITLE}</h1>
<p>The lecture notebooks as they ran on this machine: every figure and number on these pages
was measured here. {ready} of {len(modules)} modules are rendered; the others are listed as
planned (not written yet) or not built (run <code>make course</code>). Headline figures come
from the last <code>make course</code> run.</p>
<table>
<thead><tr><th>#</th><th>module</th><th>what it answers</th><th>lab</th><th>time</th>
<th>status</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
<footer>Built by <code>make site</code> on {stamp} from <code>build/notebooks/</code>. Widgets
need a live kernel: open the notebooks in JupyterLab (<code>make lab</code>) to move the sliders;
each page also shows a static plot of the widget's default setting.</footer>
</body></html>
"""


def build_site(notebooks_dir: Path, out_dir: Path, syllabus: Path = ROOT / "syllabus.md",
               sources: Path = ROOT / "notebooks") -> Path:
    """Write the site to ``out_dir`` and return the path of its ``index.html``.

    Args:
        notebooks_dir: where ``make course`` wrote ``NN_*.html`` (and ``summary.json``).
        out_dir: the site folder; HTML pages from an earlier build are replaced.
        syllabus: the module list (its table gives the order and the planned modules).
        sources: the notebooks' folder, to tell "not built" from "planned" and to find
            images referenced by relative path.

    Raises:
        FileNotFoundError: ``notebooks_dir`` holds no rendered notebook.
        ValueError: the syllabus has no module table, or a page is not nbconvert HTML.
    """
    pages = {p.stem: p for p in sorted(Path(notebooks_dir).glob(PAGE_GLOB))}
    if not pages:
        raise FileNotFoundError(f"no rendered notebooks ({PAGE_GLOB}) in {notebooks_dir}: "
                                "run `make course` (or `make course QUICK=1`) first")
    modules = read_syllabus(syllabus)
    listed = {m.notebook for m in modules}
    for stem in pages:  # a rendered notebook the syllabus does not list still gets a page
        if stem not in listed:
            modules.append(Module(stem[:2], stem[3:].replace("_", " "), stem, "-", "-", "ready"))
    written = {p.stem for p in Path(sources).glob("[0-9][0-9]_*.ipynb")}
    written |= {m.notebook for m in modules if m.status == "ready"}
    ready = [m for m in modules if m.notebook in pages]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*.html"):
        stale.unlink()
    for i, mod in enumerate(ready):
        prev = ready[i - 1] if i > 0 else None
        nxt = ready[i + 1] if i + 1 < len(ready) else None
        page = _page(pages[mod.notebook].read_text(encoding="utf-8"), mod, prev, nxt, set(pages))
        (out_dir / f"{mod.notebook}.html").write_text(page, encoding="utf-8")
        _copy_local_images(page, [Path(notebooks_dir), Path(sources)], out_dir)
    index = out_dir / "index.html"
    index.write_text(index_page(modules, set(pages), _read_runs(Path(notebooks_dir)), written),
                     encoding="utf-8")
    return index


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build the static course site from build/notebooks.")
    ap.add_argument("--notebooks", default=str(ROOT / "build" / "notebooks"),
                    help="folder of rendered notebooks (make course writes them)")
    ap.add_argument("--out", default=str(ROOT / "build" / "site"), help="site folder")
    ap.add_argument("--syllabus", default=str(ROOT / "syllabus.md"))
    args = ap.parse_args(argv)
    try:
        index = build_site(Path(args.notebooks), Path(args.out), Path(args.syllabus))
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    modules = read_syllabus(Path(args.syllabus))
    ready = sorted(p.stem for p in Path(args.out).glob(PAGE_GLOB))
    print(f"site: {len(ready)} module pages ({', '.join(s[:2] for s in ready)}), "
          f"{len([m for m in modules if m.notebook not in ready])} listed as not ready -> {index}")
    print(f"open file://{index.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
