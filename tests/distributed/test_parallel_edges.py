"""Model parallelism's edge cases on 2, 3 and 4 gloo processes (worker:
tests/distributed/_parallel_edges_worker.py), each against torch's own answer.

* The vocabulary-parallel loss over an uneven split, float64: loss and gradient equal
  ``F.cross_entropy``'s to 1e-12 for every ``reduction``, with ``ignore_index`` targets and
  with every target ignored (NaN as torch); a target outside ``[0, V)`` raises on every rank.
* The vocabulary-parallel embedding over an uneven split equals ``nn.Embedding`` and raises
  where it raises (ids >= V, < 0) or names ``idx`` (float ids).
* ZB-H1 with weights used both through their Linear's call and outside it (a tied embedding
  and head, ``F.linear(h, lin.weight)``): the gradients of GPipe, 1F1B and the unsplit model,
  float64, relative 1e-12 (sums in another order only).
* A stage output whose dtype or shape is not ``act_dtype``/``act_shape``: a ValueError naming
  them on the sending rank, and on the receiving rank an error naming the peer within
  ``timeout_s`` (not a gloo abort or a 30-minute wait).

One launch per world size runs every check (torchrun start-up dominates on 2 cores).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfkit import dist

pytestmark = pytest.mark.distributed
WORKER = str(Path(__file__).with_name("_parallel_edges_worker.py"))
TOL = 1e-12          # float64: the same sums as torch's, in another order
MISMATCH_TIMEOUT_S = 3.0
TASKS = {2: ["ce", "emb", "zb", "mismatch"], 3: ["ce", "emb", "zb"], 4: ["ce", "emb"]}


@pytest.fixture(scope="module")
def jobs():
    def go(n):
        tasks = [{"task": t, "timeout_s": MISMATCH_TIMEOUT_S} for t in TASKS[n]]
        res = dist.launch(WORKER, n, ["--config", json.dumps({"tasks": tasks})], timeout_s=300)
        return [dict(zip(TASKS[n], r, strict=True)) for r in res]
    return {n: go(n) for n in TASKS}


@pytest.mark.parametrize("world", [2, 3, 4])
def test_vocab_parallel_loss_is_cross_entropy_in_float64(jobs, world):
    for rank, r in enumerate(jobs[world]):
        ce = r["ce"]
        assert len(set(ce["widths"])) == 2 and sum(ce["widths"]) == 11   # uneven: 11 over world
        for key in ("mean", "sum", "none"):
            for case in ("some_ignored", "all_ignored"):
                c = ce[f"{key}/{case}"]
                where = f"rank {rank} of {world}, reduction={key}, {case}"
                assert c["dtype"] == "torch.float64", where
                assert c["shape"] == ([2, 5] if key == "none" else []), where
                assert c["loss_nan"] == c["want_nan"], where   # all ignored, mean: NaN as torch
                assert c["loss_err"] <= TOL and c["grad_err"] <= TOL, (where, c)
                assert c["grad_finite"], where
        assert ce["mean/all_ignored"]["want_nan"] and not ce["sum/all_ignored"]["want_nan"]
        assert ce["pad_err"] <= TOL


@pytest.mark.parametrize("world", [2, 3, 4])
def test_target_outside_the_vocabulary_raises_on_every_rank(jobs, world):
    for r in jobs[world]:
        ce = r["ce"]
        for key in ("error_over", "error_over_sized"):
            assert ce[key] and ce[key].startswith("ValueError") and "[0, 11)" in ce[key], ce[key]
            assert ce[key].endswith("to 11"), ce[key]
        for key in ("error_negative", "error_negative_sized"):
            assert ce[key] and "targets must be ids in [0, 11) or ignore_index (-100)" in ce[key]
            assert "from -1 to" in ce[key]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_vocab_parallel_embedding_is_nn_embedding(jobs, world):
    for r in jobs[world]:
        e = r["emb"]
        assert e["vocab_size"] == 11 and e["err"] == 0.0
        for name in ("over", "negative"):
            assert e[f"torch_{name}"].startswith("IndexError"), e   # what it imitates
            assert e[f"error_{name}"].startswith("IndexError: idx must hold ids in [0, 11)"), e
        assert e["error_float"].startswith("TypeError: idx must hold integer ids"), e


@pytest.mark.parametrize("world", [2, 3])
def test_zero_bubble_keeps_a_weight_used_outside_its_linear(jobs, world):
    for rank, r in enumerate(jobs[world]):
        zb = r["zb"]
        assert zb["zb_h1"]["W"] == 3 and zb["gpipe"]["W"] == 0   # the split ran
        for name in ("gpipe", "1f1b", "zb_h1"):
            assert zb[name]["rel"] <= TOL, (f"rank {rank} of {world}", name, zb[name])


@pytest.mark.parametrize("case,named", [("dtype", "act_dtype=torch.float32"),
                                        ("shape", "act_shape=(1, 8)")])
def test_a_wrong_activation_is_named_by_the_sender_and_the_receiver_does_not_hang(jobs, case,
                                                                                  named):
    sender, receiver = (r["mismatch"][case] for r in jobs[2])
    assert sender["error"].startswith("ValueError: pipeline rank 0: F0.0 would send stage 1 (global "
                                       "rank 1) its act of shape (1, 4)"), sender
    assert named in sender["error"] and "torch.float64" in sender["error"], sender
    assert receiver["error"].startswith("RuntimeError: pipeline rank 1: F1.0 waited past "
                                        f"timeout_s={MISMATCH_TIMEOUT_S}"), receiver
    assert "from stage 0 (global rank 0)" in receiver["error"], receiver
    assert receiver["took_s"] < MISMATCH_TIMEOUT_S + 30, receiver   # loaded machine: slack
