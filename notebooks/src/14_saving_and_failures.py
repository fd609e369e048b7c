# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 14 · Saving a run and surviving failures
#
# Large runs fail, and often. Llama 3's pre-training met 419 unexpected interruptions in 54
# days on 16,384 GPUs, one every 3.1 hours (Dubey et al. 2024, section 3.3.4), and still
# spent more than 90 % of its time training. What a job keeps after a failure is its last
# **checkpoint**: the whole training state (weights, optimizer state, step, scheduler, every
# rank's random number generators, the position in the data), saved so that a restarted job
# goes on as if nothing had happened. Not activation checkpointing (module 04): here a
# checkpoint is a save to storage.
#
# `perfkit.saving` writes it through `torch.distributed.checkpoint` (DCP): every rank writes
# its own shard, rank 0 writes a manifest with a checksum of every file, and one `rename`
# makes it complete. The questions, each measured here:
#
# 1. what a save costs, and how much of it blocks training;
# 2. whether a save killed midway can ever become the one a restart loads;
# 3. whether a killed run, restarted by torchrun, goes on bit for bit, and what the restart
#    costs;
# 4. how often to save, and (5) what that gives at Llama 3's scale;
# 6. whether training can go on through a failure without a restart (torchft's way);
# 7. four common claims about checkpoints: "<1 s save time", "fast storage: /dev/shm, /tmp,
#    NVMe", compression by a `.gz` name, and an `elastic_checkpoint_interval`.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
ROUNDS = 5 if QUICK else 9                        # saves per mode (an interval needs 5)
GPT = dict(n_embd=128, n_layer=1) if QUICK else dict(n_embd=256, n_layer=4)  # the tiny GPT's size
MTBF_S = 600.0                                    # mean time between failures (MTBF), section 4's: 10 min
STORE_BYTES = (8 if QUICK else 32) * 2**20        # bytes per file in section 7's write rates
GZIP_BYTES = (2**19 if QUICK else 2**21)           # float32 weights gzipped in section 7 (one core: slow)

# %%
import json
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

import perfkit
from perfkit import hw, models, saving, sizing, stats, viz
from perfkit.plan import failures
from perfkit.verdict import Prediction

ROOT = Path(perfkit.__file__).resolve().parents[1]      # the course's folder (any working dir)
SCRIPT = ROOT / "examples" / "resilient_train.py"
WORK = Path(tempfile.mkdtemp(prefix="perfkit-14-"))     # checkpoints and run logs
THREADS = sizing.timing_threads()                       # the cores other processes leave free
print(f"checkpoints on {saving.filesystem_of(WORK)[1]}; timing on {THREADS} of {sizing.CORES} threads")

# %% [markdown]
# ## 1. What does a save cost, and how much of it blocks training?
#
# **Models.** A **synchronous** save stops training until every byte is on storage: it takes
# at least the state's bytes over the storage's write bandwidth (with `fsync`, as a commit
# needs). An **asynchronous** save (CheckFreq, Mohan et al. FAST 2021; DCP's `async_save`)
# blocks only while it copies the state into CPU memory ("staging"), then writes it in the
# background (the **persist**: writing the state to storage, which a synchronous save does while
# the step waits): it blocks at least for one copy of the state, which moves twice its bytes (read
# and written), at the rate a copy of a buffer of the state's size runs (measured beside the
# saves, on the same threads, the fastest of 5; notebook 00's limits file holds copies of
# other sizes and thread counts, printed beside it, and where its copy nearest that size on
# the same threads ran faster, the floor takes that). Both are floors at the fastest rates
# seen: the fastest of 3 writes, the fastest copy (a faster moment of the same disk gives a
# lower one: section 7 measures it again); serialising, hashing and renaming add to them. On a GPU the staging copy is a
# device-to-host one (over PCIe, or NVLink-C2C, Grace Hopper's CPU-GPU link, into pinned memory): its floor is the state's
# bytes once over that link's bandwidth, not a host memcpy's read and write. A third
# expectation is recorded with the two floors, before any median is printed: the thread mode
# blocks the step for less than the synchronous save does, at most 1x its time (why, beside its
# verdict below).
#
# **Measurement.** The tiny GPT of `perfkit.models` with its AdamW state, saved by
# `perfkit.saving.Checkpointer` in `sync` and `thread` mode in interleaved rounds (one of
# each per round), beside the write bandwidth of the same directory, on the threads the
# machine's load leaves free: DCP stages the state tensor by tensor (one copy per weight and
# per Adam moment), and with more threads than free cores every copy waits at an OpenMP barrier for a thread
# the scheduler has parked (on a busy machine that alone can make the staging take longer
# than the whole synchronous save; `perfkit.sizing.timing_threads` chooses the threads).
# DCP's `process` mode (a separate writer process, which does not share Python's global
# interpreter lock, the GIL, with training: one thread of a process runs Python at a time) needs a
# process group and starts a writer process, more than this notebook's budget: its numbers
# from `benchmarks/checkpoint.py` follow the verdicts below.

# %%
with sizing.pinned_threads(THREADS):
    costs = saving.save_costs(WORK / "costs", rounds=ROUNDS, **GPT)
print(f"state {viz.si(costs.state_bytes, 'B')}; write bandwidth with fsync "
      f"{viz.si(costs.write.bytes_per_s, 'B/s')} (median of {len(costs.write.times_s)} writes; the fastest "
      f"{viz.si(costs.write.best_bytes_per_s, 'B/s')}, {costs.write.fstype}); copy rate at the state's size "
      f"{viz.si(costs.copy_bytes_per_s, 'B/s')} (read + written)")
copy_here = costs.copy_bytes_per_s   # measured beside the saves: one buffer of the state's size copied
if hw.default_limits_path().exists():   # notebook 00's copies: read, not measured again
    limits00 = hw.MachineLimits.from_json(hw.default_limits_path().read_text())
    print(saving.copy_beside_limits(costs, limits00, THREADS))
    costs = saving.with_fastest_copy(costs, limits00, THREADS)
p_sync = Prediction("the synchronous save's blocked time", "state bytes / the fastest write with fsync",
                    low=costs.sync_model_s, unit="s", physical=(0, None))
p_stage = Prediction("the thread-mode save's blocked time",
                     "one staging copy: 2 x bytes / the fastest copy rate seen near the state's size",
                     low=costs.staging_floor_s, unit="s", physical=(0, None))
