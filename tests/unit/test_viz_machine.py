"""perfkit.viz.machine: notebook 00's plots and sentences, on hand-made limits."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from perfkit import hw  # noqa: E402
from perfkit.hw import CopyPoint, MachineLimits, MatmulPoint  # noqa: E402
from perfkit.viz import machine as vm  # noqa: E402


def limits(bf16=4e9, cache=None, llc=None):
    pts = [MatmulPoint(n, dt, 1.0, f, f) for dt, f in (("float32", 1e9), ("bfloat16", bf16))
           for n in (128, 256)]
    pts = [p for p in pts if not (p.dtype == "bfloat16" and p.n == 256)]  # bf16 stopped early
    copies = [CopyPoint(2**k, 1e-3, 1e9 * k, 1e9 * k) for k in (16, 18, 20)]
    return MachineLimits("cpu", "test cpu", {"float32": 1e9, "bfloat16": bf16}, 1e10, matmul_points=pts,
                         copy_points=copies, cache_bytes_per_s=cache, llc_bytes=llc)


def test_skipped_sizes_name_each_dtype_that_stopped_early():
    assert vm.skipped_sizes(limits(), [128, 256]) == [
        " bfloat16 n=256: skipped, one call would take over 1 s at this rate"]  # its only size: no trend
    assert vm.skipped_sizes(limits(), [128]) == []
    with pytest.raises(ValueError, match="sizes"):
        vm.skipped_sizes(limits(), [])


@pytest.mark.parametrize("last, says", [
    (0.907e9, "its rate fell from 2.45 GFLOP/s at n=512 to 907 MFLOP/s at n=1024: a larger size is expected "
              "slower still, not to raise its ceiling"),
    (2.3e9, "its rate held within 10 % from 2.45 GFLOP/s at n=512 to 2.3 GFLOP/s at n=1024: flattened"),
    (3e9, "its rate rose from 2.45 GFLOP/s at n=512 to 3 GFLOP/s at n=1024: a skipped size might have run "
          "faster (its ceiling is the sizes run)")])
def test_skipped_sizes_say_what_the_skip_could_have_changed(last, says):
    """Emulated bf16 fell from 3.28 to 0.907 GFLOP/s over its sizes: "flattened" would be false."""
    pts = [MatmulPoint(n, "bfloat16", 1.0, f, f, 2) for n, f in ((256, 3.28e9), (512, 2.45e9), (1024, last))]
    pts += [MatmulPoint(128, "bfloat16", 1.0, 3.3e9, 3.3e9, 1)]  # fewer threads: not the curve read
    lim = MachineLimits("cpu", "t", {"bfloat16": 3.3e9}, 1e10, matmul_points=pts)
    assert vm.skipped_sizes(lim, [256, 512, 1024, 2048]) == [
        f" bfloat16 n=2048: skipped, one call would take over 1 s at this rate; {says}"]


@pytest.mark.parametrize("bf16, word", [(4e9, "native"), (5e8, "converted to fp32"), (1e7, "emulated")])
def test_bf16_sentence_follows_the_ratio(bf16, word, monkeypatch):
    monkeypatch.setattr(hw, "_IMITATE", None)
    text = vm.bf16_sentence(limits(bf16))
    assert word in text and f"({bf16 / 1e9:.3g}x fp32 on all cores)" in text and "imitates" not in text
    assert text.startswith("fp32 ceiling: 1 GFLOP/s") or text.startswith("fp32 ceiling: 1.00 GFLOP/s")


def test_bf16_sentence_divides_like_for_like(monkeypatch):
    """A bf16 ceiling reached on 1 thread is held against fp32's on 1 thread, not its all-core one."""
    monkeypatch.setattr(hw, "_IMITATE", None)
    lim = MachineLimits("cpu", "t", {"float32": 2.05e11, "bfloat16": 7.14e9}, 2e10, threads=2,
                        one_thread_flops={"float32": 1.05e11, "bfloat16": 7.14e9})
    text = vm.bf16_sentence(lim)
    assert "(0.068x fp32 on 1 thread each: 7.14 GFLOP/s against 105 GFLOP/s; bf16's ceiling" in text
    assert "over fp32's: 0.0348x" in text
    assert "emulated" in text and "(0.0348x fp32)" not in text


