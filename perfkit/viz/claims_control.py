"""What module 09's A/A control says: one DataLoader loop timed against itself in balanced
orders, the position effect its rounds of each order show (:func:`control_order_text`), and what
its reach is, and is not, for the timed verdicts after it (:func:`control_text`): the paired noise
of that one single-process loop at its number of rounds, not the error of other designs.
Re-exported by :mod:`perfkit.viz.claims`.

Usage::

    print(control_order_text(pin))
    print(control_text(pin, 0.05, target=0.02))
"""

from __future__ import annotations

from perfkit.data.claims import PinTiming

__all__ = ["control_order_text", "control_text"]


def control_order_text(pin: PinTiming) -> str:
    """What the A/A control's rounds of each order, taken apart, say: how much a round's second
    loop took longer (the position effect, which the balanced ratio cancels by design), and where
    both orders read on one side of 1x by more than that effect, that the gap between identical
    loops is not the position's.

    Raises:
        TypeError, ValueError: for a ``pin`` that is not a PinTiming, or one whose loops ran
            different code (no control).
    """
    if not isinstance(pin, PinTiming):
        raise TypeError(f"pin must be a perfkit.data.claims.PinTiming, got {type(pin).__name__}")
    if not pin.same_code:
        raise ValueError("pin must time one loop against itself (no CUDA): it is no control otherwise")
    a, b = pin.by_order().values()  # pageable first, pinned first: here two copies of one unpinned loop
    second, aa = pin.position_effect(), pin.speedup().value
    longer = f"{abs(second):.1%} {'longer' if second >= 0 else 'less'}"
    out = (f"the rounds of one order apart (copies A and B: the same unpinned loop, in claim 12's pageable "
           f"and pinned places): A first {a.text('x')}; B first {b.text('x')}: ") + (
        f"the second loop of a round took {longer} than the first (the same code), beyond the two intervals; "
        "the balanced ratio above cancels it by design" if a.high < b.low or b.high < a.low else
        f"their intervals overlap (by the medians a round's second loop took {longer}): no position effect "
        "shows beyond this run's noise")
    if (a.value < 1) == (b.value < 1) and abs(1 - aa) > abs(second):
        out += (f"; both orders' medians read {'below' if aa < 1 else 'above'} 1x ({a.value:.4f}x and "
                f"{b.value:.4f}x), so the {abs(1 - aa):.1%} between "
                f"identical loops is not the round's position ({abs(second):.1%}): noise, or rounds that "
                "drift together (not independent draws, which makes an order-statistic interval too narrow); "
                "this run does not tell which, and the lines below weigh it as this design's own error")
    return out


def control_text(pin: PinTiming, edge: float, target: float | None = None) -> str:
    """What the A/A control says about every timed verdict after it: how far identical loops read
    apart (:meth:`~perfkit.data.claims.PinTiming.reach`) against ``edge`` (the least a claim
    without a number must show, as a fraction) and, given, the ``target`` the design was predicted
    to keep within (a fraction): past it, the sentence says the reach passed it, as a reach, not a
    verdict (the A/A prediction judges the figure with its interval); and that each
    timed verdict on the advice is weighed by that reach (:func:`perfkit.verdict.assess`'s ``error``).

    Raises:
        TypeError, ValueError: for a ``pin`` that is not a control (see
            :func:`control_order_text`), or an ``edge`` or ``target`` that is not a number > 0.
    """
    control_order_text(pin)  # the same checks
    for name, v in (("edge", edge), ("target", 1.0 if target is None else target)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{name} must be a number > 0, got {v!r}")
    aa, reach, n = pin.speedup(), pin.reach(), len(pin.pageable.times_s)
    missed = target is not None and reach > target
    share = (f" (how far the interval reaches against what the design aimed for, not the verdict above, "
             f"which judges the figure, {aa.value:.3f}x, with its interval)" if missed else "")
    aim = ("" if target is None else f"{'past' if missed else 'within'} the {target:.0%} the design was "
           f"predicted to keep{share}; ")
    noise = f"so this loop's own noise at {n} rounds alone"
    return (f"identical loops read {aa.value:.3f}x over {n} rounds, their interval reaching {reach:.1%} "
            f"from 1x: {aim}" + (f"under the {edge:.0%} a claim without a number must show (FASTER), {noise} "
                                 "cannot push such a claim past its edge" if reach < edge else
                                 f"at least the {edge:.0%} a claim without a number must show (FASTER), "
                                 f"{noise} could push such a claim past its edge")
            + ". It is not the error of the other designs below (other work, fewer rounds, two processes). "
            "Each timed verdict on the advice below is "
        f"weighed by it: an interval within {reach:.1%} of the edge that decides it (no effect, or the "
        f"promise) is not asserted past that edge. That {reach:.1%} is the paired noise of one "
        f"single-process loop at {n} rounds within one run: where a claim compares separate runs, processes "
        "or orders, its own spread can be wider, and a claim that measured one prints it beside its verdict; "
        "comparisons of identical work later in this notebook read the design's error again, and claim 14 "
        "names the verdicts their largest reading would change.")
