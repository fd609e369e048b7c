"""perfkit.saving.preempt refuses bad arguments with a TypeError or ValueError naming the
argument, before it installs a handler or saves. Each case is (id, call, exception, regex).
Also: a SIGTERM sets the flag (one process, no group) and the old handler comes back."""

import os
import signal

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit.saving import preempt
from perfkit.saving.preempt import Preemption

CASES = [
    ("Preemption.signals int", lambda: Preemption(15), TypeError, "signals must be a list or tuple"),
    ("Preemption.signals empty", lambda: Preemption(()), ValueError, "signals must hold at least one"),
    ("Preemption.signals ints", lambda: Preemption((15,)), TypeError, r"signals\[\] must be a Signals"),
    ("Preemption.save_and_exit checkpointer", lambda: Preemption().save_and_exit(None, None), TypeError,
     "checkpointer must be a Checkpointer"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    assert not uncovered(preempt, CASES)


def test_sigterm_sets_the_flag_and_the_old_handler_returns():
    before = signal.getsignal(signal.SIGTERM)
    with Preemption() as pre:
        assert not pre.requested() and pre.received_at is None
        os.kill(os.getpid(), signal.SIGTERM)
        assert pre.requested() and pre.received_at is not None
    assert signal.getsignal(signal.SIGTERM) is before
