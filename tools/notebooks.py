"""Keep each notebook in step with its jupytext source (``src/NAME.py`` beside it).

Lectures and labs are written as jupytext percent-format scripts: ``notebooks/src/*.py``
and ``solutions/src/*.py``, paired with ``notebooks/*.ipynb`` and ``solutions/*.ipynb`` by
``jupytext.toml`` (``jupytext --sync`` and JupyterLab's jupytext extension use it too).
This tool adds only what jupytext does not do:

* cells get stable ids (``c000``, ``c001``, ...), so diffs stay small;
* the outputs of ``# NBVAL_CHECK_OUTPUT`` cells (and their execution counts, which nbval
  needs) are kept from the existing notebook when the cell's source did not change, and
  filled by one QUICK papermill run when it did; every other output is stripped.

    python -m tools.notebooks sync            # write every .ipynb from its source
    python -m tools.notebooks sync notebooks/src/00_measure_your_machine.py
    python -m tools.notebooks check           # exit 1 when a notebook and its source differ
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import jupytext
import nbformat

from tools.logs import stderr_to
from tools.strip_notebooks import keeps_output, strip

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("notebooks", "solutions")


def pairs(root: Path = ROOT) -> list[tuple[Path, Path]]:
    """``(source.py, notebook.ipynb)`` for every lecture and solution."""
    return [(py, root / folder / f"{py.stem}.ipynb")
            for folder in FOLDERS for py in sorted((root / folder / "src").glob("*.py"))]


def _inputs(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    """What a source determines: each cell's type, text and tags."""
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", []))) for c in nb.cells]


def differences(py: Path, ipynb: Path) -> list[str]:
    """Human-readable differences between a source and its notebook (empty: in step)."""
    if not ipynb.exists():
        return [f"{ipynb.relative_to(ROOT)} is missing"]
    want, have = _inputs(jupytext.read(py)), _inputs(nbformat.read(ipynb, as_version=4))
    out = []
    if len(want) != len(have):
        out.append(f"{len(want)} cells in the source, {len(have)} in the notebook")
    for i, (w, h) in enumerate(zip(want, have)):
        if w != h:
            first = (w[1].splitlines() or [""])[0][:60]
            out.append(f"cell {i} differs (source: {w[0]} cell starting {first!r})")
    return out


def _fill_kept_outputs(nb, path: Path) -> None:
    """Run ``nb`` once in QUICK mode and copy the outputs of its kept cells."""
    import papermill as pm

    from perfkit.viz.core import HEADLESS_ENV

    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "in.ipynb", Path(tmp) / path.name
        nbformat.write(nb, src)
        env = os.environ.get("PERFKIT_QUICK")
        os.environ["PERFKIT_QUICK"] = "1"
        os.environ[HEADLESS_ENV] = "1"  # widgets show their default statically (see build_widget)
        try:
            with stderr_to(Path(tmp) / "kernel.stderr.log"):  # ipykernel's warnings
                pm.execute_notebook(str(src), str(out), kernel_name="python3", cwd=str(ROOT),
                                    progress_bar=False)
        finally:
            if env is None:
                os.environ.pop("PERFKIT_QUICK")
            else:
                os.environ["PERFKIT_QUICK"] = env
            os.environ.pop(HEADLESS_ENV, None)
        ran = nbformat.read(out, as_version=4)
    for cell, done in zip(nb.cells, ran.cells):
        if keeps_output(cell):
            cell.outputs, cell.execution_count = done.outputs, done.execution_count


def sync(py: Path, ipynb: Path, execute: bool = True) -> bool:
    """Write ``ipynb`` from ``py``; return whether it changed."""
    nb = jupytext.read(py)
    nb.metadata.pop("jupytext", None)
    old = nbformat.read(ipynb, as_version=4) if ipynb.exists() else None
    kept = {}
    if old is not None:  # reuse a kept output whose cell source is unchanged
        kept = {c.source: c for c in old.cells if keeps_output(c) and c.outputs}
    missing = False
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"c{i:03d}"
        cell.metadata.pop("lines_to_next_cell", None)  # jupytext's blank-line bookkeeping
        if keeps_output(cell):
            prev = kept.get(cell.source)
            if prev is not None:
                cell.outputs, cell.execution_count = prev.outputs, prev.execution_count
            else:
                missing = True
    if missing and execute:
        _fill_kept_outputs(nb, ipynb)
    strip(nb)
    text = nbformat.writes(nb) + "\n"
    if ipynb.exists() and ipynb.read_text() == text:
        return False
    ipynb.write_text(text)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["sync", "check"])
    ap.add_argument("sources", nargs="*", help="only these sources (default: all)")
    ap.add_argument("--no-execute", action="store_true",
                    help="sync without running a notebook to fill changed kept outputs")
    args = ap.parse_intermixed_args(argv)
    todo = pairs()
    if args.sources:
        wanted = {Path(s).resolve() for s in args.sources}
        unknown = wanted - {py for py, _ in todo}
        if unknown:
            print(f"error: not a notebook source: {', '.join(map(str, unknown))} "
                  f"(sources live in {' and '.join(f + '/src/' for f in FOLDERS)})", file=sys.stderr)
            return 2
        todo = [(py, nb) for py, nb in todo if py in wanted]
    if args.command == "check":
        bad = {nb: differences(py, nb) for py, nb in todo}
        bad = {nb: d for nb, d in bad.items() if d}
        for nb, diffs in bad.items():
            print(f"{nb.relative_to(ROOT)} differs from its source: {'; '.join(diffs[:3])} "
                  "(run `make notebooks`)", file=sys.stderr)
        return 1 if bad else 0
    for py, nb in todo:
        if sync(py, nb, execute=not args.no_execute):
            print(f"wrote {nb.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
