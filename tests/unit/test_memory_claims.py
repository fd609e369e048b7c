"""perfkit.memory.claims: the counts behind notebook 09's memory claims, checked by hand."""

import math

import pytest
import torch

from perfkit import stats
from perfkit.memory import claims
from perfkit.memory.model_states import zero_model_states


def test_sizing_ratios_adam_is_two_and_activations_grow_with_batch():
    s = claims.sizing_ratios([1, 4], seq=16, n_embd=32, n_layer=1, n_head=2)
    # two fp32 moments per parameter, plus one step counter per tensor: a little above 2
    assert 2.0 <= s.adam_ratio < 2.02
    assert s.state_bytes == 2 * s.weight_bytes + s.adam_bytes
    # activations are linear in batch x sequence: 4x the batch, 4x the bytes (within the
    # logits' and loss's few per-batch bytes)
    assert s.growth() == pytest.approx(4.0, rel=0.05)
    assert s.activation_ratio(4) == pytest.approx(s.activation_bytes[4] / s.weight_bytes)
    metric = s.input_metric(4)
    assert metric == pytest.approx(4 * 4 * 16 / (s.state_bytes + s.activation_bytes[4]))
    assert metric < 4 * 16 * 4 / s.activation_bytes[4]  # below its ceiling 4 / a


def test_sizing_ratios_rejects_bad_batches():
    with pytest.raises(ValueError, match="batches"):
        claims.sizing_ratios([], seq=8)
    with pytest.raises(ValueError, match="batches entries"):
        claims.sizing_ratios([0], seq=8)


def test_checkpoint_file_named_gz_is_a_zip_and_real_gzip_is_smaller():
    state = {"w": torch.zeros(4096), "b": torch.ones(16)}  # zeros compress very well
    f = claims.checkpoint_file_sizes(state)
    assert f.format == "zip" and f.magic == b"PK"
    assert f.name_ratio == pytest.approx(1.0, abs=0.01)
    assert f.gzip_ratio < 0.2 and f.round_trips
    with pytest.raises(TypeError, match="state"):
        claims.checkpoint_file_sizes({"w": 1.0})


def test_checkpointing_saves_activations_not_model_states():
    c = claims.checkpointing_savings(batch=2, seq=16, n_layer=2, n_embd=32, n_head=2)
    assert c.checkpointed < c.plain
    assert 0 < c.step_saved < c.activations_saved < 1  # the states do not shrink
    assert c.step_saved == pytest.approx((c.plain - c.checkpointed) / (c.state_bytes + c.plain))
    assert c.model_saved == pytest.approx(1 - c.model_checkpointed / c.model_plain)
    # weights and two Adam moments (12 B per fp32 parameter): no gradient exists at the end of
    # forward under zero_grad(set_to_none=True). Planted: 16 B, counting gradients not yet made
    from perfkit.memory.model_states import count_parameters
    from perfkit.models import tiny_gpt2

    params = count_parameters(tiny_gpt2(block_size=16, n_embd=32, n_layer=2, n_head=2)).total_bytes
    assert c.state_bytes == 3 * params
    with pytest.raises(ValueError, match="n_layer"):
        claims.checkpointing_savings(batch=2, n_layer=0)


def test_checkpoint_sequential_as_written_raises_and_the_real_call_matches():
    r = claims.checkpoint_sequential_check(width=16, depth=4, rows=8, segments=2)
    assert not r.runs_as_written and r.as_written_error.startswith("TypeError")
    assert r.max_grad_diff <= 1e-6
    assert r.kept_checkpointed < r.kept_plain
    with pytest.raises(ValueError, match="segments"):
        claims.checkpoint_sequential_check(segments=0)


