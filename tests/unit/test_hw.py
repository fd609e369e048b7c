"""perfkit.hw: the model's formulas by hand, measurements are sane, records round-trip."""

import time

import pytest
import torch

from perfkit import hw, hw_sweep, roofline


def test_matmul_formulas_by_hand():
    assert roofline.matmul_flops(2, 3, 4) == 48
    assert roofline.matmul_bytes(2, 3, 4, 4) == (8 + 12 + 6) * 4
    assert roofline.matmul_intensity(1024, 1024, 1024, 4) == pytest.approx(1024 / 6)


def test_roofline_and_bound():
    # peak 100 FLOP/s, 10 B/s -> ridge at 10 FLOP/B
    assert roofline.attainable_flops(2.0, 100.0, 10.0) == 20.0
    assert roofline.attainable_flops(50.0, 100.0, 10.0) == 100.0
    assert roofline.bound(9.9, 100.0, 10.0) == "memory" and roofline.bound(10.0, 100.0, 10.0) == "compute"


@pytest.mark.parametrize("call, match", [
    (lambda: roofline.matmul_flops(0, 1, 1), "m must be an int >= 1"),
    (lambda: roofline.attainable_flops(0.0, 1.0, 1.0), "intensity"),
    (lambda: hw.measure_matmul(8, "int8"), "dtype must be one of"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


LLC = 1 << 20  # a 1 MiB last-level cache: the DRAM-sized buffers stay small


@pytest.fixture(scope="module")
def limits():  # measured on this machine, unlike conftest's invented ones
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hw, "last_level_cache_bytes", lambda device=None: LLC)
        return hw.measure_limits(matmul_sizes=[64, 128], copy_sizes=[2**16, 2**20], rounds=2,
                                 shapes=[(96, 64, 32)])


def test_measured_limits_are_sane(limits):
    assert set(limits.matmul_flops) == {"float32", "bfloat16"}
    assert all(1e6 < v < 1e17 for v in limits.matmul_flops.values())
    assert 1e8 < limits.copy_bytes_per_s < 1e13
    assert limits.method == hw.METHOD and limits.llc_bytes == LLC and limits.threads == hw.thread_counts()[0]
    counts = hw.thread_counts()
    # every square size and the course shape, on each thread count the notebooks use
    fp32 = [p for p in limits.matmul_points + limits.shape_points if p.dtype == "float32"]
    assert sorted((p.mnk, p.threads) for p in fp32) == sorted(
        (s, t) for s in [(64, 64, 64), (128, 128, 128), (96, 64, 32)] for t in counts)
    assert [p.label for p in limits.shape_points if p.threads == counts[0]][0] == "96x32 @ 32x64"
    # each ceiling is the best point of any thread count; one thread's, of one thread's points
    assert limits.matmul_flops["float32"] == max(p.best_flops_per_s for p in fp32)
    if len(counts) > 1:
        assert limits.one_thread_flops["float32"] == max(p.best_flops_per_s for p in fp32 if p.threads == 1)
        assert limits.peak_flops("float32", 1) == limits.one_thread_flops["float32"]
        assert limits.sources["float32, 1 thread"].endswith("on 1 thread")
    # the sweep gains buffers of 4x the last-level cache, copied and added: the DRAM ceiling
    assert sorted({(p.op, p.nbytes) for p in limits.copy_points}) == [
        ("add", 4 * LLC), ("copy", 2**16), ("copy", 2**20), ("copy", 4 * LLC)]
    dram = [p for p in limits.copy_points if p.nbytes >= 4 * LLC]
    # the best DRAM point, an x + y credited at most 9/8 of the fastest copy of its buffers
    best_copy = max(p.best_bytes_per_s for p in dram if p.op == "copy")
    want = min(max(p.best_bytes_per_s for p in dram), hw.ADD_OVER_COPY * best_copy)
    assert limits.copy_bytes_per_s == pytest.approx(want, rel=1e-12) and limits.dram_nbytes == 4 * LLC
    assert best_copy <= limits.copy_bytes_per_s <= hw.ADD_OVER_COPY * best_copy
    cache = [p for p in limits.copy_points if p.nbytes <= LLC // 2]
    assert limits.cache_bytes_per_s == max(p.best_bytes_per_s for p in cache)
    assert limits.cache_nbytes in {p.nbytes for p in cache}
    assert limits.sources["dram"].startswith(("copy of 4,194,304 B", "add of 4,194,304 B",
                                              "9/8 of the fastest copy of its buffers, copy of 4,194,304 B"))
    # the ceiling is the best point's fastest-tenth rate, so no point's median exceeds it
    assert all(p.flops_per_s <= limits.peak_flops(p.dtype, p.threads) * 1.0001 for p in fp32)


def test_ceilings_per_thread_count_by_hand():
    lim = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 2e10, threads=4, one_thread_flops={"float32": 3e10})
    assert [lim.peak_flops("float32", t) for t in (1, 2, 3, 4, 8)] == [3e10, 6e10, 9e10, 1e11, 1e11]
    assert lim.peak_flops() == 1e11 and lim.thread_share(2) == pytest.approx(0.6)
    assert lim.share_of_peak(3e10, threads=1) == 1.0 and lim.share_of_peak(3e10) == pytest.approx(0.3)
    # all cores reach the all-cores ceiling even where 4 x one thread's is lower (measured under load)
    low = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 2e10, threads=4, one_thread_flops={"float32": 2e10})
    assert low.peak_flops("float32", 4) == 1e11 and low.peak_flops("float32", 3) == 6e10
    # without a one-thread ceiling (a GPU, a 1-core machine) every thread count gets the whole one
    assert hw.MachineLimits("cpu", "t", {"float32": 1e11}, 2e10).peak_flops("float32", 1) == 1e11
    with pytest.raises(ValueError, match="threads must be an int >= 1"):
        lim.peak_flops("float32", 0)


def test_limits_helpers_and_json_round_trip(limits, tmp_path):
    peak, bw = limits.peak_flops(), limits.copy_bytes_per_s
    assert limits.ridge_point() == pytest.approx(peak / bw)
    assert limits.attainable(1e9) == peak and limits.share_of_peak(peak / 2) == 0.5
    assert limits.share_of_bandwidth(bw) == 1.0
    path = hw.save_limits(limits, tmp_path / "l.json")
    again = hw.MachineLimits.from_json(path.read_text())
    assert again == limits and again.shape_points == limits.shape_points
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
    hw.save_limits(limits, path)
    old_way = replace(busy, method="", matmul_flops={k: v * 2 for k, v in limits.matmul_flops.items()})
    hw.save_limits(old_way, path)  # measured another way: its (too high) ceiling is not kept
    assert hw.MachineLimits.from_json(path.read_text()) == old_way
    hw.save_limits(limits, path)
    assert hw.MachineLimits.from_json(path.read_text()).matmul_flops == limits.matmul_flops
    # a faster DRAM figure from a smaller buffer (partly cached, a QUICK run's) does not replace it
    small = replace(limits, copy_bytes_per_s=limits.copy_bytes_per_s * 2,
                    dram_nbytes=(limits.dram_nbytes or 2) // 2)
    hw.save_limits(small, path)
    assert hw.MachineLimits.from_json(path.read_text()).copy_bytes_per_s == limits.copy_bytes_per_s
    big = replace(limits, copy_bytes_per_s=limits.copy_bytes_per_s / 2,
                  dram_nbytes=(limits.dram_nbytes or 1) * 2)
    hw.save_limits(big, path)  # a slower one from a larger buffer does: no cache holds it
    assert hw.MachineLimits.from_json(path.read_text()).copy_bytes_per_s == big.copy_bytes_per_s


def test_a_kept_ceiling_keeps_the_sweep_and_source_that_reached_it(limits, tmp_path):
    from dataclasses import replace

    def sweep(scale):
        return replace(
            limits, matmul_flops={"float32": 1e11 * scale, "bfloat16": 4e11 / scale},
            one_thread_flops={"float32": 6e10 / scale, "bfloat16": 2e11 * scale},
            matmul_points=[hw.MatmulPoint(256, "float32", 1.0, 1e11 * scale, 1e11 * scale, 2),
                           hw.MatmulPoint(256, "bfloat16", 1.0, 4e11 / scale, 4e11 / scale, 2)],
            shape_points=[hw.MatmulPoint(64, "float32", 1.0, 1e9 * scale, 1e9 * scale, 1, 128, 32)],
            copy_bytes_per_s=2e10 * scale, cache_bytes_per_s=5e10 / scale, dram_nbytes=int(2**28 * scale),
            cache_nbytes=int(2**18 * scale),
            copy_points=[hw.CopyPoint(2**28, 1.0, 2e10 * scale, 2e10 * scale)],
            sources={"float32": f"fp32 {scale}", "bfloat16": f"bf16 {scale}",
                     "float32, 1 thread": f"1t {scale}", "bfloat16, 1 thread": f"bf16 1t {scale}",
                     "dram": f"dram {scale}", "cache": f"cache {scale}"})

    path = hw.save_limits(sweep(1.0), tmp_path / "l.json")
    hw.save_limits(sweep(0.5), path)  # fp32 and copy slower (busy), bf16, fp32 on 1 thread and cache faster
    kept = hw.MachineLimits.from_json(path.read_text())
    for dtype, peak in kept.matmul_flops.items():  # each ceiling is its own sweep's best point
        assert max(p.best_flops_per_s for p in kept.matmul_points if p.dtype == dtype) == peak
    assert kept.matmul_flops == {"float32": 1e11, "bfloat16": 8e11}
    assert kept.one_thread_flops == {"float32": 1.2e11, "bfloat16": 2e11}
    assert kept.shape_points == sweep(1.0).shape_points  # with fp32's ceiling
    assert kept.copy_points[0].best_bytes_per_s == kept.copy_bytes_per_s == 2e10 and kept.dram_nbytes == 2**28
    assert kept.cache_bytes_per_s == 1e11 and kept.cache_nbytes == 2**17
    assert kept.sources == {"float32": "fp32 1.0", "bfloat16": "bf16 0.5", "float32, 1 thread": "1t 0.5",
                            "bfloat16, 1 thread": "bf16 1t 1.0", "dram": "dram 1.0", "cache": "cache 0.5"}


def test_a_merged_file_keeps_each_copy_point_at_its_own_best(tmp_path):
    """An earlier run's faster DRAM ceiling (an x + y) does not bring its slower copies along: each
    copy point keeps its faster run, so the file's copy of DRAM-sized buffers is the fastest measured."""
    from perfkit.hw import CopyPoint

    path = tmp_path / "l.json"
    earlier = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 33.3e9, method=hw.METHOD, dram_nbytes=2**28,
                               copy_points=[CopyPoint(2**26, 4e-3, 30.8e9, 31.1e9, 2),
                                            CopyPoint(2**28, 2e-2, 27.7e9, 29.8e9, 2),
                                            CopyPoint(2**28, 2e-2, 33.1e9, 33.3e9, 2, "add")],
                               sources={"dram": "add of 268,435,456 B buffers on 2 threads"})
    hw.save_limits(earlier, path)
    run = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 32.9e9, method=hw.METHOD, dram_nbytes=2**28,
                           copy_points=[CopyPoint(2**26, 4e-3, 29e9, 30e9, 2),
                                        CopyPoint(2**28, 2e-2, 30e9, 32.9e9, 2)],
                           sources={"dram": "copy of 268,435,456 B buffers on 2 threads"})
    kept = hw.MachineLimits.from_json(hw.save_limits(run, path).read_text())
    best = {(p.op, p.nbytes): p.best_bytes_per_s for p in kept.copy_points}
    assert best == {("copy", 2**26): 31.1e9, ("copy", 2**28): 32.9e9, ("add", 2**28): 33.3e9}
    assert [p.op for p in kept.copy_points] == ["copy", "copy", "add"]  # copies first, by size
    assert kept.copy_bytes_per_s == 33.3e9 and kept.sources["dram"].startswith("add of")  # its own source