p_share = Prediction("thread-mode blocked time over sync's, paired by round", "staging < whole save",
                     high=1.0, unit="x", physical=(0, None))   # the expectation below the verdicts on the floors

# %%
for m in costs.blocked_s:
    print(f"  {m:6s}: blocked {costs.blocked(m).text('s')}")
ax = viz.plot_save_costs(costs)
slowest = max(max(costs.blocked_s[m]) / costs.blocked(m).value for m in costs.blocked_s)
print(f"The bars are the medians, the dots the {ROUNDS} single rounds of each mode; the slowest round took "
      f"{slowest:.3f}x its mode's median (the rounds share the machine with its other work).")
dcp_ms, commit_ms = (stats.median(costs.persist_s["sync"]) * 1e3, stats.median(costs.commit_s["sync"]) * 1e3)
viz.verdict(p_sync, costs.blocked("sync"), explain={
    "held": f"The bytes explain {100 * costs.sync_model_s / costs.blocked('sync').value:.2g}% of the save"
            + (", so as a test this floor says little" if costs.sync_model_s < costs.blocked("sync").value / 2 else "")
            + ". Timed apart "
            f"(medians): DCP's save, which plans, serialises and writes the files with fsync, {dcp_ms:.3g} ms "
            f"({dcp_ms / 1e3 / costs.sync_model_s:.2g}x the bytes' time; how it splits between planning and "
            f"writing is not timed); the commit (each file's sha256, the manifest, its fsync and the rename) "
            f"{commit_ms:.3g} ms"})

# %%
viz.verdict(p_stage, costs.blocked("thread"), explain={
    "held": f"The copy accounts for {100 * costs.staging_floor_s / costs.blocked('thread').value:.2g}% of it"
            + (", so as a test this floor says little" if costs.staging_floor_s < costs.blocked("thread").value / 2
               else "")
            + "; the rest is DCP's staging in the caller (the state's state_dict() calls, allocating the CPU buffers, "
            "copying tensor by tensor, starting the writer thread, which then plans and writes), not timed apart here",
    "below": "the staged copy ran faster than a copy of one buffer of the state's size"})

# %% [markdown]
# How much of the synchronous save does the asynchronous one still block? Recorded with the
# floors, before any median was printed: the expectation, not a bound from the floors. The thread
# mode blocks for the staging (`async_save` in torch 2.13 calls the state's `state_dict()`,
# allocates CPU buffers and copies into them in the caller, then plans and writes in the thread
# it starts), the synchronous save for the same `state_dict()` calls, the planning, the bytes
# written and a commit, so the ratio stays below 1x unless the fixed costs of staging outweigh
# the planning and the write.

# %%
share = costs.blocked_over_sync("thread")
viz.verdict(p_share, share, explain={
    "held": f"the write, the checksums and the commit left the step; what stays ({share.point('x')} "
            "of the synchronous save) is DCP's staging: the state_dict() calls and the copy into fresh CPU "
            "buffers, tensor by tensor (the planning moved to the writer thread with the write)",
    "above": f"what the thread mode still does in the caller, DCP's staging (the state_dict() calls, "
             f"allocating the CPU buffers, copying tensor by tensor), took {costs.blocked('thread').value * 1e3:.3g} ms "
             f"against a copy floor of {costs.staging_floor_s * 1e3:.3g} ms, longer at this size than "
             "the write it moves off the step (each save here waits for the last, so no earlier "
             "write ran beside it)",
    "inconclusive": "the rounds' ratios reach both sides of 1x: at this size the two cost "
                    "about the same"})

# %% [markdown]
# **The process executor.** `benchmarks/checkpoint.py` saves a larger state (an MLP of 64 MiB
# of float32 parameters and its AdamW moments) on one rank in each mode, and trains while each
# persist runs; its peak RSS (resident set size: the memory a process holds in RAM) is the
# memory each mode costs. Its stored run, with the command that produced it:

# %%
bench = json.loads((ROOT / "benchmarks" / "stored" / "checkpoint.json").read_text())
acs = bench["result"]["async"]
print(f"{bench['command']}  ({bench['date']}, {bench['cores']} cores; {bench['load']})")
print(f"state {viz.si(acs['state_bytes'], 'B')}; a step {acs['step_s_without_persist']:.3g} s without a persist")
for m in ("sync", "thread", "process"):
    r = acs["modes"][m]
    during = "" if m == "sync" else (f" ({r['blocked_over_sync']:.3g}x sync); a step while the persist ran "
                                     f"{r['step_s_during_persist']:.3g} s "
                                     f"({r['step_s_during_persist'] / acs['step_s_without_persist']:.2g}x)")
    print(f"  {m:7s}: blocked {r['median_blocked_s']:.3g} s{during}; peak RSS {viz.si(r['peak_rss_bytes'], 'B')}")

# %%
th, pr = acs["modes"]["thread"], acs["modes"]["process"]
slower = "process" if pr["step_s_during_persist"] > th["step_s_during_persist"] else "thread"
print(f"In that run the {'process' if pr['median_blocked_s'] < th['median_blocked_s'] else 'thread'} "
      f"executor blocked the step less, and the {slower} executor slowed the steps that overlapped a "
      f"persist more (process {pr['step_s_during_persist']:.3g} s, thread {th['step_s_during_persist']:.3g} s "
      "a step); "
      f"the process executor's peak memory was {pr['peak_rss_bytes'] / th['peak_rss_bytes']:.2g}x the "
      f"thread's. On {bench['cores']} busy cores a writer process takes a core from the step as a thread "
      "does: what it removes is the GIL, which matters where a free core waits for it.")

# %% [markdown]
# ## 2. Is a checkpoint atomic?
#
# A checkpoint counts once every rank's files **and** the manifest are complete: the files
# are written under a `.partial` name, the manifest (each file's sha256 and size) is written
# and fsynced, and one `os.rename` gives the directory its final name; only then does
# `latest` move. By that construction, a kill anywhere before the rename leaves a `.partial`
# directory that nothing loads; the run below tests one such point. A rename is atomic against
# a kill, not yet durable: after a power loss the directory may still hold the old name unless
# the directory itself reached the disk, so `perfkit.saving.commit` fsyncs the parent directory
# after the rename, before `latest` moves, and again after (where the platform can open a
# directory: not on Windows). The run below kills a process; it cannot cut the power.
#
# **Prediction.** A child process commits step 1, then is SIGKILLed inside the save of step
# 2, after its shard files and before the manifest: the latest checkpoint stays step 1, and
# it loads bit for bit. One bit flipped in one of its files is named by `verify`.
#
# Meanwhile the uninterrupted run that section 3 compares against starts in the background.

