"""The memory model's framework terms (PyTorch's cross-entropy peak, FSDP's unsharded weights and
gradients under a pipeline) and the published per-GPU memory it is held against
(:mod:`perfkit.plan.memory_runs`, torchtitan's Llama 3.1 benchmark)."""

import pytest

from perfkit.plan import (
    PUBLISHED_MEASURE,
    RESERVED_OVER_ACTIVE_ELSEWHERE,
    TORCHTITAN_MEMORY_ROWS,
    Layout,
    ModelSpec,
    layout_problems,
    memory_check,
    memory_per_gpu,
    memory_runs,
    stage_params,
)

GIB = 2**30
GPT = ModelSpec("gpt", layers=4, hidden=64, heads=4, ffn=256, vocab=1000, seq=32)


def test_pytorch_cross_entropy_holds_three_logits_copies_on_the_last_stage():
    lay = Layout(pp=2, micro_batch=2)
    one = memory_per_gpu(GPT, lay, 4)
    three = memory_per_gpu(GPT, lay, 4, loss_copies=3)
    logits = GPT.logits_bytes(2)
    per_layer = GPT.activation_bytes_per_layer(2)
    head = 2 * (2 * 32 * 64 * 2)  # the final norm's and the head's inputs, one (b, s, h) each
    # the first stage holds 2 micro-batches of 2 blocks; the last 1 micro-batch and the loss
    assert one.activations == max(2 * 2 * per_layer, 2 * per_layer + logits + head)
    assert three.activations == max(2 * 2 * per_layer, 2 * per_layer + 3 * logits + head)
    # one stage holds everything: two more copies exactly
    flat = Layout(micro_batch=2)
    assert (memory_per_gpu(GPT, flat, 2, loss_copies=3).activations
            - memory_per_gpu(GPT, flat, 2).activations) == 2 * logits
    assert three.model_states == one.model_states and three.buffers == one.buffers


def test_fsdp_under_a_pipeline_keeps_the_stage_gathered_and_its_gradients_unsharded():
    lay = Layout(dp=4, pp=2, zero=3)
    psi = stage_params(GPT, lay)
    kept = memory_per_gpu(GPT, lay, 8, unsharded_with_pp=True)
    assert kept.buffers == psi * (2 + 4)  # bf16 weights, fp32 gradients of the whole stage
    assert memory_per_gpu(GPT, lay, 8, unsharded_with_pp=True, unsharded_grad_bytes=2).buffers == psi * 4
    default = memory_per_gpu(GPT, lay, 8)
    assert default.buffers == 2 * GPT.layer_params * 2  # two gathered blocks, as before
    # without a pipeline FSDP reshards after forward: the flag changes nothing
    flat = Layout(dp=8, zero=3)
    assert memory_per_gpu(GPT, flat, 8, unsharded_with_pp=True) == memory_per_gpu(GPT, flat, 8)
    # nor for ZeRO 0-2, which never gathers weights
    z1 = Layout(dp=4, pp=2, zero=1)
    assert memory_per_gpu(GPT, z1, 8, unsharded_with_pp=True) == memory_per_gpu(GPT, z1, 8)


def test_rows_are_the_torchtitan_tables():
    runs = memory_runs()
    assert len(runs) == len(TORCHTITAN_MEMORY_ROWS) == 18
    got = {(r.table, r.label): round(r.published_bytes / GIB, 1) for r in runs}
    assert got[("Table 1", "8B FSDP")] == 82.4
    assert got[("Table 3", "8B FSDP")] == 67.0
    assert got[("Table 2", "8B FSDP 1, CP 8 s=262144")] == 84.5
    assert got[("Table 4", "70B 2D")] == 71.9
    assert got[("Table 5", "405B 1F1B")] == 82.5
    assert got[("Table 6", "405B FSDP 2, CP 4 s=131072")] == 77.1
    # the GPU counts the tables state: 8, 128, 256 (FSDP 32 x TP 8), 512 (8 x 8 x 8)
    gpus = {r.table: r.layout.gpus for r in runs if r.layout is not None}
    assert gpus == {"Table 1": 8, "Table 2": 8, "Table 3": 128, "Table 4": 256, "Table 5": 512,
                    "Table 6": 512}
    # Llama 3.1's sizes as its configs give them (8.03 B, 70.6 B, 405.9 B parameters)
    sizes = {r.model.name: round(r.model.num_params / 1e9, 1) for r in runs}
    assert sizes == {"Llama 3.1 8B": 8.0, "Llama 3.1 70B": 70.6, "Llama 3.1 405B": 405.9}


