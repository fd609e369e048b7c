"""benchmarks/torchft_goodput.py's accounting on a planted event log: which uncommitted steps
it puts at a failure (the kill fell in the step or in the gap just before it) and which
elsewhere (a step lost with no failure near it, as a lost healing step would be), the stall
after a kill, the counts, and a verdict that holds one lost step per failure and misses two.
The real run is tests/distributed/test_torchft.py."""

import json
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = runpy.run_path(str(ROOT / "benchmarks" / "torchft_goodput.py"), run_name="torchft_analysis")

STEP, T0 = 0.1, 1000.0


def _write(work: Path, lost_elsewhere: tuple[int, ...]) -> list[dict]:
    """100 survivor steps of 0.1 s; kills inside step 20 and in the gap before step 60, each
    followed by a 1 s stall; steps ``lost_elsewhere`` also uncommitted. Returns the kills."""
    events, t, kills = [{"event": "started", "t": T0 - 5, "pid": 7}], T0, []
    for i in range(100):
        d = 1.0 if i in (21, 61) else STEP  # the survivor waits for the heartbeat timeout
        if i == 60:
            kills.append({"t": t - 0.0005, "pid": 9})  # between step 59's end and step 60
        if i == 20:
            kills.append({"t": t + 0.05, "pid": 8})
        lost = i in (20, 60) or i in lost_elsewhere
        events.append({"event": "step", "t0": t, "t1": t + d, "committed": not lost, "step": i,
                       "participants": 1 if 21 <= i < 40 or 61 <= i < 80 else 2, "pid": 7, "attempt": 0})
        t += d + 0.001
    events.append({"event": "done", "t": t, "step": 100, "pid": 7})
    (work / "group0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    back = [{"event": "step", "t0": T0 + x, "t1": T0 + x + STEP, "committed": True, "pid": 10}
            for x in (6.0, 10.0)]
    (work / "group1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in back))
    return kills


def test_lost_steps_are_put_at_the_failures_and_the_model_holds(tmp_path):
    kills = _write(tmp_path, ())
    r = BENCH["analyse"](tmp_path, kills, STEP)
    assert (r["attempted"], r["committed"], r["failures"]) == (100, 98, 2)
    assert (r["lost_at_kill"], r["lost_elsewhere"]) == (2, 0)
    assert r["lost_steps_per_failure"] == 1.0
    assert r["step_s_median"] == pytest.approx(STEP)
    assert r["stall_after_kill_s"] == pytest.approx(1.0 - STEP)
    back = [T0 + 6.1 - kills[0]["t"], T0 + 10.1 - kills[1]["t"]]  # group 1's first commit after each
    assert r["rejoins"] == 2 and r["restart_s"] == pytest.approx(sum(back) / 2)
    assert r["model"] == pytest.approx(1 - STEP / r["failure_interval_s"])
    assert r["verdict"] == "held", r["verdict_text"]


def test_a_step_lost_away_from_a_failure_is_counted_elsewhere_and_misses(tmp_path):
    kills = _write(tmp_path, (30, 85))  # two more, no kill near either: two per failure
    r = BENCH["analyse"](tmp_path, kills, STEP)
    assert (r["lost_at_kill"], r["lost_elsewhere"]) == (2, 2)
    # step i starts after i steps of 0.1 s, the gaps of 1 ms, and 0.9 s of stall per kill before it
    assert r["lost_elsewhere_t"] == pytest.approx([30 * STEP + 0.9 + 0.030, 85 * STEP + 1.8 + 0.085])
    assert r["lost_steps_per_failure"] == 2.0
    assert r["verdict"] == "missed" and "above" in r["verdict_text"], r["verdict_text"]
    assert "lost_elsewhere" in r["verdict_text"]


def test_no_failure_no_verdict(tmp_path):
    _write(tmp_path, ())
    r = BENCH["analyse"](tmp_path, [], STEP)
    assert r["failures"] == 0 and r["verdict"] is None and r["failure_interval_s"] is None
