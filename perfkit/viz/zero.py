"""Tables and sentences of notebook 05 (ZeRO), built from :mod:`perfkit.jobs.zero_bench`'s
``Comparison`` (duck-typed: ``variants`` of results with ``step_s``, ``state_bytes``,
``model_states``, ``calls``, ``sent_bytes``, ``peak_rss_bytes``, ``max_rel_diff_vs_adamw``).

Usage::

    display(Markdown(optimizer_table(cmp)))            # section 2: one row per ZeRO-1 variant
    display(Markdown(stage_table(cmp, stages, formula)))
    print(bytes_lines(cmp.variants))                    # each variant's bytes over DDP's

The step-time edge (:func:`stage_edge`, a model of perfkit's ZeRO stages against DDP + AdamW)
and the call counts it charges live in :mod:`perfkit.viz.zero_edge`, re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfkit.viz.core import si
from perfkit.viz.zero_edge import (
    StageEdge,
    after_backward_edge,
    broadcast_sentence,
    call_cost,
    calls_per_step,
    gloo_calls_note,
    gloo_calls_per_step,
    other_edge_text,
    stage_edge,
)

__all__ = ["StageEdge", "after_backward_edge", "broadcast_sentence", "bytes_lines", "call_cost",
           "calls_per_step", "calls_sentence",
           "gloo_bytes_sentence", "gloo_calls_note", "gloo_calls_per_step", "gloo_sent_bytes",
           "optimizer_table", "other_edge_text", "ranking_note", "sent_bytes", "stage_edge", "stage_table"]


def sent_bytes(r: Any) -> float:
    """Bytes one process sends per step, all collectives together (ring model)."""
    return float(sum((r.sent_bytes or {}).values()))


def gloo_sent_bytes(r: Any) -> float:
    """Bytes one process sends per step where every reduce-scatter moves an all-reduce's bytes, as
    gloo's do: its list form all-reduces each rank's slice in turn (PyTorch pull request 149869), its
    single-tensor form all-reduces the whole buffer (pull request 118911). Each ``reduce_scatter*``
    entry of ``sent_bytes`` (counted at the ring's (N-1)/N) is doubled, to the all-reduce's 2(N-1)/N."""
    return float(sum(2 * b if k.startswith("reduce_scatter") else b for k, b in (r.sent_bytes or {}).items()))


def gloo_bytes_sentence(variants: Mapping[str, Any], baseline: str = "ddp_adamw",
                        others: bool = False) -> str:
    """A sentence, starting with a space, on what the variants that reduce-scatter moved on gloo,
    against the ring count (what NCCL's ring algorithm moves); ``""`` where none reduce-scatters.
    With ``others``, it also sets the first of them against the other variants (not ``baseline``),
    whose count is the same on either backend: which moved more bytes on gloo, compared as printed."""
    base = sent_bytes(variants[baseline])
    names = [n for n, r in variants.items()
             if any(k.startswith("reduce_scatter") for k in (r.sent_bytes or {}))]
    if not names or not base:
        return ""
    text = (" These count each reduce-scatter as a ring sends it, half an all-reduce's bytes: what NCCL's "
            "ring algorithm moves (nccl-tests counts bus bytes the same way). gloo, which ran here, has no "
            "ring reduce-scatter; it all-reduces the buffer, slice by slice, and keeps this process's slice, "
            "so on it "
            + ", ".join(f"{n} moved {gloo_sent_bytes(variants[n]) / base:.2f}x" for n in names)
            + f" {baseline}'s bytes (counted the same way).")
    rest = {n: round(sent_bytes(r) / base, 2) for n, r in variants.items()
            if n not in names and n != baseline}
    if not others or not rest:
        return text
    mine = round(gloo_sent_bytes(variants[names[0]]) / base, 2)
    groups = {w: [n for n, x in rest.items() if (x < mine, x > mine) == k] for w, k in
              (("more than", (True, False)), ("as much as", (False, False)), ("less than", (False, True)))}
    return (text + " The others make no reduce-scatter, so their count is the same on gloo: "
            + ", ".join(f"{n} {x:.2f}x" for n, x in rest.items()) + f"; on gloo {names[0]} moved "
            + ", ".join(f"{w} {' and '.join(ns)}" for w, ns in groups.items() if ns) + ".")


def calls_sentence(r: Any, base: Any, base_name: str = "DDP + AdamW") -> str:
    """What a variant does beyond ``base`` per step, from the counted collective calls."""
    n, nb = calls_per_step(r), calls_per_step(base)
    if n > nb:
        return (f"It makes {n} collective calls per step where {base_name} makes {nb}: each waits for "
                "every process, and copies into or out of a flat buffer.")
    return (f"It makes no more collective calls than {base_name} ({n} against {nb}): the difference is "
            "in its copies into and out of flat buffers and its Python hooks.")


def optimizer_table(cmp: Any) -> str:
    """Section 2's Markdown table: step time, optimizer state, peak RSS, difference to single-process
    AdamW's weights (every row, the data-parallel baseline's included)."""
    rows = ["| variant | ms / step | optimizer state / process | of unsharded | peak RSS growth "
            "| weights' largest rel. diff from single-process AdamW (DDP's row too) |",
            "|---|---|---|---|---|---|"]
    for name, v in cmp.variants.items():
        rss = si(v.peak_rss_bytes, "B") if v.peak_rss_bytes else "-"
        rows.append(f"| {name} | {v.step_s * 1e3:.1f} | {si(v.state_bytes, 'B')} | "
                    f"{v.state_bytes / cmp.total_state_bytes:.1%} | {rss} | {v.max_rel_diff_vs_adamw:.1e} |")
    return "\n".join(rows)


def stage_table(cmp: Any, stages: Mapping[str, int], formula: Mapping[str, Any]) -> str:
    """Section 3's Markdown table: model states per process by kind, against the formula
    (``formula[name].total``, bytes)."""
    rows = ["| stage | variant | parameters | gradients | optimizer state | total | formula "
            "| measured / formula |",
            "|---|---|---|---|---|---|---|---|"]
    for n, s in stages.items():
        m = cmp.variants[n].model_states
        rows.append(f"| {s} | {n} | {si(m['params'], 'B')} | {si(m['grads'], 'B')} | "
                    f"{si(m['optimizer'], 'B')} | "
                    f"{si(sum(m.values()), 'B')} | {si(formula[n].total, 'B')} | "
                    f"{sum(m.values()) / formula[n].total:.4f} |")
    return "\n".join(rows)


def bytes_lines(variants: Mapping[str, Any], baseline: str = "ddp_adamw") -> str:
    """One line per variant: its bytes per step over ``baseline``'s, by collective, and its calls."""
    base = sent_bytes(variants[baseline])
    return "\n".join(
        f"{name:>12}: {sent_bytes(r) / base:.3f}x {baseline}'s bytes per step ("
        + ", ".join(f"{k} {si(b, 'B')}" for k, b in (r.sent_bytes or {}).items())
        + f"), {calls_per_step(r)} collective call{'s' * (calls_per_step(r) != 1)}"
        for name, r in variants.items() if name != baseline)


def ranking_note(variants: Mapping[str, Any], ratios: Mapping[str, Any], names: Sequence[str]) -> str:
    """Where ranking ``names`` by their own median steps (``step_s``, s: what a bar chart of
    medians shows) disagrees with ranking them by their median paired ratios (``value``) to
    DDP + AdamW's steps: a sentence naming the first such pair, or ``""`` where the two agree."""
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ma, mb, ra, rb = variants[a].step_s, variants[b].step_s, ratios[a].value, ratios[b].value
            if (ma - mb) * (ra - rb) < 0:
                hi, lo = (a, b) if ma > mb else (b, a)
                return (f"The figure's time bars, each variant's own median step, make {hi}'s "
                        f"({si(variants[hi].step_s, 's')}) longer than {lo}'s "
                        f"({si(variants[lo].step_s, 's')}); the median paired ratios rank them the other way "
                        f"({ratios[hi].value:.3f}x against {ratios[lo].value:.3f}x): the ratio pairs each "
                        "step with DDP's in the same round, which cancels load that hit both, and the two "
                        "statistics need not agree.")
    return ""
