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
# makes it complete. Four questions, each measured here:
#
# 1. what a save costs, and how much of it blocks training;
# 2. whether a save killed midway can ever become the one a restart loads;
# 3. whether a killed run, restarted by torchrun, goes on bit for bit, and what the restart
#    costs;
# 4. how often to save, and (5) what that gives at Llama 3's scale.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
ROUNDS = 5 if QUICK else 9                        # saves per mode (an interval needs 5)
GPT = dict(n_embd=128, n_layer=2) if QUICK else dict(n_embd=256, n_layer=4)  # the tiny GPT's size
MTBF_S = 600.0                                    # a failure every 10 minutes, for section 4

# %%
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import perfkit
from perfkit import ceilings, hw, saving, sizing, viz
from perfkit.plan import failures
from perfkit.verdict import Prediction

ROOT = Path(perfkit.__file__).resolve().parents[1]      # the course's folder (any working dir)
SCRIPT = ROOT / "examples" / "resilient_train.py"
WORK = Path(tempfile.mkdtemp(prefix="perfkit-14-"))     # checkpoints and run logs
limits = hw.cached_limits(quick=QUICK)                  # notebook 00's ceilings (measured now if missing)
COPY = ceilings.ceiling(limits, "cache")                # the fastest copy, in the cache: a floor's rate
THREADS = sizing.timing_threads()                       # the cores other processes leave free
print(f"copy ceiling of this machine: {viz.si(COPY, 'B/s')} (read + written); timing on {THREADS} "
      f"of {sizing.CORES} threads")

# %% [markdown]
# ## 1. What does a save cost, and how much of it blocks training?
#
# **Models.** A **synchronous** save stops training until every byte is on storage: it takes
# at least the state's bytes over the storage's write bandwidth (with `fsync`, as a commit
# needs). An **asynchronous** save (CheckFreq, Mohan et al. FAST 2021; DCP's `async_save`)
# blocks only while it copies the state into CPU memory ("staging"), then writes it in the
# background: it blocks at least for one copy of the state, twice its bytes (read and
# written) at the copy ceiling. Both are bounds: serialising, hashing and renaming add to them.
#
# **Measurement.** The tiny GPT of `perfkit.models` with its AdamW state, saved by
# `perfkit.saving.Checkpointer` in `sync` and `thread` mode in interleaved rounds (one of
# each per round), beside the write bandwidth of the same directory, on the threads the
# machine's load leaves free: DCP stages the state tensor by tensor (about 200 copies here),
# and with more threads than free cores every copy waits at an OpenMP barrier for a thread
# the scheduler has parked (on a busy machine that alone can make the staging take longer
# than the whole synchronous save; `perfkit.sizing.timing_threads` chooses the threads).
# DCP's `process` mode
# (a separate writer process, no GIL shared with training) is measured by
# `benchmarks/checkpoint.py`; it starts a process group and a writer, more than this budget.

# %%
with sizing.pinned_threads(THREADS):
    costs = saving.save_costs(WORK / "costs", COPY, rounds=ROUNDS, **GPT)
print(f"state {viz.si(costs.state_bytes, 'B')}; write bandwidth with fsync "
      f"{viz.si(costs.write.bytes_per_s, 'B/s')} ({costs.write.fstype})")
for m in costs.blocked_s:
    print(f"  {m:6s}: blocked {costs.blocked(m).text('s')}")
ax = viz.plot_save_costs(costs)

# %%
p_sync = Prediction("the synchronous save's blocked time", "state bytes / write bandwidth with fsync",
                    low=costs.sync_model_s, unit="s", physical=(0, None))
viz.verdict(p_sync, costs.blocked("sync"), explain={
    "held": f"the bytes explain {costs.sync_model_s / costs.blocked('sync').value:.0%} of the "
            "save; the rest is DCP's planning and serialisation, the sha256 of every file and "
            "the fsyncs and rename of the commit"})

# %%
p_stage = Prediction("the thread-mode save's blocked time", "one staging copy: 2 x bytes / copy ceiling",
                     low=costs.staging_floor_s, unit="s", physical=(0, None))
viz.verdict(p_stage, costs.blocked("thread"), explain={
    "held": f"the copy accounts for {viz.si(costs.staging_floor_s, 's')} of it; DCP also plans "
            "the save and allocates the CPU buffers in the caller"})

# %% [markdown]
# How much of the synchronous save does the asynchronous one still block? The model says
# at most all of it (it blocks for a copy, the synchronous save for the copy's bytes written
# and more); how far below depends on how much of a save is fixed cost rather than bytes.

# %%
p_share = Prediction("thread-mode blocked time over sync's, paired by round", "staging < whole save",
                     high=1.0, unit="x", physical=(0, None))
