# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · Data loading: keep the model fed
#
# A training step that waits for its next batch wastes the whole machine: on a GPU server the
# accelerator idles while one CPU core decodes images or tokenizes text. This notebook
# measures, on the machine running it:
#
# 1. **when the model waits for data**: a tiny GPT-2 whose loader tokenizes every sample,
#    timed with `perfkit.profiling.StepMonitor`, against a prediction from two measured costs;
# 2. **each `DataLoader` knob**: `num_workers` for I/O-bound and CPU-bound loads,
#    `persistent_workers`, `prefetch_factor` under jittery loads, each against the pipeline
#    model `perfkit.data.simulate_pipeline`; and `pin_memory`, timed only where there is a GPU;
# 3. **realistic per-sample costs** (decoding and augmenting digits, BPE-tokenizing Python
#    source) and **padding** token batches to a multiple of 8;
# 4. **streaming data** with an `IterableDataset` sharded over workers and ranks, so that no
#    sample is read twice or lost;
# 5. **`perfkit.data.Prefetcher`**: how much of the load it hides behind a real training step;
# 6. a **widget** to move the per-sample cost, workers and prefetch depth yourself.
#
# Every section: the question, a prediction from a model, the measurement, and why they
# differ. `QUICK = True` (what CI uses) runs fewer steps.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
STEPS = 8 if QUICK else 30                    # measured steps per run
BATCH = 16                                    # samples per batch (knob experiments)
COST_MS = 2.0                                 # load cost per sample, ms (knob experiments)
COMPUTE_MS = 10.0                             # a GPU step: the host is idle meanwhile, ms
WORKERS = [0, 1, 2, 4] if QUICK else [0, 1, 2, 4, 8]
SWEEP_BATCHES = 21 if QUICK else 61           # batches per run in the sweeps, the first one's startup dropped:
                                              # 20 or 60 steady steps (20: the fewest an interval needs)
JITTER = 3.0                                  # per-sample cost variation (CV), section 2d
CORPUS_BYTES = 300_000 if QUICK else 1_000_000
GPT = dict(batch_size=8, block_size=64, max_bytes=CORPUS_BYTES)
PLANTED_MS = 2.0                              # extra decode work per text sample, ms
COMPUTE_THREADS = 1                           # intra-op threads of the model's own compute
SPAWN = not QUICK                             # also time workers started by "spawn" (slow)

# %%
import os
import shutil
import statistics
import tempfile
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader, IterableDataset

from perfkit import hw, models, stats, timing, viz
from perfkit.data import LoaderConfig, SlowDataset, datasets, measure_loader, simulate_pipeline
from perfkit.data import experiments as ex
from perfkit.data import overlap as ov
from perfkit.verdict import Prediction, judge
from perfkit.viz import data as vdata
from perfkit.viz import profiling as vprof

warnings.filterwarnings("ignore", message="This DataLoader will create")  # more workers than cores: on purpose
DEVICE = timing.resolve_device()
CORES = os.cpu_count()
limits = hw.cached_limits(quick=QUICK)  # measured by notebook 00 (or now, if missing)
torch.set_num_threads(COMPUTE_THREADS)  # after reading the limits, which were measured with all threads
print(f"torch {torch.__version__} on {limits.name}; {CORES} CPU cores, model compute on {COMPUTE_THREADS} thread{'s' * (COMPUTE_THREADS > 1)}")
print(f"DRAM ceiling of this machine: {viz.si(limits.copy_bytes_per_s, 'B/s')} (bytes counted as STREAM counts them, "
      f"a copy's twice and x + y's three times; {limits.sources.get('dram', 'the best copy or x + y')})")

# %% [markdown]
# **Why one compute thread.** On a GPU machine the model runs on the accelerator and the CPU
# cores are free to feed it. Here the model runs on the CPU too, so we give its compute one
# thread (`COMPUTE_THREADS`) and leave the other cores to the data pipeline. With two
# OpenMP threads on a 2-core machine shared with other jobs, every parallel region ends in
# a barrier that waits for whichever thread the OS descheduled, and step times swing several
# fold between runs; you can set `COMPUTE_THREADS = 2` and watch the numbers below scatter.
#
# ## 1. When does the model wait for data?
#
# **Question.** A loader tokenizes each sample's raw text (real BPE work) plus
# `PLANTED_MS` of decode work, in the training process (`num_workers=0`). What share of each
# step waits for data?
#
# **Model.** With no workers the loop loads, then computes: a step takes
# `B * c + t_compute`, so the data share is `B * c / (B * c + t_compute)`. We measure the
# per-sample cost `c` directly on the dataset, and `t_compute` on the same model fed from
# pre-tokenized data. With 1 worker the tokenizing moves to another process, on the second
# core, and overlaps the model's compute: a step takes the longer of the two, `max(t_compute,
# B * c)`. The planted cost makes the two about equal on the machine this was written on (the
# cells below print both here), and where they are equal that model is at its weakest; it leaves
# out three costs that a balanced pipeline pays: **jitter** (both parts vary from step to
# step, and each step waits for whichever is longer that time, so the median step lies above the
# longer of the two medians: the cell computes by how much from the two parts measured apart);
# **contention** (the worker's tokenizing and the model's compute thread share this machine's
# cores with each other and with whatever else runs on them); and the **handoff** of each batch
# from the worker (section 2a measures it). In steady state a step takes the longer stage's period,
# so only a slowdown of the stage the model says is longer moves the step: where that is the
# loader, a slower compute shortens the loop's wait for the next batch and leaves the step as it
# is, and the 1-worker run's compute time against `t_compute` alone shows only that the cores
# are shared.
#
# **Prediction.** The 0-worker data share within 25 % of the model's; the 1-worker step within
# 25 % of `max(t_compute, B * c)`, the model without those three costs.

# %%
gpt = models.gpt2_workload(**GPT)  # the model, fed from a corpus tokenized once
tok = models.train_bpe_tokenizer(1024, CORPUS_BYTES)  # cached under build/
text = models.text_corpus(CORPUS_BYTES)
ds = models.TokenBlockDataset(text, tok, GPT["block_size"], tokenize_per_sample=True, cost_ms=PLANTED_MS)
per_sample_s = timing.benchmark(lambda: [ds[i] for i in range(16)], warmup=1, repeat=5).median_s / 16
load_s = GPT["batch_size"] * per_sample_s
print(f"one sample: {per_sample_s * 1e3:.2f} ms (tokenizing + {PLANTED_MS} ms planted)")
print(f"one batch of {GPT['batch_size']}: {load_s * 1e3:.1f} ms")


