"""perfkit.saving.experiments and restart_experiments: notebook 14's drivers on tiny sizes.

A save's record per mode, a save killed before its rename (in a forked child) and a damaged
file named by verify, the goodput curve against the interval module, differing bits counted
bit by bit, and the restart comparison and cost split on planted run directories (the real
torchrun restart runs in tests/distributed/test_saving_restart.py and notebook 14).
"""

import json
import math

import pytest
import torch

from perfkit.saving import (
    SaveCosts,
    compare_restart,
    copy_beside_limits,
    daly_interval,
    differing_bits,
    goodput,
    goodput_curve,
    killed_save,
    restart_parts,
    restart_timeline,
    save_costs,
    small_state,
    small_step,
    with_fastest_copy,
    young_interval,
)
from perfkit.saving.restart_experiments import PARTS


def test_save_costs_records_each_mode_and_its_models(tmp_path):
    costs = save_costs(tmp_path, copy_bytes_per_s=1e10, rounds=1, n_embd=8, n_layer=1)
    assert set(costs.blocked_s) == {"sync", "thread"}
    assert all(len(v) == 1 and v[0] > 0 for v in costs.blocked_s.values())
    assert all(len(v) == 1 and v[0] > 0 for v in costs.persist_s.values())
    # the commit (checksums, manifest, rename) is timed apart, inside sync's blocked time
    assert all(len(v) == 1 and v[0] > 0 for v in costs.commit_s.values())
    assert costs.persist_s["sync"][0] + costs.commit_s["sync"][0] <= costs.blocked_s["sync"][0]
    assert costs.state_bytes > 0 and costs.write.fsync
    assert costs.sync_model_s == pytest.approx(costs.state_bytes / costs.write.best_bytes_per_s)
    assert costs.staging_floor_s == pytest.approx(2 * costs.state_bytes / 1e10)  # read + written
    assert not costs.blocked("sync").has_interval  # one round: no interval, and it says so


def test_save_costs_measures_the_copy_rate_at_the_states_size(tmp_path, monkeypatch):
    from perfkit import hw

    sizes = []
    real = hw.measure_copy

    def spy(nbytes, *a, **k):
        sizes.append(nbytes)
        return real(nbytes, *a, **k)

    monkeypatch.setattr(hw, "measure_copy", spy)
    costs = save_costs(tmp_path, rounds=1, n_embd=8, n_layer=1)
    # the state's own size, not the cache's ceiling (a 40 MB state is copied at memory speed)
    assert sizes == [costs.state_bytes]
    assert costs.staging_floor_s == pytest.approx(2 * costs.state_bytes / costs.copy_bytes_per_s)


def test_small_state_is_its_steps_replayed_bit_for_bit():
    m, opt = small_state(0)
    for s in (1, 2, 3):
        small_step(m, opt, s)
    want, want_opt = small_state(3)
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), want.state_dict().values()))
    assert torch.equal(opt.state_dict()["state"][0]["exp_avg"], want_opt.state_dict()["state"][0]["exp_avg"])
    other, _ = small_state(2)  # a step fewer differs: the comparison can fail
    assert not torch.equal(next(other.parameters()), next(want.parameters()))


def test_a_save_killed_before_its_rename_never_becomes_latest(tmp_path):
    k = killed_save(tmp_path / "k")
    assert k.killed_by == 9                       # SIGKILL, not an exit
    assert k.partial_left == ["step_000000002.partial"] and k.complete == [1]
    assert k.latest_step == 1 and k.loaded_step == 1 and k.loaded_exact
    assert k.damaged_file in k.verify_error and "checksum" in k.verify_error
    assert str(tmp_path) not in k.verify_error    # no temp path printed in the notebook


def test_goodput_curve_matches_the_interval_module():
    c = goodput_curve(save_s=2.0, restart_s=30.0, mtbf_s=3600.0, points=400)
    assert c.young_s == young_interval(2.0, 3600.0) and c.daly_s == daly_interval(2.0, 3600.0)
    assert c.tau_s[0] == pytest.approx(1.0) and c.tau_s[-1] == pytest.approx(3600.0)
    assert c.goodput == [goodput(t, 2.0, 30.0, 3600.0) for t in c.tau_s]
    assert c.best_goodput == max(c.goodput)
    # the grid's best lies next to Young's optimum of the same first-order model
    assert abs(math.log(c.best_s / c.young_s)) < 2 * math.log(c.tau_s[1] / c.tau_s[0])


