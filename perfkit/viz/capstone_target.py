"""The capstone's readings of its last run: the time to the target against tokens/s on the same
two runs, that time beside its expectation as context (one run a side: no verdict), forward +
backward against the ceiling, read over the unprofiled step and the profiled window, and every
run's tokens/s in the order run (:func:`plot_runs`), where the drift between runs shows.

Consumes numbers the capstone notebook measured; nothing here measures. Re-exported by
:mod:`perfkit.viz.capstone` and (``target_text``) :mod:`perfkit.viz`.

Usage::

    print(target_text(3.04, 1.59, pair, total))  # pair: the fixed run over the slow one, tokens/s
    print(target_context(3.04, 1.59, pair, batch_kept=True))
    print(ceiling_text(0.661, 0.0301, 0.0489, 0.0055, 205e9))
    print(headline_rate(total, {"slow": (6.5, 41216), "fixed": (1.7, 65536)}))
    fig = plot_runs([("none", 9800.0), ("data", 18900.0), ("none", 10100.0)])
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from perfkit._checks import check_items, check_real, check_type
from perfkit.profiling.capstone import Total
from perfkit.stats import MIN_SAMPLES, Estimate
from perfkit.units import si
from perfkit.viz.core import tidy

__all__ = ["ceiling_text", "headline_rate", "plot_runs", "target_context", "target_text"]


def ceiling_text(fb_share: float, step_s: float, window_s: float, at_peak_s: float, peak: float) -> str:
    """Forward + backward against the ceiling, read both ways the diagnosis allows: their profiled
    share applied to the unprofiled step (``step_s``, its median: as if the profiler stretched every
    phase alike) and to the profiled window's own step (``window_s``, its mean), each set against
    ``at_peak_s``, both ranks' model FLOPs at ``peak`` FLOP/s. Near the ceiling where that is at
    least half their time (as printed), far where under half; where the two readings part across
    half, this run does not say which.

    Raises:
        TypeError, ValueError: for a share not in (0, 1] or times and peak not finite and > 0.
    """
    check_real("fb_share", fb_share, 0, 1, lo_open=True)
    _ = [check_real(n, v, 0, lo_open=True) for n, v in (("step_s", step_s), ("window_s", window_s),
                                                        ("at_peak_s", at_peak_s), ("peak", peak))]
    runs, window = fb_share * step_s, fb_share * window_s
    near = [round(at_peak_s / t * 100) >= 50 for t in (runs, window)]
    call = ("near the ceiling by both" if all(near) else "far from the ceiling by both: the rest of their "
            "time is not arithmetic at full speed (module 06's fusion, shapes and batch size address it)"
            if not any(near) else "near the ceiling by one reading, far by the other: this run does not say "
            "which")
    return (f"forward + backward: {fb_share:.0%} of the profiled step; that share of the unprofiled step "
            f"is {runs * 1e3:.1f} ms (as if the profiler stretched every phase alike), of the profiled "
            f"window's own step {window * 1e3:.1f} ms; both ranks' model FLOPs at the all-cores ceiling, "
            f"{si(peak, 'FLOP/s')}: {at_peak_s * 1e3:.1f} ms, {at_peak_s / runs:.0%} and "
            f"{at_peak_s / window:.0%} of those: {call}")


def target_context(tt_gain: float, tokens_x: float, pair: Estimate, batch_kept: bool) -> str:
    """The time to the target beside its expectation, as context, not a verdict: one run a side
    gives one ratio, with no interval, so a verdict on it could only read inconclusive, wherever
    it fell; it is printed for where the figure lies against the expected range (1x to the top of
    ``pair``'s interval: no more progress per token than the slow job, McCandlish's model) and
    what the tokens needed say, and recorded as no verdict.

    Args:
        tt_gain: the slow run's seconds to the target over the fixed run's.
        tokens_x: the fixed run's tokens to the target over the slow run's.
        pair: tokens/s of the fixed run over the slow run whose time ``tt_gain`` reads.
        batch_kept: whether ``--fix batch`` is among the fixed run's fixes.

    Raises:
        TypeError, ValueError: for ratios not finite and > 0, or a ``pair`` that is not an Estimate.
    """
    _ = [check_real(n, v, 0, lo_open=True) for n, v in (("tt_gain", tt_gain), ("tokens_x", tokens_x))]
    check_type("pair", pair, Estimate)
    top = pair.high if pair.has_interval else pair.value
    shown, edge = float(f"{tt_gain:.3g}"), float(f"{top:.3g}")
    side = "above" if shown > edge else "below" if shown < 1 else "inside"
    need = f"The fixed job needed {tokens_x:.2f}x the tokens"
    wide = f"The range, 1x to {top:.3g}x, is wide: inside it says little more than the direction. "
    why = {"inside": (wide if top >= 2 else "") + need + (
               ": the larger batch takes fewer, larger steps for the same tokens, the likeliest cause (one "
               "run of each side, so this run does not separate the batch from the other fixes)."
               if batch_kept else "; the fixes kept leave the batch as it was: what the time gained is "
               "speed."),
           "above": need + (": fewer than the slow one, which the model does not expect (one run of each "
                            "side: noise in either curve moves its crossing)." if tokens_x < 1 else
                            f"; the runs' tokens/s, {tt_gain * tokens_x:.2f}x, beat their measured steps': "
                            "the runs' other steps gained more."),
           "below": f"{need} at {pair.value:.2f}x the tokens/s (the median step): "
                    + ("its larger batch" if batch_kept else "it") + " made less progress per token than "
                    "its speed made up."}[side]
    where = {"inside": "inside that range", "above": f"above its top, {top:.3g}x", "below": "below 1x"}[side]
    what = ("the top of these two runs' tokens/s interval" if pair.has_interval
            else "these two runs' tokens/s ratio")
    return (f"ℹ️ **Context, not a prediction** (no more progress per token than the slow job, so at most "
            f"{what}: an expectation, McCandlish's model, not a bound): time-to-target speedup, expected "
            f"between 1x and {top:.3g}x. **Measured:** {tt_gain:.2f}x, one run a side. No verdict is "
            f"recorded: one ratio has no interval (one needs at least {MIN_SAMPLES} samples), so a verdict "
            "on it could only read inconclusive, "
            f"wherever it fell. The figure lies {where}. {why}")


def run_rates_text(runs_x: float, steps_x: float, slow_run: tuple[float, float]) -> str:
    """``": over its run to the target the slow run made 1.23x ..."``: each of two runs' tokens/s
    over its whole run to the target against its measured steps', from the slow run's
    ``(tokens/s over its run, tokens/s of its measured steps)`` and the fixed over the slow run's
    ratios, over the runs (``runs_x``) and in the measured steps (``steps_x``); where a run's rate
    over its run is higher, that its steps outside the window took less than its measured median.

    Raises:
        TypeError, ValueError: for ratios or rates that are not finite numbers > 0.
    """
    for name, v in (("runs_x", runs_x), ("steps_x", steps_x), ("slow_run's rate over its run", slow_run[0]),
                    ("slow_run's measured rate", slow_run[1])):
        check_real(name, v, 0, lo_open=True)
    each = {"slow": slow_run[0] / slow_run[1], "fixed": slow_run[0] / slow_run[1] * runs_x / steps_x}
    out = (f": over its run to the target the slow run made {each['slow']:.2f}x the tokens/s of its "
           f"measured steps, the fixed run {each['fixed']:.2f}x its own")
    faster = [k for k, x in each.items() if x > 1.05]
    if faster:
        out += (f". A run's data preparation only adds time and its profiled window is counted at its "
                f"median step, so the {' and the '.join(faster)} run's steps outside the window (warm-up "
                "included) took less on average than its measured steps' median: those steps, its speed "
                "everywhere above, are a sample of a machine whose speed moved, not the run's mean")
    return out


def target_text(tt_gain: float, tokens_x: float, pair: Estimate, t: Total,
                slow_run: tuple[float, float] | None = None) -> str:
    """The time to the target against tokens/s, on the same two runs: the time's gain times
    the tokens it needed is the tokens/s over the whole runs, held against those runs' measured
    steps (``pair``, the fixed run over the first slow run), and what parts them: the runs'
    other steps, and, where the slow job ran twice, the direct ratio's other baseline.

    Args:
        tt_gain: the slow run's seconds to the target over the fixed run's.
        tokens_x: the fixed run's tokens to the target over the slow run's.
        pair: tokens/s of the fixed run over the slow run whose time ``tt_gain`` reads.
        t: the whole gain (:meth:`~perfkit.profiling.capstone.FixLoop.finish`).
        slow_run: the slow run's (tokens/s over its run, of its measured steps): see ``run_rates_text``.

    Raises:
        TypeError, ValueError: for ratios not finite and > 0, or a bad ``pair`` or ``t``.
    """
    _ = [check_real(n, v, 0, lo_open=True) for n, v in (("tt_gain", tt_gain), ("tokens_x", tokens_x))]
    check_type("pair", pair, Estimate)
    check_type("t", t, Total)
    runs_x, w = tt_gain * tokens_x, pair.value
    out = (f"time to the target: {tt_gain:.2f}x faster; tokens needed {tokens_x:.2f}x; so tokens/s over the "
           f"runs to the target {runs_x:.2f}x, against {w:.2f}x in the same two runs' measured steps (the "
           "unprofiled steps after the profiled window, each run's speed)")
    far = abs(runs_x / w - 1) > 0.05
    out += run_rates_text(runs_x, w, slow_run) if slow_run is not None else "" if not far else (
        ": the runs' other time (the data's preparation before the first step, the warm-up, the profiled "
        f"window counted at the median step, the steps after the window) puts it {runs_x / w:.2f}x from "
        "those steps' ratio")
    if len(t.slow_runs_tps) > 1 and abs(t.direct.value / w - 1) > 0.005:
        runs = " and ".join(f"{x:,.0f}" for x in t.slow_runs_tps)
        out += (f". The direct ratio, {t.direct.value:.2f}x, has another baseline: the mean of the slow "
                f"job's runs ({runs} tokens/s), not this run alone, which puts it {t.direct.value / w:.2f}x "
                "from this pair's")
    return out + "."


def headline_rate(t: Total, reach: Mapping[str, tuple[float, int] | None] | None = None,
                  prep: Mapping[str, float] | None = None) -> str:
    """The headlines' tokens/s: the slow job's (and how far its runs lay apart, past a tenth) to the
    fixed job's, the direct ratio and the rounds' product; and, where both runs to the target
    reached it (``reach``: ``"slow"`` and ``"fixed"`` -> ``(seconds, tokens)``), that pair's
    tokens/s over its whole runs beside it and how far it lies from the direct figure. With
    ``prep`` (``"slow"`` and ``"fixed"`` -> seconds of data preparation inside those seconds), the
    gap is split by the numbers: the same ratio without each run's preparation, the share of the gap
    (in log terms) the preparation makes, and each run's tokens/s over its run, preparation left
    out, against its measured steps' (the slow run's: the first of ``t.slow_runs_tps``), which with
    the direct figure's baseline (the mean of the slow runs, where there are two) makes the rest.

    Raises:
        TypeError, ValueError: for a ``t`` that is not a :class:`Total`, a reach that is not
            positive seconds and tokens, or a preparation not in [0, its run's seconds).
    """
    check_type("t", t, Total)
    out = (f"{t.slow_tps:,.0f}" + (f" (the mean of two slow runs {t.slow_apart:.2f}x apart: the machine's "
                                   "speed moved)" if t.slow_apart > 1.1 else "")
           + f" -> {t.fixed_tps:,.0f}: {t.direct.value:.2f}x measured directly in the runs' measured steps "
           f"(the rounds' product {t.product.value:.2f}x{', drift between rounds' if t.drift else ''}; "
           + ("section 3's seams say where the two part)" if t.repeated else "the same runs, chained)"))
    runs = [(reach or {}).get(k) for k in ("slow", "fixed")]
    if None in runs:
        return out
    (s_s, s_tok), (f_s, f_tok) = runs
    for name, v in (("slow seconds", s_s), ("slow tokens", s_tok), ("fixed seconds", f_s),
                    ("fixed tokens", f_tok)):
        check_real(f"reach's {name}", v, 0, lo_open=True)
    runs_x = (f_tok / f_s) / (s_tok / s_s)
    far = runs_x / t.direct.value
    out += (f"; over the whole runs to the target (the data's preparation and every step counted, one run a "
            f"side) {runs_x:.2f}x, ")
    if abs(far - 1) <= 0.05:
        return out + "within a twentieth of the direct figure"
    out += f"{far:.2f}x the direct figure"
    if prep is None:
        return out + " (section 4 says what parts them)"
    p_s, p_f = (check_real(f"prep's {k}", prep[k], 0, sec, hi_open=True)
                for k, sec in (("slow", s_s), ("fixed", f_s)))
    rate_s, rate_f = s_tok / (s_s - p_s), f_tok / (f_s - p_f)  # tokens/s over each run, preparation out
    bare = rate_f / rate_s
    own_s, own_f = rate_s / (t.slow_runs_tps or (t.slow_tps,))[0], rate_f / t.fixed_tps
    return out + (f"; without each run's data preparation ({p_s:.2f} s and {p_f:.2f} s) {bare:.2f}x, "
                  f"{bare / t.direct.value:.2f}x the direct figure: the preparation moves it "
                  f"{bare / runs_x:.2f}x; "
                  "the rest is each run's other steps against its measured ones (over its run, preparation "
                  f"out, the slow run made {own_s:.2f}x the tokens/s of its measured steps, the fixed run "
                  f"{own_f:.2f}x)" + (" and the direct figure's baseline, the mean of the slow job's runs"
                                      if len(t.slow_runs_tps) > 1 else ""))


def plot_runs(runs: Sequence[tuple[str, float]], title: str = "") -> Figure:
    """Every run's tokens/s in the order run (``runs``: ``(configuration, tokens/s)``,
    :attr:`~perfkit.profiling.capstone.FixLoop.runs`), one marker each, coloured and labelled by
    configuration, the runs of one configuration joined by a line: how far runs of one
    configuration moved between rounds (the drift), beside how far the fixes moved them.

    Raises:
        TypeError, ValueError: for ``runs`` that are not ``(name, tokens/s > 0)`` pairs, or a
            ``title`` that is not a str.
    """
    check_type("title", title, str)
    for i, r in enumerate(check_items("runs", runs)):
        if not (isinstance(r, tuple | list) and len(r) == 2 and isinstance(r[0], str)):
            raise ValueError(f"runs[{i}] must be (configuration, tokens/s), got {r!r}")
        check_real(f"runs[{i}] tokens/s", r[1], 0, lo_open=True)
    fig, ax = plt.subplots(figsize=(max(6.5, 0.45 * len(runs) + 2.5), 3.6))
    configs = list(dict.fromkeys(name for name, _ in runs))
    for k, name in enumerate(configs):
        pts = [(i + 1, t) for i, (n, t) in enumerate(runs) if n == name]
        xs, ys = zip(*pts, strict=True)
        ax.plot(xs, ys, marker="o", ms=6, lw=0.8, ls="--" if len(pts) > 1 else "", color=f"C{k % 10}",
                label=f"{name} ({len(pts)} run{'s' * (len(pts) > 1)})", zorder=3)
    ax.set_yscale("log")
    lo, hi = min(t for _, t in runs) / 1.1, max(t for _, t in runs) * 1.1
    ax.set_ylim(lo, hi)
    for subs in ((1, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9), (1, 2, 3, 5), (1, 2, 5), (1,)):  # finest, <= 8
        ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                 for m in subs if lo <= m * 10.0 ** e <= hi]
        if len(ticks) <= 8:
            break
    ax.set_yticks(ticks, [f"{t:,.0f}" for t in ticks])
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xticks(range(1, len(runs) + 1))
    ax.set_xlabel("run, in the order run")
    ax.set_ylabel("tokens/s, measured steps (log scale)")
    ax.set_title(title or "Every run's tokens/s in the order run, by configuration")
    ax.legend(title="fixes applied", fontsize=8, title_fontsize=8, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return tidy(fig)
