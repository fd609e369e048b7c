# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Capstone: make a slow training job fast, one measured fix at a time
#
# Modules 00-07 each taught one technique on a workload chosen to show it. A real job has
# several problems at once, and they interact: fixing the data pipeline makes the next
# problem the largest, a larger batch changes the loss curve. This notebook takes one such
# job from slow to fast the way you would take your own:
#
# 1. **the job**: `examples/slow_train.py`, a tiny GPT-2 on Python's own source, data-parallel
#    on 2 processes under real `torchrun`, with one problem planted from every module; each
#    fix is one flag (`--fix data,sync,...`), so the diff of a fix is a few lines;
# 2. **diagnose, fix, measure, repeat**: `perfkit diagnose` (module 01) says where the step
#    goes; of the findings' fixes, the one that can remove the most is applied; its gain is
#    **predicted** from the measured share (Amdahl's law: removing a share `s` of the step speeds
#    it up at most `1 / (1 - s)`),
#    **measured**, and **judged** (a bound that cannot test its fix is shown beside the
#    measurement as context instead); until every finding with a fix has had it, applied or
#    tried and dropped (the last diagnosis, after the rounds, lists what it still finds);
# 3. **what it bought**: a waterfall of the measured speedups, tokens/s and the MFU of the measured
#    ceiling before and after, and the **time to a target loss**, since a larger batch changes the loss curve
#    and tokens/s alone would overstate it.
#
# Every number is measured on the machine running the notebook. `QUICK = True` (what CI uses)
# runs fewer steps on a smaller corpus, with a higher target loss, and offers the loop two
# fixes (data, ddp) instead of all: each round is a 2-process job of several seconds.

# %% tags=["parameters"]
import os
import shutil

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
MAX_BYTES = 300_000 if QUICK else 1_000_000  # standard-library source the GPT-2 trains on
SKIP, WINDOW = 2, 8            # perfkit diagnose: warm-up steps, then steps recorded (8: a median, not one step)
MEASURE = 8 if QUICK else 16   # steps after the window, timed without the profiler
TARGET_LOSS = 5.8 if QUICK else 5.2  # mean loss over the last 4096 tokens of both ranks (lab 06 uses 5.2 too)
MAX_STEPS = 1500               # a run that never reaches the target stops here

# %%
import statistics
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

import perfkit
from perfkit import ceilings, compute, hw, viz
from perfkit.profiling import render_text
from perfkit.profiling.capstone import CapstoneJob, FixLoop, job_peak, round_speedup
from perfkit.profiling.capstone_text import context_kinds_text, percent2, still_listed
from perfkit.verdict import judge
from perfkit.viz.capstone import ceiling_text, dropped_text, round_prediction, show_pick, target_context

ROOT = Path(perfkit.__file__).resolve().parents[1]  # the course's folder (any working dir)
SCRIPT = ROOT / "examples" / "slow_train.py"
sys.path.insert(0, str(SCRIPT.parent))
import slow_train  # noqa: E402  (the job itself: its fixes and the finding each one answers)

CUDA = torch.cuda.is_available()
# bf16 and compile only on CUDA; QUICK offers two fixes, so that CI's run fits its budget
AVAILABLE = slow_train.parse_fixes("data,ddp" if QUICK else "all", cuda=CUDA)
limits = hw.cached_limits(quick=QUICK)  # measured by notebook 00 (or now, if missing)
WORK = Path(tempfile.mkdtemp(prefix="capstone-"))  # the jobs' logs and profiles, removed at the end
job = CapstoneJob(SCRIPT, WORK, TARGET_LOSS, max_bytes=MAX_BYTES,
                  skip=SKIP, window=WINDOW, measure=MEASURE, max_steps=MAX_STEPS,
                  batch_factor=slow_train.FAST_BATCH / slow_train.SLOW_BATCH)
loop = FixLoop(job, AVAILABLE, slow_train.FIX_FOR_FINDING, limits, repeat_before=not QUICK,
               describe=slow_train.FIXES.get)
print(f"torch {torch.__version__} on {hw.device_name()}; 2 processes, {'NCCL' if CUDA else 'gloo'}; "
      f"fp32 ceiling of this machine {viz.si(limits.peak_flops('float32'), 'FLOP/s')}, the limits file's highest over "
      f"every run on this machine ({ceilings.ceiling_source(limits, 'float32', loaded=limits)}), this run's or an earlier "
      "run's: the file keeps each ceiling's highest, not when it was measured; notebook 00's last section prints both")
