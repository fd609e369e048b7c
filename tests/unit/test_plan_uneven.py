"""Pipelines whose stage count does not divide the layers: the split, and the step time and
memory of the heaviest stage.

Each check names the wrong implementation it catches: the mean stage (``L / p`` blocks,
which makes every split of the same layers cost the same), the first stage only, the
extra blocks on the ends, the old rule that rejected every uneven pipeline.
"""

import pytest

from perfkit.plan import (
    Layout,
    ModelSpec,
    enumerate_layouts,
    layout_problems,
    memory_per_gpu,
    named_cluster,
    plan,
    stage_params,
    step_time,
)

# a small vocabulary: the output layer costs less than one block, so the middle stages of an
# uneven split are the slowest
M30 = ModelSpec("gpt-30", layers=30, hidden=256, heads=8, ffn=1024, vocab=512, seq=128)
C = named_cluster("a100-80gb")


@pytest.mark.parametrize("layers, pp, want", [
    (30, 4, (7, 8, 8, 7)),     # the two extra blocks on the middle stages, not the ends
    (32, 4, (8, 8, 8, 8)),     # even when it divides
    (9, 2, (5, 4)),            # no middle: the extra block on the first stage (the last has the head)
    (5, 4, (1, 2, 1, 1)),
    (70, 12, (5,) + (6,) * 10 + (5,)),
    (3, 3, (1, 1, 1)),
])
def test_the_default_split_puts_extra_blocks_on_the_middle_stages(layers, pp, want):
    split = Layout(pp=pp).stage_layers(layers)
    assert split == want and sum(split) == layers


def test_an_explicit_split_is_used_and_checked():
    assert Layout(pp=3, stages=(2, 5, 3)).stage_layers(10) == (2, 5, 3)
    with pytest.raises(ValueError, match="sum to 10 blocks, not the model's 11 layers"):
        Layout(pp=3, stages=(2, 5, 3)).stage_layers(11)
    with pytest.raises(ValueError, match="3 entries for pp=2"):
        Layout(pp=2, stages=(2, 5, 3))
    with pytest.raises(ValueError, match=r"stages\[1\]"):
        Layout(pp=2, stages=(2, 0))
    with pytest.raises(ValueError, match="interleave=1"):
        Layout(pp=2, interleave=2, stages=(4, 4))
    with pytest.raises(ValueError, match="cannot fill 4 pipeline stages"):
        Layout(pp=4).stage_layers(3)
    assert "stages 2-5-3" in Layout(pp=3, stages=(2, 5, 3)).label()
    with pytest.raises(ValueError, match="stage must be an int in"):
        Layout(pp=3).in_flight(8, 3)


def test_layout_problems_accept_an_uneven_pipeline_but_not_an_uneven_interleave():
    assert layout_problems(M30, Layout(dp=2, pp=4), 8, 16) == []   # the old rule rejected it
    msgs = " ".join(layout_problems(M30, Layout(dp=2, pp=4, interleave=2), 8, 16))
    assert "not divisible by pp x interleave" in msgs
    assert "cannot fill 32 pipeline stages" in " ".join(layout_problems(M30, Layout(pp=32), 32, 64))
    assert "sum to 29" in " ".join(layout_problems(M30, Layout(pp=2, stages=(15, 14)), 2, 8))


def slot(stages, tp=1):
    return step_time(M30, Layout(tp=tp, pp=len(stages), stages=stages), C, 64).detail["slot_s"]


def test_the_slowest_stage_sets_the_slot():
    # the same 30 blocks split three ways: a mean-stage model (7.5 blocks each) prices them alike
    even_ends, heavy_middle = slot((7, 8, 8, 7)), slot((6, 9, 9, 6))
    assert heavy_middle > even_ends * 1.1
    # the slowest stage here is a middle one with 8 blocks: moving a block from the last stage
    # to the first changes nothing (tp = 1: the ends add no all-reduce)
    assert slot((8, 8, 8, 6)) == pytest.approx(even_ends, rel=1e-12)
    # 8 blocks and the head on the last stage is slower than 8 blocks alone
    assert slot((7, 7, 8, 8)) > even_ends
    # the default split is the explicit one
    assert step_time(M30, Layout(pp=4), C, 64).total_s == step_time(
        M30, Layout(pp=4, stages=(7, 8, 8, 7)), C, 64).total_s


def test_the_bubble_is_p_minus_1_slots_of_the_slowest_stage():
    t = step_time(M30, Layout(pp=4), C, 64)
    assert t.terms["pipeline bubble"] == pytest.approx(3 * t.detail["slot_s"])


def test_memory_follows_the_most_loaded_stage():
    m = 8  # micro-batches: 1F1B stage i holds min(p - i, m) of them
    lay = Layout(pp=4, stages=(2, 12, 8, 8))
    per_layer = M30.activation_bytes_per_layer(1, 1, False, "none", 1)
    mem = memory_per_gpu(M30, lay, m)
    # stage 1: 3 micro-batches of 12 blocks = 36 block-activations; the first stage holds only
    # 4 x 2 = 8, the mean stage would say 4 x 7.5 = 30, the last 8 plus the logits
    head = mem.activations - 36 * per_layer
    assert head == pytest.approx(0.0, abs=1e-6)
    assert lay.in_flight(m, 1) == 3 and lay.in_flight(m, 0) == 4 and lay.in_flight(m, 3) == 1
    # parameters: the 12-block middle stage outweighs an end's 8 blocks + vocabulary here
    assert stage_params(M30, lay) == pytest.approx(12 * M30.layer_params)
    ends = stage_params(M30, Layout(pp=4, stages=(8, 7, 7, 8)))
    assert ends == pytest.approx(8 * M30.layer_params + M30.embedding_params + M30.norm_params)


def test_the_search_includes_uneven_pipelines():
    pps = {lay.pp for lay in enumerate_layouts(M30, 8, 64, 8)}
    assert 4 in pps and 8 in pps  # neither divides 30 blocks
    p = plan(M30, C, 8, 64, fixed={"pp": 4, "tp": 1})
    assert p.best and all(c.layout.pp == 4 for c in p.best)


def test_bloom_176b_trained_layout_is_accepted_and_fits():
    # BLOOM-176B (BigScience, arXiv:2211.05100, section 3.4; the run's configuration in the
    # bigscience-workshop/bigscience repository, train/tr11-176B-ml): 70 layers on 12 pipeline
    # stages (5 or 6 blocks each), TP 4, DP 8 on 384 A100-80GB, ZeRO-1, micro-batch 2, global
    # batch 2048 sequences of 2048 tokens, full activation recomputation. ALiBi and the
    # embedding's layer norm are not modelled (a few parameters, no activations of note).
    bloom = ModelSpec("bloom-176b", layers=70, hidden=14336, heads=112, ffn=4 * 14336,
                      vocab=250880, seq=2048)
    lay = Layout(dp=8, tp=4, pp=12, zero=1, micro_batch=2, recompute="full")
    assert layout_problems(bloom, lay, 384, 2048) == []
    assert lay.stage_layers(70) == (5,) + (6,) * 10 + (5,)
    assert memory_per_gpu(bloom, lay, 2048).total < C.usable_memory