# %%
pool = ThreadPoolExecutor(max_workers=1)
whole = pool.submit(saving.resilient_run, SCRIPT, WORK / "whole")

# %%
p_atomic = Prediction("the step the latest checkpoint loads after the kill", "the rename commits",
                      value=1, rel_tol=0.0, physical=(0, None))
killed = saving.killed_save(WORK / "kill")
print(f"child ended by signal {killed.killed_by} (SIGKILL = 9); left behind: {killed.partial_left}")
print(f"complete checkpoints {killed.complete}; latest loads step {killed.loaded_step}, "
      f"bit for bit: {killed.loaded_exact}")
print(f"one bit flipped in {killed.damaged_file}; verify says:\n  {killed.verify_error}")

# %%
viz.verdict(p_atomic, float(killed.loaded_step if killed.loaded_exact else -1), explain={
    "held": "the killed save left only a .partial directory; the last complete one loaded exactly"})

# %% [markdown]
# ## 3. Does a killed run resume bit for bit?
#
# `examples/resilient_train.py` trains a small float64 model with torch DDP on 2 processes
# under real `torchrun --max-restarts 3` (`perfkit.dist.launch(max_restarts=3)`), saving
# every 3 steps. At the start of step 7, rank 1 SIGKILLs itself. torchrun stops rank 0,
# starts both again after a **rendezvous** (torchrun's agents agreeing on the ranks of the new run), and each loads the last complete checkpoint (step 6) with its RNG
# states and data position.
#
# **Prediction.** Every final tensor (parameters and AdamW state, both ranks) and every
# step's loss equal those of the same run without a kill: **0 differing bits**. The
# restart cost R, from the kill to the end of the first resumed step, is mostly starting
# processes and importing torch: the state to load is a few kB. On a GPU, bit for bit also
# needs deterministic kernels (`torch.use_deterministic_algorithms(True)` with cuBLAS's
# `CUBLAS_WORKSPACE_CONFIG`) and the same world size, with NCCL's configuration held fixed on
# the same hardware (its reduction order follows the algorithm, protocol, channel count and the
# topology's ring or tree order; NCCL promises equal bits only for the same configuration on the
# same topology); this float64 CPU run on gloo needs none of that.

# %%
p_bits = Prediction("differing bits, killed-and-restarted run against the uninterrupted one",
                    "deterministic ops, same data order, every RNG state saved", high=0,
                    physical=(0, None))
p_r = Prediction("share of R spent restarting processes (detection and rendezvous, start, imports)",
                 "a fresh interpreter imports torch; the state loads in milliseconds",
                 low=0.5, physical=(0, 1))
run = saving.compare_restart(saving.resilient_run(SCRIPT, WORK / "killed", kill_step=7), whole.result())
print(f"killed at step {run.kill_step}, resumed from step {run.resumed_from}; {run.tensors} tensors compared")
print(f"differing bits: {run.differing_bits} in the final state, {run.loss_bits} in {run.steps} steps' losses")

# %%
viz.verdict(p_bits, float(run.differing_bits + run.loss_bits), explain={
    "above": f"the first differing tensor: {run.first_difference}"})

# %%
R = run.parts["total"]
print(saving.restart_table(run.parts, run.events))
ax = viz.plot_restart_timeline(saving.restart_timeline(run.events))

# %%
starts = run.parts["start_and_imports"] + run.parts["rendezvous"]
viz.verdict(p_r, starts / R, explain={
    "below": f"building the model and DDP took {run.parts['build']:.2f} s and load "
             f"{run.parts['load']:.2f} s"})
swept = json.loads((ROOT / "benchmarks" / "stored" / "checkpoint_goodput.json").read_text())  # section 4's
each_r = [x for pt in swept["result"]["points"] for x in pt["restart_each_s"]]   # s, every restart it timed
print(f"R here is one timed restart, so neither it nor the share has an interval. The stored sweep of section 4 "
      f"timed {len(each_r)} restarts of its own torchrun jobs on the machine that stored it: {min(each_r):.3g} to "
      f"{max(each_r):.3g} s (median {stats.median(each_r):.3g} s), against this one's {R:.3g} s; it does not "
      "split them into parts, so how the share moves from restart to restart is not measured.")

# %% [markdown]
# ## 4. How often should one save?
#
# A run that saves every `τ` seconds of training, spends `δ` per save, fails as a Poisson
# process with mean time between failures (MTBF) `M` and takes `R` to come back loses `δ/τ` to saves, `R/M` to restarts
# and half an interval of work per failure, `τ/(2M)` (half of `τ + δ` counts the save's own
# time too, a difference that stays small while `δ ≪ τ`). What is left is the **goodput**, the
# share of wall time spent on training that is kept:
#
# `goodput = 1 - δ/τ - (τ/2 + R)/M`, best at Young's `τ = √(2δM)` (Young 1974).
#
# Daly (2006) wrote the expected wall time exactly (failures during saves and restarts too)
# and refined the optimum: `τ = √(2δM)(1 + ⅓√(δ/2M) + δ/18M) - δ` (`perfkit.saving.interval`).
# Here with this machine's `δ` (the synchronous save of section 1) and `R` (section 3: one
# timed restart, so a single sample with no interval), and a failure every 10 minutes. An
# asynchronous save's `δ` is what it blocks plus the slowdown of the steps that run beside its
# persist; a failure during a persist also loses that checkpoint.

# %%
delta = costs.blocked("sync").value
curve = saving.goodput_curve(delta, R, MTBF_S)
print(f"δ = {delta:.3g} s, R = {R:.3g} s, M = {MTBF_S:.0f} s: Young {curve.young_s:.3g} s, "
      f"Daly {curve.daly_s:.3g} s, the first-order model's best on the grid {curve.best_s:.3g} s "
      f"({curve.best_goodput:.1%})")
ax = viz.plot_goodput(curve)

