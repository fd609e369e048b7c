"""Real clients run unchanged under ``perfkit diagnose``: a plain loop (also ``-m`` and
``--then continue``), DDP under torchrun with a slow rank, Hugging Face ``Trainer``, and a
DeepSpeed engine under torchrun."""

import json

import pytest
from conftest import EXAMPLES, SCRIPTS

from perfkit import dist

WINDOW = ["--skip", "2", "--steps", "6"]


def launch(tmp_path, script):
    dist.launch("perfkit", nproc=2, timeout_s=300,
                args=["diagnose", "--out", str(tmp_path), *WINDOW, str(script)])
    return json.loads((tmp_path / "report.json").read_text())


def check_complete(rep, world=1):
    assert rep["status"] == "complete", rep["notes"]
    # one step per optimizer step: a wrapper optimizer (accelerate, DeepSpeed) that steps
    # an inner one must not count twice
    assert rep["steps_seen"] == 8 and rep["window_steps"] == 6
    assert rep["world_size"] == world
    assert sum(rep["shares"].values()) == pytest.approx(1.0, abs=1e-6)


def test_module_run_with_then_continue_lets_the_script_finish(tmp_path, diagnose_cmd):
    run = diagnose_cmd(["--then", "continue", *WINDOW, "-m", "continue_after", "20", "--lr",
                        "1"], tmp_path, env={"PYTHONPATH": f"{SCRIPTS}:{EXAMPLES.parents[1]}"})
    assert run.code == 0, run.stderr[-2000:]
    assert "finished 20 steps, argv ['20', '--lr', '1']" in run.stdout
    assert "Where the step goes" in run.stderr  # the report goes to stderr, not the script's stdout
    check_complete(run.report)


def test_ddp_straggler_is_named(tmp_path):
    rep = launch(tmp_path, EXAMPLES / "ddp_straggler.py")
    check_complete(rep, world=2)
    top = rep["findings"][0]
    assert top["kind"] == "straggler" and "rank 1 is the straggler" in top["evidence"], (
        rep["findings"], rep["ranks"])
    assert rep["ranks"][1]["work_s"] > rep["ranks"][0]["work_s"]


def test_hugging_face_trainer(tmp_path, diagnose_cmd):
    pytest.importorskip("transformers")
    run = diagnose_cmd([*WINDOW, EXAMPLES / "hf_trainer.py"], tmp_path, timeout=300)
    assert run.code == 0, run.stderr[-3000:]
    check_complete(run.report)
    assert run.report["throughput"]["batch_size"] == 8  # Trainer's DataLoader batch
    assert run.report["shares"]["forward"] > 0 and run.report["shares"]["backward"] > 0
    assert isinstance(run.report["mfu"], str) or 0 < run.report["mfu"] < 1


def test_deepspeed_engine_under_torchrun(tmp_path):
    pytest.importorskip("deepspeed")
    rep = launch(tmp_path, EXAMPLES / "deepspeed_engine.py")
    check_complete(rep, world=2)
    assert rep["shares"]["optimizer"] > 0 and rep["shares"]["backward"] > 0
