"""The capstone's slow script (``examples/slow_train.py``): each ``--fix`` flag changes what
it names and nothing else, bad flags are refused, and it runs under torchrun with 2
processes, also under ``perfkit diagnose``.

Three 2-process jobs, shared by the assertions: the slow script and the script with every
fix that leaves the arithmetic alone (both under ``perfkit diagnose --then continue``, so
one job gives the diagnosis and the script's own result), and ``--fix all``.
"""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit import dist

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "slow_train.py"
NEUTRAL = "data,sync,ddp,optimizer,attention"  # fixes that must not change the losses
STEPS = 8


def load_script():
    spec = importlib.util.spec_from_file_location("slow_train", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def diagnosed(out: Path, fix: str) -> tuple[dict, dict]:
    """(the diagnosis report, the script's result) of one 2-process job."""
    res = dist.launch("perfkit", nproc=2, timeout_s=400, args=[
        "diagnose", "--out", str(out), "--then", "continue", "--skip", "2", "--steps", "4",
        str(SCRIPT), "--fix", fix, "--steps", str(STEPS), "--max-bytes", "300000"])
    return json.loads((out / "report.json").read_text()), res[0]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    out = {name: diagnosed(tmp_path_factory.mktemp(name), fix)
           for name, fix in (("slow", "none"), ("neutral", NEUTRAL))}
    out["all"] = (None, dist.launch(str(SCRIPT), nproc=2, timeout_s=400, args=[
        "--fix", "all", "--steps", "40", "--target-loss", "6.8", "--min-steps", "3",
        "--max-bytes", "300000"])[0])
    return out


# --- flags, in this process ---------------------------------------------------------------


@pytest.mark.parametrize("argv,message", [
    (["--fix", "data,bogus"], "unknown fix 'bogus'; known fixes: data, sync, ddp"),
    (["--fix", "Data"], "unknown fix 'Data'"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--target-loss", "nan"], "--target-loss must be a finite number > 0"),
    (["--check-every", "-1"], "--check-every must be >= 1"),
    (["--min-steps", "-2"], "--min-steps must be >= 0"),
])
def test_bad_flags_are_refused_before_anything_starts(argv, message):
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_fix_names_resolve():
    st = load_script()
    assert st.parse_fixes("none") == () and st.parse_fixes("") == ()
    assert st.parse_fixes(" sync , data ") == ("data", "sync")  # FIXES order
    cpu_all, cuda_all = st.parse_fixes("all"), st.parse_fixes("all", cuda=True)
    assert set(cuda_all) == set(st.FIXES)
    assert set(cuda_all) - set(cpu_all) == set(st.CUDA_ONLY_IN_ALL) == {"bf16", "compile"}
    assert st.parse_fixes("bf16") == ("bf16",)  # asked for by name, it applies on a CPU too
    with pytest.raises(ValueError, match="unknown fix 'x'"):
        st.parse_fixes("all,x")


# each fix and the settings it may change: exactly these, nothing else
CHANGES = {"data": {"tokenize_in_getitem"}, "sync": {"read_loss_every_step"}, "ddp": {"ddp"},
           "optimizer": {"optimizer"}, "attention": {"attn_implementation"},
           "batch": {"batch_per_rank"}, "bf16": {"autocast_bf16"}, "compile": {"compile"}}


@pytest.mark.parametrize("fix", sorted(CHANGES))
def test_each_fix_changes_only_its_own_settings(fix):
    st = load_script()
    base, fixed = st.settings(()), st.settings((fix,))
    assert {k for k in base if base[k] != fixed[k]} == CHANGES[fix]


def test_every_finding_maps_to_known_fixes():
    st = load_script()
    assert {f for fixes in st.FIX_FOR_FINDING.values() for f in fixes} <= set(st.FIXES)
    assert st.smoothed([4.0, 2.0, 6.0], tokens_per_step=2, window_tokens=4) == [None, 3.0, 4.0]


# --- real jobs: torchrun, 2 processes ------------------------------------------------------


def test_slow_script_runs_and_reports(jobs):
    _, res = jobs["slow"]
    assert res["world_size"] == 2 and res["backend"] in ("gloo", "nccl")
    assert res["steps"] == STEPS == len(res["losses"]) == len(res["step_times_s"])
    assert abs(res["losses"][0] - math.log(1024)) < 0.3  # an untrained model: ~ln(vocab)
    assert res["ranks_agree"] is True  # DDP keeps the replicas bitwise equal
    assert res["tokens_per_s"] == pytest.approx(res["tokens_per_step"] / res["step_p50_s"])
    assert res["built"] == {"tokenize_in_getitem": True, "bucket_cap_bytes": 1048,
                            "find_unused_parameters": True, "foreach": False, "fused": False,
                            "attn_implementation": "eager", "batch_per_rank": 2,
                            "compiled": False}
    # 28 tensors in 1 KB buckets: a bucket closes at the cap, so the small vectors share one; with
    # find_unused_parameters DDP keeps torch's initial layout (parameter order, never rebuilt): 11
    assert res["ddp_buckets"] == 11


def test_the_data_fix_moves_tokenizing_before_the_first_step(jobs):
    slow, fixed = jobs["slow"][1], jobs["neutral"][1]
    # every document tokenized up front: time the steps no longer hold, so a time to the target adds it
    assert fixed["data_prep_s"] > 0.02 and fixed["data_prep_s"] > 5 * slow["data_prep_s"]
    assert fixed["data_prep_s"] < fixed["setup_s"]
    assert fixed["ddp_buckets"] == 1  # DDP's default: the 1 MiB first bucket holds all 663 KiB


def test_neutral_fixes_give_the_same_losses(jobs):
    slow, fixed = jobs["slow"][1], jobs["neutral"][1]
    assert fixed["built"]["tokenize_in_getitem"] is False
    assert fixed["built"]["attn_implementation"] == "sdpa"
    assert fixed["built"]["foreach"] is True and fixed["built"]["find_unused_parameters"] is False
    assert fixed["built"]["bucket_cap_bytes"] == 25 * 2**20
    # the same samples and the same arithmetic: sdpa and foreach round differently (fp32)
    assert fixed["losses"] == pytest.approx(slow["losses"], abs=2e-3)


def test_sync_fix_removes_the_per_step_reads(jobs):
    slow, fixed = jobs["slow"][0], jobs["neutral"][0]
    assert slow["status"] == fixed["status"] == "complete" and slow["world_size"] == 2
    assert slow["syncs_per_step"] >= 8  # a loss read and one gradient norm per parameter (28) a step
    assert fixed["syncs_per_step"] < 1  # read once every --check-every steps
    assert "sync" in {f["kind"] for f in slow["findings"]}
    # tokenizing two 16 KB documents a step against reading two crops of a list
    assert slow["shares"]["data"] > 2 * fixed["shares"]["data"]


def test_fix_all_runs_the_large_batch_to_the_target(jobs):
    res = jobs["all"][1]
    assert res["fixes"] == ["data", "sync", "ddp", "optimizer", "attention", "batch"]
    assert res["built"]["batch_per_rank"] == 8 and res["tokens_per_step"] == 8 * 64 * 2
    # losses are read every 10 steps (the sync fix), so the job stops at the first read
    # after the target; the step that reached it is found afterwards
    k = res["steps_to_target"]
    assert k is not None and 4 <= k <= res["steps"] < 40 and res["steps"] % 10 == 0, res["losses"]
    assert sum(res["losses"][k - 4:k]) / 4 <= 6.8 < sum(res["losses"][k - 5:k - 1]) / 4 or k == 4
    assert res["time_to_target_s"] == pytest.approx(sum(res["step_times_s"][:k]))
