"""Checks for lab 04 (model FLOPs; fused causal attention; a faster training step).

Each check takes the namespace left by the student's notebook and raises AssertionError
with a hint. Used by `make grade` and by tests/labs/test_labs.py.

The speed check is the one place in the course where a test asserts on wall-clock time, as
the lab asks: the reference and the student's step alternate in one process
(:func:`perfkit.compute.compare`, built on :func:`perfkit.timing.interleaved`) with one
intra-op thread, and the medians are compared. The solution is about 3x faster on the
course's 2-core CPU, twice the 1.5x threshold, so load on a shared machine does not flip it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch

from perfkit import compute
from perfkit.compute import kernels
from tools.grade import require

STEPS = 4  # training steps compared in q3
LOSS_TOL = 0.02  # nats per step: bf16 autocast stays within ~1e-3 of fp32 over 4 steps
MIN_SPEEDUP = 1.5
SPEED_ROUNDS = 7  # interleaved rounds in q4


def _naive_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    t = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    att = att.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    return att.softmax(-1) @ v


def check_train_flops(ns: dict) -> None:
    f = require(ns, "train_flops")
    # 6 * 1000 * (2 * 5) + 12 * 2 * 4 * 5 * (2 * 5) = 60,000 + 4,800
    got = f(1000, 2, 4, 5, 2)
    assert got == 64_800, (
        f"train_flops(n_params=1000, n_layer=2, d_model=4, seq_len=5, batch=2) = {got}, expected "
        "64,800: 6 * n_params * tokens + 12 * n_layer * d_model * seq_len * tokens, with "
        "tokens = batch * seq_len")
    for args in [(3_648_000, 2, 384, 128, 8), (123_653_376, 12, 768, 1024, 8)]:
        want = compute.gpt_train_flops(*args[:4], tokens=args[4] * args[3])
        got = f(*args)
        assert got == want, (f"train_flops{args} = {got}, expected {want:,}: is the attention term "
                             "12 * n_layer * d_model * seq_len per token?")


def check_causal_attention(ns: dict) -> None:
    f = require(ns, "causal_attention")
    torch.manual_seed(0)
    for shape in [(2, 3, 64, 16), (1, 2, 17, 8)]:
        q, k, v = (torch.randn(*shape, requires_grad=True) for _ in range(3))
        out = f(q, k, v)
        assert isinstance(out, torch.Tensor) and out.shape == shape, (
            f"causal_attention on {shape} inputs returned "
            f"{getattr(out, 'shape', type(out).__name__)}; expected a tensor of shape {shape}")
        want = _naive_causal(q, k, v)
        err = (out - want).abs().max().item()
        assert err < 1e-4, (f"causal_attention differs from softmax(q k^T / sqrt(d) + causal mask) v "
                            f"by up to {err:.2e} on {shape} inputs: is it causal (a token may not "
                            "attend to later ones) and scaled by 1/sqrt(d_head)?")
        grads = torch.autograd.grad(out.sum(), (q, k, v))
        ref = torch.autograd.grad(want.sum(), (q, k, v))
        assert all((a - b).abs().max() < 1e-3 for a, b in zip(grads, ref)), (
            "causal_attention's gradients differ from the reference: use differentiable torch ops")
    q, k, v = (torch.randn(2, 4, 256, 16, requires_grad=True) for _ in range(3))
    saved = kernels.activation_bytes(lambda: f(q, k, v), inputs=[q, k, v])
    matrix = kernels.attention_matrix_bytes(2, 4, 256)
    assert saved < matrix / 2, (
        f"causal_attention saved {saved / 2**20:.2f} MiB for backward at B=2, H=4, T=256, "
        f"d_head=16; one (B, H, T, T) score matrix is {matrix / 2**20:.2f} MiB. A fused kernel "
        "(torch.nn.functional.scaled_dot_product_attention) saves only the output and one "
        "log-sum-exp per row.")


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run with one intra-op thread (as the lab does), then restore the setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _models(ns: dict) -> tuple:
    slow_cls, fast_cls = require(ns, "SlowGPT"), require(ns, "FastGPT")
    cfg = require(ns, "CFG")
    assert isinstance(fast_cls, type) and issubclass(fast_cls, slow_cls), (
        "FastGPT must subclass SlowGPT (class FastGPT(SlowGPT): ...)")
    torch.manual_seed(0)
    slow = slow_cls(**cfg)
    fast = fast_cls(**cfg)
    missing = fast.load_state_dict(slow.state_dict(), strict=False).missing_keys
    names = {n for n, _ in fast.named_parameters()}
    assert not missing and names == {n for n, _ in slow.named_parameters()}, (
        "FastGPT must keep SlowGPT's parameters (same names and shapes): override methods, "
        f"do not add or rename layers (missing: {missing[:5]})")
    return (slow, torch.optim.AdamW(slow.parameters(), lr=1e-3),
            fast, torch.optim.AdamW(fast.parameters(), lr=1e-3))


def check_same_training(ns: dict) -> None:
    slow_step, fast_step = require(ns, "slow_train_step"), require(ns, "fast_train_step")
    batches = require(ns, "make_batches")(STEPS, seed=1)
    slow, slow_opt, fast, fast_opt = _models(ns)
    with _one_thread():  # yours first: an unanswered question fails without waiting
        got = [float(fast_step(fast, fast_opt, x, y)) for x, y in batches]
        ref = [float(slow_step(slow, slow_opt, x, y)) for x, y in batches]
    assert ref[-1] < ref[0] - 0.3, f"the reference did not train ({ref}): the lab's data or model changed"
    gaps = [abs(a - b) for a, b in zip(ref, got)]
    assert max(gaps) <= LOSS_TOL, (
        f"losses of {STEPS} steps from the same weights: reference {[round(v, 4) for v in ref]}, "
        f"yours {[round(v, 4) for v in got]} (largest gap {max(gaps):.4f} > {LOSS_TOL}). Return "
        "the loss of the batch, run backward, step the optimizer and zero the gradients every "
        "step; keep the weights and the optimizer in fp32 (autocast changes only the forward).")


def check_speedup(ns: dict) -> None:
    slow_step, fast_step = require(ns, "slow_train_step"), require(ns, "fast_train_step")
    x, y = require(ns, "make_batches")(1, seed=2)[0]
    slow, slow_opt, fast, fast_opt = _models(ns)
    fast_step(fast, fast_opt, x, y)  # an unanswered question fails here, before any timing
    s = compute.compare(lambda: slow_step(slow, slow_opt, x, y),
                        lambda: fast_step(fast, fast_opt, x, y),
                        warmup=1, repeat=SPEED_ROUNDS, threads=1)
    assert s.ratio >= MIN_SPEEDUP, (
        f"your step is {s.ratio:.2f}x the reference's speed (median {s.baseline.median_s * 1e3:.0f} "
        f"-> {s.candidate.median_s * 1e3:.0f} ms, pairs {s.low:.2f}-{s.high:.2f}x, one thread, "
        f"interleaved); at least {MIN_SPEEDUP}x is required. Where does the time go? bf16 "
        "autocast for the matmuls, all heads in one fused attention call, one GELU kernel.")


QUESTIONS = {
    "q1_train_flops": check_train_flops,
    "q2_causal_attention": check_causal_attention,
    "q3_same_training": check_same_training,
    "q4_speedup": check_speedup,
}
TIMEOUT_S = {"q1_train_flops": 10, "q2_causal_attention": 20, "q3_same_training": 60,
             "q4_speedup": 90}