def test_the_file_credits_x_plus_y_at_most_9_8_of_the_fastest_copy(tmp_path):
    """One fast x + y run (53.8 GB/s beside copies of 32.9 GB/s) cannot lift the DRAM ceiling past
    what the write-allocate model allows it over a copy of the same buffers."""
    from perfkit.hw import CopyPoint

    path = tmp_path / "l.json"
    copy = CopyPoint(2**28, 2e-2, 28.1e9, 32.9e9, 2)
    raised = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 53.8e9, method=hw.METHOD, dram_nbytes=2**28,
                              copy_points=[copy],
                              sources={"dram": "x + y on 2 threads, measured after the sweep"})
    kept = hw.MachineLimits.from_json(hw.save_limits(raised, path).read_text())
    assert kept.copy_bytes_per_s == pytest.approx(9 / 8 * 32.9e9)
    assert kept.sources["dram"] == (
        "9/8 of the fastest copy of its buffers, copy of 268,435,456 B buffers on 2 threads: the most x + y "
        "is credited (faster: x + y on 2 threads, measured after the sweep)")
    within = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 35.2e9, method=hw.METHOD, dram_nbytes=2**28,
                              copy_points=[copy], sources={"dram": "add"})
    assert hw.credited_dram(35.2e9, "add", [copy], 2**28) == (35.2e9, "add")  # 1.07x the copy: all of it
    hw.save_limits(within, tmp_path / "w.json")
    assert hw.MachineLimits.from_json((tmp_path / "w.json").read_text()) == within
    # no copy of the ceiling's buffers: nothing to credit against
    assert hw.credited_dram(53.8e9, "x", [copy], 2**30) == (53.8e9, "x")
    assert hw.credited_dram(53.8e9, "x", [copy], None) == (53.8e9, "x")


