"""How right and how cheap ``perfkit diagnose`` is, on the planted scripts of
``examples/diagnose``.

* ``accuracy``: planted scripts whose top finding is the planted cause, over all planted
  (``comm_bound`` runs under torchrun with 2 processes); goal 1.0.
* ``false_alarms``: healthy scripts with a finding above information level; goal 0.
* ``measured``: each script's shares, syncs per step and finding shares: the numbers
  ``perfkit.profiling.Thresholds.for_command()`` is calibrated on.
* ``overhead_ratio``: a step outside the recorded window (optimizer hooks and DataLoader
  timing installed, no profiler) against the same step undiagnosed, in one process,
  interleaved (A, B, A, B; :func:`perfkit.timing.interleaved`), blocks of ``--block``
  steps of a DataLoader-fed MLP. As ``benchmarks/monitor_overhead.py`` argues, load only
  adds time, so the ratio of the fastest blocks is the cost; the median ratio is printed
  beside it. Target <= 0.03. ``hook_cost_us_per_step`` times the optimizer hooks themselves
  (called directly, batched, the minimum) and ``hook_cost_ratio`` divides it by the MLP's
  step: the cross-check that load cannot blur.
* ``window_overhead_ratio``: a step inside the window (torch.profiler with shapes and
  FLOPs, forward/backward markers) against the undiagnosed step, medians over
  alternating rounds; reported, no target: the window is short and left out of nothing
  but itself.

Every diagnosis runs as a user would run it: ``python -m perfkit diagnose`` in a fresh
process with ``OMP_NUM_THREADS=1`` (what torchrun sets). Prints one JSON object.

Run: ``.venv/bin/python benchmarks/diagnose.py [--block 20] [--repeat 15]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from perfkit import dist
from perfkit.profiling import StepRecorder
from perfkit.timing import benchmark, calibrate_number, interleaved

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "diagnose"
PLANTED = {"data_bound": "data", "sync_bound": "sync", "optimizer_bound": "optimizer",
           "overhead_bound": "overhead", "comm_bound": "communication"}
HEALTHY = ("healthy_mlp", "healthy_cnn")
WINDOW = ["--skip", "2", "--steps", "8"]


def diagnose(name: str) -> dict:
    """The report of one example script (comm_bound under torchrun, 2 processes)."""
    with tempfile.TemporaryDirectory() as out:
        args = ["diagnose", "--out", out, *WINDOW, str(EXAMPLES / f"{name}.py")]
        if name == "comm_bound":
            dist.launch("perfkit", nproc=2, args=args, timeout_s=300)
        else:
            env = {**os.environ, "OMP_NUM_THREADS": "1",
                   "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
            subprocess.run([sys.executable, "-m", "perfkit", *args], cwd=ROOT, env=env,
                           capture_output=True, timeout=300, check=True)
        return json.loads((Path(out) / "report.json").read_text())


def workload(block: int):
    """``block`` steps of an MLP fed by a DataLoader (the hooks' usual company)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(64 * block, 128),
                                      torch.randint(0, 10, (64 * block,))), batch_size=64)

    def run() -> None:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    return run


def overheads(block: int, repeat: int, out: str) -> dict:
    run = workload(block)

    def diagnosed() -> None:
        with StepRecorder(skip=10**9, steps=1, out_dir=out):  # hooks on, window never
            run()

    bare, diag = interleaved([run, diagnosed], warmup=2, repeat=repeat)
    ratios = [d / b for b, d in zip(bare.times_s, diag.times_s, strict=True)]
    window, plain = [], []
    for _ in range(max(3, repeat // 5)):
        rec = StepRecorder(skip=0, steps=block, out_dir=out, then="continue")
        with rec:
            run()
        window += rec.step_times_s[rec.window()]
        with StepRecorder(skip=10**9, steps=1, out_dir=out) as base:
            run()
        plain += base.step_times_s[1:]  # the first is measured from the recorder's start
    return {"overhead_ratio": min(diag.times_s) / min(bare.times_s) - 1,
            "overhead_ratio_median": statistics.median(ratios) - 1,
            "step_ms": min(bare.times_s) / block * 1e3,
            "window_overhead_ratio": statistics.median(window) / statistics.median(plain) - 1}


def hook_cost_us(out: str) -> float:
    """What the optimizer hooks add to one step, called directly (pre and post hook of
    one step, outside the window): batched, minimum of 15 repeats."""
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    rec = StepRecorder(skip=10**9, steps=1, out_dir=out)

    def hooks() -> None:
        rec._opt_pre(opt, (), {})
        rec._opt_post(opt, (), {})

    number = calibrate_number(hooks, target_s=0.02)
    m = benchmark(hooks, warmup=1, repeat=15, number=number)
    return min(m.times_s) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block", type=int, default=20, help="steps per timed block")
    ap.add_argument("--repeat", type=int, default=30, help="interleaved blocks of each")
    a = ap.parse_args()
    torch.set_num_threads(1)
    tops, alarms, measured = {}, {}, {}
    for name in (*PLANTED, *HEALTHY):
        rep = diagnose(name)
        att = rep["shares"] | {"syncs_per_step": rep["syncs_per_step"],
                               "host_gap": rep["host_gap_share"],
                               "flops_per_op": rep["flops_per_op"] or 0.0}
        measured[name] = {k: round(v, 3) for k, v in att.items()} | {
            f["kind"]: round(f["share"], 3) for f in rep["findings"]}  # what calibrates
        if name in PLANTED:
            tops[name] = rep["findings"][0]["kind"] if rep["findings"] else None
        else:
            alarms[name] = [f["kind"] for f in rep["findings"] if f["severity"] != "info"]
    with tempfile.TemporaryDirectory() as out:
        cost = overheads(a.block, a.repeat, out)
        cost["hook_cost_us_per_step"] = hook_cost_us(out)
        cost["hook_cost_ratio"] = cost["hook_cost_us_per_step"] * 1e-3 / cost["step_ms"]
    print(json.dumps({
        "accuracy": sum(tops[n] == k for n, k in PLANTED.items()) / len(PLANTED),
        "false_alarms": sum(bool(v) for v in alarms.values()),
        **cost, "top_findings": tops, "healthy_findings": alarms, "measured": measured,
        "config": {"window": WINDOW, "block": a.block, "repeat": a.repeat,
                   "threads": torch.get_num_threads()}}, indent=1))


if __name__ == "__main__":
    main()
