"""The experiments of module 06 (compute): the steps it times and the records it reads.

Notebook 06 asks what precision, fusion, compilation, attention kernels and shapes do to a
training step. Its measurements are built here, so the notebook shows the question, the
model, the measurement and the verdict: the tiny GPT-2's training step as a no-argument
callable (:func:`gpt_step`), the loss curves of one model trained in several precisions
(:func:`precision_curves`), the graph-break example (:class:`RescaledMLP`), attention inside the model
(:func:`attention_in_model`) and the shape sweep (:func:`shape_sweep`, from
:mod:`perfkit.compute.kernels`).

Usage::

    step = gpt_step(dict(n_embd=128, n_layer=2, n_head=4), ids, "bf16")   # one AdamW step
    sp = compare(gpt_step(gpt, ids, "fp32"), step); print(ratio_text(sp))
    print(largest_rise(precision_curves(workload, batches, ["fp32", "bf16"])))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from perfkit._checks import (
    check_callable,
    check_choice,
    check_int,
    check_items,
    check_real,
    check_tensor,
    check_type,
)
from perfkit.compute.flops import PRECISIONS, Speedup, compare, make_train_step
from perfkit.compute.kernels import ShapeSummary, activation_bytes, shape_summary, shape_sweep
from perfkit.compute.throughput import at_ends
from perfkit.memory.activations import gpt2_saved_activation_bytes
from perfkit.models import tiny_gpt2
from perfkit.stats import Estimate, median_interval
from perfkit.timing import Measurement
from perfkit.units import si
from perfkit.verdict import Prediction, Verdict, judge

__all__ = ["attention_in_model", "attention_sweep_checked", "autocast_saved_bytes", "disturbed_length",
           "disturbed_text", "disturbed_verdict", "drift_text", "gpt_step", "InModelAttention",
           "largest_mfu_text", "largest_rise", "precision_curves", "ratio_text", "RescaledMLP",
           "shape_summary", "shape_sweep", "ShapeSummary", "hidden_side", "WhereRescaledMLP"]


def gpt_step(gpt: Mapping[str, int], ids: torch.Tensor, precision: str = "fp32", compiled: bool = False,
             vocab: int = 1024, mode: str | None = None, lr: float = 1e-3) -> Callable[[], torch.Tensor]:
    """One AdamW training step of a fresh (seeded) tiny GPT-2 on ``ids``, as a callable.

    Args:
        gpt: ``n_embd``, ``n_layer``, ``n_head`` of :func:`perfkit.models.tiny_gpt2`.
        ids: ``(B, T)`` token ids, on the device the step runs on; its own targets.
        precision: ``"fp32"``, ``"bf16"`` (autocast) or ``"fp16"`` (autocast + GradScaler, CUDA).
        compiled: ``torch.compile`` the model (the optimizer stays eager), with ``mode``.
        vocab: the vocabulary (a padded one: ids never use the extra tokens).

    Raises:
        TypeError, ValueError: for ids that are not a 2-d integer tensor, or an unknown precision.
    """
    check_tensor("ids", ids, ndim=2)
    check_choice("precision", precision, PRECISIONS)
    if ids.is_floating_point():
        raise TypeError(f"ids must hold integer token ids, got {ids.dtype}")
    torch.manual_seed(0)  # every variant starts from the same weights
    model = tiny_gpt2(vocab_size=vocab, block_size=ids.shape[1], **gpt).to(ids.device)
    run = torch.compile(model, mode=mode) if compiled else model
    step = make_train_step(model, torch.optim.AdamW(model.parameters(), lr=lr),
                           lambda _m, b: run(input_ids=b, labels=b).loss, precision)
    return lambda: step(ids)


def precision_curves(model: nn.Module, loss_fn: Callable, batches: Sequence, precisions: Sequence[str],
                     lr: float = 3e-3) -> dict[str, list[float]]:
    """The loss at each step of ``model`` trained on ``batches`` in each precision, from the
    same initial weights (restored before each run) with a fresh AdamW.

    The losses are read once, at the end, so no step waits for a host read.

    Raises:
        TypeError, ValueError: for a model that is not a module, a loss_fn that is not
            callable, or no batches or precisions.
    """
    check_type("model", model, nn.Module)
    check_callable("loss_fn", loss_fn)
    check_items("batches", batches)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    curves = {}
    for p in check_items("precisions", precisions):
        model.load_state_dict(init)
        step = make_train_step(model, torch.optim.AdamW(model.parameters(), lr=lr), loss_fn, p)
        curves[p] = torch.stack([step(b) for b in batches]).tolist()
    return curves


def largest_rise(curves: Mapping[str, Sequence[float]], base: str = "fp32", other: str = "bf16") -> str:
    """Where the loss rose most in ``base``, and what ``other`` did at that same step; then
    ``other``'s own largest rise where it lies elsewhere, and what ``base`` did there. Steps are
    counted from 1, as :func:`perfkit.viz.compute.plot_loss_curves` draws them.

    The two runs share the initial weights and the batches, so a rise both take at one step
    comes from that batch; a rise in ``other`` alone, or at least twice ``base``'s (then named as
    both rising, with the ratio), is a step where ``other``'s loss left ``base``'s, and a gap
    that closes again at the next step is one step's deviation, not a changed course. Each rise
    is one difference of two noisy losses: the text compares the same steps in both runs, and
    never reads a cause off where a maximum fell.

    Raises:
        TypeError, ValueError: for curves that are not a mapping holding ``base`` and ``other``,
            or a ``base`` curve of fewer than two steps.
    """
    if not isinstance(curves, Mapping) or base not in curves or other not in curves:
        raise TypeError(f"curves must be a mapping holding {base!r} and {other!r}, got {curves!r}")
    c, o = list(curves[base]), list(curves[other])
    if len(c) < 2:
        raise ValueError(f"curves[{base!r}] needs at least two steps, got {len(c)}")

    def up(v: list[float], i: int) -> float:  # the rise into step i (0-based) from the step before
        return v[i] - v[i - 1]

    j = max(range(1, len(c)), key=lambda i: up(c, i))
    if up(c, j) <= 0:
        return f"the {base} loss never rose"
    both = up(o, j) >= up(c, j) / 2
    text = (f"largest rise of the {base} loss: steps {j} -> {j + 1} ({c[j - 1]:.3f} -> {c[j]:.3f}); "
            f"{other} at the same steps: {o[j - 1]:.3f} -> {o[j]:.3f}" + (
                ": both rose there, so the batch, which both runs share, made the loss rise" if both else
                f": {other} rose less than half as much there"))
    if j + 1 < len(c) and c[j + 1] - c[j - 1] < up(c, j) / 4:
        text += f"; the next {base} step is back at {c[j + 1]:.3f}, so the weights were not damaged"
    k = max(range(1, len(o)), key=lambda i: up(o, i))
    if k != j and up(o, k) > 0:
        alone = up(c, k) < up(o, k) / 2
        text += (f". {other}'s own largest rise is at steps {k} -> {k + 1} ({o[k - 1]:.3f} -> {o[k]:.3f}), "
                 f"where {base} moved {up(c, k):+.3f}" + ((
                     f": a rise in {other} alone" if up(c, k) <= 0 else
                     f": both rose, {other} {up(o, k) / up(c, k):.1f}x as much")
                     + f", a step where {other}'s loss left {base}'s" if alone else ": both rose there too"))
        if alone and k + 1 < len(o):
            gap, after = o[k] - c[k], o[k + 1] - c[k + 1]
            text += (f" (the gap {gap:+.3f} at step {k + 1}, {after:+.3f} at the next: one step's deviation, "
                     "then the same course)" if abs(after) < abs(gap) / 4 else
                     f" (the gap {gap:+.3f} at step {k + 1}, {after:+.3f} at the next)")
    return text + ". One seed: this says nothing of the precision in general."


def hidden_side(value: float, edge: float, unit: str = "") -> str:
    """The sentence a figure needs when three significant digits print it equal to the ``edge``
    it is judged against (``0.89973`` prints as ``0.900`` beside ``0.9``): the figure at the
    fewest digits that tell the two apart, and its side. ``""`` when three digits suffice.

    Raises:
        TypeError, ValueError: for a ``value`` or ``edge`` that is not a finite number.
    """
    check_real("value", value)
    check_real("edge", edge)
    if value == edge or f"{value:.3g}" != f"{edge:.3g}":
        return ""
    digits = next((d for d in range(4, 16) if f"{value:.{d}g}" != f"{edge:.{d}g}"), 16)
    return (f"Printed at three digits the figure equals the edge {edge:g}{unit}; at {digits} it is "
            f"{value:.{digits}g}{unit}, {'below' if value < edge else 'above'} it. ")


def ratio_text(sp: Speedup) -> str:
    """``"1.23x (93% interval ...; medians 10.0 -> 8.1 ms)"``: the judged speedup (:attr:`Speedup.estimate`),
    its interval and the two medians; where the medians' ratio lies on the other side of 1x than the
    estimate or outside its interval, the text gives that ratio too and says which statistic is the figure."""
    est = check_type("sp", sp, Speedup).estimate
    a, b = sp.baseline.median_s, sp.candidate.median_s
    places = next((p for p in range(2, 12) if round(a / b, p) != 1), 12)  # never "1.00x" beside 1x
    inside = est.level is None or est.needs is not None or not est.clear_of(a / b, "x")  # as printed
    said = (f"lies {'above' if a > b else 'below'} 1x where the figure lies "
            f"{'above' if est.value > 1 else 'below'} it: the figure is the pairs' median, and the two "
            "disagreeing says the difference is within the noise" if (a / b - 1) * (est.value - 1) < 0 else
            "" if inside else "lies outside the interval: the figure is the pairs' median, another "
            "statistic; the two medians may come from different rounds, so their ratio carries the drift "
            "between rounds that pairing cancels")
    shown = f"{a / b:.{places}f}x" if inside or (a / b - 1) * (est.value - 1) < 0 else at_ends(a / b, est)
    return (f"{est.point('x')} ({est.describe('x')}; medians {a * 1e3:.1f} -> {b * 1e3:.1f} ms"
            + (f", whose ratio, {shown}, {said}" if said else "") + ")")


class RescaledMLP(nn.Module):
    """An MLP that rescales large activations with a Python ``if`` on a tensor's value:
    dynamo must leave the graph to read it (one graph break)."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        check_int("width", width, 1)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(x))
        peak = h.abs().max()
        if peak.item() > 4.0:  # Python needs the value: a graph break
            h = h / peak
        return self.fc2(h)


