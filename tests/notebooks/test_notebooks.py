"""Every notebook runs headless in QUICK mode, and is committed clean.

The papermill run here is the same code path as `make course QUICK=1`, and it also does
what `pytest --nbval-lax` would do in a second execution: the committed outputs of the
`# NBVAL_CHECK_OUTPUT` cells must equal the fresh run's (tools.strip_notebooks).
The 90 s QUICK budget is a wall-clock target, so benchmarks/notebooks_quick.py checks it;
here a notebook only has to finish within a hang guard of several budgets, since on a
shared machine its time scales with the load of other jobs.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tools import scan_notebooks
from tools.run_course import run_notebook
from tools.strip_notebooks import keeps_output, kept_output_differences

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted([*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "solutions").glob("*.ipynb")])
QUICK_BUDGET_S = 90.0  # the target, on an idle 2-core machine: benchmarks/notebooks_quick.py
HANG_GUARD_S = 4 * QUICK_BUDGET_S  # the slowest notebook took 49 s idle, about 2x that loaded
ids = [f"{p.parent.name}/{p.stem}" for p in NOTEBOOKS]
# The labs' solutions draw no figure and keep no output; tests/labs runs every cell of each at
# QUICK size when it grades it (tools.grade), so a second run here would check nothing more
LECTURES = [p for p in NOTEBOOKS if p.parent.name == "notebooks"]
EXECUTED: list[Path] = []  # lectures test_runs_in_quick_mode ran in this session: the scan's input


def code_cells(path):
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


@pytest.mark.timeout(HANG_GUARD_S + 240)  # the guard, then HTML; a hung cell stops here
@pytest.mark.parametrize("path", LECTURES, ids=lambda p: f"notebooks/{p.stem}")
def test_runs_in_quick_mode(path, tmp_path, monkeypatch, imitate):
    """Runs as on a CPU without native bf16 (the imitate fixture, tests/conftest.py), so its QUICK sizes are
    proven on the slower machine too."""
    # Lectures render into build/notebooks/, as `make course QUICK=1` does, so the site and
    # browser tests that follow reuse them instead of running the course again.
    out = ROOT / "build" / "notebooks"
    out.mkdir(parents=True, exist_ok=True)
    # every figure the notebook draws is checked for overlapping text (tools/overlap_startup.py)
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "overlap_startup.py", startup / "00-overlap.py")
    log = tmp_path / "overlaps.jsonl"
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("PERFKIT_OVERLAP_LOG", str(log))
    run = run_notebook(path, out, quick=True, time_limit_s=HANG_GUARD_S)
    print(f"{path.name}: {run.seconds:.0f} s (QUICK budget {QUICK_BUDGET_S:.0f} s, idle machine"
          + (f"; imitating {imitate})" if imitate else ")"))
    assert run.status == "ok", f"{path.name}: {run.status}: {run.error}"
    EXECUTED.append(out / path.name)
    found = log.read_text().splitlines() if log.exists() else []
    assert not found, f"{path.name}: figures with overlapping text: {found[:5]}"
    done = nbformat.read(out / path.name, as_version=4)
    changed = kept_output_differences(nbformat.read(path, as_version=4), done)
    assert not changed, (f"{path.name}: a # NBVAL_CHECK_OUTPUT cell printed something else than its "
                         f"committed output (run `make notebooks` if the change is meant): {changed}")
    for i, cell in enumerate(c for c in done.cells if c.cell_type == "code"):
        pngs = [o["data"]["image/png"] for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        assert len(set(pngs)) == len(pngs), (
            f"{path.name} code cell {i + 1} shows the same figure twice: a cell that ends with an "
            "expression returning a Figure displays it again; assign it (fig = ...)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_parameters_cell_reads_the_environment(path):
    first = code_cells(path)[0]
    assert "parameters" in first.metadata.get("tags", []), "first code cell must be tagged parameters"
    assert "PERFKIT_QUICK" in first.source and "QUICK" in first.source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_outputs_stripped_except_checked_cells(path):
    for i, cell in enumerate(code_cells(path)):
        if keeps_output(cell):
            assert cell.outputs and cell.execution_count is not None, (
                f"{path.name} code cell {i + 1} is NBVAL_CHECK_OUTPUT but has no stored output "
                "and execution count, so nbval would compare nothing")
        else:
            assert not cell.outputs and cell.execution_count is None, (
                f"{path.name} code cell {i + 1} has committed output: run `make strip`")


def test_a_changed_kept_output_is_caught():
    def book(*outputs, cell_id="c001"):
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(6 * 7)", execution_count=1)
        cell.id, cell.outputs = cell_id, list(outputs)
        plain = nbformat.v4.new_code_cell("print(time.time())")
        plain.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1.0\n")]
        nb.cells = [nbformat.v4.new_code_cell("QUICK = True"), cell, plain]
        return nb

    out = lambda text: nbformat.v4.new_output("stream", name="stdout", text=text)  # noqa: E731
    committed = book(out("42\n"))
    assert kept_output_differences(committed, book(out("4"), out("2\n"))) == []  # one stream, split
    assert kept_output_differences(committed, book(out("43\n")))  # another number
    assert kept_output_differences(committed, book())  # printed nothing
    assert kept_output_differences(committed, book(out("42\n"), out("more\n")))  # printed more
    assert kept_output_differences(committed, book(out("42\n"), cell_id="c999"))  # cell gone
    err = nbformat.v4.new_output("stream", name="stderr", text="42\n")
    assert kept_output_differences(committed, book(err))  # same text, other stream


@pytest.mark.parametrize("path", NOTEBOOKS, ids=ids)
def test_widget_cells_are_not_compared(path):
    for i, cell in enumerate(code_cells(path)):
        if "build_widget(" in cell.source:
            assert cell.source.lstrip().startswith("# NBVAL_IGNORE_OUTPUT"), (
                f"{path.name} code cell {i + 1} builds a widget: start it with # NBVAL_IGNORE_OUTPUT")


def test_course_runner_reports_a_failure_without_hiding_the_others(tmp_path):
    def nb(name, *cells):
        book = nbformat.v4.new_notebook()
        book.cells = [nbformat.v4.new_code_cell(c) for c in cells]
        book.cells[0].metadata["tags"] = ["parameters"]
        nbformat.write(book, tmp_path / name)
        return str(tmp_path / name)

    good = nb("01_good.ipynb", "QUICK = False",
              "from perfkit.viz import show_headlines\nshow_headlines({'answer': '42 units'})")
    bad = nb("02_bad.ipynb", "QUICK = False", "raise ValueError('planted failure')")
    out = subprocess.run([sys.executable, "-m", "tools.run_course", "--quick", "--no-html",
                          "--out", str(tmp_path / "out"), "--notebooks", bad, good],
                         cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 1
    assert "ValueError: planted failure" in out.stdout
    assert "answer: 42 units" in out.stdout and "01_good" in out.stdout
    assert (tmp_path / "out" / "summary.json").exists()


def test_course_summary_prints_the_scorecard():
    from tools.run_course import NotebookRun, scorecard

    rec = lambda outcome, what: {"outcome": outcome, "text": f"**Prediction** {what}: {outcome}",  # noqa: E731
                                 "prediction": {"what": what}}
    runs = [NotebookRun("00_a", "ok", 1.0, verdicts=[rec("held", "x"), rec("missed", "copy")]),
            NotebookRun("01_b", "ok", 1.0, verdicts=[rec("inconclusive", "overlap")]),
            NotebookRun("02_c", "ok", 1.0)]
    text = scorecard(runs)
    assert "00_a" in text and " 1 / 2   1 missed, 0 inconclusive" in text
    assert "(none recorded)" in text and " 1 / 3   1 missed, 1 inconclusive" in text
    assert "00_a: [missed] Prediction copy: missed" in text
    assert "01_b: [inconclusive]" in text and "[held]" not in text


def test_a_figure_with_overlapping_text_is_caught(tmp_path, monkeypatch):
    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_code_cell("QUICK = True"),
                  nbformat.v4.new_code_cell(
                      "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
                      "ax.text(0.5, 0.5, 'one label'); ax.text(0.5, 0.5, 'another label')")]
    book.cells[0].metadata["tags"] = ["parameters"]
    nbformat.write(book, tmp_path / "99_planted.ipynb")
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "overlap_startup.py", startup / "00-overlap.py")
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("PERFKIT_OVERLAP_LOG", str(tmp_path / "overlaps.jsonl"))
    run = run_notebook(tmp_path / "99_planted.ipynb", tmp_path / "out", quick=True, time_limit_s=120,
                       html=False)
    assert run.status == "ok", run.error
    assert "another label" in (tmp_path / "overlaps.jsonl").read_text()


def test_scan_finds_only_the_known_findings():
    """The consistency scan (tools/scan_notebooks.py) over the lectures test_runs_in_quick_mode
    executed above in this session (pytest runs a file's tests in order, so this one comes after
    them): every finding is listed in tools/scan_known.json with the reason it is still there,
    and every listed one still occurs, so the list can only shrink."""
    if not EXECUTED:
        pytest.skip("no lecture notebook was executed in this session: the scan reads what "
                    "test_runs_in_quick_mode writes to build/notebooks/ (run both in one pytest call)")
    findings = scan_notebooks.scan(EXECUTED)
    new, stale = scan_notebooks.compare(findings, scan_notebooks.load_known(), {p.stem for p in EXECUTED})
    assert not new and not stale, ("the consistency scan of the QUICK run:\n"
                                   + scan_notebooks.report(new, stale))
