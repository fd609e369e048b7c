"""Each planted script's top finding names its planted cause; healthy scripts get no
finding above information level (``examples/diagnose``; thresholds in
``perfkit.profiling.Thresholds.for_command``). One run per script, shared by its assertions."""

import pytest
from conftest import EXAMPLES

from perfkit import dist

PLANTED = {"data_bound": "data", "sync_bound": "sync", "optimizer_bound": "optimizer",
           "overhead_bound": "overhead", "data_bound_prefetch": "data"}
HEALTHY = ("healthy_mlp", "healthy_cnn")
WINDOW = ["--skip", "2", "--steps", "8"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, diagnose_cmd):
    out = {}
    for name in (*PLANTED, *HEALTHY):
        out[name] = diagnose_cmd([*WINDOW, EXAMPLES / f"{name}.py"],
                                 tmp_path_factory.mktemp(name))
    return out


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_top_finding_is_the_planted_cause(runs, name):
    run = runs[name]
    assert run.code == 0, run.stderr[-3000:]
    top = run.top()
    assert top is not None and top["kind"] == PLANTED[name], (
        f"{name}: top finding {top and top['kind']!r}, planted {PLANTED[name]!r}; "
        f"shares {run.report['shares']}")
    assert top["severity"] in ("medium", "high")
    # the evidence is this run's number, and Amdahl's bound follows from the share
    assert f"{top['share']:.1%}" in top["evidence"] or PLANTED[name] == "overhead"
    assert top["max_speedup"] == pytest.approx(1 / (1 - top["share"]))
    assert top["notebook"].startswith("notebooks/") and top["fix"]
    assert f"[{top['severity']}] {top['kind']}" in run.stdout  # the terminal report


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_script_has_no_finding_above_info(runs, name):
    run = runs[name]
    assert run.code == 0, run.stderr[-3000:]
    loud = [f for f in run.report["findings"] if f["severity"] != "info"]
    assert not loud, f"{name}: false alarm {loud}; shares {run.report['shares']}"
    assert "none: no cause" in run.stdout or "[info]" in run.stdout


def test_report_numbers_are_consistent(runs):
    rep = runs["healthy_mlp"].report
    assert rep["status"] == "complete" and rep["window_steps"] == 8 and rep["steps_seen"] == 10
    assert sum(rep["shares"].values()) == pytest.approx(1.0, abs=1e-6)
    assert 0 < rep["step_p50_s"] <= rep["step_p95_s"]
    assert rep["throughput"]["batch_size"] == 256  # inferred from the DataLoader's batch
    assert rep["throughput"]["samples_per_s"] == pytest.approx(256 / rep["step_p50_s"])
    assert rep["memory"]["bytes"] > 50 * 2**20
    assert runs["healthy_mlp"].out.joinpath("report.md").read_text().startswith("# perfkit")
    assert runs["healthy_mlp"].out.joinpath("trace.rank0.json").stat().st_size > 1000
    page = runs["healthy_mlp"].out.joinpath("report.html").read_text()
    assert page.count("data:image/png;base64,") == 3  # where the step goes, steps, memory
    for name in ("shares", "steps", "memory"):
        png = runs["healthy_mlp"].out / f"report.{name}.png"
        assert png.read_bytes().startswith(b"\x89PNG")
        assert f"]({png.name})" in runs["healthy_mlp"].out.joinpath("report.md").read_text()
    # the sync-bound script reads 2 values per sample of its 256-sample batch
    assert runs["sync_bound"].report["syncs_per_step"] == pytest.approx(512, abs=2)
    assert runs["healthy_cnn"].report["syncs_per_step"] == pytest.approx(1)
    assert runs["sync_bound"].report["throughput"] is None  # no DataLoader: not guessed


def test_memory_split_is_counted_from_the_optimizers_tensors(runs):
    # healthy_mlp: Linear(256, 1024), Linear(1024, 1024), Linear(1024, 10) under AdamW
    n = 256 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10  # 1,323,018 parameters
    mem = runs["healthy_mlp"].report["memory"]
    assert (mem["params_bytes"], mem["grads_bytes"]) == (4 * n, 4 * n)  # fp32
    assert mem["optimizer_bytes"] == 2 * 4 * n + 6 * 4  # two moments, 6 float32 step counts
    assert mem["optimizers"] == ["AdamW"]
    assert 0 < mem["start_bytes"] < mem["bytes"]
    assert "optimizer state 10.1 MiB" in runs["healthy_mlp"].stdout
    # sync_bound: Linear(64, 128), Linear(128, 10) under plain SGD, which keeps no state
    mem = runs["sync_bound"].report["memory"]
    n = 64 * 128 + 128 + 128 * 10 + 10
    assert (mem["params_bytes"], mem["grads_bytes"], mem["optimizer_bytes"]) == (4 * n, 4 * n, 0)


def test_comm_bound_under_torchrun(tmp_path):
    """2 gloo ranks; DDP with 1 KB buckets: exposed communication tops the report."""
    dist.launch("perfkit", nproc=2, args=["diagnose", "--out", str(tmp_path), *WINDOW,
                                          str(EXAMPLES / "comm_bound.py")], timeout_s=240)
    import json

    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["world_size"] == 2 and [r["rank"] for r in rep["ranks"]] == [0, 1]
    assert rep["findings"][0]["kind"] == "communication", rep["shares"]
    assert rep["shares"]["communication"] > 0.2
    assert (tmp_path / "report.ranks.png").read_bytes().startswith(b"\x89PNG")  # the spread
