"""perfkit.compute.claims_ultra: settings, the tuned subset and the additive prediction."""

import pytest

from perfkit import timing
from perfkit.compute import claims_ultra as cu
from perfkit.timing import Measurement

SMALL = dict(n_embd=16, n_layer=1, n_head=2)


def m(*ts):
    return Measurement(tuple(ts), 0)


def fake_switches(times):
    names = list(cu.switches(2, 2))
    return cu.SwitchTiming(m(1.0, 1.0, 1.0), {n: m(*[t] * 3) for n, t in zip(names, times)},
                           cu.switches(2, 2), 4, 8, SMALL)


def test_switches_name_the_setting_fields():
    for changes in cu.switches(4, 2).values():
        assert set(changes) <= set(cu.Setting.__dataclass_fields__)
    assert "4 workers" in cu.switches(4, 2) and "accumulation 2" in cu.switches(4, 2)


def test_kept_are_the_switches_whose_whole_interval_is_above_one():
    t = fake_switches([0.5, 2.0, 1.0, 1.25, 0.9])  # times: faster, slower, equal, slower, faster
    assert t.kept() == ["fused attention", "accumulation 2"]
    assert t.speedup("fused GELU").value == pytest.approx(0.5)
    # planted: an interval printed as "1.00x to 1.06x" kept as lying above 1x (its unrounded low end did)
    names = list(cu.switches(2, 2))
    edge = cu.SwitchTiming(m(1.0, 1.0, 1.0, 1.0, 1.0), {names[0]: m(0.999, 0.97, 0.95, 0.96, 0.94)},
                           {names[0]: cu.switches(2, 2)[names[0]]}, 4, 8, SMALL)
    assert edge.speedup(names[0]).low > 1 and names[0] not in edge.kept()


def test_predicted_adds_the_added_switches_costs_alone():
    alone = fake_switches([0.5, 2.0, 1.0, 1.25, 0.9])
    u = cu.UltraTiming(alone, cu.Setting(), cu.Setting(), ["fused GELU", "2 workers"], m(1.0, 1.0),
                       m(0.5, 0.5), m(1.0, 1.0), 0.1, None)
    # fused GELU alone costs +100 % of a plain step, the workers +25 %: 0.5 + 1.0 * 1.25 = 1.75 s
    assert u.added_share() == {"fused GELU": pytest.approx(1.0), "2 workers": pytest.approx(0.25)}
    assert u.predicted() == pytest.approx(0.5 / 1.75)
    assert u.speedup().value == pytest.approx(0.5)
    assert u.accumulation_cost_s() is None
    # compile added: its factor divides the predicted time
    uc = cu.UltraTiming(alone, cu.Setting(), cu.Setting(), ["compile"], m(1.0, 1.0), m(0.5, 0.5), m(1.0, 1.0),
                        0.1, 2.0)
    assert uc.predicted() == pytest.approx(2.0)


def test_setting_step_rejects_uneven_micro_batches():
    with pytest.raises(ValueError, match="multiple of accumulate"):
        cu.setting_step(cu.Setting(accumulate=3), samples=4)


def test_time_switches_and_ultra_run_small():
    alone = cu.time_switches(samples=2, accumulate=2, workers=1, seq=8, model_kw=SMALL, repeat=1)
    # plain and 5 switches in balanced orders: 1 round asked, one whole cycle of 6 run
    assert set(alone.alone) == set(cu.switches(1, 2)) and alone.plain.n == 6
    u = cu.time_ultra(alone, repeat=1)
    assert u.plain.n == len(timing.balanced_orders(3 + (u.tuned_with_acc is not None)))
    assert u.ultra.workers == 1 and u.ultra.precision == "bf16" and not u.ultra.compiled
    assert set(u.added) == set(alone.changes) - set(alone.kept())
    assert u.first_step_s > 0
    with pytest.raises(TypeError, match="alone"):
        cu.time_ultra("not a timing")