if hw.imitation():  # the machine's name above ends "(imitating ...)"
    caps = ", ".join(f"{k}={v}" for k, v in hw.IMITATIONS[hw.imitation()].items())
    print(f"imitating {hw.imitation()}: {caps} before torch's first op (perfkit.imitate), so bf16 takes the "
          "emulated path of a CPU without bf16 units" + (f"; fp32 matmuls go to {lib}, which reads neither "
          "variable (notebook 00), uncapped" if (lib := compute.fp32_matmul_library()) else
          "; fp32 matmuls run ATen's own kernels here (no BLAS library in this build), capped too"))
for name, what in slow_train.FIXES.items():
    print(f"  --fix {name:<10} {what}" + ("" if name in AVAILABLE else "   (not offered to the loop here)"))

# %% [markdown]
# ## 1. The slow job, diagnosed
#
# One round is one 2-process `torchrun` job (`perfkit.profiling.capstone.CapstoneJob`):
# `perfkit diagnose --then continue` runs the script unchanged, records `SKIP` warm-up steps
# and a `WINDOW` of profiled steps, writes its report, and lets the script run on. The
# script's own result (its JSON line: step times, losses) comes back through
# `perfkit.dist.launch`. Its speed is measured on the `MEASURE` steps after the window, without
# the profiler: tokens/s from their median. Every round runs on to the target loss of section 4,
# but only those steps are read as its speed, so that every run (a repeat run stops after them) is
# read at the same point of its life; section 4 says how far a whole run's rate strays from them. (The report's own throughput line is rank 0's samples per
# second at the batch its DataLoader yields; every other throughput here is both ranks' tokens/s.)

# %%
def rel(text):
    """A report's text with the course folder's path cut: paths read relative to the checkout."""
    return text.replace(f"{ROOT}/", "")


def shown(report):
    """The report's text, its step time's p95 replaced by the window's max: a p95 of a few steps is
    their slowest one, so the max is printed, with the count of steps it is the max of."""
    times = report["step_times_s"]
    return rel(render_text(report)).replace(
        f"p95 {report['step_p95_s'] * 1e3:.2f} ms", f"max {max(times) * 1e3:.2f} ms (of {len(times)} steps)", 1)


report = loop.start()
print(shown(report).split("\nFindings")[0])
if (c := report.get("mfu_ceiling")) and abs(c["flops_per_s"] / limits.peak_flops("float32", c["threads"]) - 1) < 1e-3:
    print(f"the counted FLOP rate's ceiling, {viz.si(c['flops_per_s'], 'FLOP/s')}: {ceilings.ceiling_source(limits, 'float32', c['threads'], loaded=limits)}")
built = loop.rounds[0]["result"]  # the script's own result: DDP's buckets by torch's own initial assignment
print(f"DDP's buckets: {built['ddp_buckets']} for the model's {built['n_params']:,} gradient values, laid out by torch's own initial assignment (in parameter order, never rebuilt with find_unused_parameters=True), each closed "
      f"once it holds {built['built']['bucket_cap_bytes']:,} bytes: {built['ddp_buckets']} bucket all-reduces a step, and one of its used-parameter map")

# %% [markdown]
# The findings, worst first (each names its evidence from this run, the most fixing it can
# buy, the fix and the notebook that teaches it). The sync finding's title is written for a GPU,
# where a read of a device tensor waits for the device. On a CPU a read waits for nothing, and
# the sync share holds the reads and the time between two reads with almost no operator in
# between: with `find_unused_parameters=True`, DDP waits there for each bucket's all-reduce
# (section 2 says more). Where a collective was in flight, the sync finding splits its share:
# the reads' own time, and the time that waited for the collective. That wait is communication
# (Holistic Trace Analysis, HTA, Meta's analyser of PyTorch profiler traces, counts a collective
# kernel's whole time, its wait included, as communication; the profiler itself records operators,
# not categories); the diagnosis books it as sync only because it falls between two reads, and still grades the finding
# on the whole share (it says what the reads alone would make of it). The loop below does not
# follow that grade: it plays the fix whose bound, the time that fix can remove, is largest.

# %%
display(Markdown("\n".join(f"{i}. **[{f['severity']}] {f['kind']}**: {f['evidence']}"
                           for i, f in enumerate(report["findings"], 1)) or "no finding"))

