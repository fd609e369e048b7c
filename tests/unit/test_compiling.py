"""perfkit.compute.compiling: break-even by hand, compile timing with the tracing backend, graph breaks.

No test asserts on wall-clock speed (the machine is shared); timings are only checked for
being consistent with the work they report.
"""

import json
import math
import re

import pytest
import torch

from perfkit.compute import compiling
from perfkit.timing import Measurement


def test_compile_record_break_even_by_hand():
    rec = compiling.CompileRecord(1.0, Measurement((0.003,), 0), Measurement((0.001,), 0))
    assert rec.speedup == pytest.approx(3.0)
    assert rec.break_even_calls == pytest.approx(500.0)  # 1 s / 2 ms saved per call
    slower = compiling.CompileRecord(1.0, Measurement((0.001,), 0), Measurement((0.002,), 0))
    assert slower.break_even_calls == math.inf


def test_break_even_between_comes_from_the_paired_ratios_interval():
    # 11.3 s of compile; 11 paired rounds where a load shared by each pair moves both calls: the
    # medians' own intervals overlap (eager's low end below compiled's high end), so the old ends,
    # the two medians anywhere in their intervals at once, reached "never", though every round's
    # compiled call was 4 % to 9 % faster and the paired ratio's interval excludes 1.
    compiled = (0.0600, 0.0610, 0.0620, 0.0630, 0.0640, 0.0651, 0.0660, 0.0670, 0.0680, 0.0690, 0.0700)
    ratio = (1.04, 1.05, 1.06, 1.07, 1.08, 1.09, 1.04, 1.05, 1.06, 1.07, 1.08)
    eager = tuple(c * r for c, r in zip(compiled, ratio))
    rec = compiling.CompileRecord(11.3, Measurement(eager, 0), Measurement(compiled, 0))
    rho = rec.paired_ratio()
    assert rho.low > 1
    soon, late = rec.break_even_between()
    assert math.isfinite(late)  # the old ends gave inf here
    c = rec.compiled.median_s
    assert soon == pytest.approx(11.3 / (c * (rho.high - 1)))
    assert late == pytest.approx(11.3 / (c * (rho.low - 1)))
    assert rec.break_even_span() == f"{soon:,.0f} to {late:,.0f} steps"
    said = rec.break_even_text()
    assert said.startswith(f"{rec.break_even_calls:,.0f} steps (the medians' difference; {soon:,.0f} to ")
    assert f"at the ends of the paired ratio's {rho.label}, at the compiled median" in said
    # a paired interval that reaches 1: the latest end is never
    near = tuple(e / 1.001 for e in eager[:5]) + eager[5:]
    tied = compiling.CompileRecord(11.3, Measurement(eager, 0), Measurement(near, 0))
    assert tied.break_even_between()[1] == math.inf and tied.break_even_span().endswith("steps to never")
    few = compiling.CompileRecord(1.0, Measurement(eager[:4], 0), Measurement(compiled[:4], 0))
    with pytest.raises(ValueError, match="needs 5 rounds"):
        few.break_even_between()
    assert few.break_even_text().endswith("(the medians' difference)")
    with pytest.raises(ValueError, match="level"):
        rec.break_even_between(1.0)


def test_break_even_text_says_when_the_medians_point_lies_outside_the_paired_range():
    # eager 65.9 ms and compiled 62.1 ms medians; the paired ratios' interval sits below the ratio
    # of the medians, so the medians' difference breaks even sooner than the range's soonest end
    eager = (0.0652, 0.0655, 0.0657, 0.0658, 0.0659, 0.0659, 0.0660, 0.0661, 0.0663, 0.0668, 0.0690)
    compiled = (0.0615, 0.0617, 0.0618, 0.0620, 0.0621, 0.0621, 0.0622, 0.0623, 0.0625, 0.0629, 0.0650)
    rec = compiling.CompileRecord(12.5, Measurement(eager, 0), Measurement(compiled[5:] + compiled[:5], 0))
    soon, late = rec.break_even_between()
    inside = soon <= rec.break_even_calls <= late
    assert ("lies outside that range" in rec.break_even_text()) is not inside