def test_time_emptied_cache_returns_paired_rounds_and_their_ratio():
    t = claims.time_emptied_cache(micro=2, batch=1, seq=8, repeat=3)
    assert t.plain.n == t.emptied.n == 4  # balanced orders over whole cycles: 3 -> 4 rounds
    assert t.how in ("malloc_trim(0)", "empty_cache()")
    est = t.speedup()
    assert isinstance(est, stats.Estimate) and est.n == 4
    # plain over emptied, not the other way round
    assert est.value == pytest.approx(stats.median(stats.paired_ratios(t.plain.times_s, t.emptied.times_s)))
    with pytest.raises(ValueError, match="micro"):
        claims.time_emptied_cache(micro=0)


def test_advised_stage_follows_the_advice_at_its_edges():
    assert [claims.advised_zero_stage(b) for b in (0.5, 1, 10, 10.5)] == [1, 2, 2, 3]
    with pytest.raises(ValueError, match="billions"):
        claims.advised_zero_stage(0)


def test_zero_rule_rows_by_hand():
    # 8 x 80 GB, mixed Adam: stage 0 holds 16 B/param -> 5 B fits; stage 1 (4 + 12/8) -> 14.5 B
    rows = {r.billions: r for r in claims.zero_rule_rows([0.5, 7, 13, 30, 70], gpu_gb=80, n_gpus=8)}
    assert rows[0.5].lowest_fitting == 0 and not rows[0.5].rule_wrong   # stage 1 is more than needed, fine
    assert rows[7].lowest_fitting == 1 and not rows[7].rule_wrong       # advised 2 fits
    assert rows[13].lowest_fitting == 1 and rows[13].rule_wrong         # advised 3 where 1 fits
    assert rows[30].lowest_fitting == 3 and not rows[30].rule_wrong     # 16 * 30 / 8 = 60 GB: only 3
    # 140 GB at stage 3: none fits; stage 3, the least memory, is still the stage to ask for
    assert rows[70].lowest_fitting is None and not rows[70].rule_wrong
    assert claims.ZeroRuleRow(70, 8, 2, None).rule_wrong  # where none fits, advising less than 3 is wrong
    # a rule asking for a stage below the lowest that fits is wrong
    assert claims.ZeroRuleRow(5, 8, 1, 2).rule_wrong and not claims.ZeroRuleRow(5, 8, 2, 2).rule_wrong


def test_zero_rule_rows_count_a_sequence_of_activations_beside_the_model_states():
    # 13 B: 40 layers 5,171 wide, 34 * 5171 * 40.4 * 2048 = 14.5 GB; stage 1's 71.5 GB + 14.5 > 85.9 GB
    # (80 GiB), so stage 2 is the lowest that fits: the rule's stage 3 is still wrong, but not because
    # stage 1 fits (the planted version counted model states only and called stage 1 fitting)
    assert claims.activation_gb(13, 2048) == pytest.approx(14.55, rel=0.01)
    assert claims.activation_gb(13, 0) == 0
    gpu = 80 * 2**30 / 1e9
    rows = {r.billions: r for r in claims.zero_rule_rows([7, 13, 30], gpu, 8, tokens=2048)}
    assert rows[13].lowest_fitting == 2 and rows[13].rule_wrong
    assert rows[13].activations_gb == pytest.approx(claims.activation_gb(13, 2048))
    assert rows[7].lowest_fitting == 1 and rows[30].lowest_fitting == 3
    with pytest.raises(ValueError, match="tokens"):
        claims.zero_rule_rows([7], tokens=-1)
    with pytest.raises(ValueError, match="billions"):
        claims.activation_gb(0, 2048)


def test_largest_model_for_stage_inverts_the_formula():
    b = claims.largest_model_for_stage(1, gpu_gb=80, n_gpus=8)
    assert b == pytest.approx(80 / (4 + 12 / 8), rel=1e-9)
    assert zero_model_states(b * 1e9, 8, 1).total_gb <= 80
    assert math.isclose(claims.largest_model_for_stage(3, 80, 8), 80 * 8 / 16, rel_tol=1e-9)
    with pytest.raises(ValueError, match="stage"):
        claims.largest_model_for_stage(4)
