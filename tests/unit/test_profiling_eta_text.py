"""Notebook 01's roofline sentences: the phase split held against NEAR_ROOF, and the one eta a
ratio outside the phase model's band would need."""

from __future__ import annotations

import pytest

from perfkit.compute.phase_roofline import PhaseModel
from perfkit.viz.profiling import eta_split_text

MS = 1e-3


def model(fixed, roof, eta, rounds=5):
    t = [(fx + r / e) * MS for fx, r, e in zip(fixed, roof, eta)]
    return PhaseModel(10, 20, 4, 6, roof[0] * MS, roof[1] * MS, (t[0],) * rounds, (t[1],) * rounds,
                      (fixed[0] * MS,) * rounds, (fixed[1] * MS,) * rounds)


def test_a_ratio_below_the_band_names_the_one_eta_it_would_need():
    """Old: the 'below' text named the two phases' etas only, never that one eta would have to
    exceed 1 to give the measured ratio."""
    pm = model((2.0, 1.0), (2.0, 4.0), (0.54, 0.66))  # 1.24x, under the at-roof end 1.25x
    assert pm.measured.value < pm.low
    below = pm.explain()["below"]
    assert "forward's ops reached a smaller share" in below
    assert (f"it would take {pm.one_eta():.2f}, and an eta above 1 does not say that ops beat their roofs"
            in below)


def test_a_miss_with_each_phase_under_its_roof_blames_the_one_eta_for_both_phases():
    """Old: the text blamed only R or the fixed-cost reading, though its own etas (54 % and 66 %, both
    under 1) fit each phase: the failed part is the model's one eta for both phases."""
    pm = model((2.0, 1.0), (2.0, 4.0), (0.54, 0.66))
    below = pm.explain()["below"]
    assert ("Each phase's own eta lies in (0, 1], 54% (forward) and 66% (backward), 1.22x apart: what failed "
            "is the model's one eta for both phases") in below
    fast = model((2.0, 1.0), (2.0, 4.0), (0.5, 2.0)).explain()["below"]  # an eta above 1: the inputs
    assert "one eta for both phases" not in fast


def test_the_split_holds_each_eta_against_near_roof():
    """Old: notebook 01 called operators at 54 % and 66 % of their roofs 'too small to run fast'
    whatever NEAR_ROOF said; the words now follow eta against it."""
    near = eta_split_text(2.1e-3, 11.4e-3, (0.54, 0.66), 0.5)
    assert "2.1 ms of forward and backward's 11.4 ms in fixed costs (18%)" in near
    assert ("at 54% (forward) and 66% (backward) of their own roofs: at least NEAR_ROOF (50%) of them, so "
            "near them") in near
    assert "too small" not in near and "larger part" not in near
    mixed = eta_split_text(2.1e-3, 11.4e-3, (0.4, 0.66), 0.5)
    assert "forward's under and backward's at least NEAR_ROOF (50%) of theirs" in mixed
    most = eta_split_text(7e-3, 11e-3, (0.3, 0.3), 0.5)
    assert "more than half: the fixed costs are the larger part" in most
    with pytest.raises(ValueError, match="fixed_s"):
        eta_split_text(12e-3, 11e-3, (0.3, 0.3), 0.5)


def test_an_eta_above_one_names_the_inputs_not_ops_beating_their_roofs():
    """Old: a ratio that needed one eta above 1 was explained as 'ops faster than their roofs',
    though each eta comes from the same times it explains: the alternative the model cannot
    exclude, wrong per-op roofs R or a wrong fixed-cost reading, went unsaid."""
    pm = model((2.0, 1.0), (2.0, 4.0), (0.54, 0.66))
    below = pm.explain()["below"]
    assert "does not say that ops beat their roofs" in below
    assert "the per-op roofs R or the fixed-cost reading" in below
    assert "ops faster than their roofs" not in below
    fast = model((2.0, 1.0), (2.0, 4.0), (0.5, 2.0)).explain()["below"]  # the backward's own eta above 1
    assert fast.startswith("By this split an eta exceeds 1")
    assert "the per-op roofs R or the fixed-cost reading" in fast and "Ops ran faster" not in fast