# %% [markdown]
# ## 2. Fix what can remove the most, measure, repeat
#
# Each finding kind has the flags that remove it (`slow_train.FIX_FOR_FINDING`): `data` ->
# `--fix data`; `sync` -> `--fix sync`, then `--fix ddp`; `communication` -> `--fix ddp`;
# `optimizer` -> `--fix optimizer`; `overhead` -> `--fix batch`, then `--fix compile` (offered on
# CUDA only); `compute` (forward and backward, an information-level finding, taken last) ->
# `--fix attention`, `--fix batch`, then on CUDA `--fix bf16` and `--fix compile`. The diagnosis marks each finding **high** (its share at least twice its share's threshold),
# **medium** (past a threshold: one that fires on a count alone, as the sync finding's reads per step
# can, is medium whatever the count) or **info** (information level: a fact, not a fault, such as forward and
# backward taking most of the step, or the machine's load). A round (`FixLoop.play`) takes, among
# the fixes of the findings above information level not applied or dropped yet, the one whose bound
# (below) is largest: the most it can remove, not the grade of the finding that named it (the sync
# finding's share holds DDP's waits for its all-reduces, which `--fix ddp` removes and `--fix sync`
# does not); it applies that fix on top of the earlier ones, runs the job again, and judges it.
#
# **Prediction.** The rule is Amdahl's: a fix removes at most the time its finding measured, a
# share `s` of the step, so the step gets at most `1 / (1 - s)` faster. That is a bound, judged
# as one: it claims no gain passes it, so a figure above it is missed, and the verdict prints how far
# its interval reaches back across it (the rule is not symmetric: a fix whose true gain sits at its
# bound is called missed about half the time, while a figure inside whose interval crosses the edge
# is inconclusive). Its terms:
#
# * `s` is measured in the profiled window of the configuration the fix is added to, and taken, for
#   every fix of a waste and for forward + backward, in milliseconds of that window over an *unprofiled* step (the share times
#   the profiled steps' mean over the unprofiled steps' mean, never less than 1: the mean throughout,
#   since a share is a phase's time over the window's mean step; each bound prints its milliseconds
#   and both means, and that unprofiled mean is not the median step tokens/s reads): a phase takes no longer without the
#   profiler than with it, so this is the most it can take of an unprofiled step, as long as the runs
#   bore no load that the window did not (a factor that moves between configurations says the load
#   differed: the headlines say how far it moved). That factor mixes
#   the profiler's cost with any load that differed between the window and the runs, which is why
#   it is never taken below 1. Where the product reaches 99 % of the step the bound is void (no
#   finite gain); past the whole step the premise itself failed in that round (no phase takes more
#   than the whole step): the round says so, prints no bound, and is shown as context;
# * a fix that answers two kinds (`ddp`: sync and communication) is bounded by their shares added;
# * the **data** fix: while one rank loads its data, the other waits for it at the next
#   collective, booked as communication, so `s` is the data share plus the communication share
#   (the communication share holds more than that wait: where the gain passes the data share
#   alone, the round says so, and whether communication fell);
# * the **sync** fix: the training loop's reads and the host loop between them, plus the whole
#   communication share (the loop's own collectives, which the fix runs less often, are not
#   measured apart from DDP's), but not the time DDP waited for a collective between two of its
#   reads (below);
# * a **larger batch** is bounded by its own factor of tokens per step (a step that carries more
#   tokens cannot get shorter); `1 / MFU` is printed beside it, as room, not as a bound: its peak
#   is the best rate measured on this machine so far, which a later measurement can raise;
# * one rule (`capstone_text.bound_class`) says why a bound cannot test its fix, and such a bound is
#   printed as **context**, not judged: **too loose**, 10x or more (90 % of an unprofiled step,
#   `MAX_TESTABLE_SHARE`: it fails only on a gain above that); **too tight**, under 5 % (below);
#   **broader than the fix**, a bound that counts whole phases of which the fix changes a part the
#   diagnosis does not measure apart (the compute fixes, below); **not what limits the fix**, the
#   peak, where a larger batch's own factor of tokens limits it more.
#
# The step should not get slower either, but that is an expectation, not a bound (a fix can cost
# more than it saves): a speedup below 1x is missed only when its whole interval lies below 1x.
# The shares were measured under a profiler, which can stretch the configurations before and
# after a fix unequally; every verdict says how the profiled window's own gain, and each
# configuration's profiled over unprofiled step, compare with the runs'. Above a bound, the
# verdict measures the fix against the run before that the bound was set from (its profiled over
# unprofiled step is that run's; the judged ratio is against the mean of the runs before): within
# the bound there, the other run before moved the mean; past it, the fix removed more milliseconds
# of that run's step than the bound allows, which means the bound's phases took longer without the
# profiler than with it, or the fix removed time the diagnosis booked in other phases.
#
# **Measurement.** Tokens/s after over before, "before" being the configuration the fix was added to:
#
# * default: the configuration before runs **twice**, before and after the new one, and the ratio
#   is against the mean of the two, so a load that drifts steadily across the three runs cancels.
#   Its interval comes from each run's median step (each median's narrowest order-statistic
#   interval, the three holding together at 90 % or more, `perfkit.stats.of_medians`; the exact
#   coverage is printed with it), widened to the ratio against each "before" alone: of the steps'
#   spread it covers at least what it prints, so a round is inconclusive more often than an interval
#   of exactly that coverage would make it. It takes a run's steps as independent draws; they are
#   consecutive steps of one process, so neither drift within a run nor how far separate runs move
#   is in it (where the slow job ran more often than the headline's mean takes, section 3 sets the
#   whole gain against each of its runs). Where the two runs before lie more than a tenth apart, the
#   verdict names them and the fix's ratio against each;
# * QUICK: each configuration runs **once**, and the run after one fix is the run before the next:
#   the ratio of the two runs' median steps, with the interval of two separate runs
#   (`perfkit.stats.median_ratio(paired=False)`); a load that changed between two runs moves it.
#
# **Reading the sync rounds.** The diagnosis counts every read of a tensor's value to the host
# (`.item()`, `.cpu()`) as a sync, and books as sync the time between two reads with almost no
# operator between them. On a CPU a read costs microseconds. DDP's reads here
# (`find_unused_parameters=True`) are of its host copy of the used-parameter map
# (`local_used_map_[variable_index].item<int>()` in `Reducer::finalize_bucket_dense`, once per
# parameter), and DDP finalizes bucket by bucket, each after waiting for its all-reduce; with the
# slow job's buckets, each closed at 1,048 bytes (`bucket_cap_mb=0.001`, section 1 prints how many), every such
# wait after the first bucket's falls between two reads: communication booked as sync, which the
# sync fix's bound assumes that fix leaves, and which `--fix ddp` removes. Fewer reads leave fewer
# gaps to book such a wait in, so the sync round prints how that part moved, and says where it fell. (On CUDA, when a parameter went unused, the Reducer
# also copies the map's device copy back to the host: a real device sync there.) Where what the
# sync fix can remove is under 5 % of an unprofiled step (`MIN_TESTABLE_SHARE`; its profiled share times
# the factor above), the gain from removing it is bounded near 1x, closer than two runs of this job minutes apart repeat: that round is shown
# as **context**, not judged; a measurement past a context bound (for the sync fix, past the bound
# of the reads alone too) is said, with what the round measured about why. So is any finding that fires on its count of reads with a share under 5 %.
#
# **The compute fixes.** Once every finding above information level has had its fixes (applied,
# or tried and dropped: the last diagnosis lists any that still stands), the loop turns to forward
# and backward, and a larger batch (judged against its factor of tokens). **Attention** (fused `scaled_dot_product_attention`) changes a part of them the
# diagnosis does not measure apart, so Amdahl's bound can only use their whole share (over an
# unprofiled step, as above): broader than the fix, it cannot test it and is printed as **context**
# beside the measurement, with no prediction recorded.
# On CUDA, bf16 autocast and `torch.compile` follow, with the same bound. A fix whose median
# speedup is below 1x is dropped, and the next round starts from the configuration before it; one
# above 1x is kept. Where the interval holds 1x, either is the loop's rule, not a finding (this run
# cannot tell that fix from no change), and the round, the last diagnosis and the figures say so.
# A median above 1x alone keeps fixes on noise (the kept rounds are selected for reading high, the
# winner's curse), so a kept fix is **credited** with a gain (drawn as one in section 3, listed among
# the fixes applied and credited) only where its interval lies above 1x, or where the parts of the
# step its bound sums (for `--fix sync`, the reads and the loop between them plus communication, not
# the wait the bound leaves out) fell, in milliseconds per profiled step, by more than the profiled
# steps' spread: the standard deviation of the profiled step times, the larger of the two windows'
# (the diagnosis gives each phase's share of its window, not its time in each step, so the whole
# step's spread stands in; a spread of single steps, wider than that of a window's mean, is a
# cautious bar). Any other kept fix is **applied, not credited**; section 3 prints, for each kept
# fix, which of the two decided it.