def test_the_sweep_credits_an_add_at_most_9_8_of_its_copy(monkeypatch):
    from perfkit.hw import CopyPoint

    monkeypatch.setattr(hw, "last_level_cache_bytes", lambda device=None: 1 << 20)
    point = hw.MatmulPoint(64, "float32", 1e-5, 5e10, 6e10, 1)
    monkeypatch.setattr(hw, "sweep_matmul", lambda *a, **k: [point])
    monkeypatch.setattr(hw, "sweep_copy", lambda *a, **k: [  # an add far above the copy beside it
        CopyPoint(2**16, 1e-6, 9e10, 1e11, 1), CopyPoint(2**22, 1e-3, 9e9, 1e10, 1),
        CopyPoint(2**22, 1e-3, 1.4e10, 1.6e10, 1, "add")])
    lim = hw.measure_limits(dtypes=("float32",), matmul_sizes=[64], copy_sizes=[2**16, 2**22])
    assert lim.copy_bytes_per_s == pytest.approx(1.125e10) and lim.dram_nbytes == 2**22
    assert lim.sources["dram"].startswith("9/8 of the fastest copy of its buffers, copy of 4,194,304 B")


def test_cached_limits_measured_another_way_or_unreadable_are_measured_again(limits, tmp_path, monkeypatch):
    from dataclasses import replace

    path = hw.save_limits(replace(limits, method="1: an older perfkit"), tmp_path / "l.json")
    calls = []
    monkeypatch.setattr(hw, "measure_limits", lambda **kw: calls.append(kw) or limits)
    assert hw.cached_limits(path) == limits and len(calls) == 1
    path.write_text('{"device": "cpu", "name": "x", "matmul_flops": {"float32": 1.0}, '
                    '"copy_bytes_per_s": 1.0, "copy_points": [{"nbytes": 1, "rate": 1}]}')  # unknown fields
    assert hw.cached_limits(path) == limits and len(calls) == 2


