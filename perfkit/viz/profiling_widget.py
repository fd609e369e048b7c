"""Notebook 01's line under its widget: what section 2's measurements predict for the widget's
default setting, held against the figure the widget drew last at that setting.

Usage::

    spec = breakdown_widget("digits")
    viz.build_widget(spec)
    print(widget_expectation_text(spec, healthy_digits_summary))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfkit.units import si
from perfkit.viz.core import WidgetSpec

__all__ = ["widget_expectation_text"]


def widget_expectation_text(spec: WidgetSpec, base: Any, machine: Mapping[str, float] | None = None,
                            far: float = 1.5) -> str:
    """What ``base`` (a :class:`~perfkit.profiling.StepSummary` of the same workload without a planted
    cost) predicts for ``spec``'s (:func:`breakdown_widget`'s) default setting, its median step plus
    ``batch_size x cost_ms`` of decoding in the main process (at 0 workers), held against the figure
    the widget drew last at that setting: how many times the expectation its median step and its data
    phase's median took, and, off by more than ``far`` either way, the 1-minute load average of
    ``machine`` (:func:`perfkit.verdict_text.machine_state`, read now: its minute spans the figure's
    few seconds) where it exceeds the cores; else that this run does not measure why.

    Raises:
        ValueError: for a ``spec`` whose defaults set DataLoader workers (their decoding runs
            elsewhere, and the sum above is no expectation), or ``far`` not above 1.
    """
    from perfkit.verdict_text import machine_state

    d = spec.defaults()
    if d["num_workers"] != 0:
        raise ValueError(f"the widget's default num_workers must be 0 for this expectation, "
                         f"got {d['num_workers']}")
    if not far > 1:
        raise ValueError(f"far must be above 1, got {far!r}")
    planted = d["batch_size"] * d["cost_ms"] / 1e3  # s of decoding per batch, in the main process
    step, data = base.step.p50_s + planted, base["data"].p50_s + planted
    text = (f"expected at the default setting: about {si(step, 's')} per step, data about {data / step:.0%} "
            f"of it (section 2's digits step, {si(base.step.p50_s, 's')} by its median, plus "
            f"{d['batch_size']} x {d['cost_ms']:g} ms)")
    last = getattr(spec.fn, "last", {})
    if last.get("settings") != d or "summary" not in last:
        return text + "; the widget's last figure is not of that setting, so this line holds it against none."
    s = last["summary"]
    got, got_data = s.step.p50_s, s["data"].p50_s
    text += (f". The figure above took {si(got, 's')} per step by its median, {got / step:.2f}x that, and "
             f"data {si(got_data, 's')} by its median, {got_data / data:.2f}x the {si(data, 's')} expected")
    if 1 / far <= got / step <= far:
        return text + f": within {far:g}x of the expectation."
    if got / step < 1 / far:
        return text + f": more than {far:g}x below the expectation; this run does not measure why."
    m = machine_state() if machine is None else machine
    load, cores = m.get("load"), m.get("cores", 1.0)
    why = (f"the 1-minute load average, which spans the figure's run, is {load:.1f} on {cores:.0f} cores "
           "(this notebook's own threads among them): more runnable threads than cores, so threads waited "
           "for a core; this run does not time how much of the gap that wait makes"
           if load is not None and load > cores else
           "this run does not measure why" + (f" (the 1-minute load average is {load:.1f} on {cores:.0f} "
                                               "cores, not above them)" if load is not None else ""))
    return (text + f": more than {far:g}x above the expectation, so read section 2's figures, not this one, "
            f"as the workload's cost; {why}.")