# %% [markdown]
# `perfkit.data.experiments.monitored_steps` trains the model for `STEPS` steps (after 2
# warm-up steps) under a `StepMonitor` and keeps each step's data wait and total time. The data
# share printed is the median over the steps of each step's wait over its time, with the
# order-statistic interval of that median (`perfkit.stats.median_ratio`, paired: wait and time
# come from the same step).
#
# **Caveat.** These intervals, and those of the step times and of the ratio of two runs below,
# treat a run's consecutive steps as independent draws. They are not quite: with workers, batches
# queued during one step carry over to the next, and a slow stretch of the machine spans several
# steps. So the intervals in this section are narrower than the run's real uncertainty, and a
# verdict near its edge is weaker than it reads. Section 2 judges on the median of block means
# (blocks of consecutive steps) for this reason; here the intervals are the steps' own, so read
# each as a lower limit on the run's uncertainty.

# %%
fast = ex.monitored_steps(gpt, gpt.loader.dataset, steps=STEPS)
compute_s = fast.summary.step.p50_s - fast.summary["data"].p50_s
predicted_share = load_s / (load_s + compute_s)
print(f"compute (forward + backward + optimizer): {compute_s * 1e3:.1f} ms per step")
print(f"predicted data share with 0 workers: {predicted_share:.0%}")

# %%
runs = {f"{w} worker{'s' * (w != 1)}": ex.monitored_steps(gpt, ds, num_workers=w, steps=STEPS) for w in (0, 1, 2)}
runs["pre-tokenized"] = fast
for name, r in runs.items():
    print(f"{name:>14}: step p50 {r.summary.step.p50_s * 1e3:6.1f} ms, mean {r.summary.step.mean_s * 1e3:6.1f} ms "
          f"({r.summary.samples_per_s:4.0f} samples/s), data share {r.data_share().value:5.1%}")
lifted = {k: max(r.step_s) * 1e3 for k, r in runs.items() if r.summary.step.mean_s > 1.1 * r.summary.step.p50_s}
print("The verdicts judge medians (p50); samples/s (samples over the run's time) and the bars below are means, "
      + ("which a few slow steps lift: " + ", ".join(f"the {k} run's slowest step took {v:.0f} ms" for k, v in lifted.items())
         if lifted else "within 10 % of the medians here") + ".")
fig = vprof.plot_phase_bars({k: r.summary for k, r in runs.items()}, unit="ms",
                            title="Tiny GPT-2 step, tokenizing per sample (means)")

# %%
med = {k: (statistics.median(r.data_s) * 1e3, statistics.median(t - d for t, d in zip(r.step_s, r.data_s)) * 1e3)
       for k, r in runs.items()}   # ms per step: waiting for data, the rest
p50 = runs["0 workers"].summary.step.p50_s * 1e3  # ms
print(f"0 workers: step p50 {p50:.1f} ms against B*c + t_compute = {(load_s + compute_s) * 1e3:.1f} ms: the "
      f"difference, {round(p50, 1) - round((load_s + compute_s) * 1e3, 1):+.1f} ms, is what the loop adds to its parts timed apart "
      "(sampling, collating, parts slower inside the loop), unsplit here, plus the noise of three timings"
      + (" (below 0: that noise alone, the loop's own costs too small to see)" if p50 < (load_s + compute_s) * 1e3
         else ""))
viz.verdict(Prediction("data share with 0 workers", "B*c / (B*c + t_compute)", value=predicted_share,
                       rel_tol=0.25, physical=(0, 1)), runs["0 workers"].data_share(), explain={
    "above": f"The loop waited {med['0 workers'][0]:.1f} ms per step for data, against B*c = {load_s * 1e3:.1f} "
             "ms timed on the dataset alone: the rest is the DataLoader's own work (sampling, collating; 2a "
             "times them for a free batch) or the tokenizing running slower in the loop than alone.",
    "below": f"The rest of the step took {med['0 workers'][1]:.1f} ms here, against t_compute = "
             f"{compute_s * 1e3:.1f} ms fed from pre-tokenized data."})
loads = runs["0 workers"].data_s  # s: each batch tokenized in the loop, per step
computes = [t - d for t, d in zip(fast.step_s, fast.data_s)]  # s: each step's compute, pre-tokenized
jitter_ms = (ex.balanced_max(loads, computes) - max(statistics.median(loads), statistics.median(computes))) * 1e3
bound = ex.pipeline_excess(runs["1 worker"].step_time().value * 1e3, *med["1 worker"], load_s * 1e3,
                           compute_s * 1e3, jitter_ms, CORES)  # the longer stage's slowdown moves the step
why1 = bound.text
viz.verdict(p1 := Prediction("1-worker step time", "max(t_compute, B*c): loading overlaps the step",
                             value=max(compute_s, load_s) * 1e3, rel_tol=0.25, unit=" ms"),
            s1 := runs["1 worker"].step_time().scaled(1e3), explain={"above": why1, "held": why1 + ex.near_edge(p1, s1)})
print(ex.worker_gain(runs["1 worker"], runs["2 workers"], CORES))

# %% [markdown]
# On a GPU server the model's compute moves to the accelerator, but the trade-off does not
# vanish: each rank's workers share its cores (often 8-16 per GPU) with its own Python thread,
# which launches the kernels, and with the pinning and communication threads. Hence the usual
# advice: as many workers as it takes, up to the cores each rank can spare.
#
# ## 2. The knobs of `torch.utils.data.DataLoader`
#
# From here on the step is a `COMPUTE_MS` sleep: the host thread blocked while the accelerator
# works, as at a synchronisation point (`loss.item()`, `torch.cuda.synchronize()`). A CUDA-graph
# replay does not block it: `cudaGraphLaunch` only enqueues the graph, and the host runs on until it
# synchronises. A real eager GPU step is not
# idle on the host: its Python thread launches every kernel, and a small model can be bound by
# those launches, so that thread takes a core of its own and the cores left for workers are one
# fewer than a sleep suggests. The dataset is `SlowDataset`, whose samples cost a known
# `COST_MS` each, spent either as a sleep (I/O: reading a file or a network stream frees the
# core) or as a busy loop (decoding in Python: it holds a core).
#
# ### 2a. `num_workers` for an I/O-bound load
#
# **Model** (`simulate_pipeline`): batch `i` goes to worker `i % W`; each worker needs
# `B * c` per batch; the loop asks for batches in order and spends `t_handoff` receiving each
# one from a worker (the batch crosses a process boundary through shared memory). In steady
# state a step takes `max(t_compute + t_handoff, B * c / W)` with workers and
# `B * c + t_compute` without. We measure `t_handoff` first, on a dataset whose samples cost
# nothing, with no compute: the loop then spends all its time receiving.
#
# **Prediction.** At every worker count the model's waiting share lies within 10 points of the
# measured one.