def test_last_level_cache_is_a_plausible_size():
    llc = hw.last_level_cache_bytes("cpu")
    assert llc is None or 64 << 10 <= llc <= 4 << 30


@pytest.mark.parametrize("llc, quick, dram", [
    (1 << 20, False, 1 << 22),           # 4x the cache (the sweep's 4 MiB buffer)
    (33_600_000, False, 1 << 28),        # 134 MB: the next power of two
    (480 << 20, False, 1 << 30),         # a VM that reports its host's 480 MiB L3: capped at 1 GiB
    (480 << 20, True, 1 << 28),          # and at 256 MiB in QUICK runs
    (None, False, 1 << 28),              # unknown: 4x 32 MiB
])
def test_the_dram_ceiling_comes_from_buffers_of_4x_the_cache_capped(monkeypatch, llc, quick, dram):
    seen = {}
    monkeypatch.setattr(hw, "last_level_cache_bytes", lambda device=None: llc)
    monkeypatch.setattr(hw, "sweep_matmul",
                        lambda dtypes, *a: [hw.MatmulPoint(8, d, 1.0, 1.0, 1.0, 1) for d in dtypes])

    def copies(sizes, add_sizes, threads, rounds, device):
        seen.update(sizes=sizes, add=add_sizes, rounds=rounds)
        return [hw.CopyPoint(s, 1.0, float(s), float(s), 1, op)
                for op, ss in (("copy", sizes), ("add", add_sizes)) for s in ss]

    monkeypatch.setattr(hw, "sweep_copy", copies)
    lim = hw.measure_limits(quick=quick, dtypes=("float32",))
    # the default sizes (64 KiB to 256 MiB), and one DRAM-sized buffer if none is: also added
    assert seen["sizes"] == sorted({*(1 << p for p in range(16, 29, 2)), dram})
    assert seen["add"] == [dram] and seen["rounds"] == (2 if quick else 3)
    # the DRAM ceiling is the best of the buffers >= the DRAM size (here the largest: rate = size)
    assert lim.dram_nbytes == lim.copy_bytes_per_s == max(seen["sizes"])
    assert lim.sources["dram"] == f"copy of {max(seen['sizes']):,} B buffers on 1 thread"


