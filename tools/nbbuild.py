"""Build a course notebook from Python: cells in order, then kept outputs filled in.

Notebooks are easier to review and refactor as a short Python script than as JSON. A
script under ``tools/nbsrc/`` lists the cells; :func:`write` saves the notebook, runs it
once in QUICK mode (papermill) and keeps only the outputs of ``# NBVAL_CHECK_OUTPUT``
cells, with their execution counts, as nbval requires.

    nb = Builder()
    nb.md("# Title")
    nb.code("import os\\nQUICK = ...", tags=["parameters"])
    nb.write("notebooks/00_x.ipynb")
"""

from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path

import nbformat

from tools.strip_notebooks import keeps_output, strip

ROOT = Path(__file__).resolve().parent.parent
# One "=" per line: papermill's parameter parser skips lines with "==" (and warns).
PARAMETERS = 'import os\n\nQUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it'


class Builder:
    """Collects Markdown and code cells; dedents their text."""

    def __init__(self) -> None:
        self.nb = nbformat.v4.new_notebook()
        self.nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                          "language": "python"}
        self.nb.metadata["language_info"] = {"name": "python"}

    def md(self, text: str) -> None:
        self.nb.cells.append(nbformat.v4.new_markdown_cell(textwrap.dedent(text).strip()))

    def code(self, src: str, tags: list[str] | None = None) -> None:
        cell = nbformat.v4.new_code_cell(textwrap.dedent(src).strip())
        if tags:
            cell.metadata["tags"] = tags
        self.nb.cells.append(cell)

    def parameters(self, extra: str = "") -> None:
        """The papermill ``parameters`` cell, reading ``PERFKIT_QUICK`` from the environment."""
        self.code(PARAMETERS + ("\n" + textwrap.dedent(extra).strip() if extra else ""),
                  tags=["parameters"])

    def write(self, path: str | os.PathLike, execute: bool = True) -> Path:
        """Save to ``path``; with ``execute``, fill the kept outputs from a QUICK run."""
        import papermill as pm

        path = ROOT / path
        for i, cell in enumerate(self.nb.cells):
            cell["id"] = f"c{i:03d}"  # stable ids keep diffs small
        nbformat.write(self.nb, path)
        if execute and any(keeps_output(c) for c in self.nb.cells):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / path.name
                os.environ["PERFKIT_QUICK"] = "1"
                pm.execute_notebook(str(path), str(out), kernel_name="python3", cwd=str(ROOT),
                                    progress_bar=False)
                ran = nbformat.read(out, as_version=4)
            by_id = {c.get("id"): c for c in ran.cells}
            for cell in self.nb.cells:
                if keeps_output(cell):
                    done = by_id[cell["id"]]
                    cell.outputs, cell.execution_count = done.outputs, done.execution_count
        strip(self.nb)
        nbformat.write(self.nb, path)
        return path
