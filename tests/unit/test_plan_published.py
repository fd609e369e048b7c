"""perfkit.plan.published: the copied rows agree with their sources' own columns, the fit uses
at most two rows per table, and the held-out error leaves the fitted rows out."""

import math

import pytest

from perfkit.plan import (
    ATTENTION_EFFICIENCY,
    FOUNDRY_FLASH2,
    FOUNDRY_ROWS,
    MEGATRON_HEADS,
    MEGATRON_ROWS,
    compare,
    fit_efficiency,
    fit_rows,
    foundry_runs,
    megatron_runs,
    micro_batch_overhead,
    predict,
)


def test_megatron_rows_agree_with_their_own_columns():
    runs = megatron_runs()
    assert len(runs) == len(MEGATRON_ROWS) == 10
    for row, run in zip(MEGATRON_ROWS, runs):
        _name, _h, _l, billions, mp, gpus, _b, tflops, pct, agg = row
        # the model rebuilt from hidden and layers has the table's parameter count (to the
        # table's one decimal, which 76.05 prints as 76.1; 13 h biases per layer are left out)
        assert run.model.num_params / 1e9 == pytest.approx(billions, abs=0.06), row
        assert tflops * gpus / 1e3 == pytest.approx(agg, rel=0.02), row  # aggregate PFLOP/s
        assert tflops / 312 == pytest.approx(pct / 100, abs=0.01), row  # % of the A100's peak
        assert run.layout.tp * run.layout.pp == mp and run.layout.gpus == gpus
        # heads from the paper's Table 1, not hidden / 128 (18 heads for 1.7B, 200 for 1T)
        assert run.model.heads == MEGATRON_HEADS[_name] and _h % run.model.heads == 0, row
    assert [r.model.heads for r in runs][:2] == [24, 32] and runs[-1].model.heads == 160
    # tokens/s per GPU are the TFLOP/s over Megatron's own FLOPs per token (recompute included)
    r = runs[-1]
    assert r.reported_tokens_per_gpu * r.model.megatron_flops_per_token() == pytest.approx(163e12)


def test_the_large_h100_tables_flash_rows_run_flashattention_2():
    """Its submitting script asks for ``flash`` for 1b, 3b, 7b and 70b and ``triton`` for 13b and
    30b: one generation for the whole table (the first) would be wrong for four of six models."""
    runs = {r.model.name: r for r in foundry_runs(["h100-large"])}
    assert {n: r.attention for n, r in runs.items()} == {
        "MPT 70b": "flash2-h100", "MPT 30b": "flash1-h100", "MPT 13b": "flash1-h100",
        "MPT 7b": "flash2-h100", "MPT 3b": "flash2-h100", "MPT 1b": "flash2-h100"}
    fa2 = runs["MPT 70b"].cluster
    assert fa2.attention_efficiency == ATTENTION_EFFICIENCY["flash2-h100"][0] != ATTENTION_EFFICIENCY[
        "flash1-h100"][0]
    assert {r.attention for r in foundry_runs(["h100", "a100-80gb", "a100-40gb"])} == {"flash1-h100",
                                                                                       "flash1-a100"}
    assert {r.attention for r in megatron_runs()} == {""}


def test_settings_name_what_two_rows_differ_in():
    rows = {r.label: r for r in foundry_runs(["a100-40gb"])}
    a, b = rows["MPT 70b s=2048 on 64"], rows["MPT 70b s=2048 on 128"]
    diff = {k for k, v in a.settings().items() if b.settings()[k] != v}
    assert diff == {"GPUs", "micro-batch", "global batch"}   # not the GPU count alone
    assert a.settings()["micro-batch"] == 2 and b.settings()["micro-batch"] == 4