def test_the_matmul_sweep_keeps_each_points_best_round_and_skips_long_calls(monkeypatch):
    # bf16 without fast units: 0.5 s at n=256 means ~4 s at 512, so 512 and 1024 are skipped,
    # and below a quarter of fp32's rate it is swept once, on the first thread count, squares only;
    # fp32 at 0.01 s per call (0.08 s at 512, 0.64 s at 1024) keeps every size and shape
    per_call = {"float32": 0.01, "bfloat16": 0.5}
    calls = []

    def fake(n, dtype, device=None, repeat=7, *, m=None, k=None, threads=None):
        calls.append((dtype, n, m, k, threads))
        s = per_call[dtype] * (m or n) * n * (k or n) / 256**3 * (1 + 0.1 * (len(calls) % 3))  # rounds differ
        f = 2 * (m or n) * n * (k or n)
        return hw.MatmulPoint(n, dtype, s, f / s, f / s, threads, m, k)

    monkeypatch.setattr(hw_sweep, "measure_matmul", fake)
    pts = hw.sweep_matmul(["float32", "bfloat16"], [1024, 256, 512], [(512, 256, 128)], [2, 1], rounds=2)
    fp32 = [c for c in calls if c[0] == "float32"]
    work = ((256, None, None), (512, None, None), (1024, None, None), (256, 512, 128))
    assert fp32[:8] == [("float32", n, m, k, t) for n, m, k in work for t in (2, 1)]
    assert fp32[8:] == fp32[:8]  # the second round
    assert [c for c in calls if c[0] == "bfloat16"] == [("bfloat16", 256, None, None, 2),
                                                         ("bfloat16", 256, None, None, 1)]
    assert len(pts) == 4 * 2 + 2 and sum(not p.square for p in pts) == 2
    calls.clear()
    hw.sweep_matmul(["bfloat16"], [256, 512], [], [1], rounds=1, max_call_s=5.0)
    assert [c[1] for c in calls] == [256, 512]  # 4 s <= 5 s: measured


def test_a_long_call_is_extrapolated_from_the_last_point_not_the_fastest(monkeypatch):
    # emulated bf16 slows per FLOP as it grows: 128 in 1 ms, 256 in 0.5 s; 512 would take ~4 s
    seconds = {128: 0.001, 256: 0.5, 512: 4.0}
    calls = []

    def fake(n, dtype, device=None, repeat=7, *, m=None, k=None, threads=None):
        calls.append(n)
        return hw.MatmulPoint(n, dtype, seconds[n], 2 * n**3 / seconds[n], 2 * n**3 / seconds[n], threads)

    monkeypatch.setattr(hw_sweep, "measure_matmul", fake)
    hw.sweep_matmul(["bfloat16"], [128, 256, 512], [], [1], rounds=1, max_call_s=1.0)
    assert calls == [128, 256]  # from 128's rate 512 would look like 64 ms


def test_the_matmul_sweep_keeps_the_best_round(monkeypatch):
    rates = iter([1e9, 3e9, 2e9])

    def fake(n, dtype, device=None, repeat=7, *, m=None, k=None, threads=None):
        r = next(rates)
        return hw.MatmulPoint(n, dtype, 1.0, r, r, threads)

    monkeypatch.setattr(hw_sweep, "measure_matmul", fake)
    (p,) = hw.sweep_matmul(["float32"], [64], [], [1], rounds=3)
    assert p.best_flops_per_s == 3e9


def test_copies_are_timed_warm_on_each_thread_count(one_thread):
    pts = hw.sweep_copy([1 << 16], add_sizes=[1 << 16], threads=[1], rounds=2)
    assert [(p.op, p.nbytes, p.threads) for p in pts] == [("copy", 1 << 16, 1), ("add", 1 << 16, 1)]
    assert all(p.best_bytes_per_s >= p.bytes_per_s > 1e8 for p in pts)
    calls = []

    def first_call_slow():  # a fresh buffer's page faults land on its first write
        calls.append(1)
        time.sleep(0.05 if len(calls) == 1 else 0.0001)

    m = hw_sweep._timed(first_call_slow, 3, torch.device("cpu"))
    assert max(m.times_s) < 0.02  # the first, slow call is never timed