class WhereRescaledMLP(RescaledMLP):
    """The same function with ``torch.where``: the branch stays in the graph (no break)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(x))
        peak = h.abs().max()
        return self.fc2(torch.where(peak > 4.0, h / peak, h))


@dataclass(frozen=True)
class InModelAttention:
    """Eager against sdpa attention in a whole tiny GPT-2 (forward + backward) at one length:
    the timing, the bytes autograd saved, and notebook 04's count of them (bytes)."""

    seq_len: int
    speedup: Speedup
    saved: dict[str, int]
    counted: dict[str, int]

    def describe(self) -> str:
        mib = 2**20
        return (f"T={self.seq_len:4d}: sdpa against eager {ratio_text(self.speedup)}; saved eager "
                f"{self.saved['eager'] / mib:5.1f} MiB, sdpa {self.saved['sdpa'] / mib:5.1f} MiB, difference "
                f"{(self.saved['eager'] - self.saved['sdpa']) / mib:5.2f} MiB (predicted "
                f"{(self.counted['eager'] - self.counted['sdpa']) / mib:5.2f} MiB)")


def attention_in_model(seq_len: int, batch: int = 4, heads: int = 4, layers: int = 2, width: int = 64,
                       repeat: int = 7, threads: int | None = None,
                       device: torch.device | str = "cpu") -> InModelAttention:
    """Time and meter a tiny GPT-2 with ``"eager"`` and ``"sdpa"`` attention (the same
    weights), and count the saved bytes with
    :func:`perfkit.memory.activations.gpt2_saved_activation_bytes`."""
    check_int("seq_len", seq_len, 1)
    ids = torch.randint(0, 1024, (batch, seq_len), device=device)
    fns, saved, counted = {}, {}, {}
    for impl in ("eager", "sdpa"):
        torch.manual_seed(0)
        m = tiny_gpt2(block_size=seq_len, n_embd=width, n_layer=layers, n_head=heads).to(device)
        m.set_attn_implementation(impl)
        fns[impl] = lambda m=m: m(input_ids=ids, labels=ids).loss.backward()
        saved[impl] = activation_bytes(lambda m=m: m(input_ids=ids, labels=ids).loss, m)
        counted[impl] = gpt2_saved_activation_bytes(batch, seq_len, width, layers, heads, 1024,
                                                    attention=impl).total
    sp = compare(fns["eager"], fns["sdpa"], repeat=repeat, threads=threads)
    return InModelAttention(seq_len, sp, saved, counted)


