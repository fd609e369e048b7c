"""Strip outputs from the committed notebooks, keeping the ``# NBVAL_CHECK_OUTPUT`` cells.

nbval compares a kept output only when the cell also keeps its execution count, so those
cells keep both, and carry ``keep_output: true`` metadata, which nbstripout honours. Every
other cell loses its outputs and count (timings differ per machine and would only bloat
diffs).

    python -m tools.strip_notebooks            # notebooks/ and solutions/
    python -m tools.strip_notebooks --check    # exit 1 if any notebook needs stripping
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
CHECK_MARK = "# NBVAL_CHECK_OUTPUT"


def keeps_output(cell) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(CHECK_MARK)


def strip(nb) -> bool:
    """Strip ``nb`` in place; return whether anything changed."""
    changed = False
    for cell in nb.cells:
        if keeps_output(cell):
            # Say so in the metadata too, for tools that strip or flag outputs
            # (nbstripout honours keep_output).
            if not cell.metadata.get("keep_output"):
                cell.metadata["keep_output"] = True
                changed = True
            continue
        if cell.cell_type != "code":
            continue
        if cell.outputs or cell.execution_count is not None:
            cell.outputs, cell.execution_count = [], None
            changed = True
        if "execution" in cell.metadata:
            del cell.metadata["execution"]
            changed = True
    return changed


def _comparable(outputs) -> list[tuple[str, str]]:
    """What nbval compares of a cell's outputs: streams and the text of results and errors."""
    seen = []
    for o in outputs:
        if o.get("output_type") == "stream":
            seen.append((o.get("name", ""), o.get("text", "")))
        elif o.get("output_type") in ("execute_result", "display_data"):
            seen.append(("text/plain", o.get("data", {}).get("text/plain", "")))
        elif o.get("output_type") == "error":
            seen.append(("error", f"{o.get('ename')}: {o.get('evalue')}"))
    # consecutive writes to one stream are one text, however the kernel split them
    merged: list[tuple[str, str]] = []
    for kind, text in seen:
        text = "".join(text) if isinstance(text, list) else text
        if merged and merged[-1][0] == kind and kind in ("stdout", "stderr"):
            merged[-1] = (kind, merged[-1][1] + text)
        else:
            merged.append((kind, text))
    return merged


def kept_output_differences(committed, executed) -> list[str]:
    """The ``# NBVAL_CHECK_OUTPUT`` cells of ``committed`` whose output a fresh run changed.

    ``executed`` is the same notebook run top to bottom (papermill keeps cell ids and adds
    its parameters cell). Compared as ``pytest --nbval-lax`` compares them: stdout/stderr
    text and the plain-text form of results, exactly. Returns one line per difference.
    """
    fresh = {c.get("id"): c for c in executed.cells}
    found = []
    for i, cell in enumerate(committed.cells):
        if not keeps_output(cell):
            continue
        run = fresh.get(cell.get("id"))
        if run is None:
            found.append(f"cell {i} ({cell.get('id')}) is missing from the executed notebook")
            continue
        want, got = _comparable(cell.outputs), _comparable(run.get("outputs", []))
        if want != got:
            found.append(f"cell {i} ({cell.get('id')}): committed {want!r}, fresh run {got!r}")
    return found


def notebooks() -> list[Path]:
    return sorted([*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "solutions").glob("*.ipynb")])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    dirty = []
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        if strip(nb):
            dirty.append(path.name)
            if not args.check:
                nbformat.write(nb, path)
    if args.check and dirty:
        print("outputs to strip (run `make strip`): " + ", ".join(dirty), file=sys.stderr)
        return 1
    print(("stripped: " + ", ".join(dirty)) if dirty else "nothing to strip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
