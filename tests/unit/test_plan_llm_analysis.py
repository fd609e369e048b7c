"""perfkit.plan.llm_analysis: llm-analysis (PyPI 0.2.2) driven from published rows, configs built
in code, at the planner's fitted efficiency; rows it cannot model give None and a reason."""

import math
import subprocess
import sys
from dataclasses import replace

import pytest

from perfkit.plan import (
    LLM_ANALYSIS_INSTALL,
    Comparison,
    RowResult,
    compare_llm_analysis,
    foundry_runs,
    llm_analysis_inputs,
    megatron_runs,
    predict_llm_analysis,
)
from perfkit.plan.runs_data import FOUNDRY_ROWS


@pytest.fixture(scope="module")
def lla():
    """llm-analysis's analysis module (make setup installs it; skip only where it is absent)."""
    pytest.importorskip("llm_analysis")
    from llm_analysis import analysis

    return analysis


@pytest.fixture(scope="module")
def rows():
    meg = megatron_runs()
    foundry = foundry_runs(("a100-80gb",))
    mpt = next(r for r in foundry if r.label == "MPT 7b s=2048 on 8")
    return {"meg": meg[0], "meg145": meg[6], "mpt": mpt, "foundry": foundry}


def _by_hand(run, efficiency):
    """llm-analysis's count: per token and layer 24 h^2 + 4 s h forward (full, non-causal
    attention), the logits 2 h V; backward twice the forward, full recomputation once more;
    all at efficiency x peak, split evenly over tp x pp (no bubble, no communication)."""
    m = run.model
    fwd = m.layers * (24 * m.hidden**2 + 4 * m.seq * m.hidden) + 2 * m.hidden * m.vocab
    runs_of_fwd = 4 if run.layout.recompute == "full" else 3
    return efficiency * run.cluster.gpu.peak_flops / (runs_of_fwd * fwd)


def test_megatron_and_foundry_rows_give_llm_analysis_own_count(lla, rows, capfd):
    for run, e in ((rows["meg"], 0.5), (rows["meg145"], 0.45), (rows["mpt"], 0.6)):
        p = predict_llm_analysis(run, e)
        assert p.reason == "" and math.isfinite(p.tokens_per_gpu), run.label
        assert p.tokens_per_gpu == pytest.approx(_by_hand(run, e), rel=1e-9), run.label
        assert p.error == pytest.approx(p.tokens_per_gpu / run.reported_tokens_per_gpu - 1)
    # quiet: llm-analysis logs its configs and warns (ZeRO off, efficiency > 0.55) at every call
    predict_llm_analysis(rows["meg"], 0.9)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_the_efficiency_reaches_llm_analysis(lla, rows):
    for run in (rows["meg"], rows["mpt"]):
        a, b = (predict_llm_analysis(run, e).tokens_per_gpu for e in (0.3, 0.6))
        assert b == pytest.approx(2 * a, rel=1e-9)
        init, _ = llm_analysis_inputs(run, 0.3)
        assert init["flops_efficiency"] == 0.3


def test_inputs_carry_the_rows_layout_and_gpu(lla, rows):
    init, tr = llm_analysis_inputs(rows["meg145"], 0.5)  # 145B: TP 8, PP 8, DP 24, batch 2304
    par, gpu, model = init["parallelism_config"], init["gpu_config"], init["model_config"]
    assert (par.tp_size, par.pp_size, par.dp_size, par.sp_size) == (8, 8, 24, 1)
    assert tr["gradient_accumulation_steps"] == 2304 // 24 and tr["batch_size_per_gpu"] == 1
    assert tr["activation_recomputation"] == lla.ActivationRecomputation.FULL
    assert tr["ds_zero"] == lla.DSZeRO.NONE and tr["flash_attn"] is False and tr["softmax_dropout"] is True
    assert gpu.peak_fp16_TFLOPS == 312 and gpu.mem_per_GPU_in_GB == pytest.approx(80)
    assert gpu.hbm_bandwidth_in_GB_per_sec == pytest.approx(2039)
    assert gpu.inter_node_bandwidth_in_GB_per_sec == pytest.approx(25)  # 200 Gb/s per GPU
    shape = (model.num_layers, model.hidden_dim, model.vocab_size, model.max_seq_len)
    assert shape == (80, 12288, 51200, 2048)
    # foundry: FSDP FULL_SHARD is ZeRO-3 over every GPU; the accumulation is the source's column
    for run, row in zip(rows["foundry"], (r for r in FOUNDRY_ROWS if r[0] == "a100-80gb")):
        init, tr = llm_analysis_inputs(run, 0.5)
        assert tr["gradient_accumulation_steps"] == row[6] and tr["batch_size_per_gpu"] == row[5]
        assert init["parallelism_config"].dp_size == row[3] and tr["ds_zero"] == lla.DSZeRO.STAGE_3
        assert tr["flash_attn"] is True
        assert tr["activation_recomputation"].name == ("FULL" if row[11] else "NONE")


