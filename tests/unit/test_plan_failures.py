"""perfkit.plan.failures and the ``perfkit plan`` section it prints: Llama 3's failure rate
back to its published counts, the checkpoint's bytes and time, Daly's interval, the goodput,
and the model held against Llama 3's reported effective training time."""

import json
import math

import pytest

from perfkit.cli import main
from perfkit.plan import ModelSpec
from perfkit.plan.failures import (
    DEFAULT_RESTART_S,
    LLAMA3_FAILURES,
    LLAMA3_GPU_FAILURES_PER_YEAR,
    YEAR_S,
    checkpoint_bytes,
    failure_lines,
    failure_plan,
    llama3_check,
)
from perfkit.saving.interval import daly_interval, goodput

SMALL = ["--layers", "8", "--hidden", "1024", "--heads", "16", "--seq", "1024", "--gpu",
         "a100-80gb", "--gpus", "8", "--global-batch-tokens", "256k", "--top", "2"]


def test_llama3s_rate_gives_back_one_failure_every_3_1_hours_on_16k_gpus():
    assert LLAMA3_FAILURES["unexpected_interruptions"] == 419 and "Table 5" in LLAMA3_FAILURES["source"]
    fp = failure_plan(1e12, 16384)
    assert fp.mtbf_s == pytest.approx(54 * 86400 / 419, rel=1e-12)  # 3.09 h
    # a synchronous job stops when any GPU fails: half the GPUs, twice the MTBF
    assert failure_plan(1e12, 8192).mtbf_s == pytest.approx(2 * fp.mtbf_s, rel=1e-12)
    assert LLAMA3_GPU_FAILURES_PER_YEAR == pytest.approx(0.173, abs=5e-4)


def test_checkpoint_bytes_are_weights_and_optimizer_state_once():
    m = ModelSpec("m", layers=2, hidden=64, heads=4, ffn=256, vocab=100, seq=32)
    assert checkpoint_bytes(m) == m.num_params * 14          # bf16 weights + fp32 master, m, v
    assert checkpoint_bytes(m, "fp32_adam") == m.num_params * 12  # no gradients saved


def test_save_time_interval_and_goodput_follow_the_models():
    fp = failure_plan(5.67e12, 16384, step_s=10.0, restart_s=600.0,
                      storage_bytes_per_s=2e12, gpu_state_bytes=6e9)
    assert fp.save_s == pytest.approx(2.835)
    assert fp.interval_s == pytest.approx(daly_interval(2.835, fp.mtbf_s))
    assert fp.goodput == pytest.approx(goodput(fp.interval_s, 2.835, 600.0, fp.mtbf_s))
    assert fp.daly_goodput > fp.goodput  # the first-order model is the pessimistic one here
    assert fp.steps_per_save == round(fp.interval_s / 10.0) == 25
    assert fp.as_dict()["steps_per_save"] == 25
    # default storage: Llama 3's 2 TB/s shared by its 16,384 GPUs, per GPU of this job
    assert failure_plan(1.22e9, 10).save_s == pytest.approx(1.22e9 / (2e12 / 16384 * 10))
    assert failure_plan(1e9, 1).steps_per_save is None


def test_llama3_by_the_model_is_above_its_reported_90_percent_for_restarts_under_14_min():
    ll = llama3_check()
    assert ll["restart_s"] == DEFAULT_RESTART_S == 600.0
    assert 0.90 < ll["goodput"] < 0.93 and ll["daly_goodput"] > ll["goodput"]
    assert ll["save_s"] == pytest.approx(405e9 * 14 / 2e12)
    assert ll["max_restart_s"] == pytest.approx(862, abs=2)
    assert llama3_check(ll["max_restart_s"])["goodput"] == pytest.approx(0.90, abs=1e-12)
    assert llama3_check(1200.0)["goodput"] < 0.90


