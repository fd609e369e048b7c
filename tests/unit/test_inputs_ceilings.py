"""perfkit.ceilings refuses bad arguments by name, before any ceiling is read or raised.

Each case is (id, call, exception, regex on the message); the regex names the argument.
"""

import math

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit import ceilings, hw
from perfkit.ceilings import Observation, ceiling, observe

LIMITS = hw.MachineLimits("cpu", "test", {"float32": 1e11}, 2e10, threads=2,
                          one_thread_flops={"float32": 6e10})

CASES = [  # (id, call, exception, regex on the message)
    ("ceiling.limits", lambda: ceiling({"float32": 1e11}, "float32"), TypeError, "limits must be"),
    ("ceiling.kind", lambda: ceiling(LIMITS, "int8"), ValueError, "kind must be one of"),
    ("ceiling.kind list", lambda: ceiling(LIMITS, ["dram"]), ValueError, "kind must be one of"),
    ("ceiling.kind unmeasured", lambda: ceiling(LIMITS, "bfloat16"), ValueError,
     "dtype 'bfloat16' was not measured"),
    ("ceiling.threads", lambda: ceiling(LIMITS, "float32", 0), ValueError, "threads must be an int >= 1"),
    ("dram_copy.limits", lambda: ceilings.dram_copy({"dram": 1e10}), TypeError, "limits must be"),
    ("observe.limits", lambda: observe(None, "dram", 1.0, "x", save=False), TypeError, "limits must be"),
    ("observe.kind", lambda: observe(LIMITS, "l2", 1.0, "x", save=False), ValueError, "kind must be one of"),
    ("observe.rate nan", lambda: observe(LIMITS, "dram", math.nan, "x", save=False), ValueError,
     "rate must be a finite number >= 0"),
    ("observe.rate negative", lambda: observe(LIMITS, "dram", -1.0, "x", save=False), ValueError, "rate"),
    ("observe.rate str", lambda: observe(LIMITS, "dram", "1e9", "x", save=False), TypeError, "rate"),
    ("observe.what empty", lambda: observe(LIMITS, "dram", 1.0, " ", save=False), TypeError,
     "what must be a non-empty str"),
    ("observe.what none", lambda: observe(LIMITS, "dram", 1.0, None, save=False), TypeError, "what"),
    ("observe.threads", lambda: observe(LIMITS, "float32", 1.0, "x", threads=-2, save=False), ValueError,
     "threads must be an int >= 1"),
    ("cached_copy_bytes.limits", lambda: ceilings.cached_copy_bytes({"cache": 1e9}), TypeError,
     "limits must be"),
    ("cached_copy_bytes.share", lambda: ceilings.cached_copy_bytes(LIMITS, 0), ValueError, "share must be"),
    ("cached_copy_bytes.share above 1", lambda: ceilings.cached_copy_bytes(LIMITS, 1.5), ValueError, "share"),
    ("observe.save", lambda: observe(LIMITS, "dram", 1.0, "x", save="no"), TypeError, "save must be a bool"),
    ("observe_copy.limits", lambda: ceilings.observe_copy(None, 1.0, "x", 1, save=False), TypeError,
     "limits must be"),
    ("observe_copy.threads", lambda: ceilings.observe_copy(LIMITS, 1.0, "x", 0, save=False), ValueError,
     "threads must be an int >= 1"),
    ("observe_copy.rate", lambda: ceilings.observe_copy(LIMITS, -1.0, "x", 1, save=False), ValueError,
     "rate"),
    ("copy_ratio_floor.limits", lambda: ceilings.copy_ratio_floor({}, 4), TypeError, "limits must be"),
    ("copy_ratio_floor.nbytes", lambda: ceilings.copy_ratio_floor(LIMITS, 0), ValueError,
     "nbytes must be an int >= 1"),
    ("copy_ratio_floor.threads", lambda: ceilings.copy_ratio_floor(LIMITS, 4, threads=0), ValueError,
     "threads must be an int >= 1"),
    ("ceiling_source.limits", lambda: ceilings.ceiling_source({"float32": 1e11}, "float32"), TypeError,
     "limits must be"),
    ("ceiling_note.limits", lambda: ceilings.ceiling_note(None, "float32", 1e10), TypeError,
     "limits must be"),
    ("ceiling_note.rate above the ceiling", lambda: ceilings.ceiling_note(LIMITS, "float32", 2e11),
     ValueError, "rate must be"),
    ("ceiling_note.rate", lambda: ceilings.ceiling_note(LIMITS, "float32", 0.0), ValueError, "rate must be"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert duplicate_ids(CASES) == []


def test_every_public_callable_has_a_case():
    # Observation is the record observe returns
    assert uncovered(ceilings, CASES, {Observation.__name__}) == []
