"""Which statistic a lecture 13 verdict tests, in sentences computed from its numbers.

* :func:`window_on_difference` puts a step ratio's tolerance window on the paired difference,
  so a verdict on the ratio and the difference's reading against its point prediction are read
  as the one question or the two they are.
* :func:`faster_than_base` says whether a layout that ran faster than its base step at the
  median did so beyond the run's noise, where the model predicts it slower.
* :func:`shared_window_text` prints a prediction as context where its window also holds the
  figure the model gives without the term it names, and says where two verdicts share one
  predicted figure.
"""

from __future__ import annotations

from collections.abc import Mapping

from perfkit._checks import check_real, check_type
from perfkit.estimate import Estimate
from perfkit.units import si, si_interval
from perfkit.verdict import Prediction

__all__ = ["faster_than_base", "shared_window_text", "window_on_difference"]


def _against(m: Estimate, lo: float, hi: float, unit: str) -> str:
    """Where ``m``'s interval, as printed, lies against the window ``lo``-``hi``."""
    edges = [e for e in (lo, hi) if not m.clear_of(e, unit)]
    if edges:
        return "reaches across its edge " + " and ".join(f"{e:.3g}{unit}" for e in edges)
    return "lies inside it" if lo <= m.low and m.high <= hi else "lies clear of it"


def window_on_difference(prediction: Prediction, ratio: Estimate, gap_ms: Estimate, base_ms: float) -> str:
    """The ratio's tolerance window put on the paired difference, so that a verdict on the
    ratio (``ratio``, judged against ``prediction``'s window) and the difference's reading
    against its point prediction (``gap_ms``, the median of the rounds' differences, ms) are
    read as the one question or the two they are. The window's edges less 1, times the base
    step the model planned (``base_ms``), bound the difference. ``""`` where either has no
    interval.

    Raises:
        TypeError, ValueError: as :func:`point_and_window`, or ``base_ms`` not > 0.
    """
    check_type("prediction", prediction, Prediction)
    check_type("ratio", ratio, Estimate)
    check_type("gap_ms", gap_ms, Estimate)
    b = check_real("base_ms", base_ms)
    if b <= 0:
        raise ValueError(f"base_ms must be > 0, got {base_ms!r}")
    if prediction.value is None:
        raise ValueError("prediction must have a point value (value=..., rel_tol=...)")
    if not all(e.has_interval and e.low < e.high for e in (ratio, gap_ms)):
        return ""
    lo, hi = prediction.bounds()
    a, z = (lo - 1) * b, (hi - 1) * b
    on_gap, on_ratio = _against(gap_ms, a, z, " ms"), _against(ratio, lo, hi, "x")
    out = (f" The difference's reading judges its point prediction, {(prediction.value - 1) * b:.1f} ms, "
           f"with no tolerance; this verdict judges the ratio's window. Put on the difference (its edges "
           f"less 1, times the planned base step, {b:.1f} ms), that window runs {a:.1f} to {z:.1f} ms: "
           f"the difference's interval ({gap_ms.low:.1f} to {gap_ms.high:.1f} ms) {on_gap}, the ratio's "
           f"({ratio.low:.3g}x to {ratio.high:.3g}x) {on_ratio}")
    if on_gap.split(" edge")[0] == on_ratio.split(" edge")[0]:
        return out + (": the two read the window alike, so the verdict would be the same on either; what the "
                      "difference's reading settles is the point prediction alone.")
    return (out + ": on the window the two statistics differ, the ratio dividing each round's difference "
            "by that round's base step, so the two medians weigh the rounds differently; the verdict "
            "records the ratio's, as set before the run.")


def shared_window_text(name: str, predictions: Mapping[str, Prediction], measured: Estimate, said: str,
                       without: float | None = None, what: str = "") -> tuple[bool, str]:
    """Whether ``predictions[name]`` is recorded as a verdict, and the text beside it: printed as
    context, not recorded (``(False, text)``), where its window also holds ``without``, the
    figure the model gives without the term this prediction names (``what`` says which), so
    no figure inside it tests that term, as :func:`step_ratio_text` rules for the collectives.
    A recorded one whose point prediction prints as an earlier one's (in ``predictions``'
    order) says that the model gives both the one figure, so their verdicts test it once.

    Raises:
        KeyError: ``name`` not in ``predictions``.
        TypeError, ValueError: a prediction without a point value, ``said`` not a string.
    """
    check_type("said", said, str)
    p = predictions[name]
    if p.value is None:
        raise ValueError("prediction must have a point value (value=..., rel_tol=...)")
    low, high = p.bounds()
    u = p.unit
    if without is not None and low <= check_real("without", without) <= high:
        return False, (f"Context, not a verdict ({p.model}): {p.what}, {p.describe()}. Measured: "
                       f"{measured.text(u)}. Not recorded as a verdict: its window ({si(low, u)} to "
                       f"{si(high, u)}) also holds {si(without, u)}, {what}, so it cannot test that term. "
                       f"{said}").strip()
    names = list(predictions)
    same = [k for k in names[:names.index(name)]
            if predictions[k].value is not None and si(predictions[k].value, u) == si(p.value, u)]
    if same:
        said += (f" Its prediction, {si(p.value, u)}, is {' and '.join(same)}'s too: the model gives "
                 f"{'them' if len(same) > 1 else 'both'} one figure, so these verdicts test it once, on "
                 f"{len(same) + 1} runs, not {len(same) + 1} predictions.")
    return True, said.strip()


def faster_than_base(name: str, gap_ms: Estimate, predicted_ms: float, base: str = "DDP") -> str:
    """A sentence on a layout whose step ran faster than ``base``'s at the median of the rounds'
    paired differences (``gap_ms``, the step minus the base step, ms, with its interval), against
    the model's difference ``predicted_ms``: whether the interval resolves the speed-up (lies
    clear below 0) or holds 0, so that the run does not tell the two steps apart. ``""`` where
    the median difference is not below 0 (the layout ran no faster: the readings of the
    difference against its prediction say all).

    Raises:
        TypeError, ValueError: ``name`` or ``base`` not a non-empty string, ``gap_ms`` not an
            :class:`~perfkit.estimate.Estimate`, ``predicted_ms`` not finite.
    """
    for k, v in (("name", name), ("base", base)):
        check_type(k, v, str)
        if not v:
            raise ValueError(f"{k} must be a non-empty string")
    check_type("gap_ms", gap_ms, Estimate)
    pr = check_real("predicted_ms", predicted_ms)
    if gap_ms.value >= 0:
        return ""
    model = (f"the model predicts it {pr:.1f} ms slower" if pr > 0 else
             f"the model predicts it {-pr:.1f} ms faster" if pr < 0 else "the model predicts no difference")
    head = (f"{name} ran {-gap_ms.value:.1f} ms faster than {base} at the median paired difference, "
            f"where {model}")
    if not (gap_ms.has_interval and gap_ms.low < gap_ms.high):
        return f"{head}; the median has no interval, so this run cannot say whether that is noise."
    _, lo, hi = si_interval(gap_ms.value, gap_ms.low, gap_ms.high, " ms")  # as clear_of reads them
    span = f"its {gap_ms.label} ({lo} to {hi})"
    if gap_ms.clear_of(0.0, " ms") == "below":
        return (f"{head}; {span} lies clear below 0: a speed-up beyond this run's noise"
                + (", which no term of the model gives: unexplained by this run." if pr >= 0 else "."))
    return (f"{head}; {span} holds 0, so this run does not tell {name}'s step from {base}'s: "
            "there is no speed-up to explain, only a difference within the noise.")
