# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 06 · Make a slow training job fast
#
# Graded lab for module 08, the capstone. The job is `examples/slow_train.py`: a tiny GPT-2
# trained on the Python standard library's source, data-parallel on 2 processes under
# `torchrun` (gloo on a CPU, NCCL on CUDA). Run without `--fix`, it has every problem the
# course planted in it; notebook 08 removed them one flag at a time. Here you write the fast
# job yourself, with no flags, deciding what to fix from measurements.
#
# You will write
#
# 1. `amdahl_bound(share, factor)`: the most a job can speed up when one part of its step
#    gets faster, the bound every diagnosis finding is judged by;
# 2. `time_to_target(ends, losses, tokens_per_step, target, window_tokens)`: the time to a
#    target loss, the measure the job is graded by (a larger batch changes the loss curve, so
#    tokens/s alone can mislead);
# 3. `fast_main(argv)`: the whole job, fast: the same model, the same data, the same learning
#    rate and arguments as the slow job, with the planted problems found and fixed.
#
# The grader runs `fast_main` the way it runs the slow job: 2 processes under `torchrun`, each
# until the mean loss over the last 4096 training tokens reaches `TARGET_LOSS`. It runs the slow
# job, yours and the reference solution interleaved (2 rounds of three jobs, 1-3 minutes on 2
# cores; each job's fastest round counts, since load only slows a run down) and requires **a
# speedup in time to the target of at least 80 % of the reference solution's**, measured in
# the same rounds (so the bar follows your machine; a near miss is measured once more), the two ranks'
# weights identical at the end, and a final loss no worse than the slow job's by more than
# 0.1, in every run of yours (each is timed, and the fastest counts). When your job is too slow, the message quotes `perfkit diagnose` on it: what dominates
# its step now.
#
# Replace each `raise NotImplementedError()` with your code, run the notebook, then grade it:
#
# ```
# make grade LAB=labs/lab06_capstone.ipynb
# ```
#
# Do not rename the functions or change their arguments. The cells that launch jobs run here
# in JupyterLab, not in the grader (`RUN_JOBS`), which launches its own.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
import json
import math
import sys
import tempfile
from pathlib import Path

import perfkit
from perfkit import dist
from perfkit.profiling.render import render_text

ROOT = Path(perfkit.__file__).resolve().parents[1]  # the course's folder (any working dir)
SLOW = ROOT / "examples" / "slow_train.py"
sys.path.insert(0, str(SLOW.parent))
sys.path.insert(0, str(ROOT))  # tools.grade.pickled, from any working directory
import slow_train as job  # noqa: E402  (the slow job and the helpers fast_main may use)

RUN_JOBS = __name__ != "__lab__"  # the grader sets __name__ = "__lab__" and skips the demos
TARGET_LOSS = 5.2  # the grader's target: mean loss over the last 4096 tokens of both ranks
COMMON = ["--target-loss", TARGET_LOSS, "--steps", 1500, "--max-bytes", 300_000]
OUT = Path(tempfile.mkdtemp(prefix="lab06-"))

# %% [markdown]
# ## The slow job, diagnosed and timed
#
# Open `examples/slow_train.py` beside this notebook and read `main`: with `--fix none` every
# `if` takes its slow branch. `perfkit diagnose` runs it unchanged under `torchrun`, profiles a
# few steps after a warm-up and stops it. The findings come worst first: each names its
# evidence, its share of the step and a fix. A second run, without the profiler, goes on to
# the target loss: the time the grader compares.

# %%
def run(target, *args):
    """The result of one 2-process run of ``target`` (a script) with ``args``."""
    return dist.launch(str(target), nproc=2, args=args, timeout_s=600,
                       pythonpath=[ROOT, SLOW.parent])[0]


def diagnose(target, *args, name):
    """``perfkit diagnose``'s report on a few profiled steps of ``target``."""
    out = OUT / name
    cli = ["diagnose", "--out", out, "--skip", 3, "--steps", 4, target, *args]
    dist.launch("perfkit", nproc=2, args=cli, timeout_s=600, pythonpath=[ROOT, SLOW.parent])
    return json.loads((out / "report.json").read_text())


def show(report):
    print(render_text(report).split("\nFindings")[0])
    for f in report["findings"]:
        print(f"[{f['severity']}] {f['kind']} ({f['share']:.0%} of the step): {f['evidence']}")


