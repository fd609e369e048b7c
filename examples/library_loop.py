"""A training loop with perfkit: a small GPT on Python's own source, data-parallel with ZeRO.

    torchrun --nproc-per-node 2 examples/library_loop.py --stage 3 --steps 40 --save ckpt.pt
    torchrun --nproc-per-node 2 examples/library_loop.py --stage 1 --steps 80 --resume ckpt.pt
"""
import argparse
import itertools

import torch
from torch.utils.data import DataLoader, DistributedSampler

from perfkit import dist
from perfkit.data import Prefetcher
from perfkit.models import text_corpus
from perfkit.parallel import GPT, GPTConfig, MixedPrecision, ShardedModule, ZeroOptimizer, gpt_loss
from perfkit.profiling import StepMonitor, diagnose_shares

ap = argparse.ArgumentParser()
ap.add_argument("--stage", type=int, choices=(1, 2, 3), default=2)  # what ZeRO shards
ap.add_argument("--steps", type=int, default=100)  # train until this step
ap.add_argument("--save", help="write the whole training state here at the end")
ap.add_argument("--resume", help="start from a state --save wrote")
args = ap.parse_args()

ctx = dist.init_worker()  # torchrun's rank and world size; gloo on CPU, NCCL on CUDA
T, B = 64, 8  # tokens per sample; samples per rank and step
data = torch.frombuffer(bytearray(text_corpus(1_000_000).encode()), dtype=torch.uint8).long()
samples = [(data[i:i + T], data[i + 1:i + T + 1]) for i in range(0, len(data) - T - 1, T)]
sampler = DistributedSampler(samples, ctx.world_size, ctx.rank, seed=0, drop_last=True)
loader = DataLoader(samples, batch_size=B, sampler=sampler, drop_last=True)


def batches(start):  # a new order every epoch; on resume, the batches already seen are skipped
    epoch, skip = divmod(start, len(loader))
    while True:
        sampler.set_epoch(epoch)
        yield from itertools.islice(loader, skip, None)
        epoch, skip = epoch + 1, 0


torch.manual_seed(0)  # the same initial weights on every rank
model = GPT(GPTConfig(vocab_size=256, block_size=T, n_embd=128, n_layer=4, n_head=4))
model = model.to(ctx.device)
if args.stage == 3:  # parameters sharded too; each block gathered in bf16 when it runs
    net = ShardedModule(model, blocks=list(model.blocks),
                        mixed_precision=MixedPrecision(torch.bfloat16, torch.float32))
    opt = ZeroOptimizer(net, torch.optim.AdamW, stage=3, lr=1e-3)
else:  # optimizer state (1) and gradients (2) sharded; fp32 weights, bf16 matmuls (autocast)
    net = model
    opt = ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=args.stage, module=model,
                        lr=1e-3)
start = 0
if args.resume:  # a whole state: a run of any stage, on any number of ranks, loads it
    state = torch.load(args.resume, map_location=ctx.device)
    model.load_state_dict(state["model"])  # at stage 3 each rank keeps its slice
    opt.load_state_dict(state["optimizer"])
    start = state["step"]

mon = StepMonitor(warmup=2)  # the first steps (allocations, the first batches) left out
source = iter(Prefetcher(batches(start)))  # a thread loads the next batches during the step
for _ in range(start, args.steps):
    with mon.phase("data"):
        x, y = (t.to(ctx.device) for t in next(source))  # (B, T) each
    with mon.phase("forward"), torch.autocast(ctx.device.type, torch.bfloat16,
                                              enabled=args.stage < 3):
        loss = gpt_loss(net(x).float(), y)
    with mon.phase("backward"):
        loss.backward()  # gradient buckets are reduce-scattered while backward runs
    with mon.phase("optimizer"):
        norm = opt.clip_grad_norm_(1.0)  # the whole gradient's norm, over every rank's slices
        opt.step()  # collective: every rank steps its slices and shares them
        opt.zero_grad()
    mon.step(samples=B, tokens=B * T)

s = mon.summary()
if ctx.rank == 0:
    print(f"step {args.steps}: loss {loss.item():.3f}, gradient norm {norm.item():.2f}, "
          f"{s.step.p50_s * 1e3:.1f} ms a step (p50), {s.tokens_per_s:,.0f} tokens/s per rank")
    print("  " + ", ".join(f"{k} {v:.0%}" for k, v in s.shares().items()))
    for finding in diagnose_shares(s):  # each phase over its threshold, with the fix to try
        print("  " + str(finding))
if args.save:  # collective: every rank gathers the whole model and optimizer state
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": args.steps}
    if ctx.rank == 0:
        torch.save(state, args.save)
dist.shutdown()
