"""The constant-MFU baseline is one MFU: Megatron-LM's rows, whose TFLOP/s count the recomputed
forward, are converted to model FLOPs before they are averaged with llm-foundry's."""

import pytest

from perfkit.plan import compare, fit_rows, foundry_runs, megatron_runs


def test_megatron_model_flops_drop_the_recomputed_forward():
    m = megatron_runs()[0].model
    n, h, s, v = m.layers, m.hidden, m.seq, m.vocab
    got = m.megatron_model_flops_per_token()
    assert got == pytest.approx(72 * n * h * h * (1 + s / (6 * h) + v / (12 * n * h)))
    # the same count as PaLM's 6 N + 12 l h s with N = 12 l h^2 + V h (the spec has no biases)
    assert got == pytest.approx(6 * (12 * n * h * h + v * h) + 12 * n * h * s)


def test_megatron_rows_mfu_in_model_flops_foundry_rows_as_reported():
    r = megatron_runs()[0]
    m = r.model
    ratio = (72 * (1 + m.seq / (6 * m.hidden) + m.vocab / (12 * m.layers * m.hidden))
             / (96 * (1 + m.seq / (6 * m.hidden) + m.vocab / (16 * m.layers * m.hidden))))
    assert r.model_mfu == pytest.approx(r.reported_mfu * ratio)
    assert r.model_mfu < 0.85 * r.reported_mfu
    f = foundry_runs(["a100-80gb"])[0]
    assert f.model_mfu == f.reported_mfu


def test_baseline_on_a100_80gb_averages_one_flop_count():
    runs = megatron_runs() + foundry_runs(["a100-80gb"])
    c = compare(runs)
    fit = fit_rows(runs, "megatron") + fit_rows(runs, "a100-80gb")
    mean = sum(r.model_mfu for r in fit) / 4
    assert c.baseline_mfu["a100-80gb"] == pytest.approx(mean)
    assert c.baseline_mfu["a100-80gb"] < sum(r.reported_mfu for r in fit) / 4  # the mixed mean was higher
    for row in c.rows:  # every row predicted at that one MFU over its model FLOPs
        model_flops = row.run.flops_per_token * row.run.model_mfu / row.run.reported_mfu
        assert row.baseline == pytest.approx(mean * row.run.cluster.gpu.peak_flops / model_flops)
