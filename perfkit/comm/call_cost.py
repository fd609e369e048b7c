"""What a model charges one small collective call before its bytes, and where that charge came from.

The alpha-beta fit's intercept (:mod:`perfkit.comm.alpha_beta`) is fitted across all sizes of a
sweep (:mod:`perfkit.comm.collectives`), so it need not be what a small call costs; notebook 02's
models of naive and bucketed data parallelism charge each call :func:`small_call_cost`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from perfkit._checks import check_items, check_real, check_type
from perfkit.comm.alpha_beta import AlphaBeta
from perfkit.comm.collectives import CollectivePoint
from perfkit.units import si

__all__ = ["alpha_used_text", "small_call_cost"]


def small_call_cost(points: Sequence[CollectivePoint], fit: AlphaBeta, tol: float = 0.25,
                    up_to_bytes: float | None = None,
                    also: tuple[str, float] | None = None) -> tuple[float, str]:
    """The cost a model charges one call before its bytes, s, and a sentence saying where it came from.

    The fit's intercept ``alpha`` is fitted across all sizes, so it need not be what a small call
    costs. Where it lies within ``tol`` of the sweep's smallest size's median time, that is
    ``alpha``; where it departs further, the smallest size's measured median, so that models
    charging start-ups (notebook 02's sections 4 and 5) charge a measured call, not the line's
    intercept. With ``up_to_bytes`` (the largest message the model charges), the sentence also
    gives the sweep's calls up to that size, as a share of the charge: how far a measured call
    of those sizes lies from what the model charges it. With ``also`` (what, seconds per call:
    another timing of a small call, outside the sweep), the sentence also gives that call against
    the charge, and says where it departs from it by more than ``tol``.

    Raises:
        TypeError, ValueError: for no points, a point that is not a CollectivePoint, a ``fit``
            that is not an AlphaBeta, ``tol`` not in ``[0, 1)``, a negative ``up_to_bytes`` or
            an ``also`` that is not a (str, time > 0) pair.
    """
    items = check_items("points", points)
    first = min((check_type(f"points[{i}]", p, CollectivePoint) for i, p in enumerate(items)),
                key=lambda p: p.nbytes)
    check_type("fit", fit, AlphaBeta)
    check_real("tol", tol, 0, 1, hi_open=True)
    off = fit.alpha_s / first.time_s - 1  # the intercept against the smallest call measured
    call = f"the sweep's smallest call ({si(first.nbytes, 'B')}: {si(first.time_s, 's')})"
    cost = fit.alpha_s if abs(off) <= tol else first.time_s  # s: what each call is charged
    if also is not None and not (isinstance(also, tuple) and len(also) == 2):
        raise TypeError(f"also must be a (what, seconds) pair, got {also!r}")
    if also is not None:
        check_type("also[0]", also[0], str)
        check_real("also[1]", also[1], 0, lo_open=True)
    near = []  # s: the sweep's calls up to up_to_bytes
    if up_to_bytes is not None:
        check_real("up_to_bytes", up_to_bytes, 0)
        near = [p.time_s for p in items if p.nbytes <= up_to_bytes]
    spread = ("" if len(near) < 2 or cost <= 0 else
              f" The sweep's {len(near)} calls up to {si(up_to_bytes, 'B')} took {si(min(near), 's')} to "
              f"{si(max(near), 's')} each (median {si(statistics.median(near), 's')}), bytes included, "
              f"{min(near) / cost:.2g}x to "
              f"{max(near) / cost:.2g}x that charge: the sweep does not pin a call's start-up to it.")
    if also is not None and cost > 0:
        (what, t), side = also, ("less" if also[1] < cost else "more")
        spread += (f" {what[:1].upper() + what[1:]} took {si(t, 's')} per call, {t / cost:.2g}x that charge"
                   + (f": beyond {tol:.0%}, so a small call can cost {side} than the charge, which "
                      "stands for the sweep's calls, not for a fixed price every small call pays."
                      if abs(t / cost - 1) > tol else "."))
    if abs(off) <= tol:
        return cost, (f"Each call is charged the fit's alpha, {si(fit.alpha_s, 's')}, "  # not "-0%": level
                      + (f"{off:+.0%} from {call}, within {tol:.0%}." if f"{abs(off):.0%}" != "0%" else
                         f"{call}'s time to within 0.5 %.") + spread)
    nxt = sorted((p for p in items if p.nbytes > first.nbytes), key=lambda p: p.nbytes)[:1]
    slower = (" That call is the slower side of the inversion the fit's line cannot describe: the next "
              f"size, {si(nxt[0].nbytes, 'B')}, took {si(nxt[0].time_s, 's')}, "
              f"{nxt[0].time_s / first.time_s:.2g}x its time; the models' absolute figures rest on that "
              "charge."
              if nxt and nxt[0].time_s < 0.8 * first.time_s else "")
    return cost, (f"Each call is charged {call} as alpha: the fit's intercept, "
                  f"{si(fit.alpha_s, 's')}, lies {off:+.0%} from it, beyond {tol:.0%}, so the models "
                  "use the measured call." + slower + spread)


def alpha_used_text(fit: AlphaBeta, cost_s: float) -> str:
    """The fit's intercept for a summary, and, where the models charge another cost per call
    (``cost_s``, from :func:`small_call_cost`), that cost beside it.

    Raises:
        TypeError, ValueError: for a ``fit`` that is not an AlphaBeta or a ``cost_s`` below 0.
    """
    check_type("fit", fit, AlphaBeta)
    check_real("cost_s", cost_s, 0)
    return si(fit.alpha_s, "s") + ("" if cost_s == fit.alpha_s else
                                   f"; the models of sections 4 and 5 charge each call {si(cost_s, 's')} "
                                   "(the sweep's smallest call), not this intercept")
