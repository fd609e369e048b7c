"""The generated pages of the course book: the landing page, the scorecard, and what each
executed notebook says about its own run.

    modules = read_syllabus(ROOT / "syllabus.md")
    status = status_of(Path("build/notebooks/00_measure_your_machine.ipynb"))
    text = index_page(modules, {"00_measure_your_machine": status}, labs={}, syllabus=...)

Everything here reads the executed notebooks themselves (papermill's metadata, the cells'
error outputs, the headline and verdict outputs of ``perfkit.viz``), not a summary file, so
a page and its line on the index always describe the same run. The pages are MyST
Markdown (the Jupyter Book's parser); text that comes from a run is escaped.
"""

from __future__ import annotations

import posixpath
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from tools.run_course import headlines_of, verdicts_of

COURSE_TITLE = "Performance optimization for (distributed) PyTorch training"
_ROW = re.compile(r"^\|\s*(\d\d)\s*\|(.*)\|\s*$")
_SECTION = re.compile(r"^##\s+(\d\d)\s+·\s+(.+?)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|$#{}~])")
_LAB_NUMBER = re.compile(r"\blab\s*(\d\d)\b", re.IGNORECASE)
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)((?:\s+\"[^\"]*\")?)\)")
STATES = ("ran", "failed", "not built", "planned")


@dataclass
class Module:
    """One row of the syllabus table, with its section's one-line summary."""

    number: str  # "00"
    title: str
    notebook: str  # stem: "00_measure_your_machine"
    lab: str
    time: str
    prerequisites: str = ""
    summary: str = ""


@dataclass
class NotebookStatus:
    """How a notebook's last run went, read from the executed notebook.

    ``state`` is ``ran``, ``failed`` (``error`` names the exception), ``not built`` (the
    notebook exists but ``make course`` has not executed it) or ``planned`` (the syllabus
    lists it, nobody has written it).
    """

    state: str
    seconds: float | None = None
    error: str = ""
    quick: bool | None = None
    headlines: dict[str, str] = field(default_factory=dict)
    verdicts: list[dict] = field(default_factory=list)

    def label(self) -> str:
        """A short status: ``ran here in 12 s (QUICK sizes)``, ``failed here after 3 s``."""
        if self.state not in ("ran", "failed"):
            return self.state
        took = "" if self.seconds is None else (
            f" in {self.seconds:.0f} s" if self.state == "ran" else f" after {self.seconds:.0f} s")
        sizes = {True: " (QUICK sizes)", False: " (default sizes)", None: ""}[self.quick]
        return ("ran here" if self.state == "ran" else "failed here") + took + sizes


def md_escape(text: str) -> str:
    """``text`` as literal MyST Markdown: every character that could start markup escaped."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def md_code(text: str) -> str:
    """``text`` as one inline code span, whatever backticks it holds."""
    text = " ".join(str(text).split())
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def relink(text: str, origin: str, pages: set[str], root: Path) -> tuple[str, set[str]]:
    """Markdown written at ``origin`` (a folder of the repository: ``notebooks``, or ``""``
    for the top) with its relative links made to work in the book, which mirrors the
    repository's layout for its pages.

    A link to a page of the book stays (``syllabus.md`` becomes the landing page); an image
    that exists in the repository stays and is returned, to be copied beside the page; a link
    to any other file of the repository (source code, a folder) keeps its text and loses its
    target, since the site does not hold it. Code spans and fenced code are left alone.

    Args:
        text: the Markdown.
        origin: the folder the Markdown is written in, relative to the repository's top.
        pages: the book's pages, as repository paths (``notebooks/00_x.ipynb``).
        root: the repository's top folder.

    Returns:
        ``(text, images)``: the Markdown, and the repository paths of the images it shows.
    """
    images: set[str] = set()

    def fix(m: re.Match) -> str:
        bang, label, target, title = m.groups()
        parts = urllib.parse.urlsplit(target)
        if parts.scheme or target.startswith(("#", "/", "//")) or not parts.path:
            return m.group(0)
        path = posixpath.normpath(posixpath.join(origin, urllib.parse.unquote(parts.path)))
        if path == "syllabus.md":
            path = "index.md"
            target = posixpath.relpath(path, origin or ".") + (f"#{parts.fragment}" if parts.fragment else "")
        if path in pages:
            return f"{bang}[{label}]({target}{title})"
        if bang and not path.startswith("../") and (Path(root) / path).is_file():
            images.add(path)
            return m.group(0)
        return label  # a file the site does not hold: the words stay, the link goes

    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced:  # odd pieces between backticks are code spans
            line = "`".join(p if i % 2 else _LINK.sub(fix, p) for i, p in enumerate(line.split("`")))
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else ""), images


def read_syllabus(path: Path) -> list[Module]:
    """The modules of ``syllabus.md`` in table order, with each section's summary.

    Raises:
        ValueError: the file has no module table (rows like ``| 00 | title | `stem` | ...``),
            or a row has fewer than five cells.
    """
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    modules: list[Module] = []
    for line in lines:
        m = _ROW.match(line)
        if not m:
            continue
        cells = [c.strip() for c in m.group(2).split("|")]
        if len(cells) < 4:
            raise ValueError(f"{path}: syllabus row {line!r} has {len(cells) + 1} columns, expected "
                             "at least 5 (#, module, notebook, lab, time)")
        title, notebook, lab, time = cells[:4]
        modules.append(Module(m.group(1), title, notebook.strip("`"), lab, time))
    if not modules:
        raise ValueError(f"{path}: no module table found (rows like '| 00 | title | `stem` | ...')")
    by_number = {mod.number: mod for mod in modules}
    for i, line in enumerate(lines):
        m = _SECTION.match(line)
        if not m or m.group(1) not in by_number:
            continue
        paragraph: list[str] = []
        for text in lines[i + 1:]:
            if text.startswith("#") or (not text.strip() and paragraph):
                break
            if text.strip():
                paragraph.append(text.strip())
        joined = " ".join(paragraph)
        pre = re.match(r"\*Prerequisites:\s*(.*?)\.?\*\s*(.*)", joined)
        mod = by_number[m.group(1)]
        mod.prerequisites, mod.summary = (pre.group(1), pre.group(2)) if pre else ("", joined)
    return modules


def status_of(executed: Path | None, written: bool = True) -> NotebookStatus:
    """The status of one notebook from its executed copy (``None``: not executed).

    Args:
        executed: the notebook papermill wrote, or ``None`` when there is none.
        written: whether the notebook exists at all (``False``: ``planned``).
    """
    if executed is None:
        return NotebookStatus("not built" if written else "planned")
    nb = nbformat.read(executed, as_version=4)
    meta = nb.metadata.get("papermill", {})
    error = ""
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "error" and not error:
                error = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".splitlines()[0][:300]
    if not error and meta.get("exception"):
        error = "the run stopped with an exception (papermill recorded no cell error)"
    quick = (meta.get("parameters") or {}).get("QUICK")
    return NotebookStatus("failed" if error else "ran", meta.get("duration"), error,
                          quick if isinstance(quick, bool) else None, headlines_of(nb),
                          verdicts_of(nb))


def shift_headings(text: str, by: int) -> str:
    """Every Markdown heading outside code fences ``by`` levels deeper (negative: higher)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        m = None if fenced else _HEADING.match(line)
        if m:
            level = min(6, max(1, len(m.group(1)) + by))
            line = "#" * level + line[len(m.group(1)):]
        out.append(line)
    return "\n".join(out) + "\n"


def readme_section(readme: Path, heading: str) -> str:
    """README's section ``## heading`` (to the next ``## ``) as a page: its heading a title.

    Raises:
        ValueError: README has no such section.
    """
    lines = Path(readme).read_text(encoding="utf-8").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == f"## {heading}")
    except StopIteration:
        raise ValueError(f"{readme}: no section '## {heading}'") from None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return shift_headings("\n".join(lines[start:end]), -1)


