"""perfkit.plan.framework refuses bad arguments with a message naming the argument and what is
allowed, and so do the search's framework arguments. Each case is (id, call, exception, regex
on the message)."""

import importlib

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit.plan import (
    MEGATRON_LM_2021,
    Framework,
    Layout,
    enumerate_layouts,
    framework_problems,
    megatron_runs,
    plan,
    recipe_words,
)

module = importlib.import_module("perfkit.plan.framework")
RUN = megatron_runs()[0]

CASES = [
    ("Framework int name", lambda: Framework(1, "src"), TypeError, "name"),
    ("Framework no source", lambda: Framework("x", None), TypeError, "source"),
    ("Framework stage 4", lambda: Framework("x", "s", zero_stages=(0, 4)), ValueError, "zero_stages"),
    ("Framework no stages", lambda: Framework("x", "s", zero_stages=()), ValueError, "zero_stages"),
    ("Framework stages list", lambda: Framework("x", "s", zero_stages=[0]), TypeError, "zero_stages"),
    ("Framework sp int", lambda: Framework("x", "s", sequence_parallel=1), TypeError, "sequence_parallel"),
    ("Framework cp str", lambda: Framework("x", "s", context_parallel="no"), TypeError,
     "context_parallel"),
    ("Framework unknown recompute", lambda: Framework("x", "s", recompute=("some",)), ValueError,
     "recompute"),
    ("Framework no recompute", lambda: Framework("x", "s", recompute=()), ValueError, "recompute"),
    ("Framework uneven int", lambda: Framework("x", "s", uneven_stages=0), TypeError, "uneven_stages"),
    ("Framework recipe name", lambda: Framework("x", "s", recipe="mixed_adam"), TypeError, "recipe"),
    ("Framework negative copy", lambda: Framework("x", "s", grad_copy_bytes=-2.0), ValueError,
     "grad_copy_bytes"),
    ("Framework nan copy", lambda: Framework("x", "s", grad_copy_bytes=float("nan")), ValueError,
     "grad_copy_bytes"),
    ("framework_problems name", lambda: framework_problems("megatron", RUN.model, Layout()),
     TypeError, "framework"),
    ("framework_problems model", lambda: framework_problems(MEGATRON_LM_2021, None, Layout()),
     TypeError, "model"),
    ("framework_problems layout", lambda: framework_problems(MEGATRON_LM_2021, RUN.model, (1, 1)),
     TypeError, "layout"),
    ("enumerate_layouts framework name", lambda: enumerate_layouts(RUN.model, 32, 512, 8,
                                                                   framework="megatron"),
     TypeError, "framework"),
    ("plan framework name", lambda: plan(RUN.model, RUN.cluster, 32, 512, framework="megatron"),
     TypeError, "framework"),
    ("plan recipe beside framework", lambda: plan(RUN.model, RUN.cluster, 32, 512,
                                                  recipe="fp32_adam", framework=MEGATRON_LM_2021),
     ValueError, "recipe"),
    ("plan fixed outside framework", lambda: plan(RUN.model, RUN.cluster, 32, 512, {"sp": True},
                                                  framework=MEGATRON_LM_2021), ValueError,
     "fixed sp=True is not offered by Megatron-LM .*: it has no sequence parallelism"),
    ("recipe_words name", lambda: recipe_words("megatron-lm-2021"), TypeError, "framework"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_a_named_argument(case):
    _, call, exc, msg = case
    with pytest.raises(exc, match=msg):
        call()


def test_cases_are_unique_and_cover_the_module():
    assert duplicate_ids(CASES) == []
    assert uncovered(module, CASES) == []