# %%
free = SlowDataset(BATCH * 40, 0.0)
base_s = statistics.median(measure_loader(free, LoaderConfig(BATCH, 0)).wait_s[0][1:])
handoff_s = statistics.median(measure_loader(free, LoaderConfig(BATCH, 2)).wait_s[0][1:])
batch_load_s = BATCH * COST_MS / 1e3 + base_s
print(f"a free batch: {base_s * 1e3:.2f} ms in the loop (sampling + collating), "
      f"{handoff_s * 1e3:.2f} ms from a worker (t_handoff)" + ex.handoff_part(handoff_s * 1e3, bound.unsplit_ms, bound.stage,
                                                                 f"this cell's batches of {BATCH} free samples"))

# %%
io_ds = SlowDataset(BATCH * SWEEP_BATCHES, COST_MS / 1e3, kind="sleep")
io_runs = [measure_loader(io_ds, LoaderConfig(BATCH, w), compute=COMPUTE_MS / 1e3) for w in WORKERS]
io_pred = [simulate_pipeline(batch_load_s, COMPUTE_MS / 1e3, w, 2, steps=SWEEP_BATCHES, handoff_s=handoff_s)
           for w in WORKERS]
print(f"load {batch_load_s * 1e3:.1f} ms per batch, compute {COMPUTE_MS:.0f} ms per step")
print(vdata.sweep_lines([f"workers={w}" for w in WORKERS], io_runs, io_pred, BATCH))
fig = vdata.plot_loader_sweep(io_runs, io_pred,
                              title="I/O-bound load (sleep): workers overlap their waits")

# %% [markdown]
# The figure judged is the largest of several gaps, one per worker count, each with its own
# interval. So that all of them hold together at 90 % at least, each interval is asked at a higher level
# (Bonferroni: 98 % each for five figures), and the largest gap's interval runs from the largest
# size any of them can take at its low end to the largest at its high end. An order-statistic
# interval covers at least the level asked (7 blocks asked at 98 % cover 98.4 %): the verdict
# names that exact coverage ("largest size of k figures, each at" it) and prints the joint one
# Bonferroni's sum gives from it (`perfkit.stats`, `perfkit.data.largest_gap`). A loop's steps are no
# independent draws (batches the workers queued carry over from one step to the next, and busy
# workers deliver them in bursts), so each gap is computed per block of consecutive steps, as many
# blocks as an interval at that level needs (7 at 98 %), each as long as the run allows: the
# figure is the median block's measured waiting share less the model's over the same steps, with
# the order-statistic interval of that median (`perfkit.data.run_gaps`; a bootstrap that resampled
# single steps would count the queue's carry-over as noise). The model's step `i` is the run's
# step `i`, so a block compares the same steps on both sides (section 2d, where the model replays
# the run's own slow batches, needs that most).

# %%
io_gaps = ex.run_gaps(io_runs, io_pred)  # each run against its model, block by block
gi = max(range(len(WORKERS)), key=lambda k: abs(io_gaps[k].value))  # the run the largest gap comes from
where_gap = (f"at {WORKERS[gi]} workers: the median block waited {100 * io_gaps[gi].value:+.1f} points against "
             f"the model (over the whole run, {io_runs[gi].steady_wait_share:.0%} waiting measured, "
             f"{io_pred[gi].steady_wait_share:.0%} predicted)")
viz.verdict(Prediction("largest gap in waiting share, model against measurement (I/O-bound)",
                       "simulate_pipeline with the measured handoff", high=0.10, physical=(0, 1)),
            ex.largest_gap(io_runs, io_pred), explain={"above": f"The worst gap is {where_gap}.",
                                                       "held": f"The largest gap is {where_gap}."})

# %% [markdown]
# Both the numbers and the plot leave out the first step, which carries the startup of the
# worker processes (section 2c measures it). Sleeping workers do not compete for cores, and
# the model counts the per-batch handoff: without it, it would promise 0 % waiting as soon as
# W workers outpace the step. In the model, an I/O-bound load scales with
# workers far past the number of cores, until the storage itself saturates.
#
# ### 2b. `num_workers` for a CPU-bound load
#
# Each sample now runs a fixed amount of Python work, calibrated to take `COST_MS` on an
# idle core (like decoding: it takes longer when it has to share the core). Even with no worker
# at all it need not take its calibrated time: the calibration is the best of a few short loops,
# and on a machine that other jobs share the core may be slower, or faster, than during it (the
# line below prints which). So the model takes a batch's cost `B * c` from this sweep's first run,
# the one without workers (its mean wait per steady step): that row is then fitted, not predicted,
# and the others carry its figure.
#
# **Model.** The same pipeline, but `W` busy workers share `CORES` cores: each batch takes
# `B * c * max(1, W / CORES)`. In a long run that caps throughput at `CORES / (B * c)` batches/s,
# or `CORES / c` samples/s, the unit printed below. A run of `SWEEP_BATCHES` batches whose first step is dropped (it carries the workers' startup) can read a
# little above that cap with many workers: every worker starts a batch at once, and the batches
# they finish during the dropped first step are credited to the steady steps. The model, run
# for the same number of batches, counts that too; a measured run can still read below the cap,
# where sharing the cores cost more than the model counts (the cores' worth of decoding printed
# for each run, against `CORES`, says which).
#
# **Context, not a prediction.** The model says that past `CORES` workers throughput stops
# growing: the most workers measured should give the model's own ratio of the two runs (printed
# below). This sweep's runs are too short to judge a difference of 10 % either way (the cell
# prints why, from the run), so no prediction is recorded and nothing is graded here: the ratio
# is printed beside the model's as context, with the throughput each run delivered.

# %%
cpu_ds = SlowDataset(BATCH * SWEEP_BATCHES, COST_MS / 1e3, kind="spin")
cpu_runs = [measure_loader(cpu_ds, LoaderConfig(BATCH, w), compute=COMPUTE_MS / 1e3) for w in WORKERS]
spin_s = statistics.fmean(cpu_runs[0].wait_s[0][1:])  # s per batch, spun in the loop (WORKERS[0] is 0)
cpu_pred = [simulate_pipeline(spin_s, COMPUTE_MS / 1e3, w, 2, steps=SWEEP_BATCHES, cores=CORES,
                              handoff_s=handoff_s) for w in WORKERS]
print(f"a batch's spin in the 0-worker run: {spin_s * 1e3:.1f} ms, {spin_s / batch_load_s:.2f}x the {batch_load_s * 1e3:.1f}"
      f" ms calibrated on an idle core ({'faster' if spin_s < batch_load_s else 'slower'} than calibrated); the "
      "model takes this run's figure (workers=0: fitted)")
print(vdata.sweep_lines([f"workers={w}" for w in WORKERS], cpu_runs, cpu_pred, BATCH, COMPUTE_MS))
fig = vdata.plot_loader_sweep(cpu_runs, cpu_pred,
                              title=f"CPU-bound load (busy loop) on {CORES} cores")

