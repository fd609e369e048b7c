"""tools.run_course: a slow notebook is reported (slowest cells, load), only a failure fails."""

import nbformat
import pytest

from tools import run_course
from tools.run_course import NotebookRun, exit_status, over_budget, slowest_cells


def executed(durations, sources=None):
    """A notebook as papermill leaves it: each code cell's seconds in metadata.papermill."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# title")]
    for i, d in enumerate(durations):
        cell = nbformat.v4.new_code_cell((sources or {}).get(i, f"x{i} = {i}\nprint(x{i})"))
        if d is not None:
            cell.metadata["papermill"] = {"duration": d, "status": "completed"}
        nb.cells += [cell, nbformat.v4.new_markdown_cell("prose between cells")]
    return nb


def test_slowest_cells_are_numbered_among_code_cells_and_sorted():
    nb = executed([0.5, 40.0, None, 3.0, 120.0, 1.0],
                  sources={4: "# NBVAL_CHECK_OUTPUT\n\nbench.measure_all(settings)\nprint(1)"})
    assert slowest_cells(nb) == [(5, "bench.measure_all(settings)", 120.0), (2, "x1 = 1", 40.0),
                                 (4, "x3 = 3", 3.0)]
    assert slowest_cells(nb, k=1) == [(5, "bench.measure_all(settings)", 120.0)]
    assert slowest_cells(executed([None, None])) == []


def test_over_budget_names_the_cells_the_seconds_and_the_load(monkeypatch):
    monkeypatch.setattr(run_course.os, "cpu_count", lambda: 2)
    run = NotebookRun("06_compute", "too slow", 471.2, slowest=[(31, "bench.measure_all(settings)", 250.4),
                                                              (12, "amp = compute.compare(a, b)", 90.0),
                                                              (20, "rec = measure_compile(f, g)", 45.6)],
                      load=(3.04, 2.5, 1.0))
    text = over_budget(run, 180)
    assert text.startswith("took 471 s, over the 180 s budget")
    for part in ("cell 31 `bench.measure_all(settings)` 250 s", "cell 12", "cell 20", "46 s",
                 "load average 3.0 / 2.5 / 1.0 (1/5/15 min) on 2 cores"):
        assert part in text
    assert "load average unknown" in over_budget(NotebookRun("x", "too slow", 200.0), 180)


@pytest.mark.parametrize("statuses, code", [(["ok", "ok"], 0), (["ok", "too slow", "too slow"], 0),
                                            (["too slow", "failed"], 1), (["failed"], 1), ([], 0)])
def test_only_a_failed_notebook_fails_the_course(statuses, code):
    assert exit_status([NotebookRun(f"n{i}", s, 1.0) for i, s in enumerate(statuses)]) == code


def test_a_slow_notebook_run_exits_0_and_says_why(tmp_path, monkeypatch, capsys):
    src = tmp_path / "01_demo.ipynb"
    nbformat.write(executed([1.0]), src)

    def fake_run(path, out_dir, quick, limit, html=True):
        run = NotebookRun(path.stem, "too slow", 95.0, slowest=[(1, "x0 = 0", 94.0)], load=(2.0, 1.0, 0.5))
        run.error = over_budget(run, limit)
        return run

    monkeypatch.setattr(run_course, "run_notebook", fake_run)
    assert run_course.main(["--quick", "--notebooks", str(src), "--out", str(tmp_path / "out"),
                            "--no-html"]) == 0
    out = capsys.readouterr().out
    assert "cell 1 `x0 = 0` 94 s" in out
    assert "over the 90 s budget (reported above, not an error): 01_demo" in out
