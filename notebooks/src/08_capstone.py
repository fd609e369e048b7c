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
#    goes; the top finding's fix is applied; its gain is **predicted** from the measured share
#    (Amdahl's law: removing a share `s` of the step speeds it up at most `1 / (1 - s)`),
#    **measured**, and **judged**; until the diagnosis finds nothing worth fixing;
# 3. **what it bought**: a waterfall of the measured speedups, tokens/s and MFU before and
#    after, and the **time to a target loss**, since a larger batch changes the loss curve
#    and tokens/s alone would overstate it.
#
# Every number is measured on the machine running the notebook. `QUICK = True` (what CI uses)
# runs fewer steps on a smaller corpus, with a higher target loss.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
MAX_BYTES = 300_000 if QUICK else 1_000_000  # standard-library source the GPT-2 trains on
SKIP, WINDOW = 2, 4            # perfkit diagnose: warm-up steps, then steps recorded
MEASURE = 8 if QUICK else 16   # steps after the window, timed without the profiler
TARGET_LOSS = 5.8 if QUICK else 5.0  # mean loss over the last 4096 tokens of both ranks
MAX_STEPS = 1500               # a run that never reaches the target stops here

# %%
import json
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

import perfkit
from perfkit import dist, hw, stats, viz
from perfkit.compute import gpt_train_flops
from perfkit.profiling import render_text
from perfkit.verdict import Prediction, judge

ROOT = Path(perfkit.__file__).resolve().parents[1]  # the course's folder (any working dir)
SCRIPT = ROOT / "examples" / "slow_train.py"
sys.path.insert(0, str(SCRIPT.parent))
import slow_train  # noqa: E402  (the job itself: its fixes and the finding each one answers)

CUDA = torch.cuda.is_available()
AVAILABLE = slow_train.parse_fixes("all", cuda=CUDA)  # bf16 and compile only on CUDA
limits = hw.cached_limits(quick=QUICK)  # measured by notebook 00 (or now, if missing)
PEAK = limits.peak_flops("float32")
OUT = Path(tempfile.mkdtemp(prefix="capstone-"))
print(f"torch {torch.__version__} on {hw.device_name()}; 2 processes, "
      f"{'NCCL' if CUDA else 'gloo'}; fp32 peak of this machine {viz.si(PEAK, 'FLOP/s')}")
for name, what in slow_train.FIXES.items():
    print(f"  --fix {name:<10} {what}" + ("" if name in AVAILABLE else "   (not in `all` here)"))

# %% [markdown]
# ## 1. The slow job, diagnosed
#
# One round is one 2-process `torchrun` job: `perfkit diagnose --then continue` runs the
# script unchanged, records `SKIP` warm-up steps and a `WINDOW` of profiled steps, writes
# its report, and lets the script run on. The script's own result (its JSON line: step
# times, losses) comes back through `perfkit.dist.launch`. Its speed is measured on the
# steps after the window (at least `MEASURE`), without the profiler: tokens/s from the
# median step. Every round runs until the target loss of section 4; after it, the round before
# runs once more, for the measured steps only, so each fix is timed between two runs without it.

# %%
def run_round(fixes, to_target=True):
    """(diagnosis report, the script's result) of the job with these fixes, run until the
    target loss (and at least through the measured steps); or, with ``to_target=False``,
    for the measured steps only (a repeat run, whose speed, not loss, is compared)."""
    out = OUT / (("-".join(fixes) or "none") + ("" if to_target else "-again"))
    steps = (["--steps", MAX_STEPS, "--target-loss", TARGET_LOSS, "--min-steps", SKIP + WINDOW + 1 + MEASURE]
             if to_target else ["--steps", SKIP + WINDOW + 1 + MEASURE])
    args = ["diagnose", "--out", str(out), "--then", "continue", "--skip", SKIP,
            "--steps", WINDOW, str(SCRIPT), "--fix", ",".join(fixes) or "none",
            *steps, "--max-bytes", MAX_BYTES]
    result = dist.launch("perfkit", nproc=2, args=args, timeout_s=900)[0]
    return json.loads((out / "report.json").read_text()), result


