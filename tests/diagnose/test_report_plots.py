"""The report's memory split, counted from an optimizer's tensors, and its plots: drawn by
perfkit.viz without pyplot, embedded in report.html as PNGs, with no overlapping text."""

import base64
import os
import re
import subprocess
import sys

import pytest
import torch
from test_attribution import record

from perfkit.profiling import build_report, memory_split, render_html, render_markdown
from perfkit.viz import (
    plot_memory_split,
    plot_rank_spread,
    plot_report_shares,
    plot_step_times,
    report_figures,
    report_pngs,
    text_overlaps,
)

SPLIT = {"kind": "peak RSS", "bytes": 400 * 2**20, "start_bytes": 250 * 2**20,
         "params_bytes": 5 * 2**20, "grads_bytes": 5 * 2**20, "optimizer_bytes": 10 * 2**20,
         "optimizers": ["AdamW"]}


def two_rank_report():
    """Rank 1 works 64 ms of a 100 ms step, rank 0 4 ms: the straggler rule fires."""
    r0, r1 = record(0, 0.1, comm_s=0.096), record(1, 0.1, comm_s=0.036)
    r0["memory"] = r1["memory"] = SPLIT
    r0["step_data_s"] = [0.01] * 10
    return build_report([r0, r1])


def test_memory_split_counts_parameters_gradients_and_adam_state():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters())
    n = 8 * 16 + 16 + 16 * 4 + 4  # 212 parameters
    before = memory_split([opt], start={"rss": 0, "cuda": 0})
    assert before["params_bytes"] == 4 * n and before["grads_bytes"] == 0  # no backward yet
    assert before["optimizer_bytes"] == 0  # Adam allocates its state at the first step
    for _ in range(2):
        model(torch.randn(3, 8)).sum().backward()
        opt.step()
    mem = memory_split([opt, opt], start={"rss": 123, "cuda": 0})  # given twice: each storage counts once
    assert mem["params_bytes"] == 4 * n and mem["grads_bytes"] == 4 * n
    assert mem["optimizer_bytes"] == 2 * 4 * n + 4 * 4  # two moments + 4 float32 step counts
    assert mem["optimizers"] == ["AdamW"] and mem["start_bytes"] == 123
    assert mem["bytes"] > mem["params_bytes"] + mem["grads_bytes"] + mem["optimizer_bytes"]
    assert memory_split()["params_bytes"] is None  # no optimizer: the peak alone


def test_peak_rss_is_this_process_not_the_one_that_started_it():
    # Linux keeps ru_maxrss across exec: a child of an 800 MiB parent would report 800 MiB
    child = ("from perfkit.profiling import memory_split; print(memory_split()['bytes'])")
    parent = ("import subprocess, sys; big = b'x' * (800 * 2**20); "
              f"subprocess.run([sys.executable, '-c', {child!r}], check=True)")
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True,
                         check=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}).stdout
    assert 50 * 2**20 < int(out) < 600 * 2**20, int(out) / 2**20  # torch imported: ~300 MiB


def test_report_prints_the_split():
    rep = two_rank_report()
    text = render_markdown(rep)
    assert "peak RSS 400 MiB (250 MiB in use before the script ran)" in text
    assert ("AdamW holds: parameters 5 MiB, gradients 5 MiB, optimizer state 10 MiB; 20 MiB "
            "in all, 5.0% of the peak") in text
    assert [r["peak_bytes"] for r in rep["ranks"]] == [SPLIT["bytes"]] * 2
    bare = render_markdown(build_report([record(0, 0.1)]))
    assert "model states: not counted" in bare


def test_figures_have_no_overlapping_text():
    rep = two_rank_report()
    figs = report_figures(rep)
    assert list(figs) == ["shares", "steps", "ranks", "memory"]
    for name, fig in figs.items():
        assert not text_overlaps(fig), (name, text_overlaps(fig))
    ticks = [t.get_text() for t in figs["ranks"].axes[0].get_xticklabels()]
    assert ticks == ["rank 0", "rank 1 (straggler)"], ticks
    legend = [t.get_text() for t in figs["shares"].axes[0].get_legend().get_texts()]
    assert "forward 40.0%" in legend and "backward 50.0%" in legend
    assert not report_figures(build_report([record(0, 0.1)])).keys() - {"shares", "steps"}


def test_html_embeds_each_plot_as_a_png():
    rep = two_rank_report()
    pngs = report_pngs(rep)
    page = render_html(rep, pngs)
    found = re.findall(r'<img alt="(\w+)"[^>]*src="data:image/png;base64,([^"]+)"', page)
    assert [name for name, _ in found] == list(pngs) == ["shares", "steps", "ranks", "memory"]
    assert all(base64.b64decode(b64) == pngs[name] for name, b64 in found)
    assert "<svg" not in page and "[high] straggler" in page
    assert "<svg" in render_html(rep)  # without a plotting library: the SVG bar
    md = render_markdown(rep, ["report.shares.png"])
    assert md.endswith("## Plots\n\n![report.shares](report.shares.png)")


def test_plots_refuse_reports_without_their_data():
    single, partial = build_report([record(0, 0.1)]), build_report([{
        **record(0, 0.1), "attribution": None, "step_times_s": []}])
    with pytest.raises(ValueError, match="at least 2 ranks"):
        plot_rank_spread(single)
    with pytest.raises(ValueError, match="no split"):
        plot_memory_split(single)
    with pytest.raises(ValueError, match="no shares"):
        plot_report_shares(partial)
    with pytest.raises(ValueError, match="no recorded step"):
        plot_step_times(partial)
    with pytest.raises(TypeError, match="rep must be a dict"):
        report_figures([single])
    with pytest.raises(ValueError, match="lacks"):
        report_pngs({"shares": None})
    with pytest.raises(ValueError, match="dpi"):
        report_pngs(single, dpi=5)