# %%
at_cores = max(i for i, w in enumerate(WORKERS) if w <= CORES)   # the run at CORES workers (or fewer)
rate = {w: BATCH / r.steady_step_s for w, r in zip(WORKERS, cpu_runs)}          # samples/s measured
model_rate = {w: BATCH / p.steady_step_s for w, p in zip(WORKERS, cpu_pred)}    # samples/s in the model
# cores' worth of decoding credited to the steady steps: one batch's spin, as the 0-worker run took it, per
# measured step (above CORES when the batches finished during the dropped first step are counted in them)
got = {w: spin_s / r.steady_step_s for w, r in zip(WORKERS, cpu_runs)}
model_got = {w: spin_s / p.steady_step_s for w, p in zip(WORKERS, cpu_pred)}  # the model's own credit
at, last = WORKERS[at_cores], WORKERS[-1]
model_x = model_rate[last] / model_rate[at]   # the model's own ratio for runs this long
for w in WORKERS[1:]:  # each worker count past the fitted 0, one core's worth of decoding at most per worker
    print(f"{w} busy worker{'s' * (w > 1)}: {rate[w]:.0f} samples/s, {rate[w] / model_rate[w]:.0%} of the model's "
          f"{model_rate[w]:.0f}; {got[w]:.2f} cores' worth of decoding per steady step (a batch's spin "
          f"{spin_s * 1e3:.1f} ms, one batch every {cpu_runs[WORKERS.index(w)].steady_step_s * 1e3:.1f}"
          f" ms) on {CORES} cores" + (f"; {rate[w] / rate[at]:.2f}x the {at}-worker run (means: no interval)"
                                      if w > at else "")
          + (f"; more than the model allows at this count ({model_got[w]:.2f}, with its credit from the dropped first "
             f"step): here the batches decoded {got[w] / model_got[w] - 1:.1%} faster than in the 0-worker run, or "
             "the steps' mean moved by noise (this figure has no interval)" if got[w] > max(min(w, CORES), model_got[w])
             else ""))
print(f"the model's ratio of {last} workers over {at} for {SWEEP_BATCHES} batches, first step dropped: "
      f"{model_x:.3f}x (the long-run cap gives 1x)")
steps_ms = [(w + c) * 1e3 for w, c in zip(cpu_runs[-1].wait_s[0][1:], cpu_runs[-1].compute_s[0][1:])]  # steady
bursty = max(steps_ms) > 2 * statistics.median(steps_ms)
blocks = ("Printed as context, not as a verdict: the sweep's runs, sized for the waiting shares, give this ratio a "
          "handful of blocks of consecutive steps a run (queued batches carry over from one step to the next" + (
              f", and the {last}-worker run's steps came in bursts (median {statistics.median(steps_ms):.1f} ms, "
              f"slowest {max(steps_ms):.1f} ms: batches that workers sharing the cores finish together, then a "
              "wait), which a block spans" if bursty else "")
          + "), and the interval runs from one run's lowest block mean over the other's highest.")
measured_x = ex.rate_ratio(cpu_runs[-1], cpu_runs[at_cores])  # the ratio of median block means
pred = Prediction(f"samples/s with {last} busy workers over {at}",
                  "busy workers share the cores: the model's ratio for runs this long", value=model_x, rel_tol=0.10,
                  unit="x")
print(ex.rate_context(pred, measured_x, blocks, rate[last] / rate[at]))
short = [w for w, r, p in zip(WORKERS[1:], cpu_runs[1:], cpu_pred[1:]) if r.steady_step_s > p.steady_step_s / 0.9]
print("worker counts, past the fitted 0, measured below 90 % of the model's throughput: " + (", ".join(
      f"{w} ({rate[w] / model_rate[w]:.1%})" for w in short) + ": the model shares the cores among the workers alone, "
      "at no cost, while the training process, the DataLoader's threads and other jobs take turns on them too" if short else "none"))

# %% [markdown]
# Where the gain stops, for CPU-bound decoding make the per-sample work cheaper instead
# (decode once and cache, or move augmentation to the GPU). The model assumes the cores are the
# workers' alone; the training process, the DataLoader's own threads and other jobs on the
# machine also run on them, which is one reason a count with workers can fall short of it. (With
# no workers that reason does not apply: there the spin's own departure from its idle-core
# calibration, faster or slower as printed above, is what the model takes from the run.) Where a
# count's waiting share matches the model's while its samples/s fall short, the step itself ran
# long: the sweep's lines print each run's measured step beside the planted `COMPUTE_MS`.
#
# ### 2c. `persistent_workers`: paying the startup once
#
# **Model.** Without it, every epoch's `iter(loader)` starts fresh worker processes, so the
# first batch of every epoch waits for process startup plus one batch; with it, only the
# first epoch pays for the startup. (Every epoch still waits for its first batch: nothing is
# prefetched across the epoch boundary.) How much startup costs depends on how workers
# start: on Linux before Python 3.14 they fork the training process (3.14 makes `forkserver`
# multiprocessing's default there; DataLoader takes the default unless given
# `multiprocessing_context`); a fork is a copy-on-write clone (the page tables of a
# process holding torch must still be copied), while macOS and Windows **spawn** a new
# interpreter that imports torch and unpickles the dataset. `SPAWN` (off in QUICK mode)
# measures that case too.
#
# **Prediction.** With fork, the later epochs' first-batch wait with persistent workers is at
# most that of fresh workers (a ratio of at most 1x).

# %%
small = SlowDataset(BATCH * 4, COST_MS / 1e3)
methods = ["fork", "spawn"] if SPAWN else ["fork"]
epochs = {(m, p): measure_loader(small, LoaderConfig(BATCH, 2, persistent_workers=p, start_method=m),
                                 compute=COMPUTE_MS / 1e3, epochs=7 if m == "fork" else 2)  # fork: 6 later epochs,
          for m in methods for p in (False, True)}                                        # what an interval needs
for (m, p), r in epochs.items():
    firsts = ", ".join(f"{w[0] * 1e3:.0f}" for w in r.wait_s)
    print(f"{m:>5}, persistent_workers={p!s:>5}: first-batch wait per epoch [{firsts}] ms")
print(f"one batch alone costs {batch_load_s * 1e3:.0f} ms: the rest of a fresh worker's first wait is its startup")
later = {p: [w[0] for w in epochs[("fork", p)].wait_s[1:]] for p in (False, True)}   # s, epochs 2 on
keep = stats.median_ratio(later[True], later[False], paired=False)
gain_ms = (statistics.median(later[False]) - statistics.median(later[True])) * 1e3
viz.verdict(Prediction("later epochs' first-batch wait, persistent over fresh workers (fork)",
                       "persistent workers skip the startup", high=1.0, unit="x"), keep, explain={
    "held": f"Fresh workers cost {gain_ms:.0f} ms more at each epoch's start.",
    "above": f"Fresh workers' first wait was {gain_ms:+.0f} ms against persistent ones', next to "
             f"{batch_load_s * 1e3:.0f} ms for one batch."})

