"""Tables and sentences of notebook 05 (ZeRO), built from :mod:`perfkit.jobs.zero_bench`'s
``Comparison`` (duck-typed: ``variants`` of results with ``step_s``, ``state_bytes``,
``model_states``, ``calls``, ``sent_bytes``, ``peak_rss_bytes``, ``max_rel_diff_vs_adamw``).

Usage::

    display(Markdown(optimizer_table(cmp)))            # section 2: one row per ZeRO-1 variant
    display(Markdown(stage_table(cmp, stages, formula)))
    print(bytes_lines(cmp.variants))                    # each variant's bytes over DDP's
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfkit.viz.core import si

__all__ = ["bytes_lines", "calls_per_step", "calls_sentence", "optimizer_table", "sent_bytes", "stage_table"]


def calls_per_step(r: Any) -> int:
    """Collective calls of one step (rank 0): each is a rendezvous of every process."""
    return sum((r.calls or {}).values())


def sent_bytes(r: Any) -> float:
    """Bytes one process sends per step, all collectives together (ring model)."""
    return float(sum((r.sent_bytes or {}).values()))


def calls_sentence(r: Any, base: Any, base_name: str = "DDP + AdamW") -> str:
    """What a variant does beyond ``base`` per step, from the counted collective calls."""
    n, nb = calls_per_step(r), calls_per_step(base)
    if n > nb:
        return (f"It makes {n} collective calls per step where {base_name} makes {nb}: each waits for "
                "every process, and copies into or out of a flat buffer.")
    return (f"It makes no more collective calls than {base_name} ({n} against {nb}): the difference is "
            "in its copies into and out of flat buffers and its Python hooks.")


def optimizer_table(cmp: Any) -> str:
    """Section 2's Markdown table: step time, optimizer state, peak RSS, difference to AdamW."""
    rows = ["| variant | ms / step | optimizer state / process | of unsharded | peak RSS growth "
            "| rel. diff vs AdamW |",
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