# %% [markdown]
# One round per cell (each is one or two 2-process jobs of seconds to a minute). A cell after
# the last round has nothing left to do. Each round shows its fix and its prediction (or, where
# the bound cannot test the fix, that bound as context) before it runs the jobs; then what they
# measured, and the verdict, which sets out the prediction's model.

# %%
def play_round():
    """Play the next round; show its figures and judge its speedup against the bound its
    finding predicts. False when nothing is left to fix."""
    r = loop.play(announce=show_pick)  # its heading and prediction, shown before its runs
    if viz.show_round(r) and not r.pick.untested:
        v = judge(round_prediction(r.pick), r.speedup, explain=r.explain)
        viz.show_verdict(v)
        round_outcomes[r.pick.fix] = v.outcome + (f" ({v.direction})" if v.outcome == "missed" else "")
        judged_by[r.pick.fix] = "its factor of tokens" if r.pick.by_tokens else "the diagnosed share"
    elif r is not None:  # a bound that cannot test the fix: context, no verdict recorded
        round_outcomes[r.pick.fix] = viz.capstone.context_outcome(r)  # "context, faster", and whether within its runs' drift
        text = viz.round_context(r)
        display({"text/markdown": text, "text/plain": text.replace("**", "")}, raw=True)
    return r is not None