# %% [markdown]
# The startup grows with the training process (forking copies
# its page tables) and, with spawn, with everything a worker must import and unpickle: for
# short epochs, or a validation loader run every few hundred steps, it is paid again and
# again.
#
# ### 2d. `prefetch_factor` when the load jitters
#
# **Model.** Real loads vary (a cache miss, a large image). With `W` workers and
# `prefetch_factor = d`, up to `d * W` batches can be ready ahead; a slow batch then stalls
# the loop only when the queue runs dry. Per-sample costs with a coefficient of variation
# `JITTER` give batches whose cost varies by about `JITTER / sqrt(B)`. Four workers supply a
# batch every `B * c / 4` on average, within the step time, so the model puts no waiting at 4
# workers beyond the handoff (measured in 2a, and part of the replay below) but the jitter's;
# 2a's run without jitter shows how much the model leaves out there anyway (printed below).
# `SlowDataset` seeds each sample's cost by its index, so the model replays *this* run's batches
# (`simulate_pipeline(..., loads=...)`): a run of a few dozen steps depends on where its few slow
# batches fall, which a long-run average of random draws would miss.
#
# **Prediction.** The replay matches the measured waiting share within 10 points at every depth,
# as in 2a; how much the deeper queue saves in this run is then the replay's number.

# %%
jit_ds = SlowDataset(BATCH * SWEEP_BATCHES, COST_MS / 1e3, jitter=JITTER)
depths = [1, 2, 8]
jit_runs = [measure_loader(jit_ds, LoaderConfig(BATCH, 4, prefetch_factor=d), compute=COMPUTE_MS / 1e3)
            for d in depths]
jit_loads = [sum(jit_ds.cost(j) for j in range(i, min(i + BATCH, len(jit_ds)))) + base_s  # s, batch by batch
             for i in range(0, len(jit_ds), BATCH)]
jit_pred = [simulate_pipeline(batch_load_s, COMPUTE_MS / 1e3, 4, d, loads=jit_loads, handoff_s=handoff_s)
            for d in depths]
print(f"this run's {len(jit_loads)} batches cost {min(jit_loads) * 1e3:.0f}-{max(jit_loads) * 1e3:.0f} ms "
      f"(mean {statistics.fmean(jit_loads) * 1e3:.0f} ms)")
for d, r, p in zip(depths, jit_runs, jit_pred):
    print(f"prefetch_factor={d}: predicted {p.steady_wait_share:4.0%} waiting | measured {r.steady_wait_share:4.0%} "
          f"({r.steps} steps)")
print(ex.beyond_model(4, io_runs[WORKERS.index(4)], io_pred[WORKERS.index(4)]))  # 2a's run at these 4 workers

# %%
by_depth = "; ".join(f"depth {d}: {p.steady_wait_share:.0%} replayed, {r.steady_wait_share:.0%} measured"
                     for d, r, p in zip(depths, jit_runs, jit_pred))   # waiting shares, the gaps' terms
jit_verdict = judge(Prediction("largest gap in waiting share, replayed model against measurement (jitter)",
                                "simulate_pipeline on this run's batch costs", high=0.10, physical=(0, 1)),
                    ex.largest_gap(jit_runs, jit_pred), explain={
    "held": f"Waiting shares by depth: {by_depth}.",
    "above": f"Waiting shares by depth: {by_depth}. The replay knows each batch's planted cost and the handoff "
             "measured in 2a, not the delays of waking workers when more processes want to run than there are "
             "cores."})
viz.show_verdict(jit_verdict)
saved_pred = jit_pred[0].steady_wait_share - jit_pred[-1].steady_wait_share
print(f"prefetch_factor {depths[0]} -> {depths[-1]}: waiting {jit_runs[0].steady_wait_share:.0%} -> "
      f"{jit_runs[-1].steady_wait_share:.0%} measured, {jit_pred[0].steady_wait_share:.0%} -> "
      f"{jit_pred[-1].steady_wait_share:.0%} in the replay: "
      + ("the replay and the measurement disagree (the verdict above), so this run does not say what depth saves."
         if jit_verdict.outcome in ("missed", "disturbed") else
         "the measured saving is this run's; the verdict above could not tell whether the replay matches the "
         "measurement, so the replay does not explain it yet." if jit_verdict.outcome == "inconclusive" else
         "deeper prefetching absorbed the slow batches, at the cost of host memory for d * W batches "
         "(the first batch does not wait longer: DataLoader deals batch 0 to worker 0 first, and the deeper "
         "queue fills behind it)." if saved_pred >= 0.05 else
         "in so short a run a deeper queue has little time to fill before the slow batches come."))

# %% [markdown]
# ### 2e. `pin_memory` (GPU only)
#
# Pinned (page-locked) host memory lets the GPU's copy engine read a batch by DMA while the
# GPU computes; copying from ordinary pageable memory goes through a staging buffer and
# blocks the host. On a CPU-only machine there is nothing to copy to, and perfkit (`LoaderConfig`,
# `Prefetcher`) refuses `pin_memory=True` with a clear error.

# %%
if DEVICE.type == "cuda":
    host = torch.randn(BATCH, 3, 224, 224)  # (B, C, H, W) fp32, an image batch
    pinned = host.pin_memory()
    nbytes = host.numel() * host.element_size()
    for name, src in (("pageable", host), ("pinned", pinned)):
        m = timing.benchmark(lambda src=src: src.to(DEVICE, non_blocking=True), warmup=3, repeat=20, device=DEVICE)
        share = m.rate(nbytes) / limits.h2d_bytes_per_s if limits.h2d_bytes_per_s else float("nan")
        print(f"{name:>8}: {viz.si(m.rate(nbytes), 'B/s')} = {share:.0%} of the measured H2D ceiling")
else:
    print("No CUDA on this machine: pin_memory has nothing to speed up here (skipped).")

# %% [markdown]
# ## 3. Realistic per-sample costs, and padding
#
# **Question.** How expensive is preparing one sample of real data, and how many workers
# would it take to feed a `COMPUTE_MS` step? A batch that loads in under a tenth of the step
# needs none: in the loop (`num_workers=0`) it adds that tenth at most. Above, 2a's model applies:
# `ceil(B * c / (t_compute + t_handoff))` workers hide it (each delivers a batch per `B * c`), and
# the loop still receives each batch, so they save `B * c - t_handoff` a step, nothing where the
# handoff costs more than the load (`perfkit.data.workers_note`). The bytes a loader
# produces are tiny next to the machine's memory bandwidth: loading is bound by per-sample work,
# not by bytes.

# %%
text_ds = datasets.TextChunks(text, tok, max_len=256)
real = {"digits: decode bytes": models.DigitsDataset(),
        "digits: decode + rotate/shift to 32x32": datasets.AugmentedDigits(size=32),
        "text: BPE-tokenize a paragraph": text_ds}
