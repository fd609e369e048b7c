"""Every notebook is in step with its jupytext source (``src/NAME.py`` beside it)."""

import shutil

import nbformat
import pytest

from tools import notebooks

PAIRS = notebooks.pairs()


def test_every_notebook_has_a_source():
    names = {nb.name for _, nb in PAIRS}
    for folder in notebooks.FOLDERS:
        for nb in (notebooks.ROOT / folder).glob("*.ipynb"):
            assert nb.name in names, f"{folder}/{nb.name} has no source in {folder}/src/"


@pytest.mark.parametrize("py,ipynb", PAIRS, ids=[p.stem for p, _ in PAIRS])
def test_notebook_matches_its_source(py, ipynb):
    assert notebooks.differences(py, ipynb) == [], "run `make notebooks`"


def test_a_changed_source_is_caught(tmp_path):
    py, ipynb = PAIRS[0]
    src, nb = tmp_path / py.name, tmp_path / ipynb.name
    shutil.copy(ipynb, nb)
    src.write_text(py.read_text() + "\n# %%\nprint('a cell the notebook lacks')\n")
    assert any("cells in the source" in d for d in notebooks.differences(src, nb))
    book = nbformat.read(ipynb, as_version=4)
    book.cells[1].source += "\n# edited in the notebook only"
    nbformat.write(book, nb)
    assert any("cell 1 differs" in d for d in notebooks.differences(py, nb))


def test_sync_keeps_checked_outputs_and_stable_ids(tmp_path):
    py, ipynb = next((p, n) for p, n in PAIRS if "00_" in p.name)
    nb = tmp_path / ipynb.name
    shutil.copy(ipynb, nb)
    notebooks.sync(py, nb, execute=False)
    before, after = nbformat.read(ipynb, as_version=4), nbformat.read(nb, as_version=4)
    assert [c.id for c in after.cells] == [f"c{i:03d}" for i in range(len(after.cells))]
    assert [c.get("outputs") for c in before.cells] == [c.get("outputs") for c in after.cells]