if RUN_JOBS:
    slow_report = diagnose(SLOW, "--fix", "none", "--max-bytes", 300_000, name="slow")
    show(slow_report)
    slow = run(SLOW, "--fix", "none", *COMMON)
    print(f"\nthe slow job reached loss {TARGET_LOSS} after {slow['time_to_target_s']:.2f} s "
          f"({slow['steps_to_target']} steps, {slow['tokens_per_s']:,.0f} tokens/s)")

# %% [markdown]
# ## Q1 · `amdahl_bound(share, factor=math.inf) -> float`
#
# A part of the step takes `share` of its time (0 to 1) and becomes `factor` times faster
# (`math.inf`: removed). Return how many times faster the whole step gets at most. Raise
# `ValueError` for a `share` outside [0, 1] (or NaN) and for a `factor` that is not > 0.

# %%
def amdahl_bound(share, factor=math.inf):
    """Amdahl's law: the whole step's speedup when ``share`` of it runs ``factor``x faster."""
    ### BEGIN SOLUTION
    if not 0.0 <= share <= 1.0:  # False for NaN too
        raise ValueError(f"share must be in [0, 1], got {share}")
    if not factor > 0:
        raise ValueError(f"factor must be > 0, got {factor}")
    return 1.0 / ((1.0 - share) + share / factor)
    ### END SOLUTION


if RUN_JOBS:  # what fixing each finding can buy at most; the worst is not always the largest
    for f in slow_report["findings"]:
        print(f"{f['kind']:>13}: {f['share']:5.1%} of the step -> at most "
              f"{amdahl_bound(f['share']):.2f}x if removed, {amdahl_bound(f['share'], 2):.2f}x "
              "if halved")

# %% [markdown]
# Each bound is for one fix alone, against the step as it is now. Fixes compound, and what a
# fix removed changes every other share: the compute fixes (fused attention, a larger batch)
# show up as worth doing only once the waste is gone (notebook 08 went through it round by
# round).
#
# ## Q2 · `time_to_target(ends, losses, tokens_per_step, target, window_tokens) -> float | None`
#
# `ends[i]` is the time (s) from the first step's start to the end of step `i`, `losses[i]`
# that step's loss. Return the end of the first step at which the mean loss over the last
# `window_tokens` tokens (the last `ceil(window_tokens / tokens_per_step)` steps, a full
# window) is at or below `target`; `None` if no step reaches it.

# %%
def time_to_target(ends, losses, tokens_per_step, target, window_tokens):
    """Seconds to the first full loss window whose mean is <= target (None: never)."""
    ### BEGIN SOLUTION
    k = math.ceil(window_tokens / tokens_per_step)
    for i in range(k - 1, len(losses)):
        if sum(losses[i - k + 1:i + 1]) / k <= target:
            return ends[i]
    return None
    ### END SOLUTION


if RUN_JOBS:  # the same figure the slow job computed for itself
    ends = [sum(slow["step_times_s"][:i + 1]) for i in range(len(slow["step_times_s"]))]
    mine = time_to_target(ends, slow["losses"], slow["tokens_per_step"], TARGET_LOSS,
                          slow["window_tokens"])
    same = mine is not None and math.isclose(mine, slow["time_to_target_s"], rel_tol=1e-6)
    print(f"time to loss {TARGET_LOSS}: " + ("never" if mine is None else f"{mine:.3f} s")
          + " by time_to_target, "
          f"{slow['time_to_target_s']:.3f} s by the job: "
          + ("the same" if same else "they differ: compare your window with job.smoothed"))

# %% [markdown]
# ## Q3 · `fast_main(argv)`: the job, fast
#
# Write the whole job: copy `main` from `examples/slow_train.py` here and make it fast. Keep
# what it measures: parse the arguments with `job.parse_args(argv)`; build the data with
# `job.corpus_and_tokenizer` and `job.make_dataset`, the model with `job.make_model(seed,
# ...)`, train it with data parallelism on every rank, time the steps with `job.StepClock`,
# and end with the result on rank 0, then a clean shutdown:
#
# ```python
# result = job.summarize(ctx, args, model, clock.seconds(), losses, tokens_per_step, setup_s)
# if ctx.rank == 0:
#     dist.worker_result(result)
# dist.shutdown()
# ```
#
# `losses` must hold every step's loss averaged over the ranks, and the job must stop once
# their mean over the window reaches `--target-loss` (or after `--steps`). Anything you
# change must keep the training the same: the learning rate `job.LR`, the model and the data.
# The batch size is yours to choose (`job.FAST_BATCH` is what the reference uses).
#
# Your function is shipped to the 2 processes with `cloudpickle`: the function is copied by
# value, the modules it uses (`job`, `dist`, `math`, `torch`...) by reference, so it may use
# any module imported in this notebook, but no object that lives only in this process.