share = costs.blocked_over_sync("thread")
viz.verdict(p_share, share, explain={
    "held": f"the write, the checksums and the commit left the step; what stays ({share.point('x')} "
            "of the synchronous save) is DCP's planning "
            "and the copy, tensor by tensor",
    "above": "for a small state the fixed costs in the caller (planning, buffers) weigh as much "
             "as the writes, and the writer thread takes the GIL and the cores from the step",
    "inconclusive": "the rounds' ratios reach both sides of 1x: at this size the two cost "
                    "about the same"})

# %% [markdown]
# ## 2. Is a checkpoint atomic?
#
# A checkpoint counts once every rank's files **and** the manifest are complete: the files
# are written under a `.partial` name, the manifest (each file's sha256 and size) is written
# and fsynced, and one `os.rename` gives the directory its final name; only then does
# `latest` move. A kill anywhere before the rename leaves a `.partial` directory that nothing
# loads.
#
# **Prediction.** A child process commits step 1, then is SIGKILLed inside the save of step
# 2, after its shard files and before the manifest: the latest checkpoint stays step 1, and
# it loads bit for bit. A byte flipped in one of its files is named by `verify`.
#
# Meanwhile the uninterrupted run that section 3 compares against starts in the background.

# %%
pool = ThreadPoolExecutor(max_workers=1)
whole = pool.submit(saving.resilient_run, SCRIPT, WORK / "whole")

# %%
killed = saving.killed_save(WORK / "kill")
print(f"child ended by signal {killed.killed_by} (SIGKILL = 9); left behind: {killed.partial_left}")
print(f"complete checkpoints {killed.complete}; latest loads step {killed.loaded_step}, "
      f"bit for bit: {killed.loaded_exact}")
print(f"one bit flipped in {killed.damaged_file}; verify says:\n  {killed.verify_error}")

# %%
p_atomic = Prediction("the step the latest checkpoint loads after the kill", "the rename commits",
                      value=1, rel_tol=0.0, physical=(0, None))
viz.verdict(p_atomic, float(killed.loaded_step if killed.loaded_exact else -1), explain={
    "held": "the killed save left only a .partial directory; the last complete one loaded exactly"})

# %% [markdown]
# ## 3. Does a killed run resume bit for bit?
#
# `examples/resilient_train.py` trains a small float64 model with torch DDP on 2 processes
# under real `torchrun --max-restarts 3` (`perfkit.dist.launch(max_restarts=3)`), saving
# every 3 steps. At the start of step 7, rank 1 SIGKILLs itself. torchrun stops rank 0,
# starts both again, and each loads the last complete checkpoint (step 6) with its RNG
# states and data position.
#
# **Prediction.** Every final tensor (parameters and AdamW state, both ranks) and every
# step's loss equal those of the same run without a kill: **0 differing bits**. The
# restart cost R, from the kill to the end of the first resumed step, is mostly starting
# processes and importing torch: the state to load is a few kB.

# %%
run = saving.compare_restart(saving.resilient_run(SCRIPT, WORK / "killed", kill_step=7), whole.result())
print(f"killed at step {run.kill_step}, resumed from step {run.resumed_from}; {run.tensors} tensors compared")
print(f"differing bits: {run.differing_bits} in the final state, {run.loss_bits} in {run.steps} steps' losses")

# %%
p_bits = Prediction("differing bits, killed-and-restarted run against the uninterrupted one",
                    "deterministic ops, same data order, every RNG state saved", high=0,
                    physical=(0, None))
viz.verdict(p_bits, float(run.differing_bits + run.loss_bits), explain={
    "above": f"the first differing tensor: {run.first_difference}"})

# %%
R = run.parts["total"]
for part in saving.restart_experiments.PARTS:
    print(f"  {part.replace('_', ' '):18s} {run.parts[part]:6.2f} s  ({run.parts[part] / R:4.0%})")
print(f"  {'R':18s} {R:6.2f} s")
ax = viz.plot_restart_timeline(saving.restart_timeline(run.events))

# %%
starts = run.parts["start_and_imports"] + run.parts["rendezvous"]
p_r = Prediction("share of R spent restarting processes (rendezvous, start, imports)",
                 "a fresh interpreter imports torch; the state loads in milliseconds",
                 low=0.5, physical=(0, 1))
viz.verdict(p_r, starts / R, explain={
    "below": f"building the model and DDP took {run.parts['build']:.2f} s and load "
             f"{run.parts['load']:.2f} s"})

# %% [markdown]
# ## 4. How often should one save?
#
# A run that saves every `τ` seconds of training, spends `δ` per save, fails as a Poisson
# process of mean `M` and takes `R` to come back loses `δ/τ` to saves, `R/M` to restarts
# and half an interval of work per failure, `τ/(2M)`:
#
# `goodput = 1 - δ/τ - (τ/2 + R)/M`, best at Young's `τ = √(2δM)` (Young 1974).
#
# Daly (2006) wrote the expected wall time exactly (failures during saves and restarts too)
# and refined the optimum: `τ = √(2δM)(1 + ⅓√(δ/2M) + δ/18M) - δ` (`perfkit.saving.interval`).
# Here with this machine's `δ` (the synchronous save of section 1) and `R` (section 3), and a
# failure every 10 minutes.