def test_bf16_sentence_labels_the_class_ratio_with_the_ceilings_own_points(monkeypatch):
    """bf16's ceiling came from 1 thread: the ratio its class is read from is not called "on all cores"."""
    monkeypatch.setattr(hw, "_IMITATE", None)
    lim = MachineLimits("cpu", "t", {"float32": 4.38e11, "bfloat16": 4.15e9}, 2e10, threads=2,
                        one_thread_flops={"float32": 2.21e11, "bfloat16": 4.15e9},
                        sources={"bfloat16": "n=128 on 1 thread", "float32": "n=2048 on 2 threads"})
    text = vm.bf16_sentence(lim)
    assert "on all cores" not in text
    assert ("bf16's ceiling, its best on any thread count (n=128 on 1 thread), over fp32's (n=2048 on 2 "
            "threads): 0.00947x, the ratio its class is read from" in text)


def test_bf16_sentence_names_an_imitation(monkeypatch):
    monkeypatch.setattr(hw, "_IMITATE", "no-bf16")  # read once, when perfkit was imported
    assert "PERFKIT_IMITATE=no-bf16" in vm.bf16_sentence(limits(1e7))


def test_plots_draw_one_line_per_dtype_and_each_ceiling():
    fig = vm.plot_matmul_sweep(limits())
    assert len(fig.axes[0].get_lines()) == 2 and "test cpu" in fig.axes[0].get_title()
    bare = vm.plot_copy_sweep(limits()).axes[0]
    full = vm.plot_copy_sweep(limits(cache=5e10, llc=2**19)).axes[0]
    assert len(bare.get_lines()) == 2 and len(full.get_lines()) == 4  # + cache ceiling + LLC line
    llc = full.get_lines()[-1]  # at the buffer whose copy touches the cache's bytes: half of it
    assert llc.get_xdata()[0] == 2**18 and llc.get_label().endswith("(524 kB): buffer 262 kB")
    with pytest.raises(TypeError, match="limits"):
        vm.plot_copy_sweep({"float32": 1e9})


def test_cache_and_dram_points_follow_the_last_level_cache():
    copies = [CopyPoint(n, 1e-3, r, r) for n, r in ((2**14, 5e9), (2**16, 9e9), (2**17, 20e9), (2**20, 2e9),
                                                     (2**22, 1e9))]
    lim = MachineLimits("cpu", "t", {"float32": 1e9}, 1e9, copy_points=copies, cache_bytes_per_s=9e9,
                        llc_bytes=2**18)
    cached, dram = vm.cache_and_dram_points(lim)
    # the fastest whose source and destination fit in half the cache (2**17 is faster, but the two
    # buffers would fill half of it); the smallest >= 4x the cache
    assert (cached.nbytes, dram.nbytes) == (2**16, 2**20)
    from dataclasses import replace
    # the cache ceiling named its buffer: that one, though another ran faster by its median
    assert vm.cache_and_dram_points(replace(lim, cache_nbytes=2**14))[0].nbytes == 2**14
    with pytest.raises(ValueError, match="last-level cache"):
        vm.cache_and_dram_points(limits())  # no cache size known
    with pytest.raises(TypeError, match="limits"):
        vm.cache_and_dram_points({"llc_bytes": 1})


def two_thread_limits(slow_at=(2**18, 2**20), factor=100):
    """Copies on 2 threads and on 1; on 2 threads the sizes in ``slow_at`` collapse (a barrier
    waiting for a descheduled thread), the 64 KiB one (16,384 elements) runs on one thread."""
    one = ((2**16, 5e10), (2**18, 7e10), (2**20, 3e10), (2**24, 1e10))
    copies = [CopyPoint(n, 1e-3, r, r, 1) for n, r in one]
    copies += [CopyPoint(n, 1e-3, r / (factor if n in slow_at else 1), r, 2) for n, r in
               ((2**16, 5e10), (2**18, 7e10), (2**20, 3e10), (2**24, 1.5e10))]
    copies += [CopyPoint(2**24, 1e-3, 1.2e10, 1.2e10, 1, "add")]
    pts = [MatmulPoint(n, "float32", 1.0, f * t, f * t, t) for n, f in ((128, 1e10), (256, 2e10))
           for t in (2, 1)]
    shapes = [MatmulPoint(256, "float32", 1.0, 3e10, 3e10, 1, 4096, 256)]
    return MachineLimits("cpu", "t", {"float32": 4e10}, 1.5e10, matmul_points=pts, copy_points=copies,
                         cache_bytes_per_s=7e10, llc_bytes=2**22, threads=2,
                         one_thread_flops={"float32": 3e10}, shape_points=shapes, dram_nbytes=2**24,
                         cache_nbytes=2**18,
                         sources={"float32": "n=256 on 2 threads",
                                  "float32, 1 thread": "4096x256 @ 256x256 on 1 thread",
                                  "dram": "copy of 16,777,216 B buffers on 2 threads"})