costs = {}
for name, d in real.items():
    sample = d[0][0] if isinstance(d[0], tuple) else d[0]
    s = timing.benchmark(lambda d=d: [d[i] for i in range(16)], warmup=1, repeat=3).median_s / 16
    costs[name] = s
    share = limits.share_of_bandwidth(sample.numel() * sample.element_size() / s)
    print(f"{name:>40}: {s * 1e6:6.0f} µs/sample, {ex.workers_note(BATCH * s, COMPUTE_MS / 1e3, handoff_s)}; "
          f"bytes out {share:.4%} of the DRAM ceiling")  # workers_note: one batch's load over one step, 2a's model

# %% [markdown]
# Text samples have different lengths, so a batch must be padded to one length `T`.
# `PadCollate` pads to the longest sample rounded up to a multiple of 8: on NVIDIA GPUs, fp16/bf16
# matmuls run fastest on tensor cores when their dimensions are multiples of 8 (a performance
# preference since cuBLAS 11, once a requirement), and on any device fewer distinct shapes mean
# fewer kernel choices, and fewer recompilations where `torch.compile` keeps shapes static
# (`dynamic=False`, or CUDA graphs, recorded per shape; by default it recompiles once, with the
# length symbolic, and no more). The price is a few pad tokens per row.

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
batch = datasets.PadCollate(pad_id=0)([torch.arange(1, 6), torch.arange(1, 12), torch.arange(1, 3)])
print("input_ids", tuple(batch["input_ids"].shape), "real tokens per row", batch["attention_mask"].sum(1).tolist())
print(batch["labels"][2].tolist())

# %% [markdown]
# **Prediction.** Rounding to a multiple of 8 adds between 0 and 7 pad tokens per row,
# about 3.5 on average if the longest lengths fall evenly between multiples of 8. A batch whose
# longest sample was cut at `max_len` (256, itself a multiple of 8) gets none, so the average is
# `3.5 * (1 - share of such batches)`. That share is counted from the same batches as the figure
# it predicts: the verdict checks the remainder model, not a forecast of the data.

# %%
lengths = [len(text_ds[i]) for i in range(min(len(text_ds), 512 if QUICK else 2048))]
pad = ex.padding_waste(lengths, BATCH, text_ds.max_len)
for name, waste in pad.waste.items():
    print(f"{name:>26}: {waste:5.1%} of the batch is padding")
print(f"mean sample: {pad.mean_len:.0f} tokens")

# %%
print(f"{pad.capped:.0%} of the batches have their longest sample cut at {text_ds.max_len} tokens")
viz.verdict(Prediction("pad tokens per row added by rounding to a multiple of 8",
                       "uniform remainders (0 + ... + 7) / 8, none in a batch cut at max_len",
                       value=3.5 * (1 - pad.capped), rel_tol=0.5, physical=(0, 7)), pad.extra_per_row)

# %% [markdown]
# The rounding is the small part of the padding; most of it comes from the spread of lengths
# within a batch, which sorting samples into buckets of similar length would cut.

# %% [markdown]
# ## 4. Streaming data: no sample twice, none lost
#
# **Question.** An `IterableDataset` streams samples from files. What happens with 2
# `DataLoader` workers, and with 2 ranks of a distributed job?
#
# **Model.** Each worker process gets a copy of the dataset and calls its `__iter__`. Unless
# `__iter__` asks which worker (and which rank) it is, every copy replays the whole stream:
# each sample is seen `workers x ranks` times. `ShardedStream` gives shard
# `rank * workers + worker_id` every `(workers * ranks)`-th file (when the files divide
# evenly) or every `(workers * ranks)`-th sample.

# %% keep_output=true
# NBVAL_CHECK_OUTPUT
root = Path(tempfile.mkdtemp(prefix="perfkit07-"))
files = datasets.write_shards(range(240), root, n_files=6)


class NaiveStream(IterableDataset):
    def __iter__(self):  # every worker reads everything
        return datasets.ShardedStream(files).shard(0, 1)


naive = list(DataLoader(NaiveStream(), batch_size=None, num_workers=2))
seen = []
for rank in range(2):  # two ranks of a job, simulated one after the other
    seen += list(DataLoader(datasets.ShardedStream(files, rank=rank, world_size=2),
                            batch_size=None, num_workers=2))
print(f"naive, 2 workers: {len(naive)} samples read, {len(set(naive))} distinct\n"
      f"ShardedStream, 2 ranks x 2 workers: {len(seen)} samples read, {len(set(seen))} distinct")
shutil.rmtree(root)

# %%
viz.verdict(Prediction("samples read more than once or lost by ShardedStream (2 ranks x 2 workers)",
                       "shard rank * workers + worker_id", value=0, rel_tol=0),
            (len(seen) - len(set(seen))) + (240 - len(set(seen))))
viz.verdict(Prediction("reads per sample with the naive stream and 2 workers", "every worker replays it all",
                       value=2, rel_tol=0), len(naive) / len(set(naive)))

# %% [markdown]
# With 6 files and 4 shards (2 ranks x 2 workers) the files do not divide evenly, so `ShardedStream` strides over
# samples: every shard parses every file but keeps one line in four. With 8 files it would
# hand each shard 2 whole files instead, reading each file once. Shard sizes can differ by
# a sample; under DDP, a rank that runs out first leaves the others waiting in a collective,
# so cap the steps per epoch at the smallest shard.
#
# ## 5. The prefetcher: how much load does it hide here?
#
# **Question.** `perfkit.data.Prefetcher` loads the next batches in a background thread
# (and, on CUDA, copies them on a side stream from pinned memory) while the step runs. With a
# load about as long as the step, how much of it disappears?
#
# **Model.** Over a loop of `n` steps (`N` below), serial: `n * (t_load + t_compute)`.
# Overlapped, a two-stage pipeline (`perfkit.data.overlap_floor`): each pass over a
# `Prefetcher` starts its thread with an empty queue, so nothing hides the pass's first load, and
# no load is left to hide the last step's compute; between them each step costs the longer part:
# `t_load + t_compute + (n - 1) * max(t_load, t_compute)`. A loop that stops before the loader's
# end also waits, as it closes the prefetcher, for the load the thread has begun. The hidden
# fraction is what the prefetcher removes from the serial loop, over what it could remove at
# most, the serial loop's time beyond its longer part:
# `(serial - prefetched) / (serial - n * max(t_load, t_compute))`. The model puts it at
# `(n - 1) / n` for a loop that reaches the loader's end, and lower for one that stops early
# (`perfkit.data.overlap_hidden`). The measured fraction is computed from the loops' median times,
# the same medians the models are built from: beside the same serial loop, it lies above the fraction
# the model's least time per step would give (printed below where the measured fraction lies above the
# model's own) exactly when the prefetched loop's median beats that least time; its interval holds every loop's
# median inside its own interval at once (`perfkit.data.hidden_fraction_estimate`). It is measured
# against the serial loop itself, not against
# `t_load + t_compute` measured apart, because the serial loop can cost more than its parts
# (whatever a load leaves behind, in the caches or in the scheduler's queue, the step after it
# pays; the lines below print each serial loop's excess over the sleep load's parts, the only
# load timed alone), and the prefetcher hides that too: so the measured fraction can lie above the
# model's figure. Above 1 it would say the prefetched loop beat its longer part: where its interval
# reaches 1 and the prefetched loop's own interval reaches its floor built from the lower ends of
# the load's and the compute's, that is the noise of the loops, and the figure is clipped at 1
# (`perfkit.data.clip_at_one`); else a part ran faster inside the loop than timed apart, the figure
# is left as the medians give it, and above 1 the verdict calls it disturbed.

