"""Checks for lab 03 (the ZeRO memory formula, shard bookkeeping, a ZeRO-1 optimizer, a
ZeRO-3 block).

Q1 is checked against the ZeRO paper's figures (7.5 B parameters, K = 12, N = 64) and
against perfkit.memory; Q2 against perfkit.parallel.shard_range for every small case; Q3 first
on one process, then on 2 and 3 real torchrun processes (tools.labs.zero_check):
after 50 steps of an MLP whose 262 parameters divide by neither 2 nor 3, the parameters
must be within 1e-6 (relative, fp32) of single-process torch.optim.AdamW, and of SGD with
momentum (which, unlike Adam, notices a gradient summed instead of averaged), on the same
global batch; each process's optimizer state at most one slice of Adam's moments. Q4 on one
process, then on 2 and 3 (tools.labs.block_check): three blocks of 187 parameters
(padding needed for 2 and 3) must hold a shard of ceil(187 / N) values and no whole
parameter between uses, gather the unsharded parameters in rank order, train like AdamW
within 1e-6, and hold at most the shards (stage 3's P Ψ / N, padding included) plus one
gathered block of parameter bytes at once while the blocks run.
Used by `make grade` and tests/labs/.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tools.grade import launch_checked, pickled, require, time_limit

TOL = 1e-6
PAPER = {0: 120e9, 1: 31.40625e9, 2: 16.640625e9, 3: 1.875e9}  # bytes; printed 120/31.4/16.6/1.9 GB


def check_zero_bytes(ns: dict) -> None:
    from perfkit.memory import StateRecipe, zero_model_states

    f = require(ns, "zero_bytes_per_rank")
    for stage, want in PAPER.items():
        got = f(7.5e9, 64, stage)
        assert math.isclose(got, want, rel_tol=1e-12), (
            f"zero_bytes_per_rank(7.5e9, 64, {stage}) = {got:.6g}; the paper's Figure 1 gives "
            f"{want / 1e9:g} GB = {want:.6g} bytes. Which of P, G, K does stage {stage} divide "
            "by N?")
    for psi, n, p, g, k in ((1000, 1, 4, 4, 8), (12345, 7, 4, 4, 4), (10**9, 3, 2, 2, 12),
                            (555, 16, 2, 4, 0)):
        for stage in range(4):
            want = zero_model_states(psi, n, stage, StateRecipe("x", p, g, k)).total
            got = f(psi, n, stage, p, g, k)
            assert math.isclose(got, want, rel_tol=1e-12), (
                f"zero_bytes_per_rank({psi}, {n}, {stage}, param_bytes={p}, grad_bytes={g}, "
                f"optimizer_bytes={k}) = {got}; expected {want}. Use the byte arguments, not "
                "the defaults, and return a float without rounding")
    for bad in (dict(stage=4), dict(world_size=0), dict(num_params=0)):
        args = dict(num_params=100, world_size=2, stage=1) | bad
        try:
            f(**args)
        except ValueError:
            continue
        raise AssertionError(f"zero_bytes_per_rank(**{args}) must raise ValueError")


def check_shard_range(ns: dict) -> None:
    from perfkit.parallel import shard_range as ref

    f = require(ns, "shard_range")
    for numel in (1, 2, 3, 10, 241, 262):
        for n in (1, 2, 3, 4, 8):
            got = [tuple(f(numel, n, r)) for r in range(n)]
            want = [ref(numel, n, r)[:2] for r in range(n)]
            assert got == want, (
                f"shard_range({numel}, {n}, r) for r = 0..{n - 1} gave {got}; expected {want}: "
                f"equal slices of ceil({numel} / {n}) = {math.ceil(numel / n)} elements, "
                "rank r starting at r times that")
    for bad in ((10, 2, 2), (10, 2, -1), (0, 2, 0), (10, 0, 0)):
        try:
            f(*bad)
        except ValueError:
            continue
        raise AssertionError(f"shard_range{bad} must raise ValueError")


def _train(model, opt, steps):
    from tools.labs.zero_check import global_batch

    for s in range(steps):
        x, y = global_batch(s)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def check_zero_one(ns: dict) -> None:
    from tools.labs.zero_check import LR, WD, make_mlp

    cls = require(ns, "ZeroOne")
    # 1. one process: must equal AdamW exactly (same element-wise maths on one slice)
    mine, ref = make_mlp(), make_mlp()
    with time_limit(30, "ZeroOne on one process: building it and 20 steps of a small MLP did "
                    "not finish within 30 s (AdamW takes well under a second)"):
        opt = cls(list(mine.parameters()), torch.optim.AdamW, lr=LR, weight_decay=WD)
        assert isinstance(getattr(opt, "optim", None), torch.optim.Optimizer), (
            "ZeroOne must keep the wrapped optimizer as self.optim (an optimizer_class instance)")
        _train(mine, opt, 20)
    _train(ref, torch.optim.AdamW(ref.parameters(), lr=LR, weight_decay=WD), 20)
    with torch.no_grad():
        diff = max(float((p - q).abs().max() / q.abs().max())
                   for p, q in zip(mine.parameters(), ref.parameters()))
    assert diff <= TOL, (
        f"on one process, 20 steps differ from AdamW by {diff:.2e} (relative); expected "
        "<= 1e-6. Are the parameters views of self.flat, and does step() give self.shard "
        "the gradient of its slice before self.optim.step()?")
    # 2. 2 and 3 processes under torchrun
    with pickled(cls, "zero_one.pkl") as path:
        # AdamW, then SGD with momentum: Adam is blind to a gradient summed instead of
        # averaged over processes (m / sqrt(v) does not change with the scale), SGD is not
        cfg = [{"steps": 50, "mode": "alone", "groups": False, "state": False, "impl": path,
                "optimizer": o} for o in ("adamw", "sgd")]
        for n in (2, 3):
            jobs = launch_checked(
                "tools.labs.zero_check", n, cfg, 150, "the job",
                "a process is waiting in a collective the others never called. Every rank "
                "must call reduce_scatter and the all-gather in every step().")
            results = [r for rank in jobs for r in rank]
            numel = results[0]["numel"]
            for r in results:
                assert r["max_rel_diff"] <= TOL, (
                    f"on {n} processes with {r['optimizer']}, rank {r['rank']}'s parameters after "
                    f"50 steps differ from single-process {r['optimizer']} by "
                    f"{r['max_rel_diff']:.2e} (relative); expected <= 1e-6. Check the "
                    "reduce-scatter (sum, then divide by N: the mean gradient) and that the "
                    "all-gather writes every slice into self.flat")
                padded = n * math.ceil(numel / n)
                used = set(r["collectives"])
                assert "all_reduce" not in used and used & {
                    "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single"} and used & {
                    "all_gather", "all_gather_into_tensor", "all_gather_single"}, (
                    f"on {n} processes the optimizer called {sorted(used)}; ZeRO-1 reduce-scatters "
                    "the gradients (each rank gets the sum of its slice) and all-gathers the updated "
                    "slices. An all_reduce of the whole gradient moves twice the bytes a "
                    "reduce-scatter does")
                assert r["collective_elems_per_step"] <= 2 * padded * 1.01 + 8, (
                    f"on {n} processes the collectives moved {r['collective_elems_per_step']:.0f} "
                    f"elements per step; one reduce-scatter and one all-gather of the flat "
                    f"buffer move {2 * padded}. Is something communicated twice?")
                limit = 2 * 4 * math.ceil(numel / n) + 64  # two fp32 moments + step counters
                assert r["state_bytes"] <= limit, (
                    f"on {n} processes rank {r['rank']} holds {r['state_bytes']} bytes of "
                    f"optimizer state; one slice of Adam's moments is at most {limit} bytes. "
                    "Does self.optim see only self.shard?")


def _check_block_runs(results: list, n: int) -> None:
    """Every rank's result of tools.labs.block_check.run_impl, judged stage by stage
    (a stage on every rank before the next: a mistake on one rank shows at its cause)."""
    for r in results:
        numel, rank, want = r["numel"], r["rank"], math.ceil(r["numel"] / n)
        assert "shard_numel" not in r or r["shard_numel"] == [want] * len(r["shard_numel"]), (
            f"on {n} processes rank {rank}'s shards hold {r['shard_numel']} values for blocks of "
            f"{numel} parameters; pad the flat buffer with zeros to N * ceil(numel / N) = "
            f"{n * want} so that every process holds ceil({numel} / {n}) = {want} (the padding of "
            "uneven sizes: collectives need equal shards)")
    for r in results:
        assert r.get("param_numel_after_init", 0) == 0, (
            f"on {n} processes, after ShardedBlock(block) the block's parameters still hold "
            f"{r['param_numel_after_init']} values; the constructor must end with self.free(), "
            "which points every parameter at an empty tensor")
    for r in results:
        assert "error" not in r, f"on {n} processes rank {r['rank']} raised in {r['error']}"
    for r in results:
        assert r["gather_max_abs_diff"] <= 1e-6, (
            f"on {n} processes, after gather() rank {r['rank']}'s block parameters differ from the "
            f"unsharded block's by up to {r['gather_max_abs_diff']:.3g}: rank r's shard must land "
            "at slice r of the gathered buffer (the rank order all_gather_single keeps), and "
            "each parameter view at its offset")
    for r in results:
        assert r["param_numel_after_free"] == 0, (
            f"on {n} processes, after free() the blocks' parameters still hold "
            f"{r['param_numel_after_free']} values: free() must point every parameter at an empty "
            "tensor (p.data = torch.empty(0)), or the gathered buffer is never freed")
    for r in results:
        assert r["max_rel_diff"] <= TOL, (
            f"on {n} processes with AdamW, rank {r['rank']}'s parameters after training differ "
            f"from single-process AdamW by {r['max_rel_diff']:.2e} (relative); expected <= 1e-6")
    for r in results:
        bound = r["shard_bytes"] + r["block_bytes"]
        assert r["peak_param_bytes"] <= bound, (
            f"on {n} processes rank {r['rank']} held up to {r['peak_param_bytes']} bytes of "
            f"parameters at once while the blocks ran; stage 3 holds its shards "
            f"({r['shard_bytes']} bytes: P Ψ / N with padding) plus one gathered block "
            f"({r['block_bytes']} bytes), {bound} in all. A gathered buffer is kept alive after "
            "use (an attribute such as self.full, or a shard that is a view of the whole flat "
            "buffer): the peak parameter bytes must not grow with the number of blocks")


def check_sharded_block(ns: dict) -> None:
    from tools.labs.block_check import run_impl

    cls = require(ns, "ShardedBlock")
    with time_limit(30, "ShardedBlock on one process: three blocks of 187 parameters and 20 "
                    "steps did not finish within 30 s (the unsharded blocks take well under a "
                    "second). Does gather() or free() loop?"):
        r = run_impl(cls, 0, 1)
    if "error" in r and "NotImplementedError" in r["error"]:
        raise NotImplementedError("ShardedBlock is not implemented")
    _check_block_runs([r], 1)
    with pickled(cls, "sharded_block.pkl") as path:
        for n in (2, 3):
            jobs = launch_checked(
                "tools.labs.block_check", n, {"impl": path}, 120, "the job",
                "a process is waiting in a collective the others never called. Every rank "
                "must call the all-gather in every gather(), for the same block, in the same "
                "order", impl_name="ShardedBlock")
            _check_block_runs(sorted(jobs, key=lambda r: r["rank"]), n)


QUESTIONS = {"zero_bytes_per_rank": check_zero_bytes, "shard_range": check_shard_range,
             "ZeroOne": check_zero_one, "ShardedBlock": check_sharded_block}
# the formulas and the shard ranges are arithmetic: an answer that loops fails fast
TIMEOUT_S = {"zero_bytes_per_rank": 10, "shard_range": 10, "ZeroOne": 150, "ShardedBlock": 150}
