"""How often to save: Young's and Daly's checkpoint intervals and the goodput model.

A run that saves its state every ``tau`` seconds of training, spends ``delta`` seconds on each
save, fails as a Poisson process with mean time between failures ``M`` and takes ``R`` seconds
to come back, loses three things: the saves (``delta / tau`` of the time), the restarts
(``R / M``) and the work since the last save (half an interval per failure, ``tau / (2 M)``).
Young (1974, "A first order approximation to the optimum checkpoint interval", CACM 17(9))
balanced the first against the last: ``tau = sqrt(2 delta M)``. Daly (2006, "A higher order
estimate of the optimum checkpoint interval for restart dumps", Future Generation Computer
Systems 22(3), 303-312) wrote the expected wall time exactly,

    T_w(tau) = M exp(R / M) (exp((tau + delta) / M) - 1) T_s / tau,

(failures may strike during saves and restarts too; ``T_s`` is the training time the run
needs) and expanded its minimum in ``sqrt(delta / (2 M))``:

    tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta / (2 M)) + (1/9) delta / (2 M)] - delta

for ``delta < 2 M``, and ``tau = M`` beyond. The goodput model
``1 - delta / tau - (tau / 2 + R) / M`` is the first-order share of the wall time spent on
training that survives (:func:`goodput`); Daly's exact share is ``T_s / T_w``
(:func:`daly_goodput`).

An interval is only as good as its ``delta`` and ``M``. ``M`` counted from ``k`` failures in a
window is a Poisson rate's inverse, known to within the exact (Garwood 1936) interval of that
rate: with 6 failures the 90 % interval of ``M`` spans more than a factor of four, and Daly's
interval, which grows as ``sqrt(M)``, about a factor of two (:func:`mtbf_interval`). An
asynchronous save blocks the step only while it stages the state, but the steps that run
beside its persist run slower where they share the cores: :func:`async_save_cost` adds that
slowdown to the blocked time, the ``delta`` the model should take. ``R`` moves neither
interval (both depend on ``delta`` and ``M`` only): it moves the goodput at them.

Usage::

    tau = daly_interval(save_s=20.0, mtbf_s=3 * 3600.0)            # s of training between saves
    print(tau, goodput(tau, save_s=20.0, restart_s=600.0, mtbf_s=3 * 3600.0))
    best = best_interval([60.0, 120.0, 240.0], 20.0, 600.0, 3 * 3600.0)
    low, high = mtbf_interval(window_s=240.0, failures=6)           # s, the MTBF's 90 % interval
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from perfkit._checks import check_choice, check_int, check_items, check_real

__all__ = ["async_save_cost", "async_save_cost_of_run", "best_interval", "daly_goodput", "daly_interval",
           "daly_wall_time", "goodput", "mtbf_interval", "young_interval"]

MODELS = ("first-order", "daly")


def _positive(name: str, v: float) -> float:
    return check_real(name, v, 0, lo_open=True)


def young_interval(save_s: float, mtbf_s: float) -> float:
    """Young's interval ``sqrt(2 delta M)``: seconds of training between two saves.

    Args:
        save_s: ``delta``, the seconds one save stops training (> 0).
        mtbf_s: ``M``, the mean time between failures of the whole job, in seconds (> 0).

    Returns:
        The interval in seconds.

    Raises:
        TypeError, ValueError: for an argument that is not a finite number > 0.
    """
    return math.sqrt(2 * _positive("save_s", save_s) * _positive("mtbf_s", mtbf_s))


def daly_interval(save_s: float, mtbf_s: float) -> float:
    """Daly's higher-order estimate of the interval that minimises the expected wall time.

    ``sqrt(2 delta M) [1 + (1/3) x + (1/9) x^2] - delta`` with ``x = sqrt(delta / (2 M))``,
    for ``delta < 2 M``; ``M`` beyond (a save as long as two failure intervals: save once per
    MTBF). Always shorter than Young's (their ratio is ``1 - 2x/3 + x^2/9``): the save itself
    is exposed to failures. Against the exact minimum of :func:`daly_wall_time` (found
    numerically) it is 0.04 % short at ``delta / M = 0.1``, 2 % at 1 and 6 % near 2, where
    Young's is 17 %, 68 % and 110 % long.

    Args:
        save_s: ``delta``, the seconds one save stops training (> 0).
        mtbf_s: ``M``, the job's mean time between failures in seconds (> 0).

    Returns:
        The interval in seconds.

    Raises:
        TypeError, ValueError: for an argument that is not a finite number > 0.
    """
    delta, m = _positive("save_s", save_s), _positive("mtbf_s", mtbf_s)
    if delta >= 2 * m:
        return m
    x = math.sqrt(delta / (2 * m))
    return math.sqrt(2 * delta * m) * (1 + x / 3 + x * x / 9) - delta


def goodput(tau_s: float, save_s: float, restart_s: float, mtbf_s: float) -> float:
    """The goodput model: the share of the wall time spent on training that is kept,
    ``1 - delta / tau - (tau / 2 + R) / M``.

    A first-order expansion in ``(tau + delta) / M`` and ``R / M``: it holds while the
    interval, the save and the restart are short against the MTBF. With ``tau`` a third of
    ``M`` it is about a point below Daly's exact share (:func:`daly_goodput`), at half of
    ``M`` two and a half points (``delta = M / 720``, ``R = M / 60``), and it
    falls without bound as ``tau`` or ``R`` grow, while a real run's share only tends to 0.
    Where the formula goes negative (the losses it counts exceed the wall time, e.g.
    ``tau >= 2 M`` or ``R >= M``) it has stopped meaning anything: the run, as this model sees
    it, makes no progress, and the function returns 0.0 rather than a negative share.

    Args:
        tau_s: ``tau``, seconds of training between two saves (> 0).
        save_s: ``delta``, seconds one save stops training (>= 0).
        restart_s: ``R``, seconds from a failure to the first resumed step (>= 0).
        mtbf_s: ``M``, the job's mean time between failures in seconds (> 0).

    Returns:
        The share in [0, 1).

    Raises:
        TypeError, ValueError: for an argument that is not a finite number in its range.
    """
    tau, delta = _positive("tau_s", tau_s), check_real("save_s", save_s, 0)
    r, m = check_real("restart_s", restart_s, 0), _positive("mtbf_s", mtbf_s)
    return max(0.0, 1 - delta / tau - (tau / 2 + r) / m)


def daly_wall_time(tau_s: float, save_s: float, restart_s: float, mtbf_s: float,
                   solve_s: float) -> float:
    """Daly's expected wall time of a run that needs ``solve_s`` seconds of training:
    ``M exp(R / M) (exp((tau + delta) / M) - 1) solve_s / tau``.

    Exact for Poisson failures that may strike during training, saves and restarts alike,
    each failure sending the run back to its last complete save (Daly 2006, with the
    last segment taken as a whole interval). Its minimum over ``tau`` solves
    ``exp((tau + delta) / M) (1 - tau / M) = 1``, independent of ``R`` and ``solve_s``.

    Args:
        tau_s: seconds of training between two saves (> 0).
        save_s: seconds per save (>= 0).
        restart_s: seconds from a failure to the first resumed step (>= 0).
        mtbf_s: the job's mean time between failures in seconds (> 0).
        solve_s: seconds of training the run needs without failures or saves (> 0).

    Returns:
        The expected wall time in seconds (``inf`` where it overflows a float).

    Raises:
        TypeError, ValueError: for an argument that is not a finite number in its range.
    """
    tau, delta = _positive("tau_s", tau_s), check_real("save_s", save_s, 0)
    r, m = check_real("restart_s", restart_s, 0), _positive("mtbf_s", mtbf_s)
    solve = _positive("solve_s", solve_s)
    try:
        return m * math.exp(r / m) * math.expm1((tau + delta) / m) * solve / tau
    except OverflowError:
        return math.inf


def daly_goodput(tau_s: float, save_s: float, restart_s: float, mtbf_s: float) -> float:
    """Daly's exact share of the wall time spent on kept training: ``T_s / T_w``, that is
    ``tau / (M exp(R / M) (exp((tau + delta) / M) - 1))``. It equals :func:`goodput` to first
    order in ``(tau + delta) / M`` and ``R / M``, stays positive, and is the one to trust
    where ``tau``, ``delta`` or ``R`` are not small against ``M``.

    Args:
        tau_s: seconds of training between two saves (> 0).
        save_s: seconds per save (>= 0).
        restart_s: seconds from a failure to the first resumed step (>= 0).
        mtbf_s: the job's mean time between failures in seconds (> 0).

    Returns:
        The share in [0, 1).

    Raises:
        TypeError, ValueError: for an argument that is not a finite number in its range.
    """
    return 1.0 / daly_wall_time(tau_s, save_s, restart_s, mtbf_s, 1.0)


def best_interval(grid_s: list[float], save_s: float, restart_s: float, mtbf_s: float,
                  model: str = "first-order") -> float:
    """The interval of ``grid_s`` with the highest goodput (the shorter one on a tie).

    Args:
        grid_s: intervals to choose from, seconds (each > 0; at least one).
        save_s: seconds per save (>= 0).
        restart_s: seconds from a failure to the first resumed step (>= 0).
        mtbf_s: the job's mean time between failures in seconds (> 0).
        model: ``"first-order"`` (:func:`goodput`) or ``"daly"`` (:func:`daly_goodput`).

    Returns:
        The chosen interval in seconds.

    Raises:
        TypeError, ValueError: for an empty grid or an argument out of its range.
    """
    grid = [_positive("grid_s entries", t) for t in check_items("grid_s", grid_s)]
    share = goodput if check_choice("model", model, MODELS) == "first-order" else daly_goodput
    check_real("save_s", save_s, 0)
    check_real("restart_s", restart_s, 0)
    _positive("mtbf_s", mtbf_s)
    return max(sorted(grid), key=lambda t: share(t, save_s, restart_s, mtbf_s))


def _poisson_cdf(k: int, lam: float) -> float:
    """P(X <= k) for X ~ Poisson(lam), summed in log space (no overflow for large k)."""
    if lam == 0:
        return 1.0
    return math.fsum(math.exp(i * math.log(lam) - lam - math.lgamma(i + 1)) for i in range(k + 1))


def _solve(f, target: float, lo: float, hi: float) -> float:
    """The ``x`` in [lo, hi] where the decreasing ``f`` crosses ``target`` (bisection)."""
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > target else (lo, mid)
    return (lo + hi) / 2


def mtbf_interval(window_s: float, failures: int, level: float = 0.9) -> tuple[float, float]:
    """The mean time between failures from ``failures`` counted in ``window_s``, as the exact
    two-sided Poisson interval at ``level`` (Garwood 1936): the failure counts ``lam`` whose
    chance of ``failures`` or more (lower end) or of ``failures`` or fewer (upper end) is
    ``(1 - level) / 2``, turned into ``window_s / lam``.

    Args:
        window_s: the time the failures were counted in, s (> 0).
        failures: failures counted (>= 1; none gives no upper bound on the MTBF).
        level: the interval's confidence, in (0, 1).

    Returns:
        ``(low, high)``: the MTBF's interval in seconds; ``window_s / failures`` lies inside.

    Raises:
        TypeError, ValueError: a window not a finite number > 0, failures below 1, or a level
            outside (0, 1).
    """
    window = check_real("window_s", window_s, 0, lo_open=True)
    k = check_int("failures", failures, 1)
    tail = (1 - check_real("level", level, 0, 1, lo_open=True, hi_open=True)) / 2
    top = k + 20 * math.sqrt(k) + 40  # a count far above k: every tail there is below 1e-12
    # the lower count: P(X >= k) = 1 - P(X <= k - 1) rises with lam; the upper: P(X <= k) falls
    lam_lo = _solve(lambda lam: _poisson_cdf(k - 1, lam), 1 - tail, 0.0, top)
    lam_hi = _solve(lambda lam: _poisson_cdf(k, lam), tail, 0.0, top)
    return window / lam_hi, window / lam_lo


def async_save_cost(blocked_s: float, steps_per_save: float, step_s_during: float,
                    step_s_quiet: float) -> float:
    """Seconds of training an asynchronous save costs: the time it blocks the step, plus how
    much longer the steps that ran beside its persist took than steps without one.

    Args:
        blocked_s: the time one save blocked the step, s (>= 0).
        steps_per_save: steps that ran while one save's persist was in flight (>= 0).
        step_s_during: a step's time while a persist ran, s (> 0).
        step_s_quiet: a step's time without one, s (> 0).

    Returns:
        Seconds lost per save (never below ``blocked_s``: a step that ran faster beside a
        persist is taken as no faster).

    Raises:
        TypeError, ValueError: an argument not a finite number in its range.
    """
    blocked = check_real("blocked_s", blocked_s, 0)
    n = check_real("steps_per_save", steps_per_save, 0)
    during = check_real("step_s_during", step_s_during, 0, lo_open=True)
    quiet = check_real("step_s_quiet", step_s_quiet, 0, lo_open=True)
    return blocked + n * max(0.0, during - quiet)


def async_save_cost_of_run(run: Mapping) -> tuple[float, float, float]:
    """:func:`async_save_cost` of the thread mode in a stored checkpoint benchmark's ``async``
    result (``benchmarks/checkpoint.py``): its steps per save (the steps that ran beside a
    persist over its saves), the seconds of training one save cost, and that cost over the same
    run's synchronous save's median blocked time (above 1x the asynchronous save cost more).

    Raises:
        TypeError, ValueError: ``run`` not a mapping, or a field missing or out of range.
    """
    if not isinstance(run, Mapping):
        raise TypeError(f"run must be a mapping, got {type(run).__name__}")
    try:
        th, sync = run["modes"]["thread"], run["modes"]["sync"]
        per_save = check_real("steps_during_persist", th["steps_during_persist"], 0) / len(th["blocked_s"])
        lost = async_save_cost(th["median_blocked_s"], per_save, th["step_s_during_persist"],
                               run["step_s_without_persist"])
        sync_s = check_real("sync median_blocked_s", sync["median_blocked_s"], 0, lo_open=True)
    except (KeyError, TypeError, ZeroDivisionError) as e:
        raise ValueError(f"run lacks a benchmark field or holds a bad one: {e!r}") from e
    return per_save, lost, lost / sync_s