def test_foundry_rows_agree_with_their_own_columns():
    runs = foundry_runs()
    assert len(runs) == len(FOUNDRY_ROWS) == 209
    for row, run in zip(FOUNDRY_ROWS, runs):
        table, _m, seq, gpus, mfu, mb, acc, gbs, tok_gpu, mp, _shard, ckpt, params = row
        assert run.model.num_params == pytest.approx(params, rel=0.005), row
        assert gbs <= mb * acc * gpus  # micro-batches may not divide the batch (the README says)
        # the MFU column is the README's FLOPs per token (6 x all parameters, position
        # embeddings included, + 12 L d s) times tokens/s over the peak
        peak = 989e12 if table.startswith("h100") else 312e12
        assert run.flops_per_token * tok_gpu / peak == pytest.approx(mfu / 100, rel=0.01), row
        # PaLM's count leaves the embeddings out: it differs where positions are many
        assert run.model.model_flops_per_token() <= run.flops_per_token
        # attn_impl: triton (the first generation's stated share), FlashAttention-2 where the
        # large H100 table's submitting script asks for it
        gen = (f"flash{2 if _m in FOUNDRY_FLASH2.get(table, ()) else 1}-"
               f"{'h100' if table.startswith('h100') else 'a100'}")
        shares = (run.cluster.attention_efficiency, run.cluster.attention_backward_efficiency)
        assert run.model.flash and run.attention == gen and shares == ATTENTION_EFFICIENCY[gen]
        # Composer's DEFAULT mixed precision reduces gradients in fp32, PURE in bf16
        assert run.reduce_bytes == {"DEFAULT": 4.0, "PURE": 2.0}[mp], row
        # PyTorch 2.1's early stop: only where the source names that version (the tables re-run
        # with sweep.sh's 2.1.0 image and the large H100 table), never on the A100-40GB table
        assert run.layout.early_stop == (ckpt and table != "a100-40gb"), row
    assert all(r.cluster.ddp_after_backward for r in megatron_runs())  # Megatron-LM 2021's local DDP
    assert not any(r.cluster.ddp_after_backward for r in runs)
    assert all(not r.model.flash and r.cluster.attention_efficiency is None
               and r.cluster.attention_backward_efficiency is None and r.reduce_bytes == 2.0
               for r in megatron_runs())
    # the README's MP Mode column: the A100-40GB table and the A100-80GB table's two 70b rows
    # ran bf16 PURE, every other row amp_bf16 DEFAULT
    assert sorted({(r[0], r[9]) for r in FOUNDRY_ROWS}) == [
        ("a100-40gb", "PURE"), ("a100-80gb", "DEFAULT"), ("a100-80gb", "PURE"),
        ("h100", "DEFAULT"), ("h100-large", "DEFAULT")]
    assert [r[1] for r in FOUNDRY_ROWS if r[0] == "a100-80gb" and r[9] == "PURE"] == ["70b", "70b"]


def test_fit_uses_at_most_two_rows_per_table_and_holds_them_out():
    runs = megatron_runs()
    fit = fit_rows(runs, "megatron")
    assert len(fit) == 2
    eff = fit_efficiency(fit)
    assert 0.05 <= eff <= 1
    # at the fitted efficiency the fitted rows' log errors cancel
    logs = [math.log(predict(r, eff) / r.reported_tokens_per_gpu) for r in fit]
    assert sum(logs) == pytest.approx(0, abs=1e-6)
    c = compare(runs)
    assert sum(r.fitted for r in c.rows) == 2
    held = [r for r in c.rows if not r.fitted]
    assert c.median_error == pytest.approx(sorted(abs(r.error) for r in held)[3:5][0] / 2
                                           + sorted(abs(r.error) for r in held)[3:5][1] / 2)
    assert c.baseline_mfu["megatron"] == pytest.approx(sum(r.model_mfu for r in fit) / 2)
    with pytest.raises(ValueError, match="at most two"):
        fit_rows(runs, "megatron", 3)
    with pytest.raises(ValueError, match="no rows"):
        fit_rows(runs, "h100")


def test_prediction_grows_with_efficiency():
    r = foundry_runs(["h100"])[0]
    assert predict(r, 0.3) < predict(r, 0.6)
    with pytest.raises(ValueError, match="efficiency"):
        predict(r, 1.5)


def test_layout_rank_counts_ties_within_the_planners_error():
    from perfkit.plan import LayoutRank

    order = [(2, 1), (1, 2), (2, 2), (4, 1)]
    assert LayoutRank("r", (1, 2), order, 1.01, 0.05).ok  # second
    assert not LayoutRank("r", (4, 1), order, 1.07, 0.05).ok  # fourth, 7 % slower
    assert LayoutRank("r", (4, 1), order, 1.04, 0.05).ok  # fourth, but a tie
    assert LayoutRank("r", (8, 1), order, float("inf"), 0.05).rank is None