# %% [markdown]
# **Prediction.** For the I/O-like load (a sleep), at least 70 % of the model's value. For the
# load that **holds the GIL** (CPython's global interpreter lock: one thread runs Python at a time;
# the same DataLoader, plus a pure-Python spin of one step's time per
# batch), a least time per step, under one assumption stated below: the thread runs while the step
# is inside code that released the GIL (most PyTorch kernels do), and the step, at every return to
# Python, waits for the thread to give the GIL back (up to Python's 5 ms switch interval). A probe
# runs the step beside a busy Python thread and times how much slower it gets on average over the
# step (`slowdown`, `perfkit.data.thread_probe`). The spin is a fixed amount of work, but its
# calibration need not hold: section 2b timed a spin at a share of its calibrated time (printed
# there). So `t_spin` is the planted time times that share where it is below 1
# (`perfkit.data.spin_held`): a spin that ran short there is taken to run as short here, one slowed
# by a shared core is not, and it is a measurement carried over from another run, not a law either.
# **Assume** that meanwhile the step progresses no faster than
# that average, `1 / slowdown` of its rate alone: then a step takes at least
# `max(t_load, t_compute + t_spin (1 - 1 / slowdown))` (`perfkit.data.gil_least_step`). It
# leaves out the DataLoader's own part of the load, though with no workers that part is Python
# too (`__getitem__` per sample and collate, in the loader's thread, holding the GIL; the model
# line below prints its time): leaving it out only lowers the least step, so it stays a bound. The assumption is no law: an average is not the slowest
# rate, and a step that spends a whole spin inside one long kernel that released the GIL runs
# meanwhile at full speed on the other core; a prefetched loop faster than this least step would
# say the step did so. The prediction is judged on the prefetched loop's median time per step, at
# the probe's least slowdown, the most generous edge of its interval; the hidden fraction it
# leaves is `perfkit.data.gil_hidden_bound`. That fraction can also fall below zero: each turn
# can cost the step more than it hides.
# The load here is the digits CNN's `DataLoader` plus a known delay per batch; the compute is
# a real training step of the CNN.

# %%
cnn = models.digits_workload(batch_size=64, device=DEVICE)
x0, y0 = next(iter(cnn.loader))


def train_step(x, y):
    loss = cnn.loss_fn(cnn.model, (x.to(DEVICE), y.to(DEVICE)))
    loss.backward()
    cnn.optimizer.step()
    cnn.optimizer.zero_grad(set_to_none=True)


N = min(STEPS, len(cnn.loader))  # steps per timed loop: one pass at most
EXHAUSTS = N == len(cnn.loader)  # the loops reach the loader's end (else the close waits for a begun load)
t_step = timing.benchmark(lambda: train_step(x0, y0), warmup=3, repeat=10, device=DEVICE).median_s
print(f"CNN step alone: {t_step * 1e3:.1f} ms; planted load: the DataLoader + {t_step * 1e3:.1f} ms per batch; "
      f"each timed loop runs n = N = {N} steps of the loader's {len(cnn.loader)} batches")
probe = ov.thread_probe(lambda: train_step(x0, y0), n=1, repeat=11)  # 11 rounds: an interval inside the extremes;
# one step a round: beside a thread that holds the GIL, each of its hand-offs can wait a switch interval (5 ms)
print(f"beside a busy Python thread the step took {probe.slowdown.text('x')} its time alone, while the thread "
      f"ran at {probe.share.text()} of its own rate alone" + (
          " (beside a step it cannot run faster than alone: an interval past 1 is the noise of that rate alone, "
          "timed over a window as short as the step)" if probe.share.high > 1 else ""))


# %%
loops = ov.prefetch_loops(cnn.loader, train_step, (x0, y0), N, t_step, device=DEVICE)
meas = timing.interleaved(list(loops.values()), warmup=1, repeat=5 if QUICK else 15, device=DEVICE)
rounds = {k: m.times_s for k, m in zip(loops, meas)}   # s per loop of N steps, one entry per round
ms = {k: m.median_s / N * 1e3 for k, m in zip(loops, meas)}
t_load, t_compute = ms.pop("load only"), ms.pop("compute only")
floor_ms = ov.overlap_floor(t_load, t_compute, N, EXHAUSTS) / N  # the prefetched loop's least time per step
bound = ov.overlap_hidden(t_load + t_compute, t_load, t_compute, N, EXHAUSTS)  # the model's hidden fraction
hidden = {k: ov.hidden_fraction_estimate(rounds, k, n=N, exhausts=EXHAUSTS) for k in ("sleep", "spin")}
t_spin = ov.spin_held(t_step * 1e3, t_load, spin_s / batch_load_s)  # ms of Python per batch, 2b's share of planted
for kind in ("sleep", "spin"):
    print(f"serial, {kind} load: {ms[f'serial, {kind} load']:.2f} ms/step "
          f"({ms[f'serial, {kind} load'] - t_load - t_compute:+.2f} ms against the sleep load + compute apart); "
          f"Prefetcher: {ms[f'Prefetcher, {kind} load']:.2f} ms/step; hidden fraction {hidden[kind]}" + (
              ov.spin_load_note({**ms, "load only": t_load, "compute only": t_compute}, t_step * 1e3 * max(
                  0.0, 1 - spin_s / batch_load_s)) if kind == "spin" else ""))  # 2b's share, as for t_spin
print(f"model: load {t_load:.2f} ms" + ov.loader_gil_note(t_load, t_step * 1e3) + f", compute {t_compute:.2f} ms "
      f"per step (each a loop of {N} steps in these rounds; the step timed alone above took {t_step * 1e3:.1f} ms); "
      f"overlapped, its floor is {floor_ms:.2f} ms/step "
      "(each part at its time apart; " + ("the first load and the last step unhidden" if EXHAUSTS else
                                          "the first load unhidden, and, where loading is the longer part, the "
                                          "load begun as the loop stops")
      + f"); hidden fraction {bound:.3f} (the figure's overlap line is this floor" + (
          ", which the prefetched sleep loop beat: the verdict below weighs by how much)"
          if ms["Prefetcher, sleep load"] < floor_ms else ")"))