round_outcomes, judged_by = {}, {}  # fix -> its round's verdict, and what bounded it, for the summary
more = play_round()

# %%
more = more and play_round()

# %%
more = more and play_round()

# %%
more = more and play_round()

# %%
more = more and play_round()

# %%
more = more and play_round()

# %% [markdown]
# On CUDA two more fixes are available (bf16 and compile): the rounds go on until none is left.

# %%
while more:
    more = play_round()

# %% [markdown]
# The last diagnosis, after every fix the loop chose; then each finding above information level
# it still lists, with what became of its fixes (the loop stops when those are used up, not when
# no finding is left); then the planted problems whose fix the loop never tried, with the share of
# the step each still takes (each below its finding's threshold). The shares are rank 0's;
# communication is judged on the least exposed rank, since a rank's exposed collective time
# includes waiting for the slower rank (compare the two ranks' work outside collectives: a rank's
# *mean* profiled step less its collective time, printed beside its *p50* step, so where a slow
# step pulls the mean above the median it can read above the p50).

# %%
final, first, last = loop.rounds[-1]["report"], loop.rounds[0]["result"], loop.rounds[-1]["result"]
print(shown(final).split("\ntrace")[0])
standing = still_listed(final, slow_train.FIX_FOR_FINDING, loop.applied, loop.tried, AVAILABLE)
print("\n".join([f"still listed: {s}" for s in standing] + loop.left_alone()))
for fix, g in loop.tried.items():  # its interval decides whether the drop says anything about the fix
    print("tried: " + dropped_text(fix, g))

# %% [markdown]
# The diagnosis names *phases*: its "compute" finding says forward and backward take most of the
# step, not that they run at the machine's arithmetic speed. How far from it they are is a simpler
# question than the roofline's (which classifies a kernel by its FLOPs per byte against the
# machine's FLOP/s per byte/s, and needs the bytes each operator moves, not measured here): at the
# measured fp32 ceiling the step's model FLOPs would take `FLOPs / peak` seconds. We call forward +
# backward **near the ceiling** when that is at least half their time, else **far from it**: then
# most of their time is not arithmetic at full speed, but memory traffic, per-operator dispatch
# (with a model this small, many tiny operators) or both; this run does not tell which. Their time
# is a share measured in the profiled window: applied to the unprofiled step it assumes the profiler
# stretched every phase alike, so the line reads it both ways, over the unprofiled step and over the
# window's own, and where the two part across half it says so.

# %%
step_s = statistics.median(job.after_window(last))  # s per step, unprofiled
print(ceiling_text(final["shares"]["forward"] + final["shares"]["backward"], step_s, statistics.mean(final["step_times_s"]),
                   job.mfu(last, job_peak(limits, last)) * step_s, job_peak(limits, last)))