def test_rows_it_cannot_model_give_none_and_the_reason(lla, rows):
    run = rows["mpt"]
    cases = {
        "context parallelism": replace(run, layout=replace(run.layout, cp=2, dp=4)),
        "MLP of width": replace(run, model=replace(run.model, gated=True, ffn=11008)),
        "max_batch_size_per_gpu": replace(run, layout=replace(run.layout, micro_batch=6 * 512),
                                          global_batch=6 * 512 * 8 * 2),
        "whole number of micro-batches": replace(run, global_batch=97),
    }
    for words, bad in cases.items():
        p = predict_llm_analysis(bad, 0.5)
        assert p.tokens_per_gpu is None and p.error is None and words in p.reason, (words, p.reason)
        if words != "max_batch_size_per_gpu":  # refused before llm-analysis runs
            with pytest.raises(ValueError, match=words):
                llm_analysis_inputs(bad, 0.5)


def test_compare_summarises_held_out_rows_beside_the_planner(lla, rows):
    meg = megatron_runs()[:4]
    e = 0.5
    truth = [_by_hand(r, e) for r in meg]
    # a hand-made comparison: row 0 fitted, the planner off by +10 %, -20 %, +5 %, +30 %
    off = (0.1, -0.2, 0.05, 0.3)
    base = (0.0, 0.3, -0.1, 0.2)  # the constant-MFU baseline's errors
    cmp = Comparison([RowResult(r, i == 0, r.reported_tokens_per_gpu * (1 + o),
                                r.reported_tokens_per_gpu * (1 + b))
                      for i, (r, o, b) in enumerate(zip(meg, off, base))],
                     {"megatron": e}, {"megatron": 0.4})
    out = compare_llm_analysis(cmp)
    errs = sorted(abs(t / r.reported_tokens_per_gpu - 1) for t, r in zip(truth[1:], meg[1:]))
    s = out["tables"]["megatron"]
    assert out["held_out"] == 3 and out["modelled"] == s["modelled"] == 3
    assert s["median"] == pytest.approx(errs[1]) and s["worst"] == pytest.approx(errs[2])
    assert s["planner_median"] == pytest.approx(0.2) and s["planner_worst"] == pytest.approx(0.3)
    # the constant-MFU baseline over the same held-out rows, beside both
    assert s["baseline_median"] == pytest.approx(0.2) and s["baseline_worst"] == pytest.approx(0.3)
    assert out["overall"] == s and out["hbm_efficiency"] == 1.0
    assert [r["fitted"] for r in out["rows"]] == [True, False, False, False]
    assert out["rows"][1]["llm_analysis"] == pytest.approx(truth[1])
    # its own fit on the one fitted row makes that row exact, and scales every row alike
    own = out["own_fit"]["efficiency"]["megatron"]
    assert own == pytest.approx(e * meg[0].reported_tokens_per_gpu / truth[0])
    assert out["rows"][0]["own_fit"] == pytest.approx(meg[0].reported_tokens_per_gpu)
    assert out["rows"][2]["own_fit"] == pytest.approx(truth[2] * own / e)
    # the refitted errors split by recomputation (Table 1's rows all recompute in full)
    refit = [out["rows"][i]["own_fit"] / meg[i].reported_tokens_per_gpu - 1 for i in (1, 2, 3)]
    assert out["own_fit"]["by_recompute"] == {"megatron": {"full": pytest.approx(sorted(refit)[1])}}
    assert out["own_fit"]["overall"]["baseline_median"] == pytest.approx(0.2)


def test_bad_input_is_named(lla, rows):
    with pytest.raises(TypeError, match="run"):
        predict_llm_analysis("GPT 1.7B", 0.5)
    for e in (0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="efficiency"):
            predict_llm_analysis(rows["meg"], e)
    with pytest.raises(TypeError, match="efficiency"):
        llm_analysis_inputs(rows["meg"], "0.5")
    with pytest.raises(TypeError, match="cmp"):
        compare_llm_analysis([rows["meg"]])


def test_without_llm_analysis_every_function_names_the_install(monkeypatch, rows):
    assert "--no-deps" in LLM_ANALYSIS_INSTALL and "llm-analysis==0.2.2" in LLM_ANALYSIS_INSTALL
    monkeypatch.setitem(sys.modules, "llm_analysis", None)  # as if it were not installed
    cmp = Comparison([RowResult(rows["meg"], True, 1.0, 1.0)], {"megatron": 0.5}, {"megatron": 0.4})
    for call in (lambda: predict_llm_analysis(rows["meg"], 0.5),
                 lambda: llm_analysis_inputs(rows["meg"], 0.5), lambda: compare_llm_analysis(cmp)):
        with pytest.raises(ImportError, match="--no-deps"):
            call()
    # and importing perfkit does not import it (it imports transformers: about 2 s)
    code = "import sys, perfkit.plan.llm_analysis; assert 'llm_analysis' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