fastest = ov.gil_least_step(t_load, t_compute, probe.slowdown.low, t_spin)  # ms/step, the most generous edge
longer = max(t_load, t_compute)  # ms/step: a least step above it is a bound the GIL load is judged on
fig = vdata.plot_overlap(ms, t_load, t_compute, steps=N, floor_ms=floor_ms,
                         least_ms={"Prefetcher, spin load": fastest} if fastest > longer else None)

# %%
io_verdict = judge(Prediction("hidden fraction, I/O-like load", f"a two-stage pipeline (overlap_hidden) = {bound:.3f}",
                              low=0.7 * bound, physical=(None, 1.0)), hidden["sleep"],
                   explain=ex.sleep_explain(rounds, N, EXHAUSTS))
viz.show_verdict(io_verdict)

# %%
spin_serial = ms["serial, spin load"]  # ms/step
gil_edge = ov.gil_hidden_bound(spin_serial, t_load, t_compute, probe.slowdown.low, t_spin)  # the same, as a fraction
if fastest > longer:  # else the bound allows everything (a probe that found no slowdown): no test
    spin_step = stats.median_interval([t / N for t in rounds["Prefetcher, spin load"]])  # s/step, median round
    took = f"Of the hideable time it hid {hidden['spin'].value:.3f}, at most {gil_edge:.3f} by the bound. "
    gil_verdict = judge(Prediction(
        "prefetched loop's time per step, GIL-holding load", "gil_least_step at the probe's least slowdown, "
        f"{probe.slowdown.low:.3g}x: {fastest:.2f} ms, assuming the step runs no faster during a spin than on average beside the "
        "probe's thread", low=fastest * 1e-3, unit="s", physical=(0, None)), spin_step, explain={
        k: took + v for k, v in ex.gil_explain(t_load, t_compute, t_step * 1e3, t_spin, probe.slowdown,
                                               ms["serial, sleep load"], spin_serial, spin_step.scaled(1e3)).items()})
    viz.show_verdict(gil_verdict)
else:
    gil_verdict = None
    print(f"the GIL-holding load hid {hidden['spin']}, not judged: the probe's least slowdown, "
          f"{probe.slowdown.low:.3g}x, leaves the least step at the longer part, {longer:.2f} ms")

# %% [markdown]
# **The model behind the two figures.** For the load that **holds the GIL** the thread can
# only run while the training step is inside a PyTorch kernel that released the GIL; every
# return to Python (module calls, the optimizer's loop over parameters; autograd's backward runs
# in C++ and holds the GIL only for Python hooks) waits for the loader thread to give the GIL
# back, up to Python's 5 ms switch interval. What it can hide is bounded by the step's time
# inside such kernels, and each switch can cost the step more; the figures above say how it came
# out here. That is why `DataLoader` workers are **processes**, and why a
# thread prefetcher is the tool for loads that wait (file or network reads, GPU copies) or run
# in native code that releases the GIL.
#
# Even the I/O-like load is not free of the GIL: the sleep releases it, but the DataLoader
# around it runs Python in the loader's thread (the load's time beyond the planted sleep, printed
# above), and waking up to hand the batch over needs the GIL again; when more processes want to
# run than there are cores, each handoff can wait for the OS to schedule the other thread.
#
# On CUDA, the same `Prefetcher` also pins each batch and copies it on its own side stream
# with `non_blocking=True`; the training stream waits on an event for that copy (on the GPU,
# not the host), and `record_stream` keeps the caching allocator from reusing the batch's
# memory while the step still reads it. One side stream serves the prefetcher's whole life:
# the allocator caches memory per stream, so a new stream per epoch would strand each epoch's
# cached blocks.

# %% [markdown]
# ## 6. Explore: workers, depth and per-sample cost
#
# The widget drives `simulate_pipeline` (the model of section 2; its verdicts say where it held
# on this machine): move the
# per-sample cost, the workers, the prefetch depth and the jitter, and read the predicted
# throughput and share of the step spent waiting, for a `BATCH`-sample batch, a `COMPUTE_MS`
# step and the per-batch handoff measured in 2a. It starts at the per-sample cost of section 2
# (`COST_MS`), 2 workers, prefetch depth 2 and a load jitter (coefficient of variation) of 0.5,
# which 2a's I/O-bound model did not have: at its start it reads below 2a's prediction for 2
# workers; move the jitter to 0 to get 2a's figure back. (Run headless, as in CI, the cell shows
# that starting setting's figure instead of the sliders.)

# %%
# NBVAL_IGNORE_OUTPUT
spec = vdata.loader_widget(batch_size=BATCH, compute_ms=COMPUTE_MS, handoff_ms=handoff_s * 1e3, per_sample_ms=COST_MS)
viz.build_widget(spec)

# %% [markdown]
# ## Summary
#
# * A loop with `num_workers=0` pays about `B * c + t_compute` per step, plus the loader's own
#   work per batch (section 1 prints the difference); the data share is predictable from two
#   measured numbers, and `StepMonitor`'s `data` phase measures it.
# * In the models, workers hide an I/O-bound load and scale past the cores, and a CPU-bound load
#   stops gaining once its busy workers fill the cores (section 2b prints what more workers gained
#   or lost here, where other jobs shared the cores too). `persistent_workers` pays process startup once;
#   `prefetch_factor` absorbs jitter. `pin_memory` matters only for copies to a GPU. The
#   verdicts above say which held on this machine.
# * Padding to a multiple of 8 costs a few pad tokens per row (section 3 counts them); what it buys,
#   tensor-core shapes and fewer distinct shapes to compile, is a GPU's and was not measured here.
#   Shard streaming datasets by worker **and** rank.
# * A thread prefetcher is the tool for loads that wait; a load that computes in Python runs only
#   while the step has released the GIL (section 5 measured what that hid here).

# %%
viz.show_headlines({
    "GPT-2 data share, tokenizing in the loop": f"{runs['0 workers'].data_share().value:.0%} "
                                                f"(predicted {predicted_share:.0%})",
    "GPT-2 data share, 1 worker": f"{runs['1 worker'].data_share().value:.0%}",
    "Prefetcher hidden fraction, I/O load": f"{hidden['sleep'].text()} (model {bound:.3f}; {io_verdict.outcome})",
    "Prefetcher hidden fraction, GIL-bound load": hidden["spin"].text() + (
        f" (at most {gil_edge:.3f}; the time-per-step bound: {gil_verdict.outcome})"
        if gil_verdict else " (no bound to judge)"),
    "I/O-bound loader, best measured": f"{max(BATCH / r.steady_step_s for r in io_runs):.0f} samples/s",
})
