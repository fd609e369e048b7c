"""The consistency scan of executed notebooks (tools/scan_notebooks.py): each kind of finding is
caught in a small planted notebook, and a clean one made of lines the course really prints
gives no finding, so a scan that matches too much fails as well as one that matches too little.

The scan over this session's QUICK run is in tests/notebooks/test_notebooks.py, after the run.
"""

import json

import nbformat
import pytest

from tools import scan_notebooks as scan
from tools.run_course import NotebookRun

new_output = nbformat.v4.new_output


def out(text):
    return new_output("stream", name="stdout", text=text)


def err(text):
    return new_output("stream", name="stderr", text=text)


def markdown(text):
    """A verdict as perfkit.viz.show_verdict displays it."""
    return new_output("display_data", data={"text/markdown": text, "text/plain": text.replace("**", "")})


def book(*cells):
    """A planted executed notebook: cell 0 is markdown, then one code cell per list of outputs."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# planted")]
    for outputs in cells:
        cell = nbformat.v4.new_code_cell("pass", execution_count=1)
        cell.outputs = list(outputs)
        nb.cells.append(cell)
    return nb


def kinds(*outputs):
    """The kinds the scan finds in one code cell holding ``outputs``."""
    return [f.kind for f in scan.scan_notebook(book(outputs), "99_planted")]


# Lines the course prints that are right: speedups and slowdowns above 100 %, shares at or under
# 100 %, intervals that hold their point, bounds that held or were missed, relative paths, URLs,
# units with slashes, a timing that says it did not wait for the work.
CLEAN = [
    "matmul n=512:   85.33 FLOP/B, measured   22.3 GFLOP/s, roofline   22.9 GFLOP/s ->   97% of attainable",
    "MLP step HFU / MFU: 83% / 100%",
    "MFU 46.5% (90% interval 41.6% to 66.7%, 8 steps) = 87% of the memory roof",
    "MFU: 8.33 % of this machine's measured fp32 peak",
    "fp32 ceiling per core 58.1 GFLOP/s; the 1024-wide block reached 54 GFLOP/s (93%)",
    "bf16 ceiling: 2.48 GFLOP/s (0.108x fp32): emulated",
    "naive (no wait):      443.9 µs ->  605 GFLOP/s,    2640% of this machine's fp32 ceiling",
    "speedup after the fix: 1.50x; 164% faster; 130% slower than eager; +231% over section 2",
    "step, alternating: 1.50x (90% interval 1.34-1.71x, 263.9 -> 175.4 ms, n=8)",
    "digits loader alone: 1.00 ms per batch (90% interval 862 µs to 1.28 ms, bootstrap of the median)",
    "0.957x (0.957x to 1.08x)",
    "the 2 blocks' forward alone: 0.28 plain steps (90% interval 0.179 to 0.578, median of 8 paired ratios)",
    "ring over gloo 2.87x (3 samples, fewer than the 5 a 90% interval needs: no interval)",
    "all-reduce busbw at 1.05 MB: 198 MB/s (17% of one memcpy)",
    "T = 1024 tokens (256 to 512)",
    "speedup 1.5x (range of batch 8 to 16 samples)",
    "fp32 off the vector grid: odd n at 106% of the multiples of 64 (90% interval 0.90 to 1.48, median of 5)",
    "a single sample could have been anywhere from 7.98 to 19.60 ms: -12% to +115% around the median",
    "crossover at 256 tokens (128 to 512 tokens wide)",
    "trace: build/traces/01_tiny_gpt2.pt.trace.json (1.6 MiB); see notebooks/07_data_loading.ipynb",
    "trace (open in https://ui.perfetto.dev); paper: https://arxiv.org/abs/2104.04473",
    "16,481 tokens/s, 2.35 GB/s, 12 FLOP/s/core, DP/TP/PP = 2/1/1, 1/2 of the rows",
    'severity: "warning"; no warnings were raised',
]
CLEAN_VERDICTS = [
    "✅ **Prediction** (the caches are closer to the cores than DRAM): copy rate in cache over DRAM, at "
    "least 1x. **Measured:** 6.62x (90% interval 5.69x to 7.08x): held.",
    "❌ **Prediction** (Amdahl): speedup of the fix, at most 1.81x. **Measured:** 2.14x (90% interval 1.9x "
    "to 2.4x): missed: 2.14x is 18% above 1.81x.",
    "❔ **Prediction** (fixed costs): fp32 rate at n=128 over n=512, at most 1x. **Measured:** 0.694x "
    "(90% interval 0.0105x to 12x): inconclusive: the 90% interval reaches across the edge 1x.",
    "❔ **Prediction** (a range): time per sample at k=4 over k=1, between 0.25x and 1x. **Measured:** "
    "1.05x (90% interval 0.9x to 1.2x): inconclusive.",
    "✅ **Prediction** (the peak: MFU 2.45% can rise to 100 %): tokens/s speedup of --fix batch, between 1x "
    "and 40.8x. **Measured:** 1.95x (90% interval 1.26x to 3.85x): held.",
    "❔ **Prediction** (one model): step time, at most 30 ms. **Measured:** 980 µs (90% interval 900 µs "
    "to 31 ms): inconclusive.",
    "❌ **Prediction** (64-wide operators): the tiny GPT-2 step's FLOP/s over the roof above it, at most "
    "0.5. **Measured:** 0.873 (90% interval 0.781 to 0.95): missed: 0.873 is 75% above 0.5.",
]


def test_a_clean_notebook_gives_no_finding():
    nb = book([out("\n".join(CLEAN))], [markdown(v) for v in CLEAN_VERDICTS],
              [new_output("execute_result", data={"text/plain": "<Figure size 600x350 with 1 Axes>"},
                          execution_count=1)])
    assert scan.scan_notebook(nb, "99_clean") == []


@pytest.mark.parametrize("line", [
    "x + y:    0.08 FLOP/B, measured    250 MFLOP/s, roofline    195 MFLOP/s ->  128% of attainable",
    "MLP step on 1 thread(s): 32 GFLOP/s run = HFU 79%, MFU 164% (of the measured fp32 ceiling)",
    "MLP step HFU / MFU: 137% / 99%",
    "MLP step HFU / MFU: 99% / 101%",  # the second share
    "the linear layer reaches 127% of the ceiling",
    "MFU (section 6): fp32 batch 8: 100.9% of the fp32 ceiling",
    "largest MFU measured: 106.0% (float32, batch 8)",
    "100.9 % of the fp32 peak",
    "waiting for the work:     3797.7 µs -> 70.7 GFLOP/s,     309% of this machine's fp32 ceiling",
    "fp32 ceiling per core 58.1 GFLOP/s; the 1024-wide block reached 74 GFLOP/s (127%)",
    "x + y reaches 1.73 of its roof",
    "copy: 33 GB/s = 104% of copy bandwidth",
    "all-reduce busbw at 1.05 MB: 1.98 GB/s (117% of one memcpy)",
])
def test_a_share_of_a_ceiling_above_100_percent_is_found(line):
    assert kinds(out(line)) == ["over_ceiling"]


def test_a_verdict_on_a_share_above_one_is_found():
    held = ("⚠️ **Prediction** (a step cannot run faster than the matmul ceiling): the MLP step's HFU, "
            "between 0 and 1. **Measured:** 2.79 (90% interval 2.49 to 3.98): disturbed: 2.79 lies outside.")
    assert kinds(markdown(held)) == ["over_ceiling", "bound_not_missed"]  # and 1 bounds a share
    assert kinds(markdown(held.replace("2.79", "0.79").replace("2.49", "0.49").replace("3.98", "0.98"))) == []


def test_a_fraction_that_builds_a_bound_is_not_a_share_but_the_share_beside_it_is():
    fill = ("filling a new 8 MiB tensor: 0.42 ms, an existing one: 0.34 ms (24.7 GB/s written, above 4/3 "
            "of the DRAM roof of 15.6 GB/s, the most a fill from DRAM alone can reach")
    assert kinds(out(fill)) == []
    assert kinds(out(fill.replace("above 4/3 of", "1.58 of"))) == ["over_ceiling"]


def test_exactly_100_percent_is_not_above_the_ceiling():
    assert kinds(out("block at 100% of the fp32 ceiling")) == []
    assert kinds(out("block at 100.1% of the fp32 ceiling")) == ["over_ceiling"]


@pytest.mark.parametrize("line", [
    "bf16 step speedup (batch 1): 0.18x (90% interval 0.182x to 0.212x, bootstrap of 7 rounds)",
    "step: 0.213x (90% interval 0.182x to 0.212x)",  # above the top
    "0.956x (0.957x to 1.08x)",
    "1.2x (1.21x-1.26x)",
    "step 1.3 ms (90% interval 990 µs to 1.2 ms)",  # the units' prefixes differ: 1.3 ms > 1.2 ms
    "MFU 27.8% (90% interval 28.1% to 30.2%, 30 steps)",
    "checkpointed step: 1.39 plain steps (90% interval 1.4 to 2.04, median of 8 paired ratios)",
])
def test_a_point_outside_its_interval_is_found(line):
    assert kinds(out(line)) == ["point_outside_interval"]


def test_prefixes_are_read_before_comparing():
    # compared as bare numbers 1.1 < 990 would put the point outside
    assert kinds(out("step 1.1 ms (90% interval 990 µs to 1.2 ms)")) == []
    # a bare low end takes the high end's prefix: read as 46.5 s it put 47.7 ms outside
    assert kinds(out("TP step: 44.5 ms predicted, 47.7 ms measured (interval 46.5 to 50.4 ms)")) == []
    assert kinds(out("TP step: 44.5 ms predicted, 52.7 ms measured (interval 46.5 to 50.4 ms)")) == [
        "point_outside_interval"]


@pytest.mark.parametrize("line", [
    "bubble: 0.501 (90% interval 0.501 to 0.501, bootstrap over 4 repeats)",
    "the 90% interval 3.2 ms to 3.2 ms decides nothing",
    "gap 30.8 ms (30.8 ms-30.8 ms)",
])
def test_a_zero_width_interval_is_found(line):
    assert kinds(out(line)) == ["zero_width_interval"]


@pytest.mark.parametrize("verdict", [
    "❔ **Prediction** (Amdahl's law): speedup of the ddp fix, at most 1.81x. **Measured:** 2.14x (90% "
    "interval 1.7x to 2.6x): inconclusive: the 90% interval reaches across the edge 1.81x.",
    "✅ **Prediction** (the fix removes the wait): step time saved, at least 5 ms. **Measured:** 4.9 ms "
    "(90% interval 4.1 ms to 5.3 ms): held.",
    "❔ **Prediction** (a bound): data time, at most 30 ms. **Measured:** 31 ms (bootstrap of "
    "two separate runs (3 and 4 repeats) 20 ms to 40 ms): inconclusive.",
    "❔ **Prediction** (at best min(backward, communication) / communication): share of the communication "
    "the overlap hid, between 0 and 0.0852. **Measured:** 0.154 (3 samples, fewer than the 20 a 90% "
    "interval needs: no interval): inconclusive: 3 samples, fewer than the 20 an interval needs.",
    "✅ **Prediction** (Llama 3 reports above 90 %): the goodput model's effective training time, at "
    "least 0.9. **Figure, not measured in this run:** 0.85: held.",  # a figure from elsewhere too
])
def test_a_bound_crossed_but_not_missed_is_found(verdict):
    assert kinds(markdown(verdict)) == ["bound_not_missed"]


@pytest.mark.parametrize("line", [
    "limits saved to /root/.cache/perfkit/machine_limits.no-bf16.json",
    "TensorBoard run: /tmp/perfkit_01_tb_104xqwxu (tensorboard --logdir /tmp/perfkit_01_tb_104xqwxu)",
    f"perfkit diagnose {scan.ROOT}/examples/diagnose/healthy_cnn.py",
    "checkpoint in /home/student/perfkit/run",
    "cache at ~/.cache/torch/inductor",
    "written to tmpk3j4_x9a/ckpt",
    "C:\\Users\\student\\perfkit",
])
def test_an_absolute_or_temporary_path_is_found(line):
    assert kinds(out(line)) == ["path"]


def test_the_checkout_is_named_as_such():
    (f,) = scan.scan_notebook(book([out(f"python {scan.ROOT}/examples/x.py")]), "08_capstone")
    assert f.detail == "the checkout's absolute path"


def test_warnings_and_stderr_are_found():
    line = "/usr/lib/python3/site.py:12: UserWarning: `use_cache=True` is incompatible"
    assert kinds(out(line)) == ["path", "warning"]
    assert kinds(out("FutureWarning: x is deprecated")) == ["warning"]
    assert kinds(out("Warning: the fp32 ceiling is stale")) == ["warning"]
    assert kinds(err("something on stderr\nFutureWarning: and more")) == ["warning"]  # once per output


def test_errors_and_tracebacks_are_found():
    error = new_output("error", ename="ValueError", evalue="planted failure", traceback=[
        "\x1b[0;31mTraceback (most recent call last)\x1b[0m", f"File {scan.ROOT}/perfkit/verdict.py:229",
        "ValueError: planted"])
    assert kinds(error) == ["error"]  # one finding: its traceback's paths are not more
    assert kinds(out("Traceback (most recent call last):\n  File x, line 1\nKeyError: 3")) == ["error"]


def test_profiler_chatter_is_found_once():
    usdt = "USDT:2026-11-29 02:14:51 9700:9700 SyncActivityProfilerHandler.cpp:52] profiler_start"
    assert kinds(err(usdt)) == ["profiler_chatter"]  # not a stderr warning besides
    assert kinds(out("[W kineto] CUPTI not found")) == ["profiler_chatter"]


def test_findings_name_their_notebook_and_cell():
    nb = book([out("fine")], [out("MFU 164% of the fp32 ceiling")])
    (f,) = scan.scan_notebook(nb, "06_compute")
    assert (f.notebook, f.cell, f.kind) == ("06_compute", 2, "over_ceiling")
    assert "164%" in f.detail and f.text == "MFU 164% of the fp32 ceiling"


def test_one_line_gives_one_finding_per_kind_and_markdown_wins_over_plain():
    verdict = markdown("**Prediction** (x): HFU, at most 1. **Measured:** 1.37: missed: 1.37 is 37% above 1.")
    assert kinds(verdict, out("HFU / MFU: 137% / 164%")) == ["over_ceiling", "over_ceiling"]


def known(notebook="06_compute", kind="over_ceiling", match="MFU", **extra):
    return scan.Known(notebook, kind, match, "the fp32 ceiling is measured too low", **extra)


def test_compare_tells_new_findings_from_known_and_stale_entries():
    f = scan.Finding("06_compute", 3, "over_ceiling", "MFU 164% of the fp32 ceiling", "164%")
    assert scan.compare([f], [known()], {"06_compute"}) == ([], [])
    assert scan.compare([f], [], {"06_compute"}) == ([f], [])
    assert scan.compare([f], [known(kind="path")], {"06_compute"}) == ([f], [known(kind="path")])
    assert scan.compare([f], [known(match="HFU")], {"06_compute"})[0] == [f]  # another line
    assert scan.compare([f], [known(notebook="00_x")], {"06_compute"})[0] == [f]
    gone = known(match="HFU")
    assert scan.compare([], [gone], {"06_compute"}) == ([], [gone])  # the list may only shrink
    assert scan.compare([], [gone], {"00_x"}) == ([], [])  # its notebook was not scanned
    flaky = known(intermittent="depends on the measured step time")
    assert scan.compare([], [flaky], {"06_compute"}) == ([], [])
    text = scan.report([f], [gone])
    assert "06_compute cell 3 [over_ceiling]" in text and "'HFU'" in text and "gone" in text


def test_the_committed_known_list_is_well_formed():
    entries = scan.load_known()
    assert all(e.reason and e.match for e in entries)
    assert len({(e.notebook, e.kind, e.match) for e in entries}) == len(entries)
    books = {p.stem for p in (scan.ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert {e.notebook for e in entries} <= books


def test_a_bad_known_entry_is_refused(tmp_path):
    path = tmp_path / "known.json"
    for entry in ({"notebook": "00_x", "kind": "nonsense", "match": "a", "reason": "b"},
                  {"notebook": "00_x", "kind": "path", "match": "", "reason": "b"},
                  {"notebook": "00_x", "kind": "path", "match": "a"}):
        path.write_text(json.dumps({"findings": [entry]}))
        with pytest.raises(ValueError, match="entry 0 needs notebook, kind"):
            scan.load_known(path)


def test_the_command_line_prints_findings_and_exits_1(tmp_path, capsys):
    nbformat.write(book([out("MFU 164% of the fp32 ceiling")]), tmp_path / "06_compute.ipynb")
    nbformat.write(book([out("all fine")]), tmp_path / "07_data.ipynb")
    assert scan.main([str(tmp_path)]) == 1
    assert "06_compute cell 1 [over_ceiling]" in capsys.readouterr().out
    assert scan.main([str(tmp_path), "--json"]) == 1
    (row,) = json.loads(capsys.readouterr().out)
    assert row["notebook"] == "06_compute" and row["kind"] == "over_ceiling" and row["cell"] == 1
    listed = tmp_path / "known.json"
    listed.write_text(json.dumps({"findings": [
        {"notebook": "06_compute", "kind": "over_ceiling", "match": "MFU", "reason": "planted"}]}))
    assert scan.main([str(tmp_path), "--known", str(listed)]) == 0
    assert scan.main([str(tmp_path / "07_data.ipynb")]) == 0
    assert scan.main([str(tmp_path / "missing")]) == 2


def test_make_course_prints_the_scan_summary(tmp_path, monkeypatch, capsys):
    from tools import run_course

    src = tmp_path / "src"
    src.mkdir()
    nbformat.write(book([out("x")]), src / "99_planted.ipynb")

    def fake_run(path, out_dir, quick, limit, html=False):
        nbformat.write(book([out("MFU 164% of the fp32 ceiling")]), out_dir / path.name)
        return NotebookRun(path.stem, "ok", 1.0)

    monkeypatch.setattr(run_course, "run_notebook", fake_run)
    run_course.main(["--quick", "--out", str(tmp_path / "out"), "--notebooks", str(src / "99_planted.ipynb")])
    text = capsys.readouterr().out
    assert "consistency scan" in text and "1 finding(s) in 1 of the 1 notebook(s) scanned" in text
    assert "99_planted cell 1 [over_ceiling]" in text


def test_the_summary_counts_known_new_and_gone(tmp_path):
    lines = "MFU 164% of the fp32 ceiling\nsaved to /tmp/x/y"
    nbformat.write(book([out(lines)]), tmp_path / "06_compute.ipynb")
    listed = tmp_path / "known.json"
    entries = [{"notebook": "06_compute", "kind": "over_ceiling", "match": "MFU", "reason": "r"},
               {"notebook": "06_compute", "kind": "warning", "match": "Warn", "reason": "r"},
               {"notebook": "06_compute", "kind": "error", "match": "E", "reason": "r", "intermittent": "i"},
               {"notebook": "07_data", "kind": "error", "match": "E", "reason": "r"}]
    listed.write_text(json.dumps({"findings": entries}))
    text = scan.summary([tmp_path], listed)
    assert ("2 finding(s) in 1 of the 1 notebook(s) scanned, 1 of them listed in tools/known.json, 1 not"
            in text)
    assert "2 listed finding(s) did not occur, 1 of them not intermittent" in text
    assert "06_compute cell 1 [path]" in text and "[over_ceiling]" not in text