# %%
d_async = costs.blocked("thread").value
r_lo, r_hi = min(R, *each_r), max(R, *each_r)   # this restart and the stored sweep's
print(f"R sets what a failure costs, not the interval (neither Young's nor Daly's depends on it): over the "
      f"restarts timed here and in the stored sweep, {r_lo:.3g} to {r_hi:.3g} s, the first-order goodput at "
      f"Daly's interval runs from {saving.goodput(curve.daly_s, delta, r_hi, MTBF_S):.1%} to "
      f"{saving.goodput(curve.daly_s, delta, r_lo, MTBF_S):.1%}.")
per_save, lost, ratio = saving.async_save_cost_of_run(acs)   # section 1's stored run; ratio: over its sync save
print(f"Section 1's stored run: a thread-mode save blocked {th['median_blocked_s']:.3g} s, and the {per_save:.2g} "
      f"steps beside each persist took {th['step_s_during_persist']:.3g} s instead of "
      f"{acs['step_s_without_persist']:.3g} s: {lost:.3g} s of training per save, {ratio:.2g}x its synchronous save"
      + (" (the slowed steps cost more than the blocking it spared)" if ratio > 1 else "")
      + ". It trained on the CPU cores the persist used; a GPU step shares only the host's cores with it.")
print("δ, the save's cost to training, and Daly's interval at it:")
for what, d in (("synchronous save, measured here", delta), ("thread mode, its blocked time alone (a floor)", d_async),
                (f"thread mode, the stored run's {ratio:.2g}x sync (assumed)", ratio * delta)):
    print(f"  {what:52s} δ {d:.3g} s, Daly {saving.daly_interval(d, MTBF_S):.3g} s")

# %% [markdown]
# With `δ` this small against `M` the first-order optimum should be as good as the exact one.
# Not a prediction (at this `δ/M` the gap cannot reach a percentage point), but worth seeing:

# %%
at_young = saving.daly_goodput(curve.young_s, delta, R, MTBF_S)
gap = max(at_young, *(saving.daly_goodput(t, delta, R, MTBF_S) for t in curve.tau_s)) - at_young
print(f"δ/M = {delta / MTBF_S:.2g}: Daly's exact share at Young's interval is {at_young:.2%}; "
      + (f"the best interval on the grid does {gap * 100:.2g} percentage points better" if gap > 0
         else "no interval on the grid does better"))

# %% [markdown]
# **Measured points.** `benchmarks/checkpoint_goodput.py` (about 5 minutes, more than this
# notebook's budget) runs real torchrun jobs (2 ranks, `--max-restarts`), injects failures
# as a Poisson process with the MTBF scaled to seconds, and measures the effective training
# time at intervals of 1/4 to 4 times Daly's, in steps of 2x (the intervals printed below are those measured in the jobs, a little off the grid's), every job meeting the same
# failures. The grid is fixed before the sweep, from a short calibration run's `δ` and `R`;
# the jobs' own `δ`, `R` and MTBF (pooled) then give the Daly interval the result is judged
# against, so the grid need not be centred on it. **Prediction:** the interval with the
# highest measured goodput lies within one grid step of Daly's for the pooled `δ` and MTBF
# (0.5x to 2x). Its stored run, drawn over the model at the jobs' pooled `δ`, `R` and
# realised MTBF:

# %%
sw, pooled = swept["result"], swept["result"]["pooled"]   # read in section 3
p_sweep = Prediction("the best measured interval over Daly's", "Daly's interval from the failure rate",
                     low=0.5, high=2.0, unit="x", physical=(0, None), measured_here=False)
print(f"{swept['command']}  ({swept['date']}, {swept['cores']} cores; {swept['load']})")
if sw["daly_s"] is None:  # the jobs met too few failures for the sweep to say anything
    print(f"{pooled['failures']} failures in all: too few to judge; run it again with another --seed")
else:
    cal = sw["calibration"]
    grid = [pt["tau_s"] / sw["daly_s"] for pt in sw["points"]]
    print(f"grid from the calibration (δ {cal['save_s']:.3g} s, R {cal['restart_s']:.3g} s: Daly "
          f"{cal['daly_s']:.3g} s); it spans {min(grid):.2g}x to {max(grid):.2g}x of the pooled Daly below")
    times = sw["points"][0]["failures"]   # failure times: every job meets the same ones
    print(f"δ {pooled['save_s']:.3g} s, R {pooled['restart_s']:.3g} s, realised MTBF "
          f"{pooled['mtbf_realised_s']:.3g} s ({times} failure times, met by each of the {len(sw['points'])} "
          f"jobs: {pooled['failures']} failures, not independent): Daly {sw['daly_s']:.3g} s; measured "
          + ", ".join(f"{pt['measured']:.1%} at {pt['tau_s']:.3g} s" for pt in sw["points"]))
    m_lo, m_hi = saving.mtbf_interval(sw["config"]["window_s"], times)
    d_lo, d_hi = (saving.daly_interval(pooled["save_s"], m) for m in (m_lo, m_hi))
    print(f"{times} failures in {sw['config']['window_s']:.0f} s put the MTBF between {m_lo:.3g} and {m_hi:.3g} s "
          f"(the exact Poisson 90 % interval), and with it Daly's interval between {d_lo:.3g} and {d_hi:.3g} s, "
          f"{d_lo / sw['daly_s']:.2g}x to {d_hi / sw['daly_s']:.2g}x the one judged against.")
    ax = viz.plot_goodput(saving.goodput_curve(pooled["save_s"], pooled["restart_s"], pooled["mtbf_realised_s"]),
                          measured=[(pt["tau_s"], pt["measured"]) for pt in sw["points"]])
    worst = sw["max_abs_diff_pp"]
    kept = sw["targets"].get("within_5pp_daly")
    d, r, m = pooled["save_s"], pooled["restart_s"], pooled["mtbf_realised_s"]
    drawn = max(abs(pt["measured"] - saving.goodput(pt["tau_s"], d, r, m)) for pt in sw["points"])
    print(f"Each point is one job of {sw['config']['window_s']:.0f} s meeting {sw['points'][0]['failures']} "
          f"failures, the same failure times in every job: its goodput has no interval. The curve drawn is the "
          f"first-order model at the pooled δ, R and MTBF: its largest gap to a point is {100 * drawn:.2g} pp "
          "(percentage points of goodput). "
          "Held against each job's own model (its own δ, R and realised MTBF; R varied from job to job by "
          f"{max(pt['restart_s'] for pt in sw['points']) - min(pt['restart_s'] for pt in sw['points']):.2g} s) "
          "the points are " + ("within" if kept else "not within") + " 5 percentage points: the largest gap is "
          f"{worst['daly']:.2g} pp by Daly's model and {worst['first_order']:.2g} pp by the first-order one. "
          "What is judged below is only where the best point lies.")
    first, second = sorted(sw["points"], key=lambda pt: -pt["measured"])[:2]
    near = [0.5 <= pt["tau_s"] / sw["daly_s"] <= 2.0 for pt in (first, second)]
    inside = sum(0.5 <= g <= 2.0 for g in grid)
    print(f"{inside} of the {len(grid)} intervals measured lie within 0.5x to 2x of Daly's: a best point that "
          f"fell at random among them would pass {inside} times in {len(grid)} ({inside / len(grid):.0%}), so the "
          "verdict below tells little apart.")
    print(f"The best point ({first['measured']:.1%} at {first['tau_s']:.3g} s) beats the next "
          f"({second['measured']:.1%} at {second['tau_s']:.3g} s) by "
          f"{100 * (first['measured'] - second['measured']):.2g} pp, one job each: "
          + ("both lie within one grid step of Daly's interval, so the verdict does not hinge on that margin"
             if all(near) else "only one of them lies within one grid step of Daly's interval, so the "
             "verdict hinges on that margin between two single jobs"))

