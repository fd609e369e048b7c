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


def test_break_even_between_the_speedups_interval_ends():
    from perfkit.stats import Estimate

    # 12.5 s of compile, 67.1 ms eager, 1.05x (1.03x to 1.10x): the point alone read "3,737 steps"
    rec = compiling.CompileRecord(12.5, Measurement((0.0671,), 0), Measurement((0.0638,), 0))
    soon, late = rec.break_even_between(Estimate(1.05, 1.03, 1.10, 0.9, 11, "paired"))
    assert soon == pytest.approx(12.5 / (0.0671 * (1 - 1 / 1.10)))   # about 2,050
    assert late == pytest.approx(12.5 / (0.0671 * (1 - 1 / 1.03)))   # about 6,400
    assert soon < rec.break_even_calls < late
    assert rec.break_even_between(Estimate(1.02, 0.98, 1.05, 0.9, 11, "paired"))[1] == math.inf  # never
    with pytest.raises(TypeError, match="speedup"):
        rec.break_even_between(1.05)


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