def largest_mfu_text(top, swept: int, share: float = 1.0, threads: int = 1, cores: int = 1) -> str:
    """The sentence beside the largest share of a measured ceiling (a throughput point ``top``;
    not an MFU, whose denominator is a vendor's peak): for scale
    when it is below 100 %; above it, the causes this run can have (a ceiling from square
    matmuls up to ``swept`` only, a ceiling measured while the machine was busier, and one
    thread against its ``share`` of the ceiling when ``threads`` of ``cores`` were used). With
    ``share`` < 1 a float32 MFU is printed against the all-core ceiling too."""
    check_int("swept", swept, 1)
    check_real("share", share, 0, 1, lo_open=True)
    rate = getattr(top, "peak_flops", None)  # FLOP/s: the measured ceiling itself, where the point has it
    on = f" ({si(rate, 'FLOP/s')})" if rate else ""
    if share < 1:
        on += f" measured on {threads} of {cores} threads, {share:.0%} of the all-core one" + (
            f"; against the all-core one, {top.mfu * share:.1%}" if top.ceiling == "float32" else "")
    kind = f"{top.precision}{' compiled' if getattr(top, 'compiled', False) else ''}"  # the step it came from
    head = (f"largest share of a measured ceiling, model FLOP/s over a matmul ceiling measured here: "
            f"{top.mfu:.1%} ({kind}, batch {top.batch}, against the {top.ceiling} ceiling{on}). ")
    if top.mfu <= 1:
        return head + ("Not an MFU, and not comparable with PaLM's 46 % MFU (540B parameters, on TPUs): the "
                       "field's MFU divides by the vendor's theoretical peak, a larger denominator than a "
                       "measured ceiling.")
    return (head + f"Above 100 %: impossible against a true ceiling, so the {top.ceiling} ceiling (square "
            f"matmuls up to n={swept}) is below what this step reaches: "
            + ("notebook 00 ran at QUICK sizes here, and its default sweep goes further; "
               if swept < 1024 else "")
            + "a ceiling measured while the machine was busier reads low (notebook 00 keeps the highest it "
            "has measured: run it on a quieter machine)"
            + (f"; and held against {share:.0%} of it for {threads} of {cores} threads, one thread can reach "
               "more than its share" if share < 1 else "")
            + ". A share is only as good as its ceiling.")