def test_differing_bits_counts_bits_not_values():
    a = torch.tensor([1.0, 0.0, math.nan], dtype=torch.float64)
    assert differing_bits(a, a.clone()) == 0       # the same NaN: equal bits
    b = a.clone()
    b[0] = torch.nextafter(b[0], torch.tensor(2.0, dtype=torch.float64))
    assert differing_bits(a, b) == 1               # one ulp of 1.0: the last mantissa bit
    c = a.clone()
    c[1] = -0.0
    assert differing_bits(a, c) == 1               # the sign bit, though 0.0 == -0.0
    assert differing_bits(torch.zeros(2), torch.zeros(2, dtype=torch.int32)) == 64  # dtype differs


def _events(rank, t0):
    ev = [{"event": "created", "t": t0, "attempt": 0}, {"event": "first_step", "t": t0 + 2, "attempt": 0}]
    if rank == 1:
        ev.append({"event": "kill", "t": t0 + 3, "attempt": 0, "step": 7})
    for name, dt in (("created", 4), ("imported", 6), ("joined", 6.5), ("built", 7.5), ("loaded", 7.75),
                     ("first_step", 8), ("done", 9)):
        ev.append({"event": name, "t": t0 + dt, "attempt": 1, **({"step": 6} if name == "loaded" else {})})
    return ev