# %%
delta = costs.blocked("sync").value
curve = saving.goodput_curve(delta, R, MTBF_S)
print(f"δ = {delta:.3g} s, R = {R:.3g} s, M = {MTBF_S:.0f} s: Young {curve.young_s:.3g} s, "
      f"Daly {curve.daly_s:.3g} s, best on the grid {curve.best_s:.3g} s ({curve.best_goodput:.1%})")
ax = viz.plot_goodput(curve)

# %% [markdown]
# **Prediction.** With `δ` this small against `M`, the first-order optimum is as good as the
# exact one: Daly's exact share at Young's interval is within 0.5 percentage points of its best
# (on the curve's grid and at Young's interval itself).

# %%
at_young = saving.daly_goodput(curve.young_s, delta, R, MTBF_S)
gap = max(at_young, *(saving.daly_goodput(t, delta, R, MTBF_S) for t in curve.tau_s)) - at_young
p_young = Prediction("Daly's exact goodput lost by saving at Young's interval", "δ/M small",
                     high=0.005, physical=(0, 1))
viz.verdict(p_young, gap, explain={"above": f"δ/M = {delta / MTBF_S:.2g} is not small"})

# %% [markdown]
# **Measured points.** The sweep that injects failures as a Poisson process into real
# torchrun jobs and measures the goodput at several intervals is
# `benchmarks/checkpoint_goodput.py` (about 3 minutes, more than this notebook's budget):
#
# ```
# .venv/bin/python benchmarks/checkpoint_goodput.py
# ```
#
# It prints one JSON object with each interval's measured goodput beside the model's.
#
# The widget redraws the curve for an MTBF, a checkpoint's size, a storage bandwidth and a
# restart cost. It starts at Llama 3 405B's run (section 5); below it, the same at its default.

# %%
# NBVAL_IGNORE_OUTPUT
spec = viz.goodput_widget()
viz.build_widget(spec)

# %%
fig = spec.fn(**spec.defaults())   # the default setting, drawn statically

# %% [markdown]
# ## 5. At scale: Llama 3 405B
#
# `perfkit.plan.failures` applies the same model to a planned run. For Llama 3 405B: 405e9
# parameters, 14 bytes each saved (bf16 weights, fp32 master copy, Adam's two moments), on
# 16,384 GPUs failing at Llama 3's own rate, written at its storage's 2 TB/s, with a
# 10-minute restart (an assumption; Llama 3 does not publish one).

# %%
ll = failures.llama3_check()
print(f"save {ll['save_s']:.3g} s, MTBF {ll['mtbf_s'] / 3600:.3g} h, Daly's interval "
      f"{ll['interval_s'] / 60:.3g} min; effective training {ll['goodput']:.1%} "
      f"(Daly's exact {ll['daly_goodput']:.1%}); above 90 % for restarts under "
      f"{ll['max_restart_s'] / 60:.3g} min")
print(failures.LLAMA3_FAILURES["source"])

# %%
p_llama = Prediction("Llama 3 405B's effective training time by the goodput model",
                     "Llama 3 reports above 90 % (Dubey et al. 2024, section 3.3.4)",
                     low=failures.LLAMA3_EFFECTIVE_TRAINING, physical=(0, 1), measured_here=False)
viz.verdict(p_llama, ll["goodput"], explain={
    "below": f"a 10-minute restart costs {600 / ll['mtbf_s']:.1%} of the time at this MTBF"})

# %% [markdown]
# ## Summary
#
# * A synchronous save costs at least its bytes over the write bandwidth; an asynchronous one
#   blocks at least for a copy into memory, and for a small state fixed costs decide.
# * A checkpoint becomes one with a single rename after its manifest: a kill before that
#   leaves nothing a restart would load, and a damaged file is named by its checksum.
# * With every RNG state and the data position saved, a killed and restarted run is the same
#   run, bit for bit; its restart cost is mostly starting processes.
# * Save every `√(2δM)`; the goodput model then says what a failure rate costs, from two
#   processes here to 16,384 GPUs.

# %%
viz.show_headlines({
    "sync save": f"{costs.blocked('sync').value:.3g} s ({viz.si(costs.state_bytes, 'B')})",
    "thread save blocks": f"{costs.blocked('thread').value:.3g} s",
    "differing bits after a restart": f"{run.differing_bits + run.loss_bits}",
    "restart cost R": f"{R:.3g} s",
    "Llama 3 405B goodput": f"{ll['goodput']:.1%}",
})
