"""perfkit.saving.training_state refuses bad arguments with a TypeError or ValueError naming
the argument. Each case is (id, call, exception, regex)."""

import math

import pytest
import torch
from inputs_cases import duplicate_ids, uncovered

from perfkit.saving import training_state
from perfkit.saving.training_state import ResumableSampler, TrainState, set_rng_state

M = torch.nn.Linear(2, 2)
OPT = torch.optim.SGD(M.parameters(), lr=0.1)

CASES = [
    ("TrainState.model None", lambda: TrainState(None), TypeError,
     r"model must have state_dict\(\) and load_state_dict\(\)"),
    ("TrainState.model tensor", lambda: TrainState(torch.ones(2)), TypeError, "model must have"),
    ("TrainState.optim list", lambda: TrainState(M, [1]), TypeError, "optim must have .*or be None"),
    ("TrainState.optim without module", lambda: TrainState({"a": 1}, OPT), TypeError,
     "model must then be its torch.nn.Module"),
    ("TrainState.scheduler int", lambda: TrainState(M, OPT, scheduler=3), TypeError, "scheduler must have"),
    ("TrainState.scaler str", lambda: TrainState(M, OPT, scaler="x"), TypeError, "scaler must have"),
    ("TrainState.sampler list", lambda: TrainState(M, OPT, sampler=[0, 1]), TypeError, "sampler must have"),
    ("TrainState.step negative", lambda: TrainState(M, OPT, step=-1), ValueError, "step must be an int >= 0"),
    ("TrainState.step float", lambda: TrainState(M, OPT, step=1.0), ValueError, "step"),
    ("TrainState.rank negative", lambda: TrainState(M, OPT, rank=-1), ValueError, "rank must be an int >= 0"),
    ("ResumableSampler.n zero", lambda: ResumableSampler(0, 1), ValueError, "n must be an int >= 1"),
    ("ResumableSampler.n nan", lambda: ResumableSampler(math.nan, 1), ValueError, "n must be"),
    ("ResumableSampler.global_batch zero", lambda: ResumableSampler(8, 0), ValueError,
     r"global_batch must be an int in \[1, 8\]"),
    ("ResumableSampler.global_batch above n", lambda: ResumableSampler(8, 9), ValueError, "global_batch"),
    ("ResumableSampler.global_batch not a multiple", lambda: ResumableSampler(8, 3, 0, 2), ValueError,
     "global_batch must be a multiple of world_size=2"),
    ("ResumableSampler.rank out of range", lambda: ResumableSampler(8, 2, 2, 2), ValueError,
     r"rank must be an int in \[0, 1\]"),
    ("ResumableSampler.world_size zero", lambda: ResumableSampler(8, 2, 0, 0), ValueError,
     "world_size must be an int >= 1"),
    ("ResumableSampler.seed negative", lambda: ResumableSampler(8, 2, seed=-1), ValueError, "seed"),
    ("ResumableSampler.seed str", lambda: ResumableSampler(8, 2, seed="1"), TypeError, "seed"),
    ("ResumableSampler.shuffle int", lambda: ResumableSampler(8, 2, shuffle=1), TypeError,
     "shuffle must be a bool"),
    ("set_rng_state.state None", lambda: set_rng_state(None), TypeError,
     "state must be a dict from get_rng_state"),
    ("set_rng_state.state partial", lambda: set_rng_state({"torch": torch.get_rng_state()}), TypeError,
     "state must be a dict"),
]

NO_ARGUMENTS = {"get_rng_state"}


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    assert not uncovered(training_state, CASES, NO_ARGUMENTS)