# %% [markdown]
# ## 3. What the fixes bought
#
# The whole gain is measured **directly**, the way each round was: the fixed job against the
# slow one (at default size the slow job runs once more now, so its first run and this one, the two
# the headline's mean takes, bracket every round; a repeat run of it inside a round is that round's
# alone). The rounds' ratios multiply to the whole gain only if every configuration ran at the
# same speed in the round where it was the "after" and in the next one, where it was the
# "before"; whatever differs between those runs (load that changed between rounds, or a repeat
# run that reads slower than the run to the target it repeats) compounds in their product, so
# the headline is the direct ratio; the line below says, in the order the runs ran, which way
# each repeat went. A
# **seam** is one configuration read twice: its tokens/s as one round's "after" and again as the
# next round's "before"; the seams' ratios (second reading over first, as every arrow here reads)
# multiply to exactly the direct ratio over the rounds' product, so where they cancel the two
# agree. The product's range adds the rounds' log half-widths in quadrature, as for independent
# errors; adjacent rounds share a run, which moves their ratios in opposite directions, so that
# range is wider than it needs to be, and since each round's widened interval covers an unknown
# share above the one it prints, the range has no stated confidence: it is printed as a range,
# not as an interval. When the slow job's
# two runs lie more than a tenth apart, the headline says so, as a round does.
# Each bar is one kept fix's speedup as measured in its round (log scale: equal factors, equal
# heights), labelled with it; the next bar is the drift between runs, the direct ratio over the
# rounds' product (what the seams moved), drawn apart from the fixes, where it shows at two
# decimals; the last bar is the direct ratio. A black line through a bar's top is its interval, as
# printed. A fix measured below 1x is not among them; a kept
# fix not credited (its interval held 1x, and its bound's parts fell by no more than the profiled
# steps' spread) is drawn grey, labelled
# "not credited": its gain is not one this run can show. One whose
# interval lies above 1x, but whose round's two runs before lay at least as far apart as its gain
# lies from 1x, is drawn pale green and labelled "within the runs' drift": two runs of one
# configuration differed that much, so drift alone could have made it. The second figure is every
# run of this section's loop, in the order it ran, at the tokens/s of its measured steps, one colour
# per configuration, a dashed line joining the runs of one configuration: how far those moved between
# rounds, beside how far a fix moved the next configuration.
# **MFU of the measured ceiling** is the model's FLOPs (6 per parameter per token, the position embeddings left out since a
# lookup multiplies nothing; the token embedding, a lookup too, counts only because GPT-2 ties it
# to the output layer, whose matmul multiplies; plus attention; module 06) of both ranks per second over this
# machine's measured all-cores peak for the job's precision (fp32; bf16 once `--fix bf16` runs):
# the two processes run one thread each, on all the cores there are. It is read on the
# unprofiled steps. HFU (hardware FLOPs utilization) counts the FLOPs that ran, recomputation
# included (PaLM's appendix B defines both): it exceeds MFU where recomputation adds work, but not
# in general, since MFU's 6N + attention is a count of the model, and a kernel that skips work
# (causal attention's masked half, say) runs fewer FLOPs than that count. The
# diagnosis' "counted FLOP rate" is neither: it counts the FLOPs of the matmul and convolution
# ops the profiler has formulas for (after `--fix attention`, the fused attention's are not among
# them) on one rank, over one thread's ceiling, in the profiled, slower, window: that window's
# matmul FLOP rate, which can lie below the MFU here. Both divide by a *measured* ceiling, not a
# vendor's peak, so they read higher than a published MFU on the same machine would: PaLM's MFU
# divides by the hardware's theoretical peak, so ours carries its own name. It is
# printed to two figures: runs of one configuration minutes apart differ by more than a third
# figure would say (where the slow job ran twice, each run's MFU is printed beside their mean's).

# %%
total = loop.finish()  # the slow job again (default size), and the direct ratio
display(Markdown(viz.total_text(total)))
unresolved = [fix for fix, _ in loop.waterfall if fix not in loop.credited]  # applied, not credited
if loop.waterfall:
    viz.plot_waterfall(loop.waterfall, total=total.direct.value, unresolved=unresolved, drifted=loop.drifted, intervals=[(g.low, g.high) for g in loop.gains],
                       total_interval=(total.direct.low, total.direct.high), title="Each fix's tokens/s speedup as measured in its round, with its interval, then the drift and the total")
    plt.show()
