"""The capstone's slow training job: a tiny GPT-2 on Python's own source, data-parallel.

A realistic script with one problem planted from every module of the course. Each problem
has a fix behind one flag, so that ``--fix NAME`` turns exactly one thing from slow to fast
and the diff of a fix is the lines under ``if "NAME" in fixes``:

========== =============================================== ====================================
fix        planted (the default)                           fixed
========== =============================================== ====================================
data       every sample tokenizes its whole document in    every document tokenized once, up
           ``__getitem__``, no workers (module 07)         front (on CUDA also pinned memory
                                                           and ``perfkit.data.Prefetcher``)
sync       an all-reduce and ``.item()`` of the loss, and  losses and norms stay on the
           every parameter's gradient norm read with       device; read (one all-reduce)
           ``.item()``, every step (module 01)             every ``--check-every`` steps
ddp        DDP with ``bucket_cap_mb=0.001`` (0.001 MiB,    DDP's defaults: 25 MiB buckets, a
           1,048 bytes: one matrix, or a few vectors;      1 MiB first one (this model's
           ``ddp_buckets`` in the result says how many,    663 KiB of gradients: one bucket,
           by torch's own initial assignment)
           and ``find_unused_parameters=True`` (a host     reduced after backward, no overlap),
           read per parameter in every backward; module    gradients as bucket views
           02)
optimizer  ``AdamW(foreach=False)``: a Python loop of      ``fused=True`` on CUDA; ``foreach=True``
           small kernels per tensor on CUDA (module 06;    on a CPU, where the foreach ops loop
           on a CPU it is PyTorch's own default)           per tensor too: it changes little
                                                           there (PyTorch's fused CPU kernel,
                                                           since 2.4, is unused here)
attention  eager attention: matmul, mask, softmax,         ``scaled_dot_product_attention``
           matmul (module 06)                              (``attn_implementation="sdpa"``)
batch      2 samples per rank, far below what memory       8 per rank: 4x the tokens per step
           allows (modules 04, 06)                         (a larger batch needs more tokens
                                                           to reach the same loss)
bf16       fp32 everywhere                                 bf16 autocast (in ``all`` on CUDA
                                                           only: on a CPU without AVX512-BF16
                                                           or AMX, bf16 matmuls are slower)
compile    eager mode                                      ``torch.compile`` (in ``all`` on
                                                           CUDA only: on a small CPU run the
                                                           compile time is not paid back)
========== =============================================== ====================================

Run it under torchrun (gloo on CPU, NCCL on CUDA); rank 0 prints one JSON result line
(``PERFKIT_RESULT rank=0 {...}``: step times, tokens/s, the loss curve, the time to the
target loss) or hands it to ``perfkit.dist.launch``::

    torchrun --nproc_per_node 2 examples/slow_train.py --steps 200
    torchrun --nproc_per_node 2 examples/slow_train.py --fix data,sync --target-loss 5.0
    torchrun --nproc_per_node 2 -m perfkit diagnose examples/slow_train.py --fix all

The time to the target loss counts from the first step (the tokenizer and the data's
one-time preparation are ``setup_s``): the first step whose mean loss over the last
``--window-tokens`` training tokens (all ranks) is at or below ``--target-loss``. The data's
preparation alone is ``data_prep_s``: ``--fix data`` moves the tokenizing there, out of the
steps, so a time to the target that compares runs with and without it adds ``data_prep_s``.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time

FIXES = {
    "data": "tokenize every document once, up front, instead of in __getitem__",
    "sync": ("keep the losses and gradient norms on the device: every --check-every steps, one "
             "all-reduce of the losses and one read of them and of the last step's norms, instead of an "
             "all-reduce and a read of the loss and one read per parameter's gradient norm every step"),
    "ddp": "DDP's default buckets (this model's gradients fit the 1 MiB first one: one all-reduce "
           "after backward, instead of one per bucket closed at 1,048 bytes), no find_unused_parameters, "
           "gradients as bucket views (gradient_as_bucket_view=True: no copy between gradients and buckets)",
    "optimizer": ("AdamW with fused=True on CUDA instead of foreach=False (a Python loop of small "
                  "kernels per tensor there); on a CPU, foreach=True, which changes little: foreach=False "
                  "is PyTorch's own CPU default, and the foreach ops loop per tensor on a CPU too "
                  "(PyTorch's fused CPU kernel, since 2.4, is not used here), so this plant is a problem "
                  "on CUDA only"),
    "attention": "scaled_dot_product_attention instead of eager matmul-softmax-matmul",
    "batch": "8 samples per rank instead of 2: 4x the tokens per step",
    "bf16": "bf16 autocast (CUDA; on a CPU without AVX512-BF16 or AMX bf16 matmuls are slower)",
    "compile": "torch.compile the model (CUDA; on a short CPU run compiling is not paid back)",
}
CUDA_ONLY_IN_ALL = ("bf16", "compile")
# the fixes that remove what each `perfkit diagnose` finding names, in order ("compute" is
# the information-level finding left once nothing else is: the compute-side fixes). A sync
# finding can also come from DDP: find_unused_parameters=True reads one value per parameter
# to the host in every backward.
FIX_FOR_FINDING = {"data": ("data",), "sync": ("sync", "ddp"), "communication": ("ddp",),
                   "optimizer": ("optimizer",), "overhead": ("batch", "compile"),
                   "compute": ("attention", "batch", "bf16", "compile")}
SLOW_BATCH, FAST_BATCH = 2, 8  # samples per rank
LR = 2e-3  # AdamW; the best of 1e-3, 2e-3 and 4e-3 at 4 and 16 samples per step (2 ranks)
DOC_CHARS = 16384  # characters per document of the corpus (about one source file)
SEQ_LEN = 64


def parse_fixes(text: str, cuda: bool = False) -> tuple[str, ...]:
    """The fixes named by ``--fix`` (comma-separated; ``none``, ``all``), in FIXES order.

    Raises:
        ValueError: for an unknown name, naming the known ones.
    """
    if not isinstance(text, str):
        raise TypeError(f"--fix must be a string, got {type(text).__name__}")
    names = {n.strip() for n in text.split(",") if n.strip()}
    if "all" in names:
        names |= {f for f in FIXES if cuda or f not in CUDA_ONLY_IN_ALL}
    names.discard("all")
    names.discard("none")
    unknown = sorted(names - set(FIXES))
    if unknown:
        raise ValueError(f"unknown fix {', '.join(map(repr, unknown))}; known fixes: "
                         f"{', '.join(FIXES)}, or all, or none")
    return tuple(f for f in FIXES if f in names)


def settings(fixes: tuple[str, ...] | list[str], cuda: bool = False) -> dict:
    """The knobs the fixes set: what each flag changes, and nothing else."""
    f = set(fixes)
    batch = FAST_BATCH if "batch" in f else SLOW_BATCH
    return {
        "tokenize_in_getitem": "data" not in f,
        "prefetch": "data" in f and cuda,
        "read_loss_every_step": "sync" not in f,
        # bucket_cap_mb left at None: DDP's default (25 MiB buckets, a 1 MiB first one); a cap
        # written out, 25 included, would cap the first bucket too
        "ddp": ({"bucket_cap_mb": None, "find_unused_parameters": False,
                 "gradient_as_bucket_view": True} if "ddp" in f else
                {"bucket_cap_mb": 0.001, "find_unused_parameters": True,
                 "gradient_as_bucket_view": False}),
        "optimizer": ({"foreach": not cuda, "fused": cuda} if "optimizer" in f else
                      {"foreach": False, "fused": False}),
        "attn_implementation": "sdpa" if "attention" in f else "eager",
        "batch_per_rank": batch,
        "autocast_bf16": "bf16" in f,
        "compile": "compile" in f,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="fixes:\n" + "\n".join(f"  {k:<10} {v}"
                                                              for k, v in FIXES.items()))
    p.add_argument("--fix", default="none",
                   help="comma-separated fixes to apply, 'all' or 'none' (default)")
    p.add_argument("--steps", type=int, default=300, help="most optimizer steps (default 300)")
    p.add_argument("--target-loss", type=float, default=None,
                   help="stop once the mean loss over --window-tokens reaches it")
    p.add_argument("--min-steps", type=int, default=0,
                   help="steps run before the target loss may stop the job (default 0)")
    p.add_argument("--window-tokens", type=int, default=4096,
                   help="tokens (all ranks) the target loss is averaged over (default 4096)")
    p.add_argument("--check-every", type=int, default=10,
                   help="with the sync fix: steps between loss reads (default 10)")
    p.add_argument("--max-bytes", type=int, default=1_000_000,
                   help="bytes of the standard library's source to train on")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    try:
        a.fixes = parse_fixes(a.fix)  # CUDA's `all` is resolved again once torch is imported
    except ValueError as e:
        p.error(str(e))
    for name in ("steps", "window_tokens", "check_every", "max_bytes"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.min_steps < 0:
        p.error(f"--min-steps must be >= 0, got {a.min_steps}")
    if a.target_loss is not None and not (math.isfinite(a.target_loss) and a.target_loss > 0):
        p.error(f"--target-loss must be a finite number > 0, got {a.target_loss}")
    return a


# --- data -------------------------------------------------------------------------------


def make_dataset(text: str, tokenizer, seq_len: int, per_sample: bool, seed: int):
    """Crops of ``seq_len + 1`` tokens from ``DOC_CHARS``-character documents.

    Sample ``i`` is a crop of document ``i % n_docs`` at an offset drawn from
    ``(seed, i)``: the same tokens whether documents are tokenized per sample or once.
    """
    import torch
    from torch.utils.data import Dataset

    docs = [text[i:i + DOC_CHARS] for i in range(0, len(text) - DOC_CHARS + 1, DOC_CHARS)]

    class DocumentCrops(Dataset):
        def __init__(self) -> None:
            # the fix: tokenize once here, not in every __getitem__
            self.ids = None if per_sample else [tokenizer.encode(d).ids for d in docs]

        def __len__(self) -> int:
            return len(docs) * (DOC_CHARS // (3 * seq_len))  # ~ one crop per block of text

        def __getitem__(self, i: int):
            d = i % len(docs)
            ids = tokenizer.encode(docs[d]).ids if self.ids is None else self.ids[d]  # plant
            start = random.Random(seed * 1_000_003 + i).randrange(len(ids) - seq_len)
            block = torch.tensor(ids[start:start + seq_len + 1])  # (T + 1,)
            return block[:-1], block[1:]

    return DocumentCrops()


# --- the job ----------------------------------------------------------------------------


class StepClock:
    """Step end times: ``perf_counter`` on CPU, CUDA events (read at the end) on GPU."""

    def __init__(self, device) -> None:
        import torch

        self.cuda = device.type == "cuda"
        self.t0 = time.perf_counter()
        self.ends: list = []
        if self.cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.start.record()

    def tick(self) -> None:
        import torch

        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.ends.append(e)
        else:
            self.ends.append(time.perf_counter())

    def seconds(self) -> list[float]:
        """Seconds from the clock's start to the end of each step."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            return [self.start.elapsed_time(e) / 1e3 for e in self.ends]
        return [t - self.t0 for t in self.ends]


