"""Job: lab 07's tensor-parallel answers against the unsplit computation, with the collectives.

How lab 07's Q1 (the conjugate operators f and g) and Q2 (column- and row-parallel linears)
are graded (``tools/labs/checks_lab07.py``). The answers arrive as a cloudpickle file; every
rank runs them in float64 on data it draws with the same seed as the others, splits the
unsplit weights as Megatron-LM does (rank ``r`` of ``t`` holds rows or columns
``[r n / t, (r + 1) n / t)``), and records, separately for forward and backward, which
collectives ran through ``torch.distributed``'s module and whether each got the group it was
given. The checks judge the records; the same functions run first in the grading process on a
one-process group (``one_process_group``), where a blank or a miswired answer fails in
seconds, before any worker starts. Run by :func:`perfkit.dist.launch`::

    launch("tools.labs.tp_check", 2, ["--config", json.dumps(
        {"question": "operators", "impl": ".../ops.pkl"})], pythonpath=[ROOT])
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfkit import dist as pdist
from tools.labs.record import COLLECTIVES

__all__ = ["IN", "HIDDEN", "OUT", "TOL", "one_process_group", "record_with_group", "run",
           "run_linears", "run_operators"]

IN, HIDDEN, OUT = 6, 8, 5   # the MLP 6 -> 8 -> 5: HIDDEN splits over 2 ranks, OUT need not
TOL = 1e-10                 # float64: the split sums differ from the unsplit ones by rounding only


@contextlib.contextmanager
def record_with_group(group: Any) -> Iterator[list[tuple[str, bool]]]:
    """Record every collective called through ``torch.distributed``'s module in the block.

    Returns:
        (in the ``with`` target) a list that fills with ``(name, got_group)``: whether the
        call's ``group`` argument was ``group``.
    """
    calls: list[tuple[str, bool]] = []
    saved = {n: getattr(dist, n) for n in COLLECTIVES if hasattr(dist, n)}

    def wrap(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(f)

        def recorded(*args: Any, **kw: Any) -> Any:
            try:
                got = sig.bind(*args, **kw).arguments.get("group")
            except TypeError:  # a wrong call: the collective itself will say why
                got = None
            calls.append((name, got is group))
            return f(*args, **kw)
        return recorded

    for n, f in saved.items():
        setattr(dist, n, wrap(n, f))
    try:
        yield calls
    finally:
        for n, f in saved.items():
            setattr(dist, n, f)


@contextlib.contextmanager
def one_process_group() -> Iterator[Any]:
    """A one-process gloo group for in-process checks (the default group, made here unless
    one exists, and destroyed afterwards if made here); yields a group of rank 0 alone."""
    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.new_group([0])
    finally:
        if own:
            dist.destroy_process_group()


def _err(a: torch.Tensor | None, b: torch.Tensor) -> float:
    """Largest absolute difference; inf for a missing tensor or a shape mismatch."""
    if a is None or a.shape != b.shape:
        return float("inf")
    return float((a.detach() - b.detach()).abs().max())


def _close(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    return _err(a, b) <= TOL


def run_operators(f: Callable[..., torch.Tensor], g: Callable[..., torch.Tensor],
                  group: Any) -> dict[str, Any]:
    """Run ``f`` (copy_to_tp) and ``g`` (reduce_from_tp) as a column and a row split use them.

    f: ``x`` (3, 6) whole on every rank; ``y = f(x, group)`` feeds this rank's rows of a
    (8, 6) weight; the loss sums the ranks' output columns, so ``x.grad`` must be the
    unsplit gradient (the sum over ranks). g: this rank's columns of ``h`` (3, 8) times its
    columns of a (5, 8) weight give a partial (3, 5) sum; ``g(partial, group)`` must be the
    unsplit product and each rank's ``h`` slice must get the unsplit gradient.

    Returns:
        ``{"rank", "world", "f": {...}, "g": {...}}``: per operator the collectives of
        ``forward`` and ``backward`` (``(name, got_group)`` lists) and flags on the values
        (``value_ok``, ``grad_ok``, and what a wrong one equals: ``grad_local``,
        ``grad_averaged``, ``value_averaged``, ``grad_times_world``).

    Warning:
        Collective (through the answers): every rank of ``group`` must call it.
    """
    rank, t = dist.get_rank(group), dist.get_world_size(group)
    gen = torch.Generator().manual_seed(7)
    x, a, c = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in
               ((3, IN), (HIDDEN, IN), (3, HIDDEN)))
    rows = slice(rank * HIDDEN // t, (rank + 1) * HIDDEN // t)
    out: dict[str, Any] = {"rank": rank, "world": t}
    # f: identity forward, the ranks' input gradients summed in backward
    xr = x.clone().requires_grad_()
    with record_with_group(group) as fwd:
        y = f(xr, group)
    with record_with_group(group) as bwd:
        ((y @ a[rows].T) * c[:, rows]).sum().backward()
    local = c[:, rows] @ a[rows]    # (3, 6) this rank's share of dL/dx
    want = c @ a                    # (3, 6) the unsplit dL/dx: the sum of the shares
    out["f"] = {"forward": fwd, "backward": bwd, "value_ok": _close(y, x),
                "grad_ok": _close(xr.grad, want),
                "grad_local": t > 1 and _close(xr.grad, local),
                "grad_averaged": t > 1 and _close(xr.grad, want / t)}
    # g: the partial sums summed in forward, the output gradient passed on unchanged
    h, b, d = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in
               ((3, HIDDEN), (OUT, HIDDEN), (3, OUT)))
    hr = h[:, rows].clone().requires_grad_()
    part = hr @ b[:, rows].T        # (3, 5) this rank's partial sum
    with record_with_group(group) as fwd:
        z = g(part, group)
    with record_with_group(group) as bwd:
        (z * d).sum().backward()
    out["g"] = {"forward": fwd, "backward": bwd, "value_ok": _close(z, h @ b.T),
                "value_averaged": t > 1 and _close(z, h @ b.T / t),
                "grad_ok": _close(hr.grad, d @ b[:, rows]),
                "grad_times_world": t > 1 and _close(hr.grad, t * (d @ b[:, rows]))}
    return out


def _agree(ok: bool, group: Any) -> bool:
    """True on every rank only if ``ok`` on every rank (so that all stop together)."""
    flag = torch.tensor([float(ok)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())


def _shape(p: Any) -> list[int] | None:
    return list(p.shape) if isinstance(p, torch.Tensor) else None


def run_linears(col_cls: Callable[..., nn.Module], row_cls: Callable[..., nn.Module],
                group: Any) -> dict[str, Any]:
    """Build ``col_cls(fc1, group)`` and ``row_cls(fc2, group)`` from an unsplit 6 -> 8 -> 5
    MLP and run ``row(tanh(col(x)))`` against it, forward and backward.

    Returns:
        ``{"rank", "world", "col", "row", ...}``: the shapes of each layer's ``weight`` and
        ``bias`` and whether they equal this rank's slice of the unsplit layer
        (``*_ok``), the values each layer registers as parameters (``numel``); once the
        shapes are right on every rank, the ``forward`` and ``backward`` collectives
        (``(name, got_group)``), ``y_ok``, ``bias_counted_world`` (the output is off by
        ``(t - 1)`` biases), per gradient whether it equals the unsplit one's slice, and
        ``uneven_raises``: per class, whether a split dimension of 7 features raised
        ValueError (always true on one process).

    Warning:
        Collective (through the answers): every rank of ``group`` must call it.
    """
    rank, t = dist.get_rank(group), dist.get_world_size(group)
    torch.manual_seed(11)
    fc1 = nn.Linear(IN, HIDDEN, dtype=torch.float64)
    fc2 = nn.Linear(HIDDEN, OUT, dtype=torch.float64)
    ref1, ref2 = copy.deepcopy(fc1), copy.deepcopy(fc2)   # the answer may alter what it gets
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(4, IN, generator=gen, dtype=torch.float64)
    c = torch.randn(4, OUT, generator=gen, dtype=torch.float64)
    xx = x.clone().requires_grad_()
    y_ref = ref2(torch.tanh(ref1(xx)))                       # (4, 5) the unsplit MLP
    (y_ref * c).sum().backward()
    rows = slice(rank * HIDDEN // t, (rank + 1) * HIDDEN // t)
    col, row = col_cls(fc1, group), row_cls(fc2, group)
    want = {"col": (ref1.weight[rows], ref1.bias[rows]), "row": (ref2.weight[:, rows], ref2.bias)}
    out: dict[str, Any] = {"rank": rank, "world": t}
    for name, layer in (("col", col), ("row", row)):
        w, bias = getattr(layer, "weight", None), getattr(layer, "bias", None)
        out[name] = {"weight": _shape(w), "bias": _shape(bias),
                     "weight_ok": _close(w, want[name][0]), "bias_ok": _close(bias, want[name][1]),
                     "numel": sum(p.numel() for p in layer.parameters())}
    if not _agree(all(out[k]["weight_ok"] and out[k]["bias_ok"] for k in ("col", "row")), group):
        return out
    xr = x.clone().requires_grad_()
    with record_with_group(group) as fwd:
        y = row(torch.tanh(col(xr)))                        # (4, 5)
    with record_with_group(group) as bwd:
        (y * c).sum().backward()
    out.update(forward=fwd, backward=bwd, y_ok=_close(y, y_ref.detach()),
               bias_counted_world=t > 1 and _close(y, y_ref.detach() + (t - 1) * ref2.bias),
               grads={"x": _close(xr.grad, xx.grad),
                      "col.weight": _close(col.weight.grad, ref1.weight.grad[rows]),
                      "col.bias": _close(col.bias.grad, ref1.bias.grad[rows]),
                      "row.weight": _close(row.weight.grad, ref2.weight.grad[:, rows]),
                      "row.bias": _close(row.bias.grad, ref2.bias.grad)})
    # a split dimension of 7 features does not divide over 2 ranks: a clear error, not a
    # silently uneven split (the all-reduce needs the same shape everywhere)
    out["uneven_raises"] = {name: t == 1 or _raises_value_error(cls, lin) for name, cls, lin in (
        ("ColumnParallelLinear", col_cls, nn.Linear(IN, 7)),
        ("RowParallelLinear", row_cls, nn.Linear(7, OUT)))}
    return out


def _raises_value_error(cls: Callable[..., nn.Module], linear: nn.Linear) -> bool:
    try:
        cls(linear, None)
    except ValueError:
        return True
    except Exception:  # noqa: BLE001 - any other error is the wrong one
        return False
    return False


def run(cfg: dict[str, Any]) -> dict[str, Any]:
    """Check the pickled answers of ``cfg["impl"]`` for ``cfg["question"]`` (``"operators"``:
    a dict with ``copy_to_tp`` and ``reduce_from_tp``; ``"linears"``: one with
    ``ColumnParallelLinear`` and ``RowParallelLinear``) on a group of every rank.

    Warning:
        Collective: every rank must call it with the same ``cfg``.
    """
    import cloudpickle

    with open(cfg["impl"], "rb") as fh:
        impl = cloudpickle.load(fh)
    group = dist.new_group(list(range(dist.get_world_size())))   # passed explicitly
    if cfg["question"] == "operators":
        return run_operators(impl["copy_to_tp"], impl["reduce_from_tp"], group)
    return run_linears(impl["ColumnParallelLinear"], impl["RowParallelLinear"], group)


def main(argv: Sequence[str] | None = None) -> None:
    import argparse
    import json

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help='JSON: {"question": ..., "impl": path}')
    cfg = json.loads(p.parse_args(argv).config)
    pdist.init_worker(backend="gloo")   # CPU tensors, even where CUDA would pick nccl
    pdist.worker_result(run(cfg))
    pdist.shutdown()


if __name__ == "__main__":
    main()