# %%
if sw["daly_s"] is not None:
    viz.verdict(p_sweep, sw["best_measured_s"] / sw["daly_s"])

# %% [markdown]
# ## 5. At scale: Llama 3 405B
#
# `perfkit.plan.failures` applies the same model to a planned run. For Llama 3 405B: 405e9
# parameters, 14 bytes each saved (an assumption: bf16 weights, an fp32 master copy and Adam's
# two moments; the paper gives its storage's rate and its failures, not its checkpoint's
# layout, which could leave out the bf16 copy, 12 bytes, or hold more), on 16,384 GPUs failing
# at Llama 3's own rate, written at its storage's 2 TB/s, with a 10-minute restart (an
# assumption too; Llama 3 does not publish one). Nothing here is measured,
# and no verdict follows: it shows what Young's and Daly's interval give at Llama 3's
# published failure rate. What the published "above 90 %" does say through the model is the
# longest restart it allows.

# %%
ll = failures.llama3_check()
print(f"save {ll['save_s']:.3g} s, MTBF {ll['mtbf_s'] / 3600:.3g} h, Daly's interval "
      f"{ll['interval_s'] / 60:.3g} min; effective training {ll['goodput']:.1%} "
      f"(Daly's exact {ll['daly_goodput']:.1%}) with the {ll['restart_s'] / 60:.3g}-minute restart assumed. "
      f"Llama 3's reported effective training time above {ll['reported']:.0%} fits the model, at the assumed "
      f"{ll['save_s']:.3g} s save, only with restarts under {ll['max_restart_s'] / 60:.3g} min; a save that blocks "
      f"nothing would allow up to {(1 - ll['reported']) * ll['mtbf_s'] / 60:.3g} min (restarts not published; the "
      "model counts unexpected interruptions only, so each bound is necessary under its save, not sufficient).")
print(failures.LLAMA3_FAILURES["source"])

# %% [markdown]
# The widget redraws the curve for an MTBF, a checkpoint's size, a storage bandwidth and a
# restart cost. It starts at Llama 3 405B's run above (a static page shows that setting): its
# title names Daly's interval and the model's goodput there, the two figures printed above.

# %%
# NBVAL_IGNORE_OUTPUT
spec = viz.goodput_widget(mtbf_h=ll["mtbf_s"] / 3600, checkpoint_gb=failures.LLAMA3_PARAMS * 14 / 1e9,
                          bandwidth_gb_per_s=failures.LLAMA3_STORAGE_BYTES_PER_S / 1e9,
                          restart_min=ll["restart_s"] / 60)
viz.build_widget(spec)

# %% [markdown]
# ## 6. Can training go on through a failure, without a restart?
#
# Checkpoint and restart makes every failure cost the whole job a restart and half an
# interval of work. torchft (PyTorch's fault-tolerance library) keeps the healthy replica
# groups of a data-parallel job training: before each step a lighthouse forms a quorum of the
# live groups, a group whose gradient all-reduce broke when its peer died does not commit that
# step, the next quorum leaves the dead group out, and a restarted group rejoins by copying
# the weights of a live one. **Model** (`saving.per_step_goodput`): a surviving group loses
# the step in flight and no other step (it also waits out the lighthouse's heartbeat timeout
# after each failure: time, not steps, printed below), so the share of its attempted steps that do not commit
# is `step / failure interval`. **Prediction:** that share, within half a step per failure
# (which tells one lost step apart from none and from two).
#
# `benchmarks/torchft_goodput.py` (minutes: too long for this notebook) starts a
# lighthouse and two replica groups of one process each under `torchrun`, kills one group
# with SIGKILL at Poisson times and counts the other group's attempted and committed steps.
# Its stored run, from the machine that stored it (the host is not recorded; its cores and load are):

# %%
ft = json.loads((ROOT / "benchmarks" / "stored" / "torchft_goodput.json").read_text())
fr = ft["result"]
ft_model = saving.per_step_prediction(fr["step_s_median"], fr["failure_interval_s"])  # before its counts print
p_ft = Prediction(ft_model.what, ft_model.model, value=ft_model.value, rel_tol=ft_model.rel_tol,
                  physical=ft_model.physical, timed=False, measured_here=False)
print(f"{ft['command']}  ({fr['run_s'] / 60:.1f} min; {ft['date']}, {ft['cores']} cores; {ft['load']})")
print(f"{fr['failures']} failures in {fr['wall_s']:.0f} s (one per {fr['failure_interval_s']:.3g} s); "
      f"step {fr['step_s_median']:.3g} s (median), all at the one load the line above gives")
print(f"survivor: {fr['attempted']} steps attempted, {fr['committed']} committed: {fr['uncommitted']} lost, "
      f"{fr['lost_at_kill']} of them in flight at a kill; its committed steps took {fr['time_goodput']:.1%} of its "
      f"wall time")
