"""perfkit.saving.experiments and restart_experiments refuse bad arguments with a message
naming the argument and what is allowed.

Each case is (id, call, exception, regex on the message).
"""

import math

import pytest
import torch
from inputs_cases import duplicate_ids, uncovered

from perfkit.hw import MachineLimits
from perfkit.saving import experiments, restart_experiments
from perfkit.saving.experiments import (
    SaveCosts,
    copy_beside_limits,
    goodput_curve,
    killed_save,
    save_costs,
    small_state,
    small_step,
    with_fastest_copy,
)
from perfkit.saving.restart_experiments import (
    compare_restart,
    differing_bits,
    resilient_run,
    restart_parts,
    restart_table,
    restart_timeline,
)
from perfkit.saving.storage import WriteBandwidth

RECORDS = {"SaveCosts", "KilledSave", "GoodputCurve", "RestartRun"}
COSTS = SaveCosts(10**7, {"sync": [0.1]}, {"sync": [0.1]}, WriteBandwidth("d", "/", "ext4", 1, True, (1e-3,)),
                  1e10)
LIMITS = MachineLimits("cpu", "x", {"float32": 1e11}, 1e10)

CASES = [
    ("save_costs.root int", lambda: save_costs(3, 1e9), TypeError, "root"),
    ("save_costs.copy_bytes_per_s zero", lambda: save_costs("x", 0.0), ValueError,
     "copy_bytes_per_s must be a finite number > 0"),
    ("save_costs.modes without sync", lambda: save_costs("x", 1e9, modes=("thread",)), ValueError,
     "modes must include 'sync'"),
    ("save_costs.modes unknown", lambda: save_costs("x", 1e9, modes=("sync", "fast")), ValueError, "modes"),
    ("save_costs.modes ints", lambda: save_costs("x", 1e9, modes=(1, 2)), TypeError, "modes"),
    ("save_costs.rounds zero", lambda: save_costs("x", 1e9, rounds=0), ValueError,
     "rounds must be an int >= 1"),
    ("save_costs.n_embd odd", lambda: save_costs("x", 1e9, n_embd=10), ValueError,
     "n_embd must be a multiple of 4"),
    ("save_costs.n_layer zero", lambda: save_costs("x", 1e9, n_layer=0), ValueError, "n_layer"),
    ("small_state.steps negative", lambda: small_state(-1), ValueError, "steps must be an int >= 0"),
    ("small_state.steps float", lambda: small_state(1.5), ValueError, "steps"),
    ("small_step.model None", lambda: small_step(None, *small_state(0)[1:], 1), TypeError, "model"),
    ("small_step.opt module", lambda: small_step(torch.nn.Linear(1, 1), torch.nn.Linear(1, 1), 1), TypeError,
     "opt"),
    ("small_step.step zero", lambda: small_step(*small_state(0), 0), ValueError, "step must be an int >= 1"),
    ("killed_save.root None", lambda: killed_save(None), TypeError, "root"),
    ("killed_save.timeout_s nan", lambda: killed_save("x", math.nan), ValueError, "timeout_s"),
    ("copy_beside_limits.costs dict", lambda: copy_beside_limits({}, LIMITS, 1), TypeError, "costs"),
    ("copy_beside_limits.limits None", lambda: copy_beside_limits(COSTS, None, 1), TypeError, "limits"),
    ("copy_beside_limits.threads zero", lambda: copy_beside_limits(COSTS, LIMITS, 0), ValueError, "threads"),
    ("with_fastest_copy.costs None", lambda: with_fastest_copy(None, LIMITS, 1), TypeError, "costs"),
    ("with_fastest_copy.limits dict", lambda: with_fastest_copy(COSTS, {}, 1), TypeError, "limits"),
    ("with_fastest_copy.threads zero", lambda: with_fastest_copy(COSTS, LIMITS, 0), ValueError, "threads"),
    ("goodput_curve.save_s zero", lambda: goodput_curve(0.0, 1.0, 10.0), ValueError, "save_s"),
    ("goodput_curve.restart_s negative", lambda: goodput_curve(1.0, -1.0, 10.0), ValueError, "restart_s"),
    ("goodput_curve.mtbf_s inf", lambda: goodput_curve(1.0, 1.0, math.inf), ValueError, "mtbf_s"),
    ("goodput_curve.points one", lambda: goodput_curve(1.0, 1.0, 10.0, points=1), ValueError, "points"),
    ("differing_bits.a list", lambda: differing_bits([1.0], torch.ones(1)), TypeError, "a must be"),
    ("differing_bits.b None", lambda: differing_bits(torch.ones(1), None), TypeError, "b must be"),
    ("restart_parts.events dict", lambda: restart_parts({}, []), TypeError, "events"),
    ("restart_parts.no kill", lambda: restart_parts([{"event": "created", "t": 1, "attempt": 1}], []),
     ValueError, "kill"),
    ("restart_parts.part missing", lambda: restart_parts([{"event": "created", "t": 1, "attempt": 1}],
                                                         [{"event": "kill", "t": 0}]), ValueError, "lack"),
    ("restart_timeline.events list", lambda: restart_timeline([]), TypeError, "events"),
    ("restart_table.parts list", lambda: restart_table([], {}), TypeError, "parts"),
    ("restart_table.part missing", lambda: restart_table({"total": 1.0}, {}), ValueError, "lack"),
    ("restart_timeline.no kill", lambda: restart_timeline({0: []}), ValueError, "kill"),
    ("resilient_run.script missing", lambda: resilient_run("no_such_script.py", "out"), ValueError,
     "script must be an existing file"),
    ("resilient_run.steps one", lambda: resilient_run(__file__, "out", steps=1), ValueError, "steps"),
    ("resilient_run.kill_step past the end", lambda: resilient_run(__file__, "out", steps=4, kill_step=4),
     ValueError, "kill_step"),
    ("resilient_run.max_restarts zero with a kill",
     lambda: resilient_run(__file__, "out", kill_step=2, max_restarts=0), ValueError, "max_restarts"),
    ("resilient_run.out int", lambda: resilient_run(__file__, 3), TypeError, "out"),
    ("compare_restart.killed int", lambda: compare_restart(1, "x"), TypeError, "killed"),
    ("compare_restart.not a run", lambda: compare_restart("no_such_dir", "x"), ValueError,
     "killed must be the directory of a finished resilient_run"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    assert not uncovered(experiments, CASES, RECORDS)
    assert not uncovered(restart_experiments, CASES, RECORDS)


def test_killed_save_refuses_a_root_with_files(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="root must be an empty or missing directory"):
        killed_save(tmp_path)