def test_every_stated_layout_is_valid_and_the_interleaved_one_is_not_stated():
    for r in memory_runs():
        if r.layout is None:
            assert "Interleaved" in r.label and "not stated" in r.unmodelled
            continue
        assert layout_problems(r.model, r.layout, r.layout.gpus, r.global_batch) == []
        # a pipeline: one micro-batch per stage, torchtitan's default
        if r.layout.pp > 1:
            assert r.layout.micro_batches(r.global_batch) == r.layout.pp
            assert r.unsharded_with_pp
        assert r.loss_copies == 3


def test_long_context_rows_are_within_ten_percent_and_need_the_loss_term():
    res = [r for r in memory_check(memory_runs()) if r.run.table == "Table 2"]
    assert len(res) == 4 and all(abs(r.error) <= 0.10 and r.fits for r in res)
    # model states are sharded over FSDP x CP: the four rows hold the same bytes per GPU
    assert len({round(r.predicted.total) for r in res}) == 1
    # with one fp32 logits copy (a fused, in-place loss) the model misses them by ~46 %
    ones = [r for r in memory_check(memory_runs(), loss_copies=1.0) if r.run.table == "Table 2"]
    assert all(r.error < -0.40 for r in ones)


def test_pipeline_rows_count_the_unsharded_stage():
    (r,) = [r for r in memory_check(memory_runs()) if r.run.label == "405B 1F1B"]
    psi = stage_params(r.run.model, r.run.layout)
    assert r.predicted.buffers == pytest.approx(psi * 6)
    assert r.predicted.buffers / GIB > 30  # ~6.3 B parameters per GPU before sharding
    assert r.fits


def test_result_without_a_layout_has_no_error():
    res = memory_check(memory_runs())
    none = [r for r in res if r.predicted is None]
    assert len(none) == 1 and none[0].error is None and none[0].fits is None


LLAMA = ModelSpec("llama-ish", layers=2, hidden=64, heads=4, ffn=160, vocab=1000, seq=32, kv_heads=2,
                  gated=True, tied=False)


def test_op_level_checkpointing_keeps_every_second_matmul_output():
    h, k, f = 64, 32, 160
    kept, rerun = LLAMA.op_matmuls()
    assert kept == [(h, h), (h, k), (h, f), (f, h)]  # Q, V, gate, down (1st, 3rd, 5th, 7th)
    assert rerun == [(h, k), (h, h), (h, f)]  # K, O, up
    gelu = ModelSpec("gpt", layers=2, hidden=64, heads=4, ffn=256, vocab=1000, seq=32)
    assert gelu.op_matmuls() == ([(64, 64), (64, 64), (64, 256)], [(64, 64), (64, 64), (256, 64)])
    # bytes by hand, bf16, b = 2, s = 32: block input, Q, V, gate, down, the kernel's output
    # (2 bytes each), and its fp32 log-sum-exp per head
    s, b, a = 32, 2, 4
    want = 2 * s * b * (h + h + k + f + h + h) + 4 * a * s * b
    assert LLAMA.activation_bytes_per_layer(b, recompute="op") == want
    # tp = 2 with SP: the block input and every column-parallel output split; the down-projection's
    # output is the row-parallel partial sum, whole
    want_tp = 2 * s * b * ((h + h + k + f + h) / 2 + h) + 4 * a * s * b / 2
    assert LLAMA.activation_bytes_per_layer(b, tp=2, sp=True, recompute="op") == want_tp
    # it keeps less than no recomputation and more than full recomputation
    assert (LLAMA.activation_bytes_per_layer(b, recompute="full") < want
            < LLAMA.activation_bytes_per_layer(b, recompute="none"))


def test_op_level_checkpointing_reruns_the_matmuls_it_does_not_keep():
    h, k, f = 64, 32, 160
    base = LLAMA.dense_flops_per_token("none")
    assert LLAMA.dense_flops_per_token("op") - base == 2 * LLAMA.layers * (h * k + h * h + h * f)
    # the fused kernel's output is kept: attention is not rerun (full recomputation reruns it)
    assert LLAMA.attention_flops_split("op") == LLAMA.attention_flops_split("none")
    assert Layout(dp=2, zero=3, recompute="op").label() == "dp2 tp1 pp1 z3 mb1 op"