print(f"after a kill: the survivor's next steps ran {fr['stall_after_kill_s']:.2g} s past the median step (mean; "
      f"the lighthouse's {fr['config']['lighthouse']['heartbeat_timeout_ms'] / 1e3:g} s heartbeat timeout, less "
      f"what had passed: time, not steps); the killed group took {fr['restart_s']:.3g} s to rejoin")
print(saving.whole_job_text(fr, fr["config"]["groups"]))
viz.verdict(p_ft, fr["uncommitted"] / fr["attempted"], explain={
    "above": f"{fr['lost_elsewhere']} step(s) lost away from a kill (a rejoin or a heal)",
    "below": f"{fr['failures'] - fr['lost_at_kill']} kill(s) that cost no step"})

# %% [markdown]
# ## 7. Four claims about checkpoints
#
# Training guides repeat four pieces of advice; the first three are measured here, the
# fourth is computed. Each prediction below is the claim's own figure or a model's, not
# chosen from the numbers (the "<1 s" claims are judged on section 1's saves, printed above).
#
# **"<1 s checkpoint save time."** A claim without a size and a storage says nothing: a save
# takes at least its bytes over the write bandwidth. Judged once, on section 1's synchronous
# save to its directory; the time an asynchronous save blocks the step re-reads section 1's other
# figure against the same 1 s, so it is printed beside it as context, not recorded a second time.
# Both say for what sizes the claim held among the saves this notebook shows (section 1's and the
# stored run's) and at what size it stopped, since a verdict at one small size endorses no other.

# %%
saves = {m: {costs.state_bytes: costs.blocked(m).value, acs["state_bytes"]: acs["modes"][m]["median_blocked_s"]} for m in ("sync", "thread")}
also = {m: f" (judged at this size only; also shown: {saving.one_second_sizes(saves[m], skip=costs.state_bytes)})" for m in saves}
p_1s_sync = Prediction(f"a synchronous save of {viz.si(costs.state_bytes, 'B')} to {costs.write.fstype} "
                       "with fsync" + also["sync"], "the claim at this one size: <1 s checkpoint save time",
                       high=1.0, unit="s", physical=(0, None))
scope = {m: saving.one_second_scope(saves[m], judged=costs.state_bytes, same_as=f"section 1's floor on the {m} mode's blocked time") for m in saves}
big = 8.03e9 * 14                  # Llama 3 8B's training state, 14 bytes per parameter assumed (section 5)
llama_s = (f" Llama 3 8B's state, {viz.si(big, 'B')}, would take {big / costs.write.best_bytes_per_s:.3g} s at the "
           f"fastest of section 1's writes with fsync ({viz.si(costs.write.best_bytes_per_s, 'B/s')}) alone (below).")
viz.verdict(p_1s_sync, costs.blocked("sync"), explain={
    "held": scope["sync"] + llama_s,
    "above": f"the bytes alone take {costs.sync_model_s:.2g} s at {viz.si(costs.write.best_bytes_per_s, 'B/s')}; "
             f"the other {max(0.0, costs.blocked('sync').value - costs.sync_model_s):.2g} s are the save's fixed costs (planning, serialising, checksums, "
             "the commit's fsyncs), stretched by the machine's load. " + scope["sync"] + llama_s})
print(f"Context, not a second verdict on the claim: the time a thread-mode save of the same state blocks the step, "
      f"{costs.blocked('thread').text('s')}, {'under' if costs.blocked('thread').value < 1 else 'not under'} 1 s. "
      + scope["thread"])

# %%
for line in saving.one_second_lines(costs, acs["state_bytes"], {m: acs["modes"][m]["median_blocked_s"]
                                                                for m in ("sync", "thread")}):
    print(line)
sy, bytes_s = acs["modes"]["sync"], acs["state_bytes"] / costs.write.best_bytes_per_s  # s at the fastest write
dcp_s = stats.median(sy["persist_s"])
print(f"The stored synchronous save, {sy['median_blocked_s']:.3g} s for {viz.si(acs['state_bytes'], 'B')}: DCP's "
      f"save (planning, serialising, writing with fsync) took {dcp_s:.3g} s of it (median of {len(sy['persist_s'])}), "
      f"{dcp_s / bytes_s:.2g}x the bytes' {bytes_s:.2g} s at the fastest of section 1's writes, and the commit around "
      f"it the other {sy['median_blocked_s'] - dcp_s:.3g} s; that run shared the cores under the load its first "
      "line names, and times its parts no further.")
w = costs.write   # section 1's writes: their rate varies from write to write (section 7 measures it again)
print(f"Llama 3 8B's state ({viz.si(big, 'B')} at 14 bytes per parameter, assumed as in section 5) at the rates "
      f"section 1's {len(w.times_s)} writes ran here ({viz.si(w.nbytes / max(w.times_s), 'B/s')} to "
      f"{viz.si(w.best_bytes_per_s, 'B/s')}): {big / w.best_bytes_per_s:.3g} to "
      f"{big * max(w.times_s) / w.nbytes:.3g} s from one process.")

# %% [markdown]
# Each model takes the fixed costs measured at this notebook's small state as if they did not
# grow with the state. The stored run, a larger state on another day under its own load (named
# where it was printed), holds each model at another size: where it took longer, the model's
# size for 1 s is not stated. The line through the two saves lets the fixed costs grow, and
# fits no straight line where the two loads differ too much. Spread over `N` writers to storage
# that scales, a save takes `1/N` of one writer's time.

# %% [markdown]
# **"Fast storage: /dev/shm, /tmp, NVMe."** Two different things. *Speed*: a plain `write`
# ends in memory on any filesystem (a disk's page cache, or tmpfs's own pages); `fsync`
# waits until the device holds the data, and tmpfs (`/dev/shm`) has no device, so there it
# returns at once.
# *Durability*: what `write` returned belongs to the kernel, so it survives the writing
# process being killed on every filesystem; tmpfs lives in memory and swap, so it is gone at
# a reboot (the kernel's `Documentation/filesystems/tmpfs.rst`), and a container's own tmpfs
# mount is removed when the container stops (Docker's documentation, "tmpfs mounts"); on a
# disk, data not yet fsynced can be lost in a power failure or kernel crash. *Size*: a
# container's `/dev/shm` is its own tmpfs, 64 MB unless `docker run --shm-size` sets it
# (Docker's `docker run` reference), so a checkpoint larger than that fails there. Of the claim's
# three names only `/dev/shm` is measured by name; the disk is the filesystem of this notebook's temporary checkpoint directory (the
# system's temporary folder, `/tmp` unless `TMPDIR` says otherwise), or the course folder's
# where that is tmpfs: its type is printed, not its device. **Predictions:** on tmpfs a write with fsync takes as
# long as one without (1x ± 25 %); on the disk the checkpoints of this notebook lie on, at
# least as long (fsync adds the device's time).