# %%
def fast_main(argv=None):
    """The slow job with its planted problems fixed."""
    ### BEGIN SOLUTION
    import time

    import torch
    import torch.distributed as tdist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    args = job.parse_args(argv)
    t_setup = time.perf_counter()
    ctx = dist.init_worker()
    text, tok = job.corpus_and_tokenizer(ctx, args.max_bytes)
    # data: every document tokenized once, here, instead of in every __getitem__
    ds = job.make_dataset(text, tok, job.SEQ_LEN, per_sample=False, seed=args.seed)
    sampler = DistributedSampler(ds, ctx.world_size, ctx.rank, shuffle=True, seed=args.seed,
                                 drop_last=True)
    batch = job.FAST_BATCH  # batch: 4x the tokens per step, still far inside memory
    loader = DataLoader(ds, batch_size=batch, sampler=sampler, drop_last=True)
    model = job.make_model(args.seed, "sdpa").to(ctx.device)  # attention: fused SDPA
    ddp = DDP(model, gradient_as_bucket_view=True)  # ddp: default buckets, overlapped
    opt = torch.optim.AdamW(model.parameters(), lr=job.LR, foreach=True)  # optimizer
    tokens_per_step = batch * job.SEQ_LEN * ctx.world_size
    window = math.ceil(args.window_tokens / tokens_per_step)  # steps in the loss window
    losses, pending = [], []
    setup_s = time.perf_counter() - t_setup
    clock = job.StepClock(ctx.device)
    step, epoch, done = 0, 0, False
    while not done:
        sampler.set_epoch(epoch)
        for x, y in loader:  # (B, T) int64 each
            x, y = x.to(ctx.device), y.to(ctx.device)
            loss = F.cross_entropy(ddp(input_ids=x).logits.flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            pending.append(loss.detach())  # sync: no host read inside the step
            step += 1
            done = step >= args.steps
            if step % args.check_every == 0 or done:  # one all-reduce and one read per check
                got = torch.stack(pending)
                tdist.all_reduce(got)
                losses += (got / ctx.world_size).tolist()
                pending.clear()
                mean = sum(losses[-window:]) / window
                if args.target_loss is not None and step >= args.min_steps and \
                        len(losses) >= window and mean <= args.target_loss:
                    done = True
            clock.tick()
            if done:
                break
        epoch += 1
    result = job.summarize(ctx, args, model, clock.seconds(), losses, tokens_per_step, setup_s)
    if ctx.rank == 0:
        dist.worker_result(result)
    dist.shutdown()
    ### END SOLUTION


# %% [markdown]
# Your job once, to the target loss, against the slow run above (the grader interleaves
# both with the reference, in rounds, so its figures are steadier than this first look), and,
# at the default size, what dominates its step now:

# %%
if RUN_JOBS:
    from tools.grade import pickled

    with pickled(fast_main, "fast_main.pkl") as pkl:
        fast = run(ROOT / "tools" / "run_main.py", pkl, *COMMON)
        fast_report = None if QUICK else diagnose(  # QUICK (CI): the grader's mutants run it
            ROOT / "tools" / "run_main.py", pkl, "--max-bytes", 300_000, name="fast")
    if fast["time_to_target_s"] is None:
        print(f"your job did not reach loss {TARGET_LOSS} in 1500 steps")
    else:
        gain = slow["time_to_target_s"] / fast["time_to_target_s"]
        print(f"time to loss {TARGET_LOSS}: {slow['time_to_target_s']:.2f} s -> "
              f"{fast['time_to_target_s']:.2f} s ({gain:.2f}x); tokens/s "
              f"{slow['tokens_per_s']:,.0f} -> {fast['tokens_per_s']:,.0f}; the ranks' weights "
              + ("agree" if fast["ranks_agree"] else "DIFFER: the gradients are not averaged"))
    if fast_report is not None:
        show(fast_report)