def _status_cell(status: NotebookStatus) -> str:
    badge = {"ran": "bdg-success", "failed": "bdg-danger", "not built": "bdg-warning",
             "planned": "bdg-secondary"}[status.state]
    word = {"ran": "ran here", "failed": "failed", "not built": "not built",
            "planned": "planned"}[status.state]
    detail = ""
    if status.state == "ran":
        detail = f" in {status.seconds:.0f} s" if status.seconds is not None else ""
    elif status.state == "failed":
        detail = f" {md_code(status.error)}"
    elif status.state == "not built":
        detail = " (run `make course`)"
    return f"{{{badge}}}`{word}`{detail}"


def index_page(modules: list[Module], statuses: dict[str, NotebookStatus], labs: dict[str, str],
               syllabus: str, built: str) -> str:
    """The landing page: every module with its status and headline figures, then the syllabus.

    Args:
        modules: the syllabus's modules in order (plus notebooks it does not list).
        statuses: by notebook stem; a module without one is ``planned``.
        labs: lab number ("00") -> the lab page's path without suffix (``labs/lab00_x``).
        syllabus: the text of ``syllabus.md`` (its title and module table are replaced).
        built: when and where the pages were built, one line.
    """
    ran = sum(statuses.get(m.notebook, NotebookStatus("planned")).state == "ran" for m in modules)
    lines = [f"# {COURSE_TITLE}", "",
             "The lecture notebooks as they ran on the machine that built these pages: every "
             "figure and number below was measured there, and every verdict was computed "
             f"from that measurement. {ran} of {len(modules)} modules ran here. {built}", "",
             "Start with [working through the course](working_through_the_course.md); the "
             "[scorecard](scorecard.md) lists which predictions held on this machine.", "",
             "## Modules", "", "```{list-table}", ":header-rows: 1", ":widths: 4 26 20 36 14",
             ":class: perfkit-modules", "",
             "* - #", "  - module", "  - status", "  - headline figures (measured here)", "  - lab"]
    for mod in modules:
        status = statuses.get(mod.notebook, NotebookStatus("planned"))
        title = md_escape(mod.title)
        if status.state != "planned":
            title = f"[{title}](notebooks/{mod.notebook}.ipynb)"
        lines += [f"* - {mod.number}", f"  - {title}", f"  - {_status_cell(status)}"]
        heads = [f"{md_escape(k)}: **{md_escape(v)}**" for k, v in status.headlines.items()]
        if status.verdicts:
            held = sum(v.get("outcome") == "held" for v in status.verdicts)
            heads.append(f"predictions held: {held} of {len(status.verdicts)}")
        lines += ([f"  - - {heads[0]}"] + [f"    - {h}" for h in heads[1:]]) if heads else ["  - "]
        number = _LAB_NUMBER.search(mod.lab)
        lab = md_escape(mod.lab) if mod.lab.strip() not in ("", "-") else ""
        if number and number.group(1) in labs and not mod.lab.startswith("("):
            lab = f"[{lab}]({labs[number.group(1)]}.ipynb)"
        lines.append(f"  - {lab}")
    lines += ["```", "", "## Syllabus", ""]
    body = [line for line in syllabus.splitlines()
            if not _ROW.match(line) and not re.match(r"^\|[-| ]+\|\s*$", line)
            and not re.match(r"^\|\s*#\s*\|", line)]
    if body and body[0].startswith("# "):
        body = body[1:]
    for line in shift_headings("\n".join(body), 1).splitlines():
        lines.append(line)
        m = re.match(r"^###\s+(\d\d)\s+·", line)
        stem = next((x.notebook for x in modules if m and x.number == m.group(1)), None)
        if stem and statuses.get(stem, NotebookStatus("planned")).state != "planned":
            lines += ["", f"*Lecture:* [{stem}](notebooks/{stem}.ipynb)"]
    return "\n".join(lines) + "\n"


