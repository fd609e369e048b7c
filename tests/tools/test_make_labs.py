"""make_labs turns solution regions into NotImplementedError and refuses broken markers."""

import nbformat
import pytest

from tools.make_labs import MarkerError, blank_source, make_lab


def test_region_becomes_raise_at_its_indentation():
    src = "def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\nprint(1)"
    assert blank_source(src) == "def f(x):\n    raise NotImplementedError()\nprint(1)"


def test_markdown_region_becomes_answer_placeholder():
    assert blank_source("Why?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION", True) == \
        "Why?\nYOUR ANSWER HERE"


@pytest.mark.parametrize("src", [
    "### BEGIN SOLUTION\nx = 1",
    "x = 1\n### END SOLUTION",
    "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION",
])
def test_broken_markers_are_refused(src):
    with pytest.raises(MarkerError):
        blank_source(src)


def test_outputs_cleared_and_a_lab_without_regions_refused():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")
    cell.outputs = [nbformat.v4.new_output("stream", text="1")]
    cell.execution_count = 3
    nb.cells = [cell]
    lab = make_lab(nb)
    assert lab.cells[0].outputs == [] and lab.cells[0].execution_count is None
    assert nb.cells[0].outputs, "the solution notebook itself is left untouched"
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    with pytest.raises(MarkerError, match="give the answers away"):
        make_lab(nb)
