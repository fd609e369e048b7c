"""perfkit.jobs.tp_plan on 4 torchrun processes: what the planner's local check of TP and
DP x TP reads, held against perfkit.plan.local's exact counts.

One launch runs every task at its smallest (a 2 x 2 mesh for the memory, TP over 4 for the
step, one narrow block): the timings are not checked (4 processes share 2 cores), only that
each is there, that the all-reduces clocked in a TP step are the ones the planner counts, and
that their time splits into ranks arriving apart and every rank present. Model states and
collective counts are exact.
"""

from __future__ import annotations

import json

import pytest

from perfkit import dist
from perfkit.plan import Layout, plain_gpt_spec, tp_allreduces, tp_memory, tp_rank_params

pytestmark = pytest.mark.distributed
MODEL = {"vocab_size": 64, "block_size": 16, "n_embd": 32, "n_layer": 2, "n_head": 4}
BATCH, REPEAT = 2, 2


@pytest.fixture(scope="module")
def ranks():
    cfg = {"model": MODEL, "batch": BATCH, "memory": {"dp": 2},
           "step": {"warmup": 1, "repeat": REPEAT},
           "block": {"widths": [32], "batch": 2, "seq": 8, "warmup": 0, "repeat": 1}}
    return dist.launch("perfkit.jobs.tp_plan", 4, ["--config", json.dumps(cfg)], timeout_s=240)


def test_dp_x_tp_model_states_and_collectives_are_the_planners(ranks):
    spec, lay = plain_gpt_spec(**MODEL), Layout(dp=2, tp=2, micro_batch=BATCH)
    want = tp_memory(spec, lay, 2 * BATCH).model_states
    for r in ranks:
        m = r["memory"]
        assert (m["dp"], m["tp"]) == (2, 2)
        assert m["numel"] == tp_rank_params(spec, 2)
        assert sum(m["model_states"].values()) == want   # fp32 AdamW: 16 bytes per parameter
        # TP's all-reduces and the data-parallel bucket's one
        assert m["calls"] == {"all_reduce": sum(n for n, _ in tp_allreduces(spec, lay).values()) + 1}
        assert m["saved_activation_bytes"] > 0


def test_a_tp_steps_allreduces_are_clocked_and_split(ranks):
    st = ranks[0]["step"]
    spec, gb = plain_gpt_spec(**MODEL), st["global_batch"]
    assert gb == 4 * BATCH
    counted = tp_allreduces(spec, Layout(tp=4, micro_batch=gb))
    assert st["tp_comm"]["calls"] == sum(n for n, _ in counted.values())
    assert sorted({int(b) for _, b in counted.values()}) == sorted(st["message_bytes"].values())
    assert set(st["message_bytes"].values()) <= set(st["link"]["sizes"])
    c = st["tp_comm"]
    for comm, skew, both in zip(c["comm_s"], c["skew_s"], c["transfer_s"], strict=True):
        assert skew >= 0 and comm > 0
        assert both <= comm + 1e-6   # the collective itself lies inside the slowest rank's time
    assert all(len(v) == REPEAT for v in st["times_s"].values())
    assert set(st["times_s"]) == {"ddp", "tp", "tp_compute"}
    blk = ranks[0]["block"]["32"]
    assert set(blk["times_s"]) == {"unsplit", "split", "split_compute", "replicated"}
    assert blk["split_comm"]["calls"] == 4 and blk["message_bytes"] == 2 * 8 * 32 * 4