def _run(d, planted=None):
    d.mkdir()
    for r in (0, 1):
        state = {"model": {"w": torch.arange(4, dtype=torch.float64)}, "optim": {"state": {0: {"step": 3}}}}
        if planted is not None and r == 1:
            state["model"]["w"][2] = planted
        torch.save(state, d / f"final.rank{r}.pt")
        (d / f"loss.rank{r}.jsonl").write_text("".join(
            json.dumps({"attempt": 0, "step": s, "loss": 1.0 / (s + 1)}) + "\n" for s in range(12)))
        (d / f"events.rank{r}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in _events(r, 100.0)))
    return d


def test_compare_restart_counts_bits_and_splits_the_restart(tmp_path):
    run = compare_restart(_run(tmp_path / "killed"), _run(tmp_path / "whole"))
    assert (run.differing_bits, run.loss_bits, run.first_difference) == (0, 0, "")
    assert run.tensors == 4 and run.steps == 12 and run.kill_step == 7 and run.resumed_from == 6
    assert run.parts == pytest.approx({"rendezvous": 1.0, "start_and_imports": 2.0, "join": 0.5,
                                       "build": 1.0, "load": 0.25, "first_step": 0.25, "total": 5.0})
    assert sum(run.parts[p] for p in PARTS) == pytest.approx(run.parts["total"])
    # the first part runs from the kill to the new worker: named for failure detection too, not
    # "rendezvous" alone, which it overstated
    from perfkit.saving import restart_table
    table = restart_table(run.parts, run.events)
    assert "  detect+rendezvous    1.00 s" in table and "torchrun notices the failure" in table
    assert "\n  rendezvous " not in table
    # a planted one-ulp difference on rank 1 is found and named
    bad = compare_restart(_run(tmp_path / "bad", planted=math.nextafter(2.0, 3.0)), tmp_path / "whole")
    assert bad.differing_bits == 1 and bad.first_difference == "rank 1: model.w"


def test_restart_parts_and_timeline_from_events():
    ev = {r: _events(r, 0.0) for r in (0, 1)}
    assert restart_parts(ev[0], ev[1])["total"] == pytest.approx(5.0)
    spans = restart_timeline(ev)
    assert [s[1] for s in spans if s[0] == 0] == ["training (attempt 0)", *PARTS, "training (resumed)"]
    assert spans[0][2:] == (2.0, 3.0)              # rank 0 trains from its first step to the kill
    assert all(a <= b for _, _, a, b in spans)


def test_restart_table_names_its_rank_and_each_ranks_join():
    """Rank 0's join read 0.00 s beside a figure that drew rank 1 waiting there: the table says
    whose parts it lists and every rank's own join."""
    from perfkit.saving import restart_table

    ev = {0: _events(0, 0.0), 1: _events(1, 0.0)}
    ev[1] = [dict(e, t=e["t"] - 0.15) if e["attempt"] == 1 and e["event"] in ("created", "imported") else e
             for e in ev[1]]
    text = restart_table(restart_parts(ev[0], ev[1]), ev)
    assert text.startswith("restart of rank 0")
    assert "each rank's: rank 0 0.50 s, rank 1 0.65 s" in text
    assert text.splitlines()[-2].split() == ["R", "5.00", "s"]


def test_the_copy_rate_is_set_beside_the_limits_files_copies_with_threads():
    from perfkit.hw import MachineLimits
    from perfkit.hw_sweep import CopyPoint
    from perfkit.saving.storage import WriteBandwidth

    pts = [CopyPoint(2**26, 0.01, 1e10, 26.3e9, 1, "copy"), CopyPoint(2**26, 0.01, 1e10, 34.3e9, 2, "copy"),
           CopyPoint(2**22, 0.01, 1e10, 93.2e9, 1, "copy"), CopyPoint(2**28, 0.01, 1e10, 36.0e9, 2, "add")]
    lim = MachineLimits("cpu", "x", {"float32": 1e11}, 36.0e9, copy_points=pts, cache_bytes_per_s=175e9,
                        sources={"dram": "add of 268,435,456 B buffers on 2 threads",
                                 "cache": "copy of 4,194,304 B buffers on 2 threads"})
    bw = WriteBandwidth("d", "/", "ext4", 2**20, True, (0.001,) * 3)
    costs = SaveCosts(42_700_000, {"sync": [0.1]}, {"sync": [0.08]}, bw, 20.3e9)
    text = copy_beside_limits(costs, lim, 1)
    # the file's DRAM ceiling is its best thread count on 268 MB buffers, not a cache figure
    assert "DRAM ceiling 36 GB/s (add of 268,435,456 B buffers on 2 threads" in text
    assert "in-cache copy 175 GB/s" in text
    assert "on 1 thread, its copy nearest the state's size 26.3 GB/s (67.1 MB buffers)" in text
    assert "The copy here: 20.3 GB/s on 42.7 MB buffers, 1 thread." in text
    # a floor takes the fastest copy seen: notebook 00's 26.3 GB/s beat this run's 20.3 GB/s
    assert text.endswith("The staging floor takes the faster, 26.3 GB/s: a floor holds only at the fastest "
                         "rate seen.")
    assert with_fastest_copy(costs, lim, 1).copy_bytes_per_s == 26.3e9
    assert with_fastest_copy(costs, lim, 1).staging_floor_s < costs.staging_floor_s
    assert "34.3" in copy_beside_limits(costs, lim, 2)
    faster = SaveCosts(42_700_000, {"sync": [0.1]}, {"sync": [0.08]}, bw, 40e9)
    assert with_fastest_copy(faster, lim, 1) is faster    # this run's copy was the faster one
    # 40 GB/s beat the 36 GB/s DRAM ceiling: caches served part of it, and the floor is theirs
    assert "The copy here: 40 GB/s on 42.7 MB buffers, 1 thread. That copy ran faster than the DRAM " \
        "ceiling" in copy_beside_limits(faster, lim, 1)
    assert copy_beside_limits(faster, lim, 1).endswith("a floor for this machine's caches, not for DRAM.")


def test_the_sync_floor_takes_the_fastest_write():
    from perfkit.saving.storage import WriteBandwidth

    # three writes of 1 MB: 1, 2 and 4 ms. The median's rate (500 MB/s) is not a floor's
    bw = WriteBandwidth("d", "/", "ext4", 10**6, True, (0.001, 0.002, 0.004))
    costs = SaveCosts(10**7, {"sync": [0.1]}, {"sync": [0.08]}, bw, 1e10)
    assert bw.bytes_per_s == pytest.approx(5e8) and bw.best_bytes_per_s == pytest.approx(1e9)
    assert costs.sync_model_s == pytest.approx(0.01)