def scorecard_page(statuses: dict[str, NotebookStatus], chance: float | None) -> str:
    """The scorecard of the run: predictions held per notebook, then every one that did not.

    Args:
        statuses: by notebook stem, in page order.
        chance: how many misses chance alone would give if every prediction were true
            (``perfkit.stats.chance_misses`` summed), or ``None`` when no verdict has a level.
    """
    kinds = ("held", "missed", "inconclusive", "disturbed")
    lines = ["# Scorecard of this run", "",
             "Each lecture records predictions before it measures (`perfkit.verdict`); these are "
             "the verdicts of the run that built these pages, on its machine.", "",
             "| lecture | " + " | ".join(kinds) + " | run |", "|---|" + "--:|" * len(kinds) + "---|"]
    total = [0] * len(kinds)
    for stem, status in statuses.items():
        if status.state not in ("ran", "failed"):
            continue
        counts = [sum(v.get("outcome") == k for v in status.verdicts) for k in kinds]
        total = [a + b for a, b in zip(total, counts)]
        lines.append(f"| [{stem}](notebooks/{stem}.ipynb) | " + " | ".join(str(c) for c in counts)
                     + f" | {md_escape(status.label())} |")
    lines.append("| **all lectures** | " + " | ".join(f"**{c}**" for c in total) + " | |")
    if chance is not None:
        lines += ["", f"If every prediction were true, chance alone would report up to "
                  f"{chance:.1f} of them missed (each is judged on a confidence interval)."]
    off = [(stem, v) for stem, s in statuses.items() for v in s.verdicts if v.get("outcome") != "held"]
    lines += ["", "## Not held", ""]
    if not off:
        lines.append("Every recorded prediction held.")
    for stem, v in off:
        text = " ".join(str(v.get("text", "")).split())
        lines += [f"- [{stem}](notebooks/{stem}.ipynb), **{md_escape(v.get('outcome', '?'))}**: {text}"]
    return "\n".join(lines) + "\n"