def test_layout_ranks_plan_each_megatron_row_with_its_software():
    from perfkit.plan import layout_ranks

    runs = megatron_runs()
    ranks = layout_ranks(compare(runs[-3:], fit_count=1))  # the three largest: seconds
    assert [r.published for r in ranks] == [(8, 16), (8, 35), (8, 64)]
    assert all(r.ranked and r.rank is not None for r in ranks)
    # a published layout the planner does not rank first says which terms it loses on
    for r in ranks:
        assert (r.why == "") == (r.rank == 1)
        assert not r.why or (r.why.startswith("dp") and "step time" in r.why)
    with pytest.raises(ValueError, match="no rows"):
        layout_ranks(compare(runs[-1:], fit_count=1), "h100")


def test_a_micro_batch_costs_at_least_fsdps_unhidden_collectives():
    # llm-foundry's sweep of the micro-batch alone: seconds per micro-batch = fixed + b * mb
    from perfkit.plan.runs_data import FOUNDRY_MB_SWEEP, MPT_SHAPES

    for name, seq, gpus, mfu, mb, acc, gbs, tok_gpu, params in FOUNDRY_MB_SWEEP:
        # each row agrees with its own MFU column (6 x parameters + 12 L d s, A100 peak)
        layers, d = MPT_SHAPES[name][:2]
        assert (6 * params + 12 * layers * d * seq) * tok_gpu / 312e12 == pytest.approx(mfu / 100, rel=0.01)
        assert gbs == mb * acc * gpus

    got = micro_batch_overhead()
    assert set(got) == {"7b", "13b"}
    for name, g in got.items():
        for r in (r for r in FOUNDRY_MB_SWEEP if r[0] == name):
            # the fit reproduces each point (7b: 3 points on a line within 2 %; 13b: 2 exactly)
            assert g["fixed_s"] + g["per_sequence_s"] * r[4] == pytest.approx(r[4] * r[1] / r[7], rel=0.02)
        # a fixed cost per micro-batch, and at least what the collectives cost unhidden: had
        # FSDP hidden them behind compute, ``fixed`` would be near 0
        assert g["fixed_s"] >= g["planner_collectives_s"] > 0
    assert got["13b"]["fixed_s"] > got["7b"]["fixed_s"]  # it grows with the parameters


def test_one_efficiency_per_gpu_type_fitted_on_two_rows_of_each_table():
    runs = megatron_runs() + foundry_runs(["a100-80gb", "a100-40gb"])
    c = compare(runs)
    # Megatron's table and llm-foundry's A100-80GB table run on one GPU type: one figure,
    # fitted on both tables' two rows together; the 40GB table has its own
    assert c.efficiency["megatron"] == c.efficiency["a100-80gb"] != c.efficiency["a100-40gb"]
    fit = fit_rows(runs, "megatron") + fit_rows(runs, "a100-80gb")
    assert c.efficiency["megatron"] == pytest.approx(fit_efficiency(fit))
    assert c.baseline_mfu["a100-80gb"] == pytest.approx(sum(r.model_mfu for r in fit) / 4)
    assert sum(r.fitted for r in c.rows) == 6
    assert [r.run.table for r in c.rows] == [r.table for r in runs]  # source order kept


def test_calibrated_per_chip_or_from_the_other_tables_only():
    runs = megatron_runs() + foundry_runs(["a100-80gb", "a100-40gb"])
    # per chip: the A100-40GB and 80GB are the same 312 TFLOP/s chip, so one figure for all three
    chip = compare(runs, calibrate="chip")
    assert chip.efficiency["megatron"] == chip.efficiency["a100-80gb"] == chip.efficiency["a100-40gb"]
    assert sum(r.fitted for r in chip.rows) == 6
    # cross-table: each table predicted from the other two tables' fitted rows, none of its own
    cross = compare(runs, calibrate="other_tables")
    assert not any(r.fitted for r in cross.rows) and len(cross.rows) == len(runs)
    others = fit_rows(runs, "megatron") + fit_rows(runs, "a100-80gb")
    assert cross.efficiency["a100-40gb"] == pytest.approx(fit_efficiency(others))
    assert cross.baseline_mfu["a100-40gb"] == pytest.approx(sum(r.model_mfu for r in others) / 4)
    assert cross.efficiency["a100-40gb"] != cross.efficiency["megatron"]
    assert [r.run.table for r in cross.rows] == [r.table for r in runs]
    with pytest.raises(ValueError, match="calibrate"):
        compare(runs, calibrate="table")
    with pytest.raises(ValueError, match="alone on its chip"):
        compare(megatron_runs(), calibrate="other_tables")