def test_failure_lines_state_each_number(capsys):
    fp = failure_plan(5.67e12, 16384, step_s=10.0, storage_bytes_per_s=2e12)
    text = "\n".join(failure_lines(fp))
    for part in ("checkpoint 5.67 TB", "at 2 TB/s: 2.83 s per save", "one every 3.09 h on 16,384 GPUs",
                 "restart 10 min", "best interval 4.16 min (Daly; Young 4.19 min), every 25 steps",
                 "expected effective training time 92.4%", "reported above 90%", "under 14.4 min"):
        assert part in text, part


def test_perfkit_plan_prints_the_section_for_the_best_layout(capsys):
    assert main(["plan", *SMALL, "--restart-minutes", "5", "--storage-gb-per-s", "10"]) == 0
    out = capsys.readouterr().out
    assert "saving and failures" in out and "restart 5 min" in out and "at 10 GB/s" in out
    assert main(["plan", *SMALL, "--restart-minutes", "5", "--storage-gb-per-s", "10", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    f = rec["failures"]
    assert f["restart_s"] == 300.0 and f["storage_bytes_per_s"] == 10e9 and f["gpus"] == 8
    assert f["step_s"] == rec["best"][0]["step_s"]
    mem = rec["best"][0]["memory_bytes"]
    assert f["gpu_state_bytes"] == pytest.approx(mem["params"] + mem["optimizer"])
    assert f["save_s"] == pytest.approx(f["checkpoint_bytes"] / 10e9)
    assert f"every {f['steps_per_save']} steps" in out


def test_perfkit_plan_help_names_the_failure_flags(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = capsys.readouterr().out
    for flag in ("--storage-gb-per-s", "--gpu-failures-per-year", "--restart-minutes", "419"):
        assert flag in out


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--gpu-failures-per-year", "0", "--gpu-failures-per-year must be a finite number > 0"),
    ("--gpu-failures-per-year", "nan", "--gpu-failures-per-year"),
    ("--storage-gb-per-s", "-1", "--storage-gb-per-s must be a finite number > 0"),
    ("--storage-gb-per-s", "inf", "--storage-gb-per-s"),
    ("--restart-minutes", "-5", "--restart-minutes must be a finite number >= 0"),
])
def test_bad_failure_flags_exit_2_naming_the_flag(flag, value, says, capsys):
    assert main(["plan", *SMALL, flag, value]) == 2
    assert says in capsys.readouterr().err


def test_nothing_fits_prints_no_failure_section(capsys):
    assert main(["plan", "--gpu", "a100-40gb", "--gpus", "1", "--layers", "96", "--hidden", "12288",
                 "--heads", "96", "--seq", "2048"]) == 1
    assert "saving and failures" not in capsys.readouterr().out


def test_a_huge_job_fails_often_and_keeps_little():
    fp = failure_plan(1e15, 10**6, storage_bytes_per_s=1e11)
    assert fp.mtbf_s < fp.save_s and 0.0 <= fp.goodput < 0.1 and math.isfinite(fp.interval_s)


def test_per_step_fault_tolerance_loses_one_step_per_failure_of_the_whole_job():
    """torchft's model at the job's MTBF (planted: one GPU's MTBF, 1/gpus as often, or the
    checkpoint interval in place of the step, fails)."""
    fp = failure_plan(1e12, 1024, step_s=2.0)
    assert fp.per_step_committed == pytest.approx(1 - 2.0 / fp.mtbf_s, rel=1e-12)
    assert fp.mtbf_s == pytest.approx(YEAR_S / (LLAMA3_GPU_FAILURES_PER_YEAR * 1024))
    assert fp.as_dict()["per_step_committed"] == fp.per_step_committed
    assert failure_plan(1e12, 1024).per_step_committed is None
    line = failure_lines(fp)[-1]
    assert "per-step fault tolerance" in line and f"{fp.per_step_committed:.4%}" in line
    assert "torchft" in failure_lines(fp)[-1] and not any(
        "per-step" in x for x in failure_lines(failure_plan(1e12, 1024)))
