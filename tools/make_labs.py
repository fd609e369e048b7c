"""Generate the student labs in ``labs/`` from the solutions in ``solutions/``.

``solutions/labNN_*.ipynb`` is the single source of every lab. Code between
``### BEGIN SOLUTION`` and ``### END SOLUTION`` (nbgrader's markers, so nbgrader users can
take the notebooks as they are) becomes ``raise NotImplementedError()`` at the marker's
indentation; in Markdown cells the region becomes "YOUR ANSWER HERE". Outputs and execution
counts are cleared.

    python -m tools.make_labs            # write labs/
    python -m tools.make_labs --check    # exit 1 when labs/ is stale (CI)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


class MarkerError(ValueError):
    """A solution region is opened twice, closed before it opens, or never closed."""


def blank_source(source: str, markdown: bool = False, where: str = "") -> str:
    """Replace every solution region of one cell's source with its blank."""
    out: list[str] = []
    inside = False
    for lineno, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise MarkerError(f"{where} line {lineno}: {BEGIN} inside an open region")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + ("YOUR ANSWER HERE" if markdown else "raise NotImplementedError()"))
        elif stripped == END:
            if not inside:
                raise MarkerError(f"{where} line {lineno}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise MarkerError(f"{where}: {BEGIN} is never closed by {END}")
    return "\n".join(out)


def make_lab(solution: nbformat.NotebookNode, name: str = "") -> nbformat.NotebookNode:
    """The student version of one solution notebook (a new notebook; the input is kept)."""
    lab = nbformat.from_dict(solution)
    regions = 0
    for i, cell in enumerate(lab.cells):
        if BEGIN in cell.source:
            regions += cell.source.count(BEGIN)
            cell.source = blank_source(cell.source, cell.cell_type == "markdown",
                                       f"{name} cell {i}")
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.get("metadata", {}).pop("execution", None)
    if regions == 0:
        raise MarkerError(f"{name}: no {BEGIN} region, so the lab would give the answers away")
    return lab


def generate(solutions: Path = ROOT / "solutions", labs: Path = ROOT / "labs",
             check: bool = False) -> list[str]:
    """Write (or, with ``check``, compare) every lab; return the names that differ."""
    stale = []
    sources = sorted(solutions.glob("lab*.ipynb"))
    expected = {p.name for p in sources}
    for extra in sorted(labs.glob("lab*.ipynb")):
        if extra.name not in expected:
            stale.append(f"{extra.name} (no solution)")
            if not check:
                extra.unlink()
    for src in sources:
        lab = make_lab(nbformat.read(src, as_version=4), src.name)
        text = nbformat.writes(lab) + "\n"
        dst = labs / src.name
        if not dst.exists() or dst.read_text() != text:
            stale.append(src.name)
            if not check:
                labs.mkdir(parents=True, exist_ok=True)
                dst.write_text(text)
    return stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if labs/ is stale")
    args = ap.parse_args(argv)
    try:
        stale = generate(check=args.check)
    except MarkerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check:
        if stale:
            print("labs/ is stale; run `make labs`: " + ", ".join(stale), file=sys.stderr)
            return 1
        print("labs/ matches solutions/")
    else:
        print("regenerated: " + (", ".join(stale) if stale else "nothing (up to date)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
