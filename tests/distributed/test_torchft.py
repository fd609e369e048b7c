"""torchft's per-step fault tolerance, run for real (``benchmarks/torchft_goodput.py``, QUICK
sized): a lighthouse, two replica groups of one process each under ``torchrun``, and two
SIGKILLs of group 1 at fixed gaps in a 12 s window (``--schedule 1.5,1.5``: 1.5 s after each
start's first committed step), restarted by ``torchrun --max-restarts``.

Checked from the benchmark's JSON and, independently, from the survivor's own event log:
the failures fell in the survivor's window; the survivor committed steps after each one
(it kept training, and never restarted); and its committed steps fall short of its attempted
ones only by the steps the benchmark reports lost, each one in flight at a kill (at least one,
at most one per failure). Not the verdict: whether the share holds is timing, which the
stored run judges.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchft")

pytestmark = pytest.mark.distributed

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_survivor_commits_through_injected_failures_and_loses_only_the_steps_in_flight(tmp_path):
    work = tmp_path / "run"
    env = {**os.environ, "PERFKIT_QUICK": "1"}
    out = subprocess.run([sys.executable, "benchmarks/torchft_goodput.py", "--window-s", "12",
                          "--schedule", "1.5,1.5", "--dir", str(work)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=200)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout)
    # two unless a restart took over eight seconds (a loaded machine): the second kill then
    # falls after the window
    assert res["failures"] >= 1, res["kills_t"]

    ev0 = [json.loads(line) for line in (work / "group0.jsonl").read_text().splitlines()]
    assert [e["event"] for e in ev0].count("started") == 1, "the surviving group restarted"
    steps = [e for e in ev0 if e["event"] == "step"]
    t0 = steps[0]["t0"]
    kills = [t0 + k for k in res["kills_t"]]
    for k in kills:  # training went on after each failure
        after = sum(e["committed"] for e in steps if e["t0"] > k)
        assert after >= 5, f"{after} steps committed after the kill at {k - t0:.1f} s"

    attempted, committed = len(steps), sum(e["committed"] for e in steps)
    assert (res["attempted"], res["committed"]) == (attempted, committed)
    lost = attempted - committed
    assert lost == res["lost_at_kill"] + res["lost_elsewhere"]
    assert res["lost_elsewhere"] == 0, f"steps lost away from a failure at {res['lost_elsewhere_t']} s"
    assert 1 <= res["lost_at_kill"] <= res["failures"]
    # each uncommitted step was in flight (or just starting) when a kill struck
    ends = [t0] + [e["t1"] for e in steps[:-1]]
    for end, e in zip(ends, steps):
        if not e["committed"]:
            assert any(end - 0.01 <= k <= e["t1"] + 0.01 for k in kills), e
    assert res["lost_steps_per_failure"] == pytest.approx(lost / res["failures"])
