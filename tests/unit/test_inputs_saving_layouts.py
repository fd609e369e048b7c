"""perfkit.saving.layouts refuses bad arguments: a TypeError or ValueError naming the argument
and what is allowed, when the state is built, not inside a DCP save on every rank.

Each case is (id, call, exception, regex on the message).
"""

import pytest
import torch
from inputs_cases import duplicate_ids, uncovered
from torch import nn

from perfkit.parallel import ShardedModule, ZeroOptimizer
from perfkit.saving import ModelState, OptimState, check_loadable, layouts, model_state, optim_state

MODEL = nn.Linear(2, 2)
OTHER = nn.Linear(2, 2)
OPT = torch.optim.SGD(MODEL.parameters(), lr=0.1)
INNER = nn.Sequential(nn.Linear(2, 2))
SHARDED = ShardedModule(INNER)
OPT3 = ZeroOptimizer(SHARDED, torch.optim.SGD, stage=3, lr=0.1)

CASES = [  # (id, call, exception, regex on the message)
    ("model_state.module type", lambda: model_state("model"), TypeError,
     "module must be a Module"),
    ("model_state.module None", lambda: model_state(None), TypeError, "module must be"),
    ("ModelState.module type", lambda: ModelState(torch.ones(2)), TypeError, "module must be"),
    ("ModelState.load_state_dict not a dict", lambda: ModelState(MODEL).load_state_dict([1]),
     TypeError, "model state_dict must be a dict"),
    ("ModelState.load_state_dict missing key", lambda: ModelState(MODEL).load_state_dict(
        {"weight": torch.ones(2, 2)}), ValueError, r"lacks \['bias'\]"),
    ("ModelState.load_state_dict other shape", lambda: ModelState(MODEL).load_state_dict(
        {"weight": torch.ones(3, 2), "bias": torch.ones(2)}), ValueError,
     r"weight: saved shape \(3, 2\), this layout's \(2, 2\)"),
    ("optim_state.optimizer type", lambda: optim_state(MODEL, MODEL), TypeError,
     "optimizer must be an Optimizer"),
    ("optim_state.module type", lambda: optim_state(OPT, OPT), TypeError,
     "module must be a Module"),
    ("optim_state.module other model", lambda: optim_state(OPT, OTHER), ValueError,
     "module does not hold parameter 0 of param group 0"),
    ("optim_state.module stage 3", lambda: optim_state(OPT3, OTHER), ValueError,
     "module must be the stage-3 optimizer's ShardedModule"),
    ("OptimState.optimizer type", lambda: OptimState(None, MODEL), TypeError, "optimizer must be"),
    ("OptimState.module other model", lambda: OptimState(OPT, OTHER), ValueError,
     "module does not hold parameter"),
    ("OptimState.load_state_dict not a dict", lambda: OptimState(OPT, MODEL).load_state_dict(3),
     TypeError, "optimizer state_dict must be a dict"),
    ("OptimState.load_state_dict no state", lambda: OptimState(OPT, MODEL).load_state_dict(
        {"param_groups": []}), ValueError, r"lacks \['state'\]"),
    ("check_loadable.checkpoint type", lambda: check_loadable(3, {}), TypeError,
     "checkpoint must be a"),
    ("check_loadable.state type", lambda: check_loadable("x", [MODEL]), TypeError,
     "state must be a dict"),
    ("check_loadable.checkpoint no metadata", lambda: check_loadable("/nonexistent/ckpt", {}),
     ValueError, r"checkpoint '/nonexistent/ckpt' holds no DCP metadata"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    missing = uncovered(layouts, CASES)
    assert not missing, f"no bad-input case for {missing}"


def test_stage_3_accepts_the_wrapper_or_the_module_it_wraps():
    assert optim_state(OPT3, SHARDED).kind == optim_state(OPT3, INNER).kind == "zero3"