def test_threads_sentence_names_the_collapsed_sizes_and_why():
    text = vm.threads_sentence(two_thread_limits())
    assert text.startswith("On 2 threads the copies of 262 kB to 1.05 MB ran 100x to 100x slower than on one")
    assert "at least 32,768 elements" in text
    assert "The 65.5 kB buffer (16,384 elements) runs on one thread either way; it ran as fast" in text
    quiet = vm.threads_sentence(two_thread_limits(slow_at=()))
    assert quiet.startswith("On 2 threads no copy of at least 32,768 elements (PyTorch's grain size")
    assert ("ran below 50% of its rate on one in the sweep: the threads' barrier cost little while it "
            "ran") in quiet
    # a buffer below the grain slowed by the load alone is not blamed on the barrier, and says so
    loaded = vm.threads_sentence(two_thread_limits(slow_at=(2**16, 2**18)))
    assert loaded.startswith("On 2 threads the copy of 262 kB ran 100x slower than on one")
    assert ("it ran 100x slower on the 2-thread pass: no barrier is involved, so that much is the load "
            "alone") in loaded
    assert "ran 5,720x slower" in vm.threads_sentence(two_thread_limits((2**18,), factor=5720))
    # faster on the all-threads pass is not "as fast": it says how much, and that no barrier was involved
    faster = vm.threads_sentence(two_thread_limits(slow_at=(2**16,), factor=0.5))
    assert "it ran 2x faster on the 2-thread pass, with no barrier involved" in faster
    assert "within 5 %" not in faster
    assert vm.threads_sentence(limits()) == ""  # one thread count only: nothing to compare
    with pytest.raises(TypeError, match="limits"):
        vm.threads_sentence(None)


def test_sweep_and_source_lines():
    lim = two_thread_limits()
    assert [" ".join(ln.split()) for ln in vm.sweep_lines(lim)] == [
        "float32 n=128: 20 GFLOP/s on 2 threads, 10 GFLOP/s on 1 thread",
        "float32 n=256: 40 GFLOP/s on 2 threads, 20 GFLOP/s on 1 thread",
        "float32 4096x256 @ 256x256: 30 GFLOP/s on 1 thread"]
    assert [" ".join(ln.split()) for ln in vm.source_lines(lim)] == [
        "float32 matmul: 40 GFLOP/s from n=256 on 2 threads",
        "float32 matmul, 1 thread: 30 GFLOP/s from 4096x256 @ 256x256 on 1 thread",
        "DRAM bandwidth: 15 GB/s from copy of 16,777,216 B buffers on 2 threads",
        "cache bandwidth: 70 GB/s from the sweep"]
    for fn in (vm.sweep_lines, vm.source_lines):
        with pytest.raises(TypeError, match="limits"):
            fn({"float32": 1e9})


def test_plots_draw_each_thread_count_and_the_add():
    lim = two_thread_limits()
    assert {ln.get_label() for ln in vm.plot_matmul_sweep(lim).axes[0].get_lines()} == {
        "float32, 2 threads", "float32, 1 thread"}
    labels = {ln.get_label() for ln in vm.plot_copy_sweep(lim).axes[0].get_lines()}
    assert {"copy, 2 threads", "copy, 1 thread", "x + y, 1 thread"} <= labels


def test_a_capped_dram_size_is_the_dram_point():
    lim = two_thread_limits()  # 4 MiB cache, DRAM ceiling from 16 MiB buffers: 4x the cache
    assert vm.cache_and_dram_points(lim)[1].nbytes == 2**24
    from dataclasses import replace
    capped = replace(lim, llc_bytes=2**23, dram_nbytes=2**24)  # 4x would be 32 MiB: capped at 16
    cached, dram = vm.cache_and_dram_points(capped)
    assert dram.nbytes == 2**24 and dram.op == "copy" and cached.nbytes == 2**18  # the fastest in cache