def drift_text(before: Mapping[str, Measurement], after: Mapping[str, Measurement]) -> str:
    """How two steps' medians moved between two cells' rounds (``before`` and ``after``: step
    name -> its :class:`perfkit.timing.Measurement`, the same two names), in words the numbers
    bear out: each move in percent, then what the pair of moves says.

    A step whose two medians' intervals overlap did not move clearly; when neither did,
    the sentence says so and no more. Otherwise: "about as much" only for moves within 5 points and
    a factor of 1.5 of each other (of one sign, what a change of load does; opposite signs are named);
    else the step that moved the more is named, with how many times as much if both moved one way.

    Raises:
        ValueError: for mappings that do not hold the same two step names.
    """
    check_type("before", before, Mapping)
    check_type("after", after, Mapping)
    if len(before) != 2 or set(before) != set(after):
        raise ValueError(f"before and after must name the same two steps, got {list(before)}, {list(after)}")
    (a, b), moved = before, {k: after[k].median_s / before[k].median_s - 1 for k in before}

    def apart(k: str) -> bool:  # the two medians' intervals are clear of each other
        x, y = (median_interval(m.times_s) for m in (before[k], after[k]))
        return x.has_interval and y.has_interval and (x.high < y.low or y.high < x.low)

    pct = {k: f"{v:+.1%}" if abs(v) < 0.095 else f"{v:+.0%}" for k, v in moved.items()}  # no "-0%"
    head = f"the {a} step's median moved {pct[a]} and the {b} one's {pct[b]}: "
    far = max(moved, key=lambda k: abs(moved[k]))
    if not (apart(a) or apart(b)):
        return head + "neither clearly, as each step's two medians have overlapping intervals."
    same, times = moved[a] * moved[b] > 0, abs(moved[far]) / max(min(map(abs, moved.values())), 1e-12)
    if times <= 1.5 and abs(abs(moved[a]) - abs(moved[b])) < 0.05 and moved[a] * moved[b] != 0:  # alike
        return head + ("both the same way and by about as much, as a change of load would move them." if same
                       else "by about as much in opposite directions: a load that slows both alike would not "
                       "do that, and this notebook does not time why.")
    more = f"both the same way, but the {far} step moved the more, {times:.1f}x as much" if same else ""
    return head + (more or f"the {far} step moved the more") + (f", so the two figures differ by the {far} "
                   "step's own time between the runs (a load that slows both alike would not do that); this "
                   "notebook does not time why.")