# %%
DISK = WORK if saving.filesystem_of(WORK)[1] not in ("tmpfs", "ramfs") else ROOT
p_shm = Prediction("shared memory (tmpfs): a write's time with fsync over without, paired by round",
                   "tmpfs has no device to wait for", value=1.0, rel_tol=0.25, unit="x", physical=(0, None))
p_disk = Prediction(f"{saving.filesystem_of(DISK)[1]} disk: a write's time with fsync over without, "
                    "paired by round", "fsync waits for the device", low=1.0, unit="x", physical=(0, None))
with sizing.pinned_threads(THREADS):
    rates = saving.storage_rates(["/dev/shm", DISK], nbytes=STORE_BYTES, rounds=ROUNDS)
for d, name in (("/dev/shm", "shared memory"), (str(DISK), "disk")):
    kept = rates.survives(d)
    print(f"{name} ({rates.fstypes[d]}): {rates.rate(d, False).text('B/s')} without fsync, "
          f"{rates.rate(d, True).text('B/s')} with; by its filesystem's rules (not measured) it survives "
          f"a killed process: {'yes' if kept['killed_process'] else 'no'}, a removed container: "
          f"{'yes' if kept['killed_container'] else 'no'}"
          + (" (if the directory is a mounted volume; a container's own writable layer goes with it)"
             if kept['killed_container'] else "") + f", a reboot: {'yes' if kept['reboot'] else 'no'}")
disk_fsync, first = rates.rate(str(DISK), True), costs.write  # section 1 wrote WORK's filesystem
if saving.filesystem_of(DISK)[0] == saving.filesystem_of(WORK)[0] and disk_fsync.has_interval:
    print(saving.same_disk_rates(first, disk_fsync, rates.nbytes))
shm_plain, disk_plain = rates.rate("/dev/shm", False), rates.rate(str(DISK), False)
print(saving.plain_write_note(rates, "/dev/shm", str(DISK)))
payload = copy_here / 2  # section 1's copy: bytes read plus written, so payload is half
fastest = max(shm_plain.value, disk_plain.value)
print(f"A plain write copies its bytes into the kernel's pages: the faster ran at {fastest / payload:.2g}x the "
      f"payload rate of section 1's copy ({viz.si(payload, 'B/s')}), a reference, not a ceiling (that copy moved one "
      f"{viz.si(costs.state_bytes, 'B')} buffer; these writes {viz.si(rates.nbytes, 'B')} from a reused 16 MiB one).")

# %%
viz.verdict(p_shm, rates.fsync_over_plain("/dev/shm"), explain=dict.fromkeys(("held", "above", "below"), rates.medians_note("/dev/shm") + saving.fsync_scope_note(rates, "/dev/shm", str(DISK))))
viz.verdict(p_disk, rates.fsync_over_plain(str(DISK)), explain={"held": rates.medians_note(str(DISK)),
    "below": "this disk acknowledged fsync as fast as the page cache took the write (a virtual "
             "disk whose host caches it, or a drive with a write cache that does not flush)"})

# %% [markdown]
# **Compression by a `.gz` name.** Notebook 09 showed that the name alone changes nothing:
# `torch.save` writes its zip archive whatever the file is called. Compressing needs
# `gzip.open` (level 9 by Python's default). **Predictions:** on float32 weights gzip keeps at
# least 24/32 of the bytes (for zero-mean weights the sign and the mantissa's 23 bits are
# close to random; only the exponent can shrink), and a gzip save takes longer than a plain
# one, both fsynced (gzip runs on one core at tens of MB/s at most, slower than the write
# bandwidth with fsync that section 1 measured on this disk).

# %%
p_gz = Prediction("a gzip save's file over a plain one's, float32 weights", "24 of 32 bits are random",
                  low=24 / 32, high=1.0, unit="x", physical=(0, None))
p_gz_s = Prediction("a gzip save's time over a plain one's, both fsynced, paired by round",
                    "one core compresses slower than the disk writes", low=1.0, unit="x", physical=(0, None))
torch.manual_seed(0)
weights = [p.detach() for p in models.tiny_gpt2(n_head=4, **GPT).parameters()]   # initialised: normal
with sizing.pinned_threads(THREADS):
    gz = saving.gzip_costs(weights, DISK, max_bytes=GZIP_BYTES, rounds=ROUNDS)
print(f"{viz.si(gz.raw_bytes, 'B')} of {gz.dtype} weights: gzip -{gz.level} keeps {gz.gz_ratio:.1%} of the "
      f"file at {viz.si(gz.gzip_bytes_per_s(), 'B/s')}; a save takes {gz.gz_over_plain().text('x')} the plain one")

# %%
viz.verdict(p_gz, gz.gz_ratio, explain={"below": "these weights hold structure a trained weight lacks"})
viz.verdict(p_gz_s, gz.gz_over_plain())

# %% [markdown]
# **`elastic_checkpoint_interval`.** An elastic job's save interval is not a constant to
# choose once: it is section 4's interval, `√(2δM)` refined by Daly (its best interval judged
# against a measured sweep there), and a job's MTBF `M` falls as 1/N with its N GPUs. Where
# the save time `δ` is set by storage whose bandwidth does not grow with the job, the interval
# scales as 1/√N; where every GPU writes its shard to storage that scales (`δ` falls as 1/N,
# an assumption: no run here measures more than one writer), it scales as 1/N. Either way it
# should be recomputed when the world size changes. What it would be, with Llama 3's storage held at its 2 TB/s:

# %%
half = failures.failure_plan(failures.LLAMA3_PARAMS * 14, failures.LLAMA3_FAILURES["gpus"] // 2,
                             storage_bytes_per_s=failures.LLAMA3_STORAGE_BYTES_PER_S)