def after_window(result):
    """Step times after the profiled window (and after the step that wrote the trace)."""
    return result["step_times_s"][SKIP + WINDOW + 1:]


def tokens_per_s(result, steps=None):
    """Tokens per second at the median step (of ``steps``, default after the window)."""
    return result["tokens_per_step"] / statistics.median(steps or after_window(result))


def speedup(befores, after, resamples=400):
    """tokens/s after over the mean of ``befores`` (the previous configuration, run before and
    after the new one) as a perfkit.stats Estimate: the 10th-90th percentile of that ratio over
    bootstrap resamples of every run's steps, widened to the ratio against each before alone (a
    load that drifted across the three runs shows as a gap between those two) and to the point."""
    rng, b = random.Random(0), after_window(after)

    def ratio(steps_after, steps_before):
        return tokens_per_s(after, steps_after) / statistics.mean(
            tokens_per_s(r, s) for r, s in zip(befores, steps_before))

    boot = sorted(ratio(rng.choices(b, k=len(b)), [rng.choices(a, k=len(a)) for a in map(after_window, befores)])
                  for _ in range(resamples))
    each = [tokens_per_s(after) / tokens_per_s(r) for r in befores]
    point = ratio(b, [after_window(r) for r in befores])
    return stats.Estimate(point, min(boot[resamples // 10], *each, point), max(boot[-resamples // 10 - 1], *each, point),
                          None, len(b), "p10-p90 of step resamples, widened to the ratio against each run before")


report, result = run_round(())
rounds = [{"fixes": (), "report": report, "result": result}]
print(render_text(report).split("\nFindings")[0])

# %% [markdown]
# The findings, worst first (each names its evidence from this run, the most fixing it can
# buy, the fix and the notebook that teaches it):

# %%
display(Markdown("\n".join(f"{i}. **[{f['severity']}] {f['kind']}**: {f['evidence']}"
                           for i, f in enumerate(report["findings"], 1)) or "no finding"))

# %% [markdown]
# ## 2. Fix the top finding, measure, repeat
#
# Each finding kind has the flags that remove it (`slow_train.FIX_FOR_FINDING`): `data` ->
# `--fix data`; `sync` -> `--fix sync`, then `--fix ddp` (DDP's `find_unused_parameters=True`
# reads one value per parameter to the host in every backward); `communication` ->
# `--fix ddp`; `optimizer` -> `--fix optimizer`; `overhead` -> `--fix batch`. A round takes
# the worst finding with a fix not applied yet, applies it on top of the earlier ones, runs
# the job again, and judges (a fix that answers two kinds, like `ddp`, is bounded by their
# shares added):
#
# **Prediction.** The fix removes at most the time its finding measured, so the step gets
# at most `1 / (1 - share)` faster (Amdahl's law), and it should not get slower. The shares
# are measured in the profiled window, and the profiler slows PyTorch's operators (syncs and
# collectives are such operators), not the tokenizer: so the data share is the data time
# over the *unprofiled* step (the profiled one where the profiler did not slow the step), no
# less than its true share, and `1 / (1 - share)` stays an upper bound.
# The measured figure is tokens/s after over before, with the configuration before run twice,
# before and after the new one, against the mean of the two: a load that drifts steadily
# cancels. Its spread is the 10th-90th percentile of the same ratio over bootstrap resamples
# of the three runs' steps (the noise within the runs), widened to the ratio against each
# "before" alone (the drift between runs). A spread across a bound makes the verdict
# inconclusive.
#
# Two things to know when reading the sync rounds: on a CPU an `.item()` waits for no device
# queue, so the sync share is mostly the Python work around the reads; and half of the
# slow job's reads come from DDP, which the sync fix does not touch.
#
# Once no finding above information level is left, what remains is the arithmetic itself:
# forward and backward. The compute fixes of module 06 are predicted from their own models:
# **attention** (fused `scaled_dot_product_attention`) changes only forward and backward, so
# Amdahl's bound uses their share; a **larger batch** (more work per operator) is bounded by
# the machine's peak: tokens/s can rise at most `1 / MFU`. On CUDA, bf16 autocast and
# `torch.compile` follow, with the same bound as attention.

# %%
def next_fix(report, result, applied):
    """(kind, share, bound, model, fix) for the next round, or None: nothing worth fixing.
    A fix already applied, or tried and found slower (``tried``), is not chosen again."""
    for f in report["findings"]:
        if f["severity"] == "info":
            continue
        for fix in slow_train.FIX_FOR_FINDING.get(f["kind"], ()):
            if fix not in applied and fix not in tried and fix in AVAILABLE:
                # the fix may also answer other kinds (ddp: sync and communication)
                also = [k for k, fixes in slow_train.FIX_FOR_FINDING.items() if fix in fixes
                        and k != f["kind"] and k in report["shares"]]
                share = f["share"] + sum(report["shares"][k] for k in also)
                names = " + ".join([f["kind"], *also])
                if f["kind"] != "data":
                    return (f["kind"], share, 1 / (1 - share), f"Amdahl: the {names} share {share:.1%} "
                            "removed", fix)
                # the profiler slows PyTorch's operators, not the tokenizer: the same data time
                # counted against an unprofiled step
                slowdown = statistics.mean(report["step_times_s"]) / statistics.median(after_window(result))
                share = min(share * max(1.0, slowdown), 0.99)
                return (f["kind"], share, 1 / (1 - share),
                        f"Amdahl: the data time, {share:.1%} of an unprofiled step, removed", fix)
    compute = report["shares"]["forward"] + report["shares"]["backward"]
    for fix in slow_train.FIX_FOR_FINDING["compute"]:
        if fix in applied or fix in tried or fix not in AVAILABLE:
            continue
        if fix == "batch":
            mfu = mfu_of(result)
            return ("compute", mfu, 1 / mfu, f"the peak: MFU {mfu:.2%} can rise to 100 %", fix)
        return ("compute", compute, 1 / (1 - compute),
                f"Amdahl: forward + backward, {compute:.1%} of the step", fix)
    return None


def mfu_of(result):
    """Model FLOPs per second (6N per token + attention) over this machine's measured peak
    for the precision the job ran in (bf16 with --fix bf16, else fp32)."""
    n = result["n_params"] - result["seq_len"] * 64  # position embeddings: a lookup
    flops = gpt_train_flops(n, 2, 64, result["seq_len"], result["tokens_per_step"])
    return flops * tokens_per_s(result) / result["tokens_per_step"] / peak_of(result)


def peak_of(result):
    """The measured matmul ceiling for the job's precision, in FLOP/s."""
    bf16 = "bf16" in result["fixes"] and "bfloat16" in limits.matmul_flops
    return limits.peak_flops("bfloat16") if bf16 else PEAK

# %%
applied, waterfall, tried = [], [], {}  # tried: fix -> its gain, for rounds that made the step slower


def explain_round(kind, fix, gain, spread, bound, before):
    """The verdict's sentence for each outcome, chosen by what this round measured (``before``:
    the round the fix was chosen from)."""
    cause = {"batch": "the bound is the machine's peak",
             "compute": "the bound uses the whole forward + backward share, of which this fix "
                        "changes a part"}.get("batch" if fix == "batch" else kind)
    noise = ("the change was smaller than the noise within the rounds" if spread[0] < 1.0 <= spread[1]
             else "the speedup reaches the bound within the noise of the rounds")
    inconclusive = f"{cause}; {noise}." if cause else f"{noise}."
    slowdown = (statistics.mean(before["report"]["step_times_s"])
                / statistics.median(after_window(before["result"])))
    held = f"It bought {(gain - 1) / (bound - 1):.0%} of what the bound allowed." if bound > 1 else ""
    if kind == "data" and bound >= 99:  # the share was capped at 99 %
        held = (f"The data time in the profiled window was as long as a whole unprofiled step (the "
                f"profiled steps took {slowdown:.1f}x as long: the profiler, and any load), so this bound "
                "says little.")
    above = ("a rank's data time also holds the other rank up at the next collective, where it counts as "
             f"communication ({before['report']['shares']['communication']:.1%} of the step before the "
             "fix), not as data; and the" if kind == "data" else
             (f"the bound's share was measured under the profiler, where a step took {slowdown:.1f}x as "
              "long as without it; " if slowdown > 1.1 else "")
             + "a fix that removes many small calls also removes per-call costs the attribution counts in "
             "other phases; and the")
    return {
        "held": held,
        "above": "More than the bound allows. " + above[0].upper() + above[1:]
        + " load may have changed faster than the three runs (before, after, before again) can cancel.",
        "inconclusive": inconclusive[0].upper() + inconclusive[1:],
        "below": "The step got slower: against the previous configuration run before and after it, "
                 "the fix cost more than it saved on this machine (on a busy machine, one run can also be "
                 "slowed for reasons of its own). It is dropped from the fixes: the next round starts "
                 "from the configuration before it."}


def play_round():
    """Apply the next fix, run the job, judge its gain; False when nothing is left to fix."""
    pick = next_fix(rounds[-1]["report"], rounds[-1]["result"], applied)
    if pick is None:
        print(f"Nothing left worth fixing after {len(applied)} rounds.")
        return False
    kind, share, bound, model, fix = pick
    report, result = run_round((*applied, fix))
    again = run_round(tuple(applied), to_target=False)[1]  # the previous one again: before, after, before
    est = speedup([rounds[-1]["result"], again], result)  # the one ratio: printed and judged
    gain, spread = est.value, est.spread
    before = statistics.mean(tokens_per_s(r) for r in (rounds[-1]["result"], again))
    display(Markdown(f"### Round {len(applied) + len(tried) + 1}: {kind} -> `--fix {fix}`\n\n"
                     f"{slow_train.FIXES[fix]}. Tokens/s {before:,.0f} (the configuration before, mean "
                     f"of its runs before and after this one) -> {tokens_per_s(result):,.0f}: "
                     f"**{gain:.2f}x** (p10-p90 {spread[0]:.2f}-{spread[1]:.2f}x)."))
    p = Prediction(f"tokens/s speedup of --fix {fix}", model, low=1.0, high=bound, unit="x")
    viz.show_verdict(judge(p, est, explain=explain_round(kind, fix, gain, spread, bound, rounds[-1])))
    if gain < 1.0:  # slower: the next round starts from the configuration before it
        tried[fix] = gain
        print(f"--fix {fix}: tried, slower ({gain:.2f}x); dropped from the fixes, the next round starts "
              f"from {', '.join(applied) or 'the slow job'}")
        return True
    applied.append(fix)
    rounds.append({"fixes": tuple(applied), "report": report, "result": result})
    waterfall.append((fix, gain))
    return True


more = True

# %% [markdown]
# One round per cell (each is a 2-process job of seconds to a minute). A cell after the
# last round has nothing left to do.

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

# %%
more = more and play_round()

# %% [markdown]
# On CUDA two more fixes are available (bf16 and compile): the rounds go on until none is left.

# %%
while more:
    more = play_round()

# %% [markdown]
# The last diagnosis, after every fix the loop chose; then the planted problems it left
# alone, with the share of the step each still takes: below its finding's threshold, the
# diagnosis did not call them worth fixing. The shares are rank 0's; communication is
# judged on the least exposed rank, since a rank's exposed collective time includes waiting
# for the slower rank (compare the two ranks' work outside collectives).

# %%
final = rounds[-1]["report"]
print(render_text(final).split("\ntrace")[0])
SHARE = {"data": "data", "sync": "sync", "ddp": "communication", "optimizer": "optimizer"}
for fix in (f for f in AVAILABLE if f not in applied and f not in tried):  # compute fixes always run
    print(f"not applied: --fix {fix} ({SHARE[fix]}: {final['shares'][SHARE[fix]]:.1%} of "
          "the last step)")
for fix, g in tried.items():
    print(f"tried, slower: --fix {fix} ({g:.2f}x), not among the fixes")

# %% [markdown]
# The diagnosis names *phases*: its "compute" finding says forward and backward take most of the
# step, not that they run at the machine's arithmetic speed. Whether they are **compute-bound** is
# a roofline question: at the measured fp32 ceiling, the step's model FLOPs would take
# `FLOPs / peak` seconds; compute-bound means forward + backward take not much longer than that
# (here: at least half their time would be arithmetic at the ceiling).

# %%
fb_share = final["shares"]["forward"] + final["shares"]["backward"]
fb_s = fb_share * statistics.median(after_window(rounds[-1]["result"]))  # s per step, unprofiled
at_peak_s = mfu_of(rounds[-1]["result"]) * statistics.median(after_window(rounds[-1]["result"]))
bound_by = "compute-bound" if at_peak_s >= 0.5 * fb_s else "not compute-bound"
print(f"forward + backward: {fb_share:.0%} of the step, {fb_s * 1e3:.1f} ms; the model's FLOPs at the "
      f"{viz.si(peak_of(rounds[-1]['result']), 'FLOP/s')} ceiling: {at_peak_s * 1e3:.1f} ms "
      f"({at_peak_s / fb_s:.0%} of it): {bound_by}"
      + ("" if bound_by == "compute-bound" else
         ": the rest of their time is memory traffic and per-operator costs (module 06's fusion, "
         "shapes and batch size), not arithmetic"))

# %% [markdown]
# ## 3. What the fixes bought
#
# Each bar is one kept fix's measured tokens/s speedup over the round before it (the ratio its
# verdict judged), from the total before to the total after (log scale: equal factors, equal
# heights); the last bar is their product. A fix that made the step slower is not among them. MFU is the model's FLOPs (6 per parameter per token, plus attention; module 06)
# of both ranks per second over this machine's measured peak for the job's precision (fp32;
# bf16 once `--fix bf16` runs), on the unprofiled steps
# (the diagnosis' MFU counts one rank's matmul FLOPs over the profiled, slower, window).

# %%
fig = viz.plot_waterfall(waterfall, title="Measured tokens/s speedup of each fix, in the "
                                          "order the diagnosis chose")
plt.show()
first, last = rounds[0]["result"], rounds[-1]["result"]
for name, r in (("slow", first), ("fixed", last)):
    print(f"{name:>5}: {tokens_per_s(r):9,.0f} tokens/s, MFU {mfu_of(r):.2%}, "
          f"batch {r['tokens_per_step']:,} tokens/step, fixes: {', '.join(r['fixes']) or 'none'}")
product = math.prod(g for _, g in waterfall)  # the waterfall's last bar: the headline speedup
direct = tokens_per_s(last) / tokens_per_s(first)
print(f"the kept fixes' gains multiply to {product:.2f}x (the last bar, and the summary's figure); the "
      f"slow and fixed runs compared directly: {direct:.2f}x"
      + ("." if abs(product / direct - 1) < 0.05 else
         f", {max(product, direct) / min(product, direct):.2f}x apart: each gain is timed against the "
         "configuration before it, run just before and after it, while the direct ratio compares runs "
         "minutes apart, whose load differed."))

# %% [markdown]
# ## 4. Time to a target loss
#
# Tokens/s is not the goal; a model that reaches its loss sooner is. The batch fix trains
# on 4x the tokens per optimizer step, and fewer, larger steps make less progress per token
# early in training (module 06's batch-size section).
#
# **Prediction.** The time to the target loss improves by less than tokens/s: at most the
# throughput speedup, since the fixed job needs at least as many tokens to get there.
#
# Every round ran until the mean loss over the last 4096 tokens reached `TARGET_LOSS`; the
# first and the last are compared here. Their profiled windows (and the step that wrote the trace) are counted at
# the median unprofiled step time: the profiler's cost is not the job's.

# %%
def clean_seconds(result):
    """Seconds at each step's end, the window steps counted at the median other step."""
    t, med = list(result["step_times_s"]), statistics.median(after_window(result))
    for i in range(SKIP, min(len(t), SKIP + WINDOW + 1)):
        t[i] = med
    return [sum(t[:i + 1]) for i in range(len(t))]


reach = {}
for name, r in (("slow", first), ("fixed", last)):
    k = r["steps_to_target"]
    secs = clean_seconds(r)
    reach[name] = None if k is None else (secs[k - 1], k * r["tokens_per_step"])
    print(f"{name:>5}: " + ("did not reach the target" if k is None else
                            f"loss {TARGET_LOSS} after {secs[k - 1]:.1f} s, {k} steps, "
                            f"{k * r['tokens_per_step']:,} tokens"))
curves = {}
for name, r in (("slow", first), ("fixed", last)):
    pts = [(t, v) for t, v in zip(clean_seconds(r), slow_train.smoothed(
        r["losses"], r["tokens_per_step"], r["window_tokens"]), strict=True) if v is not None]
    curves[name] = ([t for t, _ in pts], [v for _, v in pts])
fig = viz.plot_time_to_target(curves, TARGET_LOSS,
                              title="Mean loss over the last 4096 tokens against seconds")
plt.show()
throughput_gain = direct  # these two runs' own ratio: the bound for their time-to-target ratio
if None not in reach.values():
    tt_gain = reach["slow"][0] / reach["fixed"][0]
    print(f"time to the target: {tt_gain:.2f}x faster; tokens/s {throughput_gain:.2f}x; "
          f"tokens needed {reach['fixed'][1] / reach['slow'][1]:.2f}x")
    p_tt = Prediction("time-to-target speedup", "no more progress per token than the slow job",
                      high=throughput_gain, low=1.0, unit="x")
    viz.show_verdict(judge(p_tt, tt_gain, explain={
        "held": f"The fixed job needed {reach['fixed'][1] / reach['slow'][1]:.2f}x the tokens: "
                "that is the price of the larger batch.",
        "above": "The fixed job needed fewer tokens than the slow one: its larger batch "
                 "averaged out noise that slowed the small-batch job's progress."}))

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
# * The diagnosis chose the order, and each round's verdict says whether the gain stayed
#   within what the measured share allowed.
# * Once no waste is left, the compute fixes are bounded by the compute's share and by the
#   machine's peak.
# * The time to the target loss, not tokens/s, says what the job gained.

# %%
viz.show_headlines({
    "fixes applied": ", ".join(applied),
    "tokens/s": f"{tokens_per_s(first):,.0f} -> {tokens_per_s(last):,.0f}; the fixes' product "
                f"{product:.2f}x (runs compared directly {direct:.2f}x)",
    "tried, slower": ", ".join(f"{f} ({g:.2f}x)" for f, g in tried.items()) or "none",
    "MFU": f"{mfu_of(first):.2%} -> {mfu_of(last):.2%} (6N + attention FLOPs over the measured "
           f"{'bf16' if peak_of(last) != PEAK else 'fp32'} peak)",
    "time to target loss": (f"{reach['slow'][0]:.1f} s -> {reach['fixed'][0]:.1f} s "
                            f"({reach['slow'][0] / reach['fixed'][0]:.2f}x)"
                            if None not in reach.values() else "not reached"),
})