def disturbed_text(points: Sequence) -> str:
    """What disturbed an attention sweep, with its numbers ("naive attention's time grew 100x
    from T=128 to T=256, for 4x the work"), or ``""`` when :func:`disturbed_length` finds nothing."""
    bad = disturbed_length(points)
    if bad is None:
        return ""
    by = {(p.impl, p.seq_len): p.seconds for p in points}
    lens = sorted({p.seq_len for p in points})
    a = bad[1]
    b = lens[lens.index(a) + 1]
    grew = by[bad[0], b] / by[bad[0], a]
    return (f"{bad[0]} attention's time {'fell' if grew < 1 else 'grew'} {grew:.3g}x from T={a} to T={b}, "
            f"for {(b / a) ** 2:.3g}x the work")


def disturbed_verdict(prediction: Prediction, measured: float | Estimate, reason: str,
                      explain: Mapping[str, str] | None = None) -> Verdict:
    """:func:`perfkit.verdict.judge`, unless ``reason`` says the run that produced ``measured``
    was disturbed (a non-empty sentence with its numbers): then a held or inconclusive verdict
    becomes ``"disturbed"``, its text giving the reason instead of an outcome the run cannot
    support (a "held" from a sweep whose times jumped is no evidence for the model). A figure
    past a bound stays missed (a bound is crossed or not), with the reason added.

    Raises:
        TypeError, ValueError: for a ``reason`` that is not a str, and whatever ``judge`` refuses.
    """
    if not isinstance(reason, str):
        raise TypeError(f"reason must be a str (empty: not disturbed), got {type(reason).__name__}")
    why = reason.strip().rstrip(".")
    # a disturbed run's figure is not explained by the model's causes: only "disturbed" is said
    said = {k: t for k, t in (explain or {}).items() if not why or k == "disturbed"}
    v = judge(prediction, measured, explain=said)
    if not why or v.outcome == "disturbed":
        return v
    after = (" " + said["disturbed"].strip()) if said.get("disturbed") else ""
    if v.outcome == "missed":
        return replace(v, text=f"{v.text.rstrip()} The run was disturbed too: {why}, so the miss may be "
                               f"the machine's, not the model's.{after}")
    start = v.text.index("**Measured:**")
    head = v.text[:v.text.index(f": {v.outcome}", start)]
    text = (f"{head}: disturbed: {why}, so this run cannot test the model (it says {v.outcome} on these "
            f"times).{after}")
    return replace(v, outcome="disturbed", direction="", text=text)


def disturbed_length(points: Sequence) -> tuple[str, int] | None:
    """The first ``(impl, T)`` whose time to the next length of the sweep fell, or grew more
    than 4x the ``T^2`` work's growth: a sweep the machine's load disturbed (``None``: none)."""
    by = {(p.impl, p.seq_len): p.seconds for p in check_items("points", points)}
    lens = sorted({p.seq_len for p in points})
    for impl in sorted({p.impl for p in points}):
        for a, b in zip(lens, lens[1:]):
            if not 1 <= by[impl, b] / by[impl, a] <= 4 * (b / a) ** 2:
                return impl, a
    return None




def autocast_saved_bytes(model: nn.Module, ids: torch.Tensor) -> dict[str, int]:
    """Bytes autograd saves for backward in one forward of ``model`` on ``ids`` (its own
    targets), in fp32 and under bf16 autocast (:func:`perfkit.compute.kernels.activation_bytes`)."""
    check_tensor("ids", ids, ndim=2)

    def forward(precision: str) -> torch.Tensor:
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            return model(input_ids=ids, labels=ids).loss

    return {p: activation_bytes(lambda p=p: forward(p), model) for p in ("fp32", "bf16")}


def attention_sweep_checked(impls: Mapping[str, Callable], seq_lens: Sequence[int], retries: int = 1,
                            **kwargs) -> tuple[list, str]:
    """:func:`perfkit.compute.kernels.attention_sweep`, measured again (up to ``retries``
    times) while :func:`disturbed_length` finds a length the machine's load disturbed.

    Returns:
        ``(points, note)``: the last sweep, and a sentence naming each disturbed sweep
        (empty when the first was clean).
    """
    from perfkit.compute.kernels import attention_sweep

    check_int("retries", retries, 0)
    notes = []
    for _ in range(retries + 1):
        pts = attention_sweep(dict(impls), seq_lens, **kwargs)
        bad = disturbed_length(pts)
        if bad is None:
            break
        notes.append(f"{bad[0]} attention's time from T={bad[1]} to the next length fell or grew over "
                     "16-fold (4x the work)")
    if not notes:
        return pts, ""
    again = len(notes) <= retries  # the last sweep was clean
    return pts, ("a disturbed sweep (" + "; then ".join(notes) + ")"
                 + (": the times above are from the next sweep" if again else ", every time: the times above "
                    "are the last sweep's"))