def test_break_even_elsewhere_holds_another_runs_saving_against_the_range():
    eager = (0.0652, 0.0655, 0.0657, 0.0658, 0.0659, 0.0659, 0.0660, 0.0661, 0.0663, 0.0668, 0.0690)
    compiled = (0.0615, 0.0617, 0.0618, 0.0620, 0.0621, 0.0621, 0.0622, 0.0623, 0.0625, 0.0629, 0.0650)
    rec = compiling.CompileRecord(11.3, Measurement(eager, 0), Measurement(compiled, 0))
    soon, late = rec.break_even_between()
    # a sweep that saved 1.9 ms a step: about 5,900 steps, past the range's end, never "stands"
    said = compiling.break_even_elsewhere(rec, 0.0674, 0.0655)
    assert "saves 1.9 ms per call" in said and "after 5,947 calls" in said
    assert f"({rec.break_even_span('calls')} at its paired ratio's interval ends)" in said
    assert "outside that range" in said
    assert f"section 3's {rec.break_even_calls:,.0f} at its medians (" in said
    at_point = rec.compiled.median_s * rec.paired_ratio().value  # a saving at the paired ratio's median
    assert "inside that range" in compiling.break_even_elsewhere(rec, at_point, rec.compiled.median_s)
    assert "never pays off" in compiling.break_even_elsewhere(rec, 0.0650, 0.0655)
    few = compiling.CompileRecord(1.0, Measurement(eager[:4], 0), Measurement(compiled[:4], 0))
    said = compiling.break_even_elsewhere(few, 0.0674, 0.0655)
    assert said.endswith("after 526 calls, against section 3's 260 at its medians.")
    with pytest.raises(ValueError, match="eager_s"):
        compiling.break_even_elsewhere(rec, 0.0, 0.0655)


def test_measure_compile_with_the_tracing_backend():
    # backend="eager" traces with dynamo but generates no code: the plumbing, in seconds
    x = torch.randn(256)
    f = lambda: torch.sin(x) * 2  # noqa: E731
    rec = compiling.measure_compile(f, torch.compile(lambda: torch.sin(x) * 2, backend="eager"),
                                    warmup=1, repeat=3)
    assert rec.eager.n == rec.compiled.n == 3 and rec.compile_s > 0


def test_measure_compile_balanced_puts_each_first_in_half_the_rounds():
    """balanced=True: rounds e c, c e, ... over whole cycles (3 asked, 4 run); the default keeps
    eager first in every round (planted: that order, a position effect on the second call)."""
    calls = []
    rec = compiling.measure_compile(lambda: calls.append("e"), lambda: calls.append("c"), warmup=0,
                                    repeat=3, balanced=True)
    assert rec.eager.n == rec.compiled.n == 4 and "".join(calls[3:]) == "ecce" * 2
    calls.clear()
    compiling.measure_compile(lambda: calls.append("e"), lambda: calls.append("c"), warmup=0, repeat=2)
    assert "".join(calls[3:]) == "ecec"
    with pytest.raises(TypeError, match="balanced"):
        compiling.measure_compile(lambda: None, lambda: None, balanced="yes")


def test_graph_breaks_found_and_fixed():
    def broken(x):
        if x.sum().item() > 0:  # data-dependent Python branch: a graph break
            return x * 2
        return x - 1

    def fixed(x):
        return torch.where(x.sum() > 0, x * 2, x - 1)

    x = torch.randn(8)
    r = compiling.graph_breaks(broken, x)
    assert r.breaks == 1 and r.graphs == 2 and "item" in r.reasons[0]
    assert compiling.graph_breaks(fixed, x) == compiling.GraphReport(1, 0, [])
    with pytest.raises(TypeError, match="fn"):
        compiling.graph_breaks(3)


def test_cold_compile_cost_is_kept_from_a_cold_run_and_reported_on_a_warm_one(tmp_path):
    m = Measurement((0.002, 0.002), 1)
    path = tmp_path / "costs.json"
    warm = compiling.CompileRecord(0.8, m, m, fx_cache_hits=3)
    cold_s, text = compiling.cold_compile_cost("GELU chain", warm, path)
    assert cold_s is None and "not measured on this machine yet" in text and "0.8 s" in text
    cold_s, text = compiling.cold_compile_cost("GELU chain", compiling.CompileRecord(21.5, m, m), path)
    assert cold_s == 21.5
    assert text.startswith("cold cache (no inductor cache hit): compiling GELU chain cost 21.5 s")
    cold_s, text = compiling.cold_compile_cost("GELU chain", warm, path)
    assert cold_s == 21.5 and "3 inductor cache hits" in text and "a cold cache cost 21.5 s here" in text
    assert "load now" not in text  # faster than the cold one: nothing to explain
    when = r"20\d\d-\d\d-\d\d \d\d:\d\d UTC"
    assert re.search(rf"\(measured by an earlier run on {when}, stored in costs.json\)", text)
    old = tmp_path / "old.json"  # a file written before the date was kept: a bare number
    old.write_text(json.dumps({next(iter(json.loads(path.read_text()))): 19.0}))
    cold_s, text = compiling.cold_compile_cost("GELU chain", warm, old)
    assert cold_s == 19.0 and "(measured by an earlier run, stored in old.json)" in text
    slow = compiling.CompileRecord(43.0, m, m, fx_cache_hits=1)  # warm, yet slower than the cold one
    said = compiling.cold_compile_cost("GELU chain", slow, path)[1]
    assert "took 2.0x as long, so the machine's load now (load average" in said
    assert compiling.cold_compile_cost("GPT-2 step", warm, path)[0] is None  # kept per name
    with pytest.raises(TypeError, match="name"):
        compiling.cold_compile_cost("", warm, path)
    with pytest.raises(TypeError, match="record"):
        compiling.cold_compile_cost("x", 21.5, path)