def smoothed(losses: list[float], tokens_per_step: int, window_tokens: int) -> list:
    """Mean loss over the last ``window_tokens`` tokens at each step (``None`` until full)."""
    k = max(1, math.ceil(window_tokens / tokens_per_step))
    out, run = [], 0.0
    for i, x in enumerate(losses):
        run += x - (losses[i - k] if i >= k else 0.0)
        out.append(run / k if i >= k - 1 else None)
    return out


def corpus_and_tokenizer(ctx, max_bytes: int):
    """(the first ``max_bytes`` of the standard library's source, the job's BPE tokenizer).

    Rank 0 trains (or loads) the cached tokenizer first, then the others load it.
    Collective: every rank must call it.
    """
    import torch.distributed as tdist

    from perfkit import models

    if ctx.rank == 0:
        tok = models.train_bpe_tokenizer(1024, max_bytes)
    tdist.barrier()
    if ctx.rank != 0:
        tok = models.train_bpe_tokenizer(1024, max_bytes)
    return models.text_corpus(max_bytes), tok


def make_model(seed: int, attn_implementation: str = "eager"):
    """The job's tiny GPT-2 (vocabulary 1024, 2 layers of width 64), seeded: every rank
    and every variant of the job starts from the same weights."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=1024, n_positions=SEQ_LEN, n_embd=64, n_layer=2, n_head=2,
                     bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0, attn_implementation=attn_implementation)
    return GPT2LMHeadModel(cfg)


def summarize(ctx, args, model, ends: list[float], losses: list[float], tokens_per_step: int,
              setup_s: float) -> dict:
    """The job's result: step times, tokens/s, the loss curve, the time to the target.

    Args:
        ends: seconds from the first step's start to each step's end (``StepClock``).
        losses: the global mean loss of each step (all ranks).

    ``ranks_agree`` is whether every rank ends with bitwise the same parameters (as data
    parallelism keeps them). Collective: every rank must call it.
    """
    import torch
    import torch.distributed as tdist

    times = [b - a for a, b in zip([0.0, *ends], ends, strict=False)]
    window = max(1, math.ceil(args.window_tokens / tokens_per_step))
    smooth = smoothed(losses, tokens_per_step, args.window_tokens)
    hit = next((i for i, v in enumerate(smooth) if args.target_loss is not None and
                v is not None and v <= args.target_loss), None)
    steady = times[min(3, len(times) - 1):]  # after warm-up (and compilation)
    with torch.no_grad():  # a fingerprint of the weights, compared across ranks
        mine = torch.stack([p.detach().double().sum() for p in model.parameters()])
    every = [torch.zeros_like(mine) for _ in range(ctx.world_size)]
    tdist.all_gather(every, mine)
    return {
        "device": str(ctx.device), "backend": ctx.backend, "world_size": ctx.world_size,
        "seq_len": SEQ_LEN, "n_params": sum(p.numel() for p in model.parameters()),
        "tokens_per_step": tokens_per_step, "steps": len(times),
        "setup_s": setup_s, "train_s": ends[-1], "step_times_s": times,
        "step_p50_s": statistics.median(steady),
        "tokens_per_s": tokens_per_step / statistics.median(steady),
        "losses": [round(v, 5) for v in losses], "window_tokens": args.window_tokens,
        "target_loss": args.target_loss, "steps_to_target": None if hit is None else hit + 1,
        "time_to_target_s": None if hit is None else ends[hit],
        "final_loss": statistics.fmean(losses[-window:]),
        "ranks_agree": all(torch.equal(every[0], e) for e in every[1:]),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch
    import torch.distributed as tdist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from perfkit import dist
    from perfkit.parallel import DDP_FIRST_BUCKET_BYTES, assign_buckets

    t_setup = time.perf_counter()
    ctx = dist.init_worker()
    cuda = ctx.device.type == "cuda"
    fixes = parse_fixes(args.fix, cuda)
    s = settings(fixes, cuda)
    text, tok = corpus_and_tokenizer(ctx, args.max_bytes)
    t_data = time.perf_counter()
    ds = make_dataset(text, tok, SEQ_LEN, s["tokenize_in_getitem"], args.seed)
    data_prep_s = time.perf_counter() - t_data  # with the data fix: every document tokenized
    sampler = DistributedSampler(ds, ctx.world_size, ctx.rank, shuffle=True, seed=args.seed,
                                 drop_last=True)
    B = s["batch_per_rank"]
    loader = DataLoader(ds, batch_size=B, sampler=sampler, drop_last=True, num_workers=0)
    source = loader
    if s["prefetch"]:  # pinned copies on a side stream while the model runs (module 07)
        from perfkit.data import Prefetcher

        source = Prefetcher(loader, device=ctx.device)

    model = make_model(args.seed, s["attn_implementation"]).to(ctx.device)
    ddp = DDP(model, device_ids=[ctx.device.index] if cuda else None, **s["ddp"])
    # DDP's buckets (a 1 MiB first bucket only when bucket_cap_mb is unset): with
    # find_unused_parameters DDP never rebuilds them, so they stay as torch's own initial
    # assignment lays them out, in parameter order; otherwise they are rebuilt in backward's order
    first = DDP_FIRST_BUCKET_BYTES if s["ddp"]["bucket_cap_mb"] is None else None
    cap = getattr(ddp, "bucket_bytes_cap", None)  # none (or 0) where the wrapper is not DDP (a lab's variant)
    params = list(model.parameters())
    if cap and getattr(ddp, "find_unused_parameters", False):
        n_buckets = len(tdist._compute_bucket_assignment_by_size(params, [first or cap, cap])[0])
    else:
        n_buckets = len(assign_buckets(params, cap, first)) if cap else None
    net = torch.compile(ddp) if s["compile"] else ddp
    opt = torch.optim.AdamW(model.parameters(), lr=LR, **s["optimizer"])

    def batches():
        epoch = 0
        while True:  # epochs until --steps
            sampler.set_epoch(epoch)
            yield from source
            epoch += 1

    tokens_per_step = B * SEQ_LEN * ctx.world_size
    read_every = 1 if s["read_loss_every_step"] else args.check_every
    window = max(1, math.ceil(args.window_tokens / tokens_per_step))
    losses: list[float] = []   # global mean loss of each step (read so far)
    pending: list = []         # this rank's loss tensors not read yet (sync fix)
    setup_s = time.perf_counter() - t_setup
    clock = StepClock(ctx.device)
    for step, (x, y) in enumerate(batches()):  # x, y: (B, T) int64
        x, y = x.to(ctx.device, non_blocking=True), y.to(ctx.device, non_blocking=True)
        with torch.autocast(ctx.device.type, torch.bfloat16, enabled=s["autocast_bf16"]):
            logits = net(input_ids=x).logits                             # (B, T, V)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if s["read_loss_every_step"]:  # the plant: a collective and host reads every step
            logged = loss.detach().clone()
            tdist.all_reduce(logged)
            losses.append(logged.item() / ctx.world_size)
            grad_norms = {n: p.grad.norm().item() for n, p in model.named_parameters()}
        else:  # the fix: values stay on the device until the next check
            pending.append(loss.detach())
            grad_norms = torch.stack([p.grad.norm() for p in model.parameters()])
        done = step + 1 >= args.steps
        if pending and ((step + 1) % read_every == 0 or done):
            got = torch.stack(pending).float()  # one collective, one read per check
            tdist.all_reduce(got)
            losses += (got / ctx.world_size).tolist()
            pending.clear()
            grad_norms = dict(zip((n for n, _ in model.named_parameters()),
                                  grad_norms.tolist(), strict=True))
        clock.tick()
        if args.target_loss is not None and step + 1 >= args.min_steps and len(losses) >= window and \
                statistics.fmean(losses[-window:]) <= args.target_loss:
            done = True
        if done:
            break
    result = summarize(ctx, args, model, clock.seconds(), losses, tokens_per_step, setup_s)
    result.update({
        "fixes": list(fixes), "settings": s, "data_prep_s": data_prep_s, "ddp_buckets": n_buckets,
        "built": {  # read back from the objects, not from the settings
            "tokenize_in_getitem": ds.ids is None,
            "bucket_cap_bytes": ddp.bucket_bytes_cap,
            "find_unused_parameters": ddp.find_unused_parameters,
            "foreach": opt.defaults["foreach"], "fused": opt.defaults["fused"],
            "attn_implementation": model.config._attn_implementation,
            "batch_per_rank": loader.batch_size, "compiled": net is not ddp,
        },
        "largest_grad_norm": max(grad_norms.values()),
    })
    if ctx.rank == 0:
        dist.worker_result(result)
    dist.shutdown()  # barrier, destroy the group, os._exit(0): no gloo abort at exit


if __name__ == "__main__":
    sys.exit(main())
