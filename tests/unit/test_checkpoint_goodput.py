"""The injected-failure sweep's bookkeeping (benchmarks/checkpoint_goodput.py) on a job's
events written by hand: the effective training time ratio, the restart cost per failure
(a failure during a restart ends that restart), the full restart, the work lost, the step's
seconds between saves, and a resumed state that skipped a step refused."""

import importlib.util
import json
from pathlib import Path

import pytest

from perfkit.saving.interval import daly_goodput, goodput

_spec = importlib.util.spec_from_file_location(
    "checkpoint_goodput", Path(__file__).parents[2] / "benchmarks" / "checkpoint_goodput.py")
G = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(G)

EVENTS = [
    {"event": "begin", "t": 0.0},
    {"event": "save", "t": 1.0, "step": 10, "blocked_s": 0.1},
    {"event": "save", "t": 2.1, "step": 20, "blocked_s": 0.1},   # 10 steps in 1.0 s
    {"event": "kill", "t": 2.6, "attempt": 0},                   # 0.5 s since the save: lost
    {"event": "started", "t": 3.0, "attempt": 1},
    {"event": "kill", "t": 4.0, "attempt": 1},                   # during the restart: 1.4 s
    {"event": "started", "t": 4.3, "attempt": 2},
    {"event": "resumed", "t": 5.9, "attempt": 2, "step": 20},
    {"event": "first_step", "t": 6.1, "attempt": 2, "step": 21},  # training resumed at 6.0
    {"event": "save", "t": 7.1, "step": 30, "blocked_s": 0.1},
    {"event": "save", "t": 8.2, "step": 40, "blocked_s": 0.1},
    {"event": "done", "t": 10.0, "attempt": 2, "step": 58, "count": 58, "step_s": 0.2},
]


def write(tmp_path, events):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return tmp_path


def test_job_record_worked_by_hand(tmp_path):
    rec = G.job_record(write(tmp_path, EVENTS), 10)
    assert rec["step_s"] == pytest.approx(0.1)           # from the saves, not done's 0.2
    assert rec["tau_s"] == pytest.approx(1.0)
    assert rec["wall_s"] == 10.0 and rec["productive_s"] == pytest.approx(5.8)
    assert rec["measured"] == pytest.approx(0.58)
    assert rec["failures"] == 2 and rec["saves"] == 4 and rec["save_s"] == pytest.approx(0.1)
    assert rec["restart_each_s"] == [1.4, 2.0]             # the first ended by the second
    assert rec["restart_s"] == pytest.approx(1.7) and rec["restart_full_s"] == pytest.approx(2.0)
    assert rec["lost_per_failure_s"] == pytest.approx(0.25)  # 0.5 s, and none in the restart


def test_model_is_evaluated_at_the_jobs_own_numbers(tmp_path):
    rec = G.job_record(write(tmp_path, EVENTS), 10)
    out = G.model(rec, 5.0)
    assert out["model_first_order"] == pytest.approx(goodput(1.0, 0.1, 1.7, 5.0))
    assert out["model_daly"] == pytest.approx(daly_goodput(1.0, 0.1, 2.0, 5.0))
    assert out["diff_first_order_pp"] == pytest.approx(100 * (0.58 - goodput(1.0, 0.1, 1.7, 5.0)))


def test_a_resume_that_skipped_a_step_is_refused(tmp_path):
    bad = [*EVENTS[:-1], {**EVENTS[-1], "count": 57}]
    with pytest.raises(RuntimeError, match="counts 57 steps at step 58"):
        G.job_record(write(tmp_path, bad), 10)


def test_failure_gaps_are_a_poisson_process_of_the_asked_mean():
    gaps = G.failure_gaps(3, 20.0, 4000)
    assert sum(gaps) / len(gaps) == pytest.approx(20.0, rel=0.05)
    assert G.failure_gaps(3, 20.0, 5) == gaps[:5]
