"""Bad input to ``perfkit diagnose``: clear messages, the documented exit codes, partial
reports with what was recorded, and no process left behind."""

import re
import time

import psutil
from conftest import SCRIPTS

from perfkit.cli import main


def test_missing_script_and_module_messages(tmp_path, capsys):
    assert main(["diagnose", "--out", str(tmp_path), str(tmp_path / "nope.py")]) == 2
    assert f"no such script: '{tmp_path / 'nope.py'}'" in capsys.readouterr().err
    assert main(["diagnose", "-m", "no_such_module_xyz"]) == 2
    assert "no module named 'no_such_module_xyz'" in capsys.readouterr().err
    assert main(["diagnose"]) == 2
    assert "name a script" in capsys.readouterr().err
    assert main(["diagnose", "--steps", "0", "x.py"]) == 2
    assert "steps must be an int >= 1, got 0" in capsys.readouterr().err


def test_script_that_raises_shows_its_traceback_and_a_partial_report(tmp_path, diagnose_cmd):
    run = diagnose_cmd([SCRIPTS / "raises.py"], tmp_path)  # fails in its 7th step
    assert run.code == 1
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in run.stderr
    assert 'raises.py", line 9' in run.stderr and "runpy" not in run.stderr
    assert "the script raised after 6 of 13 steps" in run.stderr
    assert run.report["status"] == "partial: the script raised after 6 steps"
    assert run.report["steps_seen"] == 6 and run.report["step_p50_s"] > 0


def test_no_optimizer_step_times_out_and_names_step_marker(tmp_path, diagnose_cmd):
    t0 = time.monotonic()
    run = diagnose_cmd(["--timeout", "6", SCRIPTS / "no_step.py", "--long"], tmp_path)
    assert run.code == 124
    assert "no optimizer step in 6 s" in run.stderr and "--step-marker" in run.stderr
    assert run.report["steps_seen"] == 0
    assert time.monotonic() - t0 < 120  # stopped at the timeout, not after 30 s of script


def test_step_marker_makes_steps_of_a_function(tmp_path, diagnose_cmd):
    run = diagnose_cmd(["--step-marker", "no_step_update:update", "--skip", "2", "--steps",
                        "4", SCRIPTS / "no_step.py"], tmp_path)
    assert run.code == 0, run.stderr[-2000:]
    assert run.report["status"] == "complete" and run.report["window_steps"] == 4
    # each step sleeps 10 ms outside PyTorch: the step time shows it
    assert run.report["step_p50_s"] >= 0.010
    bad = diagnose_cmd(["--step-marker", "no_step_update:nope", SCRIPTS / "no_step.py"],
                       tmp_path / "bad")
    assert bad.code == 2 and "has no function 'nope'" in bad.stderr


def test_hang_is_killed_at_the_timeout_with_what_was_recorded(tmp_path, diagnose_cmd):
    run = diagnose_cmd(["--timeout", "10", SCRIPTS / "hang.py"], tmp_path, timeout=180)
    assert run.code == 124, run.stderr[-2000:]
    assert "timed out after 10 s with 4 of 13 steps recorded" in run.stderr
    assert run.report["status"] == "timed out after 4 steps"
    assert run.report["throughput"]["batch_size"] == 4
    pids = [int(p) for p in re.findall(r"\d+", run.stdout.split("worker pids:")[1]
                                       .splitlines()[0])]
    pids.append(int(run.stdout.split("main pid:")[1].split()[0]))
    time.sleep(0.5)
    alive = [p for p in pids if psutil.pid_exists(p)
             and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left running: {alive}"


def test_help_lists_the_options(capsys):
    try:
        main(["diagnose", "--help"])
    except SystemExit as e:
        assert e.code == 0
    out = capsys.readouterr().out
    for opt in ("--skip", "--steps", "--then", "--out", "--timeout", "--step-marker", "-m"):
        assert opt in out, opt
