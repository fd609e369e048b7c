"""perfkit.plan.memory_runs and memory_per_gpu's framework terms refuse bad arguments with a
message naming the argument and what is allowed.

Each case is (id, call, exception, regex on the message).
"""

import importlib
import math

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit.plan import Layout, ModelSpec, memory_per_gpu
from perfkit.plan.memory_runs import memory_check, memory_runs

module = importlib.import_module("perfkit.plan.memory_runs")  # the package re-exports a function of that name

NAN, INF = math.nan, math.inf
GPT = ModelSpec("gpt", layers=4, hidden=64, heads=4, ffn=256, vocab=1000, seq=32)
LAY = Layout(dp=2, pp=2, zero=3)

CASES = [
    ("memory_check empty", lambda: memory_check([]), ValueError, "runs"),
    ("memory_check not runs", lambda: memory_check([1]), TypeError, r"runs\[0\]"),
    ("memory_check str", lambda: memory_check("abc"), TypeError, "runs"),
    ("memory_check loss_copies below 1", lambda: memory_check(memory_runs(), 0.5), ValueError,
     "loss_copies"),
    ("memory_check loss_copies nan", lambda: memory_check(memory_runs(), NAN), ValueError, "loss_copies"),
    ("memory_check loss_copies str", lambda: memory_check(memory_runs(), "3"), TypeError, "loss_copies"),
    ("memory_per_gpu loss_copies 0", lambda: memory_per_gpu(GPT, LAY, 4, loss_copies=0), ValueError,
     "loss_copies"),
    ("memory_per_gpu loss_copies inf", lambda: memory_per_gpu(GPT, LAY, 4, loss_copies=INF), ValueError,
     "loss_copies"),
    ("memory_per_gpu unsharded_with_pp int", lambda: memory_per_gpu(GPT, LAY, 4, unsharded_with_pp=1),
     TypeError, "unsharded_with_pp"),
    ("memory_per_gpu unsharded_grad_bytes 0",
     lambda: memory_per_gpu(GPT, LAY, 4, unsharded_with_pp=True, unsharded_grad_bytes=0), ValueError,
     "unsharded_grad_bytes"),
    ("memory_per_gpu unsharded_grad_bytes nan",
     lambda: memory_per_gpu(GPT, LAY, 4, unsharded_grad_bytes=NAN), ValueError, "unsharded_grad_bytes"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_a_named_argument(case):
    _, call, exc, msg = case
    with pytest.raises(exc, match=msg):
        call()


def test_cases_are_unique_and_cover_the_module():
    assert duplicate_ids(CASES) == []
    # memory_runs takes no arguments; MemoryRun and MemoryResult are records perfkit returns
    assert uncovered(module, CASES, {"memory_runs", "MemoryRun", "MemoryResult"}) == []