print(f"here (δ = {delta:.3g} s, M = {MTBF_S:.0f} s) {curve.daly_s:.3g} s; Llama 3 405B on "
      f"{failures.LLAMA3_FAILURES['gpus']:,} GPUs {ll['interval_s'] / 60:.3g} min, and after an elastic "
      f"shrink to half the GPUs (the MTBF doubled, the save still {half.save_s:.3g} s) {half.interval_s / 60:.3g} min, "
      f"{half.interval_s / ll['interval_s']:.3g}x (√2 = 1.41)")

# %% [markdown]
# ## Summary
#
# * A synchronous save costs at least its bytes over the write bandwidth with fsync; an
#   asynchronous one blocks at least for one copy of the state at the copy rate of its size.
#   The headlines give the share of each measured time its floor explains: where it is small,
#   the floor held as a weak test.
# * The verdicts are fewer tests than their count: the "<1 s" verdict judges section 1's
#   synchronous save again (the blocked time's reading is context), sections 4 and 6 judge stored runs, the atomic commit and the differing bits
#   are exact checks, and a floor or bound (section 1's, the disk's fsync over plain) tests
#   little where the measurement lies far from it. The line above the headlines, and the
#   headlines' first row, count the held verdicts by kind (from how each prediction was built)
#   and say how many of them were tests.
# * An asynchronous save costs training its blocked time plus the slowdown of the steps that
#   run beside its persist, so it is not cheaper than a synchronous one by construction: on
#   busy cores the slowdown can outweigh the blocked time it spares. The stored run's cost per
#   save, against its synchronous save, is in the headlines (section 4 derives it); it trained
#   on the CPU, where the persist competes with the step itself, which a GPU step does not.
# * A checkpoint becomes one with a single rename after its manifest: a kill before that
#   leaves nothing a restart would load, and a damaged file is named by its checksum.
# * With every RNG state and the data position saved, a killed and restarted run can be the
#   same run, bit for bit: section 3 counts the differing bits and splits the restart cost.
# * Save about every `√(2δM)` (Young's interval; Daly's refinement matters for large `δ/M`),
#   recomputed when the world size
#   and with it the MTBF changes; the goodput model then says what a failure rate costs, from
#   two processes here to 16,384 GPUs.
# * Per-step fault tolerance (torchft) trades the restart for a quorum before every step: a
#   surviving replica group loses the step in flight, and waits out the dead one's heartbeat;
#   the job as a whole also loses the killed group's time until it rejoins (section 6 prints
#   both).
# * "<1 s" holds for a size and a storage, not in general: the headlines give each save shown
#   with its side of 1 s, and Llama 3 8B's state at section 1's write rates.
# * `fsync` waits for a device where there is one, and tmpfs has none, so by the kernel's
#   rules (not shown by a timing) its fsync waits for nothing; what this run measured of it,
#   the ratio of fsync over plain with its interval, is in the headlines below. A plain write
#   ends in memory on either, so the name `/dev/shm` promises no speed there: the headlines
#   give tmpfs's plain rate over the disk's. tmpfs keeps nothing across a reboot; gzip on
#   float weights is measured against its time in section 7 (headlines below).

# %%
from perfkit.viz.saving import verdict_kinds

judged = {"sync floor": p_sync, "staging floor": p_stage, "thread/sync": p_share, "atomic commit": p_atomic,
          "differing bits": p_bits, "restart share": p_r, "interval sweep": p_sweep, "torchft share": p_ft,
          "<1 s sync": p_1s_sync, "tmpfs fsync": p_shm, "disk fsync": p_disk,
          "gzip size": p_gz, "gzip time": p_gz_s}
if sw["daly_s"] is None:   # the sweep met too few failures: no verdict on it
    judged.pop("interval sweep")
print(verdict_kinds(judged, again=("<1 s sync",), verdicts=viz.shown_verdicts()))
viz.show_headlines({
    "verdicts": verdict_kinds(judged, again=("<1 s sync",), verdicts=viz.shown_verdicts(),
                              names=False).rstrip("."),
    "sync save": f"{costs.blocked('sync').value:.3g} s ({viz.si(costs.state_bytes, 'B')})",
    "thread save blocks": f"{costs.blocked('thread').value:.3g} s",
    "floors' share of those times (sync: bytes; thread: copy)": f"{100 * costs.sync_model_s / costs.blocked('sync').value:.2g}%; {100 * costs.staging_floor_s / costs.blocked('thread').value:.2g}%",
    "async (thread) save, one stored CPU run under load: training lost per save":
        f"{lost:.3g} s, {ratio:.2g}x its sync save's there (training on {bench['cores']} CPU cores shared with the "
        f"writer; {bench['load']}; a GPU step competes with a persist differently)",
    '"<1 s" claim, sync save': f"{saving.one_second_sizes(saves['sync'])}; Llama 3 8B's state, one writer at "
                               f"section 1's write rates: {big / w.best_bytes_per_s:.3g} to "
                               f"{big * max(w.times_s) / w.nbytes:.3g} s",
    "differing bits after a restart": f"{run.differing_bits + run.loss_bits}",
    "restart cost R": f"{R:.3g} s",
    "Llama 3 405B, modelled": f"{ll['goodput']:.1%} with a {ll['restart_s'] / 60:.3g}-min restart assumed (save every "
                              f"{ll['interval_s'] / 60:.3g} min); above 90 % for restarts under "
                              f"{ll['max_restart_s'] / 60:.3g} min",
    "tmpfs; disk: with fsync, fsync over plain": f"{viz.si(rates.rate('/dev/shm', True).value, 'B/s')}, {rates.fsync_over_plain('/dev/shm').text('x')}; "
                                 f"{viz.si(rates.rate(str(DISK), True).value, 'B/s')}, {rates.fsync_over_plain(str(DISK)).text('x')}",
    "plain write, tmpfs over disk": f"{shm_plain.value / disk_plain.value:.2g}x, intervals {'apart' if saving.plain_apart(rates, '/dev/shm', str(DISK)) else 'overlap'}",
    "gzip on float32 weights": f"{gz.gz_ratio:.1%} of the bytes, {gz.gz_over_plain().value:.3g}x the time",
})
shutil.rmtree(WORK, ignore_errors=True)  # this run's checkpoints and logs (see WORK at the top)