print("\n".join(loop.credits[f] for f, _ in loop.waterfall))  # each kept fix: what credited it, or not
viz.capstone.plot_runs(loop.runs, title="Every run's tokens/s in the order run, by the fixes it ran with")
plt.show()
mfu = {name: job.mfu(r, job_peak(limits, r), tps) for name, r, tps in
       (("slow", first, total.slow_tps), ("fixed", last, total.fixed_tps))}
pct = percent2  # two figures: runs of one configuration repeat no closer
slow_mfus = [pct(job.mfu(first, job_peak(limits, first), t)) for t in total.slow_runs_tps]
runs_mfu = f" (its runs {' and '.join(slow_mfus)})" if len(slow_mfus) > 1 else ""
for name, r, tps in (("slow", first, total.slow_tps), ("fixed", last, total.fixed_tps)):
    print(f"{name:>5}: {tps:9,.0f} tokens/s, MFU of the measured ceiling {pct(mfu[name])}{runs_mfu if name == 'slow' else ''} (of "
          f"{viz.si(job_peak(limits, r), 'FLOP/s')}), batch {r['tokens_per_step']:,} tokens/step, "
          f"fixes: {', '.join(r['fixes']) or 'none'}")

# %% [markdown]
# ## 4. Time to a target loss
#
# Tokens/s is not the goal; a model that reaches its loss sooner is. The batch fix trains
# on 4x the tokens per optimizer step, and fewer, larger steps make less progress per token
# early in training (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training":
# above the critical batch size, more tokens per step buy less than proportional progress).
#
# **Expectation (context, not a prediction).** The time to the target loss improves by less than
# tokens/s: at most the tokens/s gain of the two runs compared here (the top of its interval), if
# the fixed job needs at least as many tokens to get there. That is an expectation (McCandlish's
# model), not a bound, and so is the 1x below it. The two runs are the slow job's first
# run and the fixed one; the direct ratio of section 3 has another baseline where the slow job
# ran twice (the mean of both runs), and the line below says how far that moves it.
#
# Every round ran until the mean loss over the last 4096 tokens reached `TARGET_LOSS`; the
# first and the last are compared here. Each run's clock starts when its data's preparation
# does: `--fix data` tokenizes every document before the first step, which moves that time out
# of the steps (tokens/s no longer sees it), not away, so the time to the target counts it
# (printed beside each time). Their profiled windows (and the step that wrote the
# trace) are counted at the median unprofiled step time: the profiler's cost is not the job's.
# With `--fix sync` the job reads its losses only every `--check-every` (10) steps, so it stops
# at the first read past the target and its curve runs on a few steps below it; the time and the
# steps to the target are taken afterwards from every step's recorded loss. Each side is one run,
# so the ratio below has no interval: where a curve approaches the target slowly, a little
# noise moves its crossing by a lot. One ratio is one sample, too few for an interval, so a
# verdict on it could only read inconclusive, wherever it fell: it would test nothing, so none is
# recorded, and the expectation is printed as context for where the figure lies against its edges. The learning rate was chosen as the best of three at both
# batch sizes (`slow_train.LR`), so the larger batch is not held back by a rate tuned for the
# smaller one.

# %%
reach = {name: job.reached(r) for name, r in (("slow", first), ("fixed", last))}
for name, r in (("slow", first), ("fixed", last)):
    print(f"{name:>5}: " + ("did not reach the target" if reach[name] is None else
                            f"loss {TARGET_LOSS} after {reach[name][0]:.1f} s ({r['data_prep_s']:.2f} s of it "
                            f"preparing the data), {r['steps_to_target']} steps, {reach[name][1]:,} tokens"))
curves = {name: job.loss_curve(r, slow_train.smoothed) for name, r in (("slow", first), ("fixed", last))}
fig = viz.plot_time_to_target(curves, TARGET_LOSS, title="Mean loss over the last 4096 tokens against seconds, "
                                "the data's preparation counted", ylabel="mean loss, last 4096 tokens")
plt.show()

# %%
if not loop.applied:  # the slow run against itself: nothing to judge
    print("no fix was kept: the fixed job is the slow one, and its time to the target the same run's")
elif None not in reach.values():  # the edge: the tokens/s gain of these two runs
    tt_gain, tokens_x = reach["slow"][0] / reach["fixed"][0], reach["fixed"][1] / reach["slow"][1]
    pair = round_speedup(job, [first], last)  # the fixed run over the slow run whose time is read
    print(viz.target_text(tt_gain, tokens_x, pair, total, (reach["slow"][1] / reach["slow"][0], job.tokens_per_s(first))))
    text = target_context(tt_gain, tokens_x, pair, "batch" in last["fixes"])  # one run a side: no verdict
    display({"text/markdown": text, "text/plain": text.replace("**", "")}, raw=True)