def test_op_level_checkpointing_is_searched_only_when_asked_for():
    from perfkit.plan import named_cluster, plan

    c = named_cluster("h100-sxm")
    free = plan(LLAMA, c, 8, 16)
    assert all(x.layout.recompute != "op" for x in free.best)
    asked = plan(LLAMA, c, 8, 16, fixed={"recompute": "op"})
    assert asked.best and all(x.layout.recompute == "op" for x in asked.best)


def test_memory_rebuilds_the_rest_of_one_block_under_op_checkpointing():
    lay = Layout(micro_batch=2, recompute="op")
    mem = memory_per_gpu(LLAMA, lay, 2)
    op = LLAMA.activation_bytes_per_layer(2, recompute="op")
    none = LLAMA.activation_bytes_per_layer(2)
    head = LLAMA.logits_bytes(2) + 2 * (2 * 32 * 64 * 2)
    assert mem.activations == 2 * op + head + (none - op)


def test_torchtitan_selective_op_rows_are_op_level_checkpointing():
    res = [r for r in memory_check(memory_runs()) if r.run.table in ("Table 1", "Table 3")]
    assert len(res) == 6 and all(r.run.layout.recompute == "op" for r in res)
    # Korthikanti's selective recomputation keeps everything a fused kernel does: ~1.5x too much
    assert all(r.fits and abs(r.error) <= 0.15 for r in res)


def test_published_figures_are_reserved_memory_which_bounds_the_allocated_prediction():
    from dataclasses import replace

    assert "reserved_bytes.all.peak" in PUBLISHED_MEASURE and "max_reserved_gib" in PUBLISHED_MEASURE
    res = memory_check(memory_runs())
    done = [r for r in res if r.predicted is not None]
    assert len(done) == 17 and all(r.at_most_published is True for r in done)
    assert [r.at_most_published for r in res if r.predicted is None] == [None]
    # the bound can fail: a figure below the prediction is reported as such
    (r,) = [r for r in done if r.run.table == "Table 1" and r.run.label == "8B FSDP"]
    low = replace(r, run=replace(r.run, published_bytes=r.predicted.total - 1))
    assert low.at_most_published is False
    assert replace(r, run=replace(r.run, published_bytes=r.predicted.total)).at_most_published is True


def test_no_sourced_reserved_over_active_ratio_transfers_to_the_torchtitan_rows():
    ratios = [reserved / active for _, active, reserved in RESERVED_OVER_ACTIVE_ELSEWHERE]
    assert min(ratios) == pytest.approx(1.272, abs=1e-3) and max(ratios) == pytest.approx(1.354, abs=1e-3)
    done = [r for r in memory_check(memory_runs()) if r.predicted is not None]
    # a planted wrong version: allocated bytes times the smallest sourced ratio overshoots the
    # eager 8B FSDP rows by 10-12 % and the torch.compile ones by 19-20 % (the module's docstring)
    planted = {(r.run.table, r.run.label): r.predicted.total * min(ratios) / r.run.published_bytes - 1
               for r in done if r.run.table in ("Table 1", "Table 3")}
    eager = [e for (_, label), e in planted.items() if label == "8B FSDP"]
    compiled = [e for (_, label), e in planted.items() if "compile" in label]
    assert len(eager) == 2 and all(0.10 <= e <= 0.12 for e in eager)
    assert len(compiled) == 4 and all(0.19 <= e <= 0.20 for e in compiled)
    # within torchtitan's own rows the published figure is 1.06 to 1.29 times the prediction:
    # the gap is not one constant, so no single factor is added
    over = [r.run.published_bytes / r.predicted.total for r in done]
    assert 1.06 <= min(over) < 1.07 and 1.28 < max(over) <= 1.30


def test_the_405b_tables_name_asynctp_among_what_is_not_modelled():
    """Tables 5 and 6 of torchtitan's benchmark state AsyncTP in their headings: its buffers are
    as unmodelled there as in Table 4's AsyncTP row."""
    from perfkit.plan import memory_runs

    for run in memory_runs():
        if run.table in ("Table 5", "Table 6") or "AsyncTP" in run.label:
            assert "AsyncTP" in run.unmodelled, run.label