def test_cache_lines_print_the_merged_ceiling_and_an_earlier_higher_one(tmp_path):
    from dataclasses import replace
    run = two_thread_limits()
    faster = [replace(p, best_bytes_per_s=1.6e10, source="copy beside x + y") if (p.op, p.nbytes, p.threads)
              == ("copy", 2**24, 2) else p for p in run.copy_points]
    earlier = replace(run, matmul_flops={"float32": 5e10}, copy_bytes_per_s=1.7e10, copy_points=faster,
                      sources={**run.sources, "float32": "n=512 on 2 threads", "dram": "add of 2 GB"})
    hw.save_limits(earlier, tmp_path / "l.json")
    cached = MachineLimits.from_json(hw.save_limits(run, tmp_path / "l.json").read_text())
    assert [" ".join(ln.split()) for ln in vm.cache_lines(run, cached)] == [
        "float32 matmul: 50 GFLOP/s an earlier run's (n=512 on 2 threads); this run measured 40 GFLOP/s",
        "float32 matmul, 1 thread: 30 GFLOP/s this run's",
        "DRAM bandwidth: 17 GB/s an earlier run's (add of 2 GB); this run measured 15 GB/s",
        "DRAM-sized copy: 16 GB/s an earlier run's (copy beside x + y); this run measured 15 GB/s",
        "cache bandwidth: 70 GB/s this run's"]
    # a DRAM ceiling this run raised past 9/8 of its copy: the file credits less, and says whose it is
    raised = replace(run, copy_bytes_per_s=3e10,
                     sources={**run.sources, "dram": "x + y, measured after the sweep"})
    held = MachineLimits.from_json(hw.save_limits(raised, tmp_path / "r.json").read_text())
    assert " ".join(vm.cache_lines(raised, held)[2].split()) == (
        "DRAM bandwidth: 16.9 GB/s the file's (9/8 of the fastest copy of its buffers, copy of 16,777,216 "
        "B buffers on 2 threads: the most x + y is credited (faster: x + y, measured after the sweep)); this "
        "run reached 30 GB/s")
    # nothing higher before: every line is this run's own figure
    assert all(ln.endswith("this run's") for ln in vm.cache_lines(run, run))
    with pytest.raises(TypeError, match="run"):
        vm.cache_lines(None, run)
    with pytest.raises(TypeError, match="cached"):
        vm.cache_lines(run, {"float32": 1e9})


def test_cache_sentence_states_what_the_sweep_shows_beside_what_the_os_reports():
    copies = [CopyPoint(n, 1e-3, r, r, 2) for n, r in ((2**16, 60e9), (2**20, 100e9), (2**22, 80e9),
                                                       (2**24, 30e9), (2**28, 28e9))]
    lim = MachineLimits("cpu", "t", {"float32": 1e9}, 3e10, copy_points=copies, cache_bytes_per_s=1.35e11,
                        llc_bytes=32 << 20, dram_nbytes=2**28)
    text = vm.cache_sentence(lim)
    assert text.startswith("the cache the sweep shows: the largest buffer whose copy kept at least half the "
                           "cache ceiling by its median is 4.19 MB (8.39 MB read and written)")
    assert "the next size swept, 16.8 MB (33.6 MB touched), did not" in text
    # 65.5 kB copied at 60 GB/s, under half of 135: the old sentence said every buffer "up to" 4.19 MB kept it
    assert "of the smaller buffers, 65.5 kB (44% of it) did not either" in text and "up to" not in text
    assert "The OS reports a last-level cache of 33.6 MB: that is the size it reports" in text
    assert text.endswith("Operations of at most 8.39 MB counted are held against the cache's roof below")
    assert "slices" not in text  # no claim about how the OS adds its figure up
    from dataclasses import replace
    assert "OS" not in vm.cache_sentence(replace(lim, llc_bytes=None))
    assert vm.cache_sentence(replace(lim, cache_bytes_per_s=None)).startswith("no copy kept half")


def test_the_roofline_widget_starts_in_float32_and_names_its_roof():
    """Its default figure was bf16's, titled "attainable" at a rate the sweep measured 2.4x slower."""
    pts = [MatmulPoint(256, "bfloat16", 1e-2, 3.28e9, 3.3e9, 2),
           MatmulPoint(256, "float32", 1e-4, 1.9e11, 2e11, 2)]
    lim = MachineLimits("cpu", "t", {"float32": 2e11, "bfloat16": 7.81e9}, 3.7e10,
                        sources={"bfloat16": "the bf16 step's matmuls replayed alone at batch 4"})
    spec = vm.matmul_roofline_widget(lim, measured=MachineLimits("cpu", "t", {"float32": 2e11}, 3e10,
                                                                 matmul_points=pts))
    assert spec.defaults() == {"log2_n": 8, "dtype": "float32"}
    title = spec.fn(log2_n=8, dtype="bfloat16").axes[0].get_title().replace("\n", " ")
    assert "attainable" not in title and "the bf16 step's matmuls replayed alone at batch 4" in title
    assert "this run's sweep measured 3.28 GFLOP/s at this size (42% of that roof)" in title
    untimed = spec.fn(log2_n=9, dtype="bfloat16").axes[0].get_title()  # the sweep did not time n=512
    assert "this run's sweep" not in untimed
    for kw in spec.extremes():
        spec.fn(**kw)
    with pytest.raises(TypeError, match="limits"):
        vm.matmul_roofline_widget({"float32": 1e9})
    with pytest.raises(TypeError, match="measured"):
        vm.matmul_roofline_widget(lim, measured=pts)