# %% [markdown]
# ## 5. On a GPU
#
# The same script runs unchanged with CUDA: the process group is NCCL, and `--fix all` adds
# two fixes that the loop applies only on a GPU: **bf16 autocast** (tensor cores; on a CPU it
# pays only with native bf16 units, which notebook 00's bf16/fp32 ratio shows, and module 06
# measures what it gives a training step) and **torch.compile** (kernel fusion; whether a short
# run pays back its compile time is module 06's break-even count). The data fix also pins
# memory and overlaps the host-to-device copy with `perfkit.data.Prefetcher`, and the
# optimizer fix uses `AdamW(fused=True)`. The sync fix matters far more there: every
# `.item()` waits for the whole GPU queue, so the per-step reads above stall the device.
# The loop above picks those fixes itself when `torch.cuda.is_available()`.

# %% [markdown]
# ## Summary
#
# * The bounds chose the order: each round played the fix that could remove the most by the
#   diagnosis it started from (bounds are taken anew each round, so a later round can play a larger
#   bound than an earlier one), not the finding graded worst (the sync finding's grade counts DDP's waits, which are communication).
#   Each round set its fix's gain against the bound its finding's
#   share gave (a larger batch: against its factor of tokens per step), judged where that bound
#   could test the fix and shown as context where it could not. The headlines count the rounds shown
#   as context and, for each kind of bound, the judged rounds that held, missed (each verdict says
#   why) and were inconclusive (these runs could not tell); where no round judged against a diagnosed
#   share held or missed, they say that this run did not test whether the shares predict the gains,
#   and they say how far the factor that scaled every share moved between configurations.
# * A fix kept or dropped on an interval that holds 1x is one this run cannot tell from no
#   change: the headlines say so beside it.
# * On a CPU the sync share of a DDP job with `find_unused_parameters=True` is not the reads'
#   cost: the sync finding splits it, and the part with a collective in flight is communication,
#   which the sync fix's bound leaves out; the sync round says how far that part moved with the fix.
# * When every finding above information level has had its fixes (applied, or tried and dropped:
#   the headlines list any finding the last diagnosis still shows), the loop turns to the compute:
#   attention's bound is the compute's whole share, broader than the fix, so it is printed as
#   context and its gain is what was measured. A larger batch is judged against its factor of
#   tokens per step.
# * The time to the target loss, not tokens/s, says what the job gained; its clock counts the
#   data's preparation, which the data fix moves out of the steps, where tokens/s does not see it.

# %%
viz.show_headlines({
    "fixes applied and credited": ", ".join(loop.credited) or "none",
    "applied, not credited (interval holds 1x, its bound's parts fell by no more than the profiled steps' spread)":
        ", ".join(unresolved) or "none",
    "tokens/s": viz.capstone.headline_rate(total, reach if loop.applied else None,  # beside the runs to the target
                                           {"slow": first["data_prep_s"], "fixed": last["data_prep_s"]}),
    f"each round's outcome (context: a bound that cannot test its fix, {context_kinds_text()})": ", ".join(
        f"{f}: {o}" for f, o in round_outcomes.items()) or "none",
    "verdicts, by what bounded them": viz.tally_text(round_outcomes, judged_by, ("the diagnosed share", "whether the diagnosed shares predict the gains"),
                                                     loop.factors),
    "tried and dropped": "; ".join(dropped_text(f, g) for f, g in loop.tried.items()) or "none",
    "findings above information level the last diagnosis still lists": "; ".join(standing) or "none",
    "MFU of the measured ceiling": f"{pct(mfu['slow'])}{runs_mfu} -> {pct(mfu['fixed'])} (6N + attention "
                                   "FLOPs over this machine's measured peak of the job's precision, not "
                                   "PaLM's theoretical peak)",
    "time to target loss": (f"{reach['slow'][0]:.1f} s -> {reach['fixed'][0]:.1f} s "
                            f"({reach['slow'][0] / reach['fixed'][0]:.2f}x; the data's preparation counted: "
                            f"{first['data_prep_s']:.2f} s and {last['data_prep_s']:.2f} s)"
                            if None not in reach.values() else "not reached"),
})
shutil.rmtree(WORK, ignore_errors=True)  # this run's logs and profiles (see WORK at the top)
