"""perfkit.saving.checkpointer refuses bad arguments with a TypeError or ValueError naming the
argument, before anything is written. Each case is (id, call, exception, regex)."""

import math

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit.saving import checkpointer
from perfkit.saving.checkpointer import Checkpointer


def ck(tmp="/tmp/perfkit-inputs-ckpt"):
    return Checkpointer(tmp)


CASES = [
    ("Checkpointer.root int", lambda: Checkpointer(3), TypeError, "root must be a directory path"),
    ("Checkpointer.root empty", lambda: Checkpointer(""), TypeError, "root"),
    ("Checkpointer.keep zero", lambda: Checkpointer("/tmp/x", keep=0), ValueError,
     "keep must be an int >= 1"),
    ("Checkpointer.keep float", lambda: Checkpointer("/tmp/x", keep=2.0), ValueError, "keep"),
    ("Checkpointer.mode", lambda: Checkpointer("/tmp/x", mode="async"), ValueError,
     "mode must be one of 'sync', 'thread', 'process'"),
    ("Checkpointer.mode process without a group", lambda: Checkpointer("/tmp/x", mode="process"),
     ValueError, "mode 'process' needs an initialized process group"),
    ("Checkpointer.timeout_s zero", lambda: Checkpointer("/tmp/x", timeout_s=0), ValueError,
     "timeout_s must be a finite number > 0"),
    ("Checkpointer.timeout_s inf", lambda: Checkpointer("/tmp/x", timeout_s=math.inf), ValueError,
     "timeout_s"),
    ("Checkpointer.save step negative", lambda: ck().save(-1, {}), ValueError, "step must be an int >= 0"),
    ("Checkpointer.save state int", lambda: ck().save(1, 3), TypeError,
     "state must be a TrainState, a Stateful or a dict"),
    ("Checkpointer.load_latest state list", lambda: ck().load_latest([1]), TypeError, "state must be"),
    ("Checkpointer.wait timeout_s negative", lambda: ck().wait(-1.0), ValueError, "timeout_s"),
    ("Checkpointer.wait timeout_s nan", lambda: ck().wait(math.nan), ValueError, "timeout_s"),
]

RECORDS = {"SaveRecord"}


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    assert not uncovered(checkpointer, CASES, RECORDS)
