"""perfkit.hw: the model's formulas by hand, measurements are sane, records round-trip."""

import pytest

from perfkit import hw


def test_matmul_formulas_by_hand():
    assert hw.matmul_flops(2, 3, 4) == 48
    assert hw.matmul_bytes(2, 3, 4, 4) == (8 + 12 + 6) * 4
    assert hw.matmul_intensity(1024, 1024, 1024, 4) == pytest.approx(1024 / 6)


def test_roofline_and_bound():
    # peak 100 FLOP/s, 10 B/s -> ridge at 10 FLOP/B
    assert hw.attainable_flops(2.0, 100.0, 10.0) == 20.0
    assert hw.attainable_flops(50.0, 100.0, 10.0) == 100.0
    assert hw.bound(9.9, 100.0, 10.0) == "memory" and hw.bound(10.0, 100.0, 10.0) == "compute"
    assert hw.percent_of_limit(25.0, 100.0) == 25.0


@pytest.mark.parametrize("call, match", [
    (lambda: hw.matmul_flops(0, 1, 1), "m must be a positive int"),
    (lambda: hw.attainable_flops(0.0, 1.0, 1.0), "intensity"),
    (lambda: hw.percent_of_limit(1.0, 0.0), "limit"),
    (lambda: hw.measure_matmul(8, "int8"), "dtype must be one of"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.fixture(scope="module")
def limits():  # measured on this machine, unlike conftest's invented ones
    return hw.measure_limits(matmul_sizes=[64, 128], copy_sizes=[2**16, 2**20])


def test_measured_limits_are_sane(limits):
    assert set(limits.matmul_flops) == {"float32", "bfloat16"}
    assert all(1e6 < v < 1e17 for v in limits.matmul_flops.values())
    assert 1e8 < limits.copy_bytes_per_s < 1e13
    assert len(limits.matmul_points) == 4 and len(limits.copy_points) == 2
    # the ceiling is the best point's fastest-tenth rate, so no point's median exceeds it
    assert all(p.flops_per_s <= limits.peak_flops(p.dtype) * 1.0001 for p in limits.matmul_points)


def test_limits_helpers_and_json_round_trip(limits, tmp_path):
    peak, bw = limits.peak_flops(), limits.copy_bytes_per_s
    assert limits.ridge_point() == pytest.approx(peak / bw)
    assert limits.attainable(1e9) == peak and limits.share_of_peak(peak / 2) == 0.5
    assert limits.share_of_bandwidth(bw) == 1.0
    path = hw.save_limits(limits, tmp_path / "l.json")
    again = hw.MachineLimits.from_json(path.read_text())
    assert again == limits
    with pytest.raises(ValueError, match="was not measured"):
        limits.peak_flops("float16")


def test_cached_limits_reuses_this_machines_file(limits, tmp_path):
    path = hw.save_limits(limits, tmp_path / "l.json")
    assert hw.cached_limits(path) == limits  # same device and name: no new measurement


def test_matmul_roofline_point(limits):
    p = hw.matmul_roofline(256, "float32", limits)
    assert p.flops == 2 * 256**3 and p.intensity == pytest.approx(256 / 6)
    assert p.attainable_flops == limits.attainable(p.intensity)
    assert p.predicted_s == pytest.approx(p.flops / p.attainable_flops)


def test_saving_keeps_the_higher_ceiling_of_the_same_machine(limits, tmp_path):
    from dataclasses import replace

    path = hw.save_limits(limits, tmp_path / "l.json")
    busy = replace(limits, matmul_flops={k: v / 10 for k, v in limits.matmul_flops.items()},
                   copy_bytes_per_s=limits.copy_bytes_per_s / 10)
    hw.save_limits(busy, path)  # measured while the machine was loaded
    kept = hw.MachineLimits.from_json(path.read_text())
    assert kept.matmul_flops == limits.matmul_flops
    assert kept.copy_bytes_per_s == limits.copy_bytes_per_s
    other = replace(busy, name="another machine")
    hw.save_limits(other, path)  # another machine: replaced, not merged
    assert hw.MachineLimits.from_json(path.read_text()) == other