@pytest.mark.parametrize("bf16, support", [(4e11, "native"), (1e11, "native"), (5e10, "converted"),
                                           (2.5e10, "converted"), (2.4e10, "emulated"), (1.2e9, "emulated")])
def test_support_is_read_from_the_ceilings_ratio(bf16, support):
    lim = hw.MachineLimits("cpu", "t", {"float32": 1e11, "bfloat16": bf16}, 2e10)
    assert lim.support("bfloat16") == support and lim.support("float32") == "native"
    with pytest.raises(ValueError, match="was not measured"):
        lim.support("float16")


def _in_fresh_python(env_value, code, drop=(), extra=None):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", *drop)}
    env.update(extra or {})
    env["PERFKIT_IMITATE"] = env_value
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_the_no_bf16_imitation_caps_the_kernels_and_has_its_own_name_and_cache():
    out = _in_fresh_python("no-bf16", "import torch, os\nfrom perfkit import hw\nprint(hw.imitation(), "
                           "torch.backends.cpu.get_cpu_capability(), os.environ['ONEDNN_MAX_CPU_ISA'], "
                           "hw.default_limits_path().name,\n"
                           "hw.device_name('cpu').endswith('imitating no-bf16)'), hw.cpu_bf16())")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["no-bf16", "AVX2", "AVX2", "machine_limits.no-bf16.json", "True",
                                  "emulated"]
    assert hw.imitation() is None and hw.default_limits_path().name == "machine_limits.json"
    # always its own inductor cache (natively compiled kernels crash the capped CPU), also when
    # the parent's Inductor had put the native one into the environment (the old setdefault
    # kept it: the leak that filled the native cache with AVX2 graphs)
    code = "import os\nfrom perfkit import hw\nprint(os.environ['TORCHINDUCTOR_CACHE_DIR'])"
    out = _in_fresh_python("no-bf16", code, drop=("TORCHINDUCTOR_CACHE_DIR",))
    assert out.returncode == 0 and out.stdout.strip().endswith(".no-bf16"), out.stderr
    for named in ("/tmp/mine", "/tmp/mine.no-bf16"):
        out = _in_fresh_python("no-bf16", code, extra={"TORCHINDUCTOR_CACHE_DIR": named})
        assert out.stdout.strip() == "/tmp/mine.no-bf16", out.stderr
    # and a native process handed an imitation's cache goes back to the base one
    out = _in_fresh_python("", code, extra={"TORCHINDUCTOR_CACHE_DIR": "/tmp/mine.no-bf16"})
    assert out.stdout.strip() == "/tmp/mine", out.stderr


def test_an_unknown_imitation_is_refused_by_name():
    out = _in_fresh_python("no-avx", "from perfkit import hw")
    assert out.returncode != 0 and "PERFKIT_IMITATE must be one of ['no-bf16']" in out.stderr


@pytest.mark.parametrize("ratio_bf16, flags, support", [
    (4.3e11, "native", "native"), (4.3e11, "converted", "converted"), (4.3e11, "emulated", "emulated"),
    (0.95e11, "emulated", "emulated"), (0.95e11, "native", "converted"), (1e9, "native", "emulated"),
    (0.95e11, None, "converted")])
def test_bf16_support_is_no_better_than_the_cpu_flags_allow(ratio_bf16, flags, support):
    # a loaded machine can measure emulated bf16 near fp32's rate: the flags still say emulated
    lim = hw.MachineLimits("cpu", "t", {"float32": 1e11, "bfloat16": ratio_bf16}, 2e10, cpu_bf16=flags)
    assert lim.support("bfloat16") == support
    assert lim.support("float32") == "native"  # the flags speak of bf16 only


def test_cpu_bf16_reads_this_cpus_flags(monkeypatch):
    flags = {"avx2 fma avx512f avx512_bf16": "native", "avx2 fma avx512f": "converted",
             "avx2 fma": "emulated", "fma amx_bf16 avx512f": "native"}
    for text, kind in flags.items():
        monkeypatch.setattr(hw, "_cpuinfo", lambda key, text=text: text if key == "flags" else "cpu")
        assert hw.cpu_bf16() == kind
    monkeypatch.setattr(hw, "_cpuinfo", lambda key: None)
    assert hw.cpu_bf16() is None
    monkeypatch.setattr(hw, "_IMITATE", "no-bf16")
    assert hw.cpu_bf16() == "emulated"
