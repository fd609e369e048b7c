"""perfkit.hw: the model's formulas by hand, measurements are sane, records round-trip."""

import pytest

from perfkit import hw, roofline


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


@pytest.fixture(scope="module")
def limits():  # measured on this machine, unlike conftest's invented ones
    return hw.measure_limits(matmul_sizes=[64, 128], copy_sizes=[2**16, 2**20])


def test_measured_limits_are_sane(limits):
    assert set(limits.matmul_flops) == {"float32", "bfloat16"}
    assert all(1e6 < v < 1e17 for v in limits.matmul_flops.values())
    assert 1e8 < limits.copy_bytes_per_s < 1e13
    # the sweep gains one buffer of at least 4x the last-level cache: the DRAM ceiling
    assert len(limits.matmul_points) == 4 and len(limits.copy_points) == 3
    llc = hw.last_level_cache_bytes()
    dram = [p for p in limits.copy_points if p.nbytes >= 4 * (llc or 32 << 20)]
    assert dram and limits.copy_bytes_per_s == max(p.best_bytes_per_s for p in dram)
    assert limits.method == hw.METHOD and limits.llc_bytes == llc
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
    hw.save_limits(limits, path)
    old_way = replace(busy, method="", copy_bytes_per_s=limits.copy_bytes_per_s * 2)
    hw.save_limits(old_way, path)  # measured another way: its (too high) ceiling is not kept
    assert hw.MachineLimits.from_json(path.read_text()) == old_way
    hw.save_limits(limits, path)
    assert hw.MachineLimits.from_json(path.read_text()).copy_bytes_per_s == limits.copy_bytes_per_s


def test_a_kept_ceiling_keeps_the_sweep_that_reached_it(limits, tmp_path):
    from dataclasses import replace

    def sweep(scale):
        return replace(
            limits, matmul_flops={"float32": 1e11 * scale, "bfloat16": 4e11 / scale},
            matmul_points=[hw.MatmulPoint(256, "float32", 1.0, 1e11 * scale, 1e11 * scale),
                           hw.MatmulPoint(256, "bfloat16", 1.0, 4e11 / scale, 4e11 / scale)],
            copy_bytes_per_s=2e10 * scale, cache_bytes_per_s=5e10 * scale,
            copy_points=[hw.CopyPoint(2**28, 1.0, 2e10 * scale, 2e10 * scale)])

    path = hw.save_limits(sweep(1.0), tmp_path / "l.json")
    hw.save_limits(sweep(0.5), path)  # fp32 and copy slower (busy), bf16 faster
    kept = hw.MachineLimits.from_json(path.read_text())
    for dtype, peak in kept.matmul_flops.items():  # each ceiling is its own sweep's best point
        assert max(p.best_flops_per_s for p in kept.matmul_points if p.dtype == dtype) == peak
    assert kept.matmul_flops == {"float32": 1e11, "bfloat16": 8e11}
    assert kept.copy_points[0].best_bytes_per_s == kept.copy_bytes_per_s == 2e10
    assert kept.cache_bytes_per_s == 5e10


def test_cached_limits_measured_another_way_are_measured_again(limits, tmp_path, monkeypatch):
    from dataclasses import replace

    path = hw.save_limits(replace(limits, method="1: an older perfkit"), tmp_path / "l.json")
    calls = []
    monkeypatch.setattr(hw, "measure_limits", lambda **kw: calls.append(kw) or limits)
    assert hw.cached_limits(path) == limits and len(calls) == 1


def test_last_level_cache_is_a_plausible_size():
    llc = hw.last_level_cache_bytes("cpu")
    assert llc is None or 64 << 10 <= llc <= 4 << 30


def test_a_copy_sweep_without_a_dram_sized_buffer_gets_one(monkeypatch):
    monkeypatch.setattr(hw, "last_level_cache_bytes", lambda device=None: 1 << 20)  # a 1 MiB cache
    lim = hw.measure_limits(dtypes=("float32",), matmul_sizes=[32], copy_sizes=[1 << 16])
    assert [p.nbytes for p in lim.copy_points] == [1 << 16, 1 << 22]
    assert lim.copy_bytes_per_s == lim.copy_points[1].best_bytes_per_s
    assert lim.cache_bytes_per_s == lim.copy_points[0].best_bytes_per_s  # 64 KiB <= half the cache


def test_matmul_sizes_whose_one_call_would_exceed_max_call_s_are_skipped(monkeypatch):
    # bf16 without fast units: 0.5 s at n=256 means ~4 s at 512, so 512 and 1024 are skipped;
    # fp32 at 0.01 s per call (0.08 s at 512, 0.64 s at 1024) keeps every size
    per_call = {"float32": 0.01, "bfloat16": 0.5}
    calls = []

    def fake(n, dtype, device=None, repeat=7):
        calls.append((n, dtype))
        s = per_call[dtype] * (n / 256) ** 3
        return hw.MatmulPoint(n, dtype, s, 2 * n**3 / s, 2 * n**3 / s)

    monkeypatch.setattr(hw, "measure_matmul", fake)
    lim = hw.measure_limits(matmul_sizes=[1024, 256, 512], copy_sizes=[1 << 16], max_call_s=1.0)
    assert calls == [(256, "float32"), (512, "float32"), (1024, "float32"), (256, "bfloat16")]
    assert [(p.n, p.dtype) for p in lim.matmul_points] == calls
    calls.clear()
    hw.measure_limits(dtypes=("bfloat16",), matmul_sizes=[256, 512], copy_sizes=[1 << 16],
                      max_call_s=5.0)
    assert calls == [(256, "bfloat16"), (512, "bfloat16")]  # 4 s <= 5 s: measured


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
