"""Job: perfkit's pipeline schedules on real processes, against the unsplit model and PyTorch's.

Run by :func:`perfkit.dist.launch` with a list of tasks; every rank returns one record per task::

    launch("perfkit.jobs.pipeline_parallel", 2, ["--config", json.dumps({"tasks": [
        {"task": "equal", "schedule": "1f1b", "n_micro": 4, "optimizer": "sgd"},
        {"task": "bubble", "schedule": "gpipe", "n_micro": 4, "t_f": 0.02, "t_b": 0.04}]})])

Tasks (``"task"`` key; sizes of the tiny :class:`perfkit.parallel.GPT` in ``MODEL``, overridable):

* ``equal``: ``steps`` steps of perfkit's ``schedule`` (``n_virtual`` for interleaved; stages
  balanced by parameter count, or by time measured on rank 0 with ``"balance": "time"``)
  against the unsplit model on the same global batch, on every rank; ``optimizer``
  ``"sgd"`` (momentum 0.9) or ``"adamw"``. Returns the max relative difference over this
  rank's parameters, the loss curves (last stage), the peak saved-for-backward bytes; with
  ``"dp": 2`` the world is a ``(dp, pp)`` device mesh, gradients averaged over the dp group.
* ``torch``: the same with ``torch.distributed.pipelining`` (``ScheduleGPipe``,
  ``Schedule1F1B``, ``ScheduleInterleaved1F1B``).
* ``bubble``: stages whose forward sleeps ``t_f`` and backward ``t_b`` seconds (sleeps, not
  busy-work: they cost the same on 2 loaded cores as on 16 idle ones), or real GPT blocks
  (``"real": true``); each step's measured per-rank slots (gathered on every rank). With
  ``"schedules": [...]`` instead of ``"schedule"``, the schedules run on the same stages in
  alternating rounds (one step each, the order balanced: A B, B A, ...), so step ``i`` of each
  is paired; ``slots`` is then ``{name: steps}``. Real blocks balanced by time also return
  ``layer_costs`` (each layer's forward + backward seconds, timed alone on rank 0 before any
  step) and ``sizes`` (layers per stage): the stages' costs known before the steps are timed.
* ``timing``: perfkit 1F1B and ``Schedule1F1B`` steps alternated; seconds per step.
* ``deadlock`` (2 ranks, last): a hanging order executed; every rank's timeout error.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfkit import dist as pdist
from perfkit.parallel.gpt import GPT, GPTConfig, gpt_loss, split_layers
from perfkit.parallel.pipeline import average_gradients, balance, layer_costs, run_schedule
from perfkit.parallel.schedules import Schedule, make_schedule, parse_actions
from perfkit.parallel.simulate import validate
from perfkit.timing import balanced_orders

__all__ = ["MODEL", "ZERO", "Sleep", "run"]

ZERO = 1e-9   # see _diffs: trained parameters here are above 1e-6 after one step
MODEL = {"vocab_size": 64, "block_size": 16, "n_embd": 32, "n_layer": 4, "n_head": 4}


class _SleepFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, t_f: float, t_b: float) -> torch.Tensor:
        ctx.t_b = t_b
        time.sleep(t_f)
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        time.sleep(ctx.t_b)
        return g, None, None


class Sleep(nn.Module):
    """A stage of controlled cost: ``x * w``, sleeping ``t_f`` s forward and ``t_b`` s backward."""

    def __init__(self, t_f: float, t_b: float) -> None:
        super().__init__()
        self.w, self.t_f, self.t_b = nn.Parameter(torch.ones(1)), t_f, t_b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SleepFn.apply(x * self.w, self.t_f, self.t_b)


def _groups(dp: int) -> tuple[list[int], Any, Any]:
    """(pp ranks of this process, pp group, dp group) on a (dp, pp) device mesh."""
    if dp == 1:
        return list(range(dist.get_world_size())), None, None
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (dp, dist.get_world_size() // dp), mesh_dim_names=("dp", "pp"))
    pp_group, dp_group = mesh["pp"].get_group(), mesh["dp"].get_group()
    return dist.get_process_group_ranks(pp_group), pp_group, dp_group


def _setup(task: dict) -> dict:
    dp = task.get("dp", 1)
    pp_ranks, pp_group, dp_group = _groups(dp)
    p = len(pp_ranks)
    sched = make_schedule(task["schedule"], p, task["n_micro"], task.get("n_virtual", 1))
    validate(sched)
    cfg = GPTConfig(**{**MODEL, **task.get("model", {})})
    torch.manual_seed(0)
    model = GPT(cfg)
    ref = copy.deepcopy(model)
    layers = model.layers()
    b, t = task.get("micro_batch", 2), cfg.block_size
    costs = None
    if task.get("balance", "params") == "time":   # measured on rank 0, so every rank cuts alike
        cut: list[Any] = [None]
        if dist.get_rank() == 0:
            costs = layer_costs(layers, "time", torch.randint(cfg.vocab_size, (b, t)))
            cut = [(balance(costs, sched.n_stages), costs)]
        dist.broadcast_object_list(cut, src=0)
        sizes, costs = cut[0]
    else:
        sizes = balance(layer_costs(layers, "params"), sched.n_stages)
    mods = split_layers(layers, sizes)
    me = pp_ranks.index(dist.get_rank())
    mine = {s: mods[s] for s in range(sched.n_stages) if sched.rank_of(s) == me}
    starts = [sum(sizes[:s]) for s in range(len(sizes))]
    ref_layers = ref.layers()
    pairs = [(q, r) for s, mod in mine.items()
             for i, layer in enumerate(mod) for q, r in zip(layer.parameters(),
                                                             ref_layers[starts[s] + i].parameters())]
    g = torch.Generator().manual_seed(1)
    n = dp * sched.n_micro * b
    steps = task.get("steps", 5)
    data = [(torch.randint(cfg.vocab_size, (n, t), generator=g),
             torch.randint(cfg.vocab_size, (n, t), generator=g)) for _ in range(steps)]
    dp_rank = dist.get_rank(dp_group) if dp_group is not None else 0
    return dict(sched=sched, cfg=cfg, ref=ref, mine=mine, pairs=pairs, sizes=sizes, costs=costs, data=data,
                pp_ranks=pp_ranks, pp_group=pp_group, dp_group=dp_group, dp=dp, b=b, me=me,
                part=slice(dp_rank * n // dp, (dp_rank + 1) * n // dp))


def _optimizer(name: str, params: list) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    return torch.optim.AdamW(params, lr=1e-2)


def _ref_losses(env: dict, opt_name: str) -> list[float]:
    opt = _optimizer(opt_name, list(env["ref"].parameters()))
    out = []
    for x, y in env["data"]:
        opt.zero_grad()
        loss = gpt_loss(env["ref"](x), y)
        loss.backward()
        opt.step()
        out.append(float(loss.detach()))
    return out


def _diffs(pairs: list) -> dict:
    """``max_rel_diff``: max over parameters of ``max |p - p_ref| / max |p_ref|``;
    ``zero_abs_diff``: max ``|p - p_ref|`` over the parameters at rounding level
    (``max |p_ref| <= ZERO``), left out of the first: the key projection's bias has a zero
    gradient in exact arithmetic (softmax is unchanged by adding ``q . b_k`` to every score of
    a query), so it holds only rounding noise (~1e-12) and its relative difference says nothing."""
    rel, zero = 0.0, 0.0
    for q, r in pairs:
        d, scale = float((q.detach() - r.detach()).abs().max()), float(r.detach().abs().max())
        if scale <= ZERO:
            zero = max(zero, d)
        else:
            rel = max(rel, d / scale)
    return {"max_rel_diff": rel, "zero_abs_diff": zero}


def _equal(task: dict) -> dict:
    env = _setup(task)
    sched, cfg, b = env["sched"], env["cfg"], env["b"]
    opt = _optimizer(task.get("optimizer", "sgd"), [q for mod in env["mine"].values()
                                                    for q in mod.parameters()])
    losses, peaks, saved = [], [], {}
    for x, y in env["data"]:
        x, y = x[env["part"]], y[env["part"]]
        opt.zero_grad()
        # clones: a view would count its whole batch's storage as the stage's saved input
        rec = run_schedule(sched, env["mine"], [c.clone() for c in x.split(b)],
                           [c.clone() for c in y.split(b)], gpt_loss,
                           (b, cfg.block_size, cfg.n_embd), pp_ranks=env["pp_ranks"],
                           group=env["pp_group"])
        if env["dp"] > 1:
            average_gradients(list(env["mine"].values()), env["dp_group"])
        opt.step()
        losses.append(rec.losses)
        peaks.append(rec.peak_saved_bytes)
        saved = rec.saved_bytes
    if env["dp"] > 1 and losses[0]:   # the step's loss: the mean over the dp replicas
        t = torch.tensor([sum(ls) / len(ls) for ls in losses])
        dist.all_reduce(t, group=env["dp_group"])
        step_losses = (t / env["dp"]).tolist()
    else:
        step_losses = [sum(ls) / len(ls) if ls else None for ls in losses]
    ref = _ref_losses(env, task.get("optimizer", "sgd"))   # trains the reference
    return {**_diffs(env["pairs"]), "losses": step_losses, "ref_losses": ref,
            "sizes": env["sizes"], "peak_saved_bytes": max(peaks), "saved_bytes": saved,
            "stages": sorted(env["mine"]), "n_params": len(env["pairs"])}


def _torch_schedule(env: dict, task: dict) -> Any:
    from torch.distributed import pipelining as pl

    sched, cpu = env["sched"], torch.device("cpu")
    stages = [pl.PipelineStage(mod, s, sched.n_stages, cpu, group=env["pp_group"])
              for s, mod in sorted(env["mine"].items())]
    kind = {"gpipe": pl.ScheduleGPipe, "1f1b": pl.Schedule1F1B,
            "interleaved": pl.ScheduleInterleaved1F1B}[task["schedule"]]
    arg = stages if task["schedule"] == "interleaved" else stages[0]
    return kind(arg, n_microbatches=sched.n_micro, loss_fn=gpt_loss)


def _torch_step(pipe: Any, env: dict, x: torch.Tensor, y: torch.Tensor) -> list:
    first, last = 0 in env["mine"], env["sched"].n_stages - 1 in env["mine"]
    losses: list = []
    pipe.step(*((x,) if first else ()), **({"target": y, "losses": losses} if last else {}))
    return [float(v.detach()) for v in losses]


def _torch(task: dict) -> dict:
    env = _setup(task)
    opt = _optimizer(task.get("optimizer", "sgd"), [q for mod in env["mine"].values()
                                                    for q in mod.parameters()])
    pipe = _torch_schedule(env, task)
    losses = []
    for x, y in env["data"]:
        opt.zero_grad()
        ls = _torch_step(pipe, env, x, y)
        opt.step()
        losses.append(sum(ls) / len(ls) if ls else None)
    ref = _ref_losses(env, task.get("optimizer", "sgd"))
    return {**_diffs(env["pairs"]), "losses": losses, "ref_losses": ref,
            "n_params": len(env["pairs"])}


def _timing(task: dict) -> dict:
    env = _setup({**task, "schedule": "1f1b", "steps": 1})
    sched, cfg, b = env["sched"], env["cfg"], env["b"]
    pipe = _torch_schedule(env, {"schedule": "1f1b"})
    x, y = env["data"][0]
    mods = list(env["mine"].values())

    def ours() -> None:
        run_schedule(sched, env["mine"], list(x.split(b)), list(y.split(b)), gpt_loss,
                     (b, cfg.block_size, cfg.n_embd), count_memory=False)

    times: dict[str, list[float]] = {"perfkit": [], "torch": []}
    for i in range(task.get("warmup", 2) + task.get("repeat", 10)):
        for name, fn in (("perfkit", ours), ("torch", lambda: _torch_step(pipe, env, x, y))):
            for mod in mods:
                mod.zero_grad()
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            dist.barrier()   # the step ends when its slowest rank ends
            if i >= task.get("warmup", 2):
                times[name].append(time.perf_counter() - t0)
    return times


def _bubble(task: dict) -> dict:
    p = dist.get_world_size()
    names = task.get("schedules") or [task["schedule"]]
    scheds = [make_schedule(n, p, task["n_micro"], task.get("n_virtual", 1)) for n in names]
    if any(s.n_stages != scheds[0].n_stages or any(s.rank_of(k) != scheds[0].rank_of(k)
                                                   for k in range(s.n_stages)) for s in scheds):
        raise ValueError(f"schedules {names} must place every stage on the same rank")
    me = dist.get_rank()
    cut: dict[str, Any] = {}
    if task.get("real"):
        env = _setup({**task, "schedule": names[0], "steps": 1})
        cut = {"sizes": env["sizes"], "layer_costs": env["costs"]}
        mine, shape, b = env["mine"], (env["b"], env["cfg"].block_size, env["cfg"].n_embd), env["b"]
        x, y = env["data"][0]
        xs, ys, loss_fn = list(x.split(b)), list(y.split(b)), gpt_loss
    else:
        mine = {s: Sleep(task["t_f"], task["t_b"]) for s in range(scheds[0].n_stages)
                if scheds[0].rank_of(s) == me}
        shape = (1, 4)
        xs = ys = [torch.ones(shape) for _ in range(scheds[0].n_micro)]

        def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return (out - target).pow(2).mean()
    steps: dict[str, list] = {n: [] for n in names}
    orders = balanced_orders(len(names))   # for two: A B, B A, ... (a round's position falls on both)
    for i in range(task.get("steps", 3)):
        for j in orders[i % len(orders)]:
            dist.barrier()
            rec = run_schedule(scheds[j], mine, xs, ys, loss_fn, shape, count_memory=False)
            rows: list = [None] * p
            dist.all_gather_object(rows, rec.slots)
            steps[names[j]].append(rows)
    return {"slots": steps if task.get("schedules") else steps[names[0]], **cut}


def _deadlock(task: dict) -> dict:
    """Execute an order that hangs (rank 1 runs micro-batch 1 first while rank 0 waits for
    micro-batch 0's gradient): every receive must time out with a message, not hang.
    Run it last: the receives it leaves posted would take later messages with their tags."""
    bad = Schedule("bad", 2, 2, 2, (parse_actions(["F0.0", "B0.0", "F0.1", "B0.1"]),
                                    parse_actions(["F1.1", "F1.0", "B1.0", "B1.1"])))
    me = dist.get_rank()
    xs = [torch.ones(1, 4) for _ in range(2)]
    side = dist.new_group(backend="gloo")   # the timed-out receives close this group's pairs
    t0 = time.perf_counter()
    try:
        run_schedule(bad, {me: Sleep(0.0, 0.0)}, xs, xs, lambda o, t: (o - t).pow(2).mean(),
                     (1, 4), timeout_s=task.get("timeout_s", 2.0), count_memory=False,
                     group=side)
    except RuntimeError as e:
        return {"error": str(e)[:300], "waited_s": time.perf_counter() - t0}
    return {"error": None}


TASKS = {"equal": _equal, "torch": _torch, "timing": _timing, "bubble": _bubble,
         "deadlock": _deadlock}


def run(cfg: dict) -> list[dict]:
    """Run ``cfg["tasks"]`` in order; one record per task (see the module docstring).

    Warning:
        Collective: every rank runs the same tasks.
    """
    torch.set_num_threads(1)
    out = []
    for task in cfg["tasks"]:
        try:
            out.append(TASKS[task["task"]](task))
        except Exception as e:   # a task PyTorch refuses here is recorded, the rest still runs
            if not task.get("may_fail"):
                raise
            out.append({"error": f"{type(e).__name__}: {e}"[:500]})
    return out


if __name__ == "__main__":
    pdist.worker_main(run, __doc__)
