"""ZeRO-1, ZeRO-2, ZeRO-3 and DP x TP (2 x 2) killed and restarted under real torchrun
(``--max-restarts``), resumed through ``perfkit.saving.Checkpointer`` with ``TrainState``,
``model_state`` and ``optim_state`` (worker: tests/distributed/_saving_layout_restart_worker.py).

Four ranks train the four layouts side by side, float64, each saved every 2 steps in its own
Checkpointer mode (ZeRO-1 and DP x TP synchronous, ZeRO-2 with the thread executor, ZeRO-3
with the process executor). Rank 1 SIGKILLs itself at the start of step 5 in the first
attempt; torchrun restarts the job and every layout resumes from its last complete
checkpoint (step 4 here; step 2 if the step-4 save was still in flight, which then never
counts). Every loss before and after the kill, the parameters and the optimizer state
(moments, step counters, hyperparameters) equal a run that never stopped, bit for bit.
The test first checks that the run really was killed and resumed from a step above 0: a
run that silently started again from scratch would otherwise pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit import dist

pytestmark = pytest.mark.distributed
WORKER = str(Path(__file__).with_name("_saving_layout_restart_worker.py"))
LAYOUTS = ["zero1", "zero2", "zero3", "dptp"]
MODES = ["sync", "thread", "process", "sync"]
STEPS, KILL_STEP = 6, 5


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    root = tmp_path_factory.mktemp("layout-restart")
    return dist.launch(WORKER, 4, ["--root", root, "--layouts", ",".join(LAYOUTS),
                                   "--modes", ",".join(MODES)], timeout_s=400, max_restarts=2,
                       env={"PYTHONWARNINGS": "error::DeprecationWarning,error::FutureWarning"})


@pytest.mark.parametrize("layout", LAYOUTS)
def test_killed_and_restarted_layout_equals_the_run_that_never_stopped(restarted, layout):
    for rank, res in enumerate(restarted):
        r = res[layout]
        assert r["attempt"] == 1 and r["attempts"] == [0, 1], (rank, r)  # killed once
        assert 0 < r["start"] <= KILL_STEP, (rank, r)  # resumed from a checkpoint
        assert r["steps"] == list(range(STEPS)), (rank, r)
        assert r["losses_differ"] == [], (rank, r["losses_differ"])
        assert r["tensors"] > 20 and r["state_differs"] == [], (rank, r["state_differs"])
