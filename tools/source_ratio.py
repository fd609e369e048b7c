"""Code lines against prose lines in the lecture sources (``notebooks/src/*.py``).

A reader should see the question, the prediction, the measurement and the verdict, not the
plumbing: the course keeps code at most 1.5x prose over all lectures. Blank lines and the
jupytext header do not count; a markdown cell's lines are prose (``# `` stripped), every
other non-blank line is code (comments in code cells count as code).

    python -m tools.source_ratio            # a table per notebook and the total
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 1.5


def count(text: str) -> tuple[int, int]:
    """``(code, prose)`` non-blank lines of one percent-format source."""
    code = prose = 0
    kind = None
    for line in text.splitlines():
        if line.startswith("# %%"):
            kind = "prose" if "[markdown]" in line else "code"
            continue
        if kind is None or not line.strip() or (kind == "prose" and line.strip() == "#"):
            continue
        if kind == "prose":
            prose += 1
        else:
            code += 1
    return code, prose


def table(folder: Path = ROOT / "notebooks" / "src") -> list[tuple[str, int, int]]:
    """``(name, code, prose)`` for each lecture source in ``folder``."""
    return [(p.stem, *count(p.read_text())) for p in sorted(folder.glob("[0-9][0-9]_*.py"))]


def main() -> int:
    rows = table()
    code, prose = sum(r[1] for r in rows), sum(r[2] for r in rows)
    for name, c, p in rows:
        print(f"{name:<28} code {c:5d}  prose {p:5d}  {c / max(p, 1):4.2f}x")
    print(f"{'all lectures':<28} code {code:5d}  prose {prose:5d}  {code / max(prose, 1):4.2f}x "
          f"(limit {LIMIT}x)")
    return 0 if code <= LIMIT * prose else 1


if __name__ == "__main__":
    sys.exit(main())
