"""perfkit.ceilings: a rate that beats its ceiling raises it (in the record and the cache) and
says so; a share held against a ceiling after observe never exceeds 1."""

import pytest

from perfkit import ceilings, hw
from perfkit.ceilings import ceiling, observe


@pytest.fixture
def lim():  # 4 cores: 100 GFLOP/s on all of them, 30 on one; DRAM 20 GB/s, cache 50 GB/s
    return hw.MachineLimits("cpu", "test", {"float32": 1e11, "bfloat16": 2e9}, 2e10, threads=4,
                            one_thread_flops={"float32": 3e10}, cache_bytes_per_s=5e10, method=hw.METHOD,
                            sources={"float32": "n=1024 on 4 threads", "dram": "copy of 1 GiB"})


def test_a_rate_below_its_ceiling_changes_nothing(lim, tmp_path):
    obs = observe(lim, "float32", 2e10, "the step", threads=1, path=tmp_path / "l.json")
    assert obs.limits is lim and not obs.raised and obs.note == ""
    assert obs.share == pytest.approx(2 / 3) and obs.before == obs.after == 3e10
    assert not (tmp_path / "l.json").exists()  # nothing to save


def test_a_rate_above_the_all_cores_ceiling_raises_it_and_says_so(lim, tmp_path):
    path = tmp_path / "l.json"
    obs = observe(lim, "float32", 1.2e11, "the MLP step", path=path)
    assert obs.raised and obs.share == 1.0 and obs.before == 1e11 and obs.after == 1.2e11
    assert obs.note == ("the float32 matmul ceiling rose from 100 GFLOP/s to 120 GFLOP/s: the MLP step ran "
                        "faster than the sweep")
    assert obs.limits.peak_flops("float32") == 1.2e11
    assert obs.limits.sources["float32"] == "the MLP step, measured after the sweep"
    assert obs.limits.peak_flops("float32", 1) == 3e10  # one thread's ceiling is another ceiling
    assert hw.MachineLimits.from_json(path.read_text()) == obs.limits  # what later notebooks read
    # the cache keeps the higher ceiling: an older, lower record saved later does not undo it
    hw.save_limits(lim, path)
    assert hw.MachineLimits.from_json(path.read_text()).peak_flops("float32") == 1.2e11


def test_said_shows_a_small_rise_at_the_digits_that_show_it(lim):
    # a default run's notebook 00 printed "rose from 203 GFLOP/s to 203 GFLOP/s" for a 0.2 % rise
    obs = observe(lim, "float32", 1.002e11, "the linear layer", save=False)
    assert "rose from 100 GFLOP/s to 100 GFLOP/s" in obs.note  # the note, as other notebooks print it
    assert obs.said(show_rise=True).startswith("the float32 matmul ceiling rose from 100 GFLOP/s to "
                                               "100.2 GFLOP/s: the linear layer ran faster")
    assert obs.said() == obs.note
    assert observe(lim, "float32", 2e10, "the step", threads=1, save=False).said(True) == ""


def test_one_threads_ceiling_is_raised_alone(lim, tmp_path):
    obs = observe(lim, "float32", 4e10, "the step on 1 thread", threads=1, path=tmp_path / "l.json")
    assert obs.raised and obs.share == 1.0 and obs.limits.peak_flops("float32", 1) == 4e10
    assert obs.limits.peak_flops("float32") == 1e11  # the all-cores ceiling was not beaten
    assert obs.note.startswith("the float32 matmul (1 thread) ceiling rose from 30 GFLOP/s to 40 GFLOP/s")
    assert obs.limits.sources["float32, 1 thread"] == "the step on 1 thread, measured after the sweep"


def test_dram_and_cache_ceilings(lim):
    obs = observe(lim, "dram", 3e10, "x + y", save=False)
    assert obs.raised and obs.limits.copy_bytes_per_s == 3e10 and obs.share == 1.0
    assert obs.note == ("the DRAM bandwidth ceiling rose from 20 GB/s to 30 GB/s: x + y ran faster than "
                        "the sweep")
    assert obs.limits.cache_bytes_per_s == 5e10
    assert obs.limits.sources["dram"] == "x + y, measured after the sweep"
    # the cache's ceiling is at least DRAM's: a DRAM rate above the cache's figure lifts both
    high = observe(lim, "dram", 6e10, "x + y", save=False).limits
    assert ceiling(high, "cache") == 6e10
    assert observe(lim, "cache", 4e10, "a chain", save=False).limits is lim
    assert observe(lim, "cache", 7e10, "a chain", save=False).limits.cache_bytes_per_s == 7e10
    no_cache = hw.MachineLimits("cpu", "t", {"float32": 1.0}, 2e10)
    assert ceiling(no_cache, "cache") == 2e10


def test_save_false_leaves_the_cache_alone(lim, tmp_path):
    path = hw.save_limits(lim, tmp_path / "l.json")
    observe(lim, "float32", 5e11, "x", path=path, save=False)
    assert hw.MachineLimits.from_json(path.read_text()) == lim


@pytest.mark.parametrize("threads", [None, 1, 2, 3, 4, 7])
def test_no_share_exceeds_one_after_observe(lim, threads):
    # the rates straddle every ceiling, incl. t x one thread's between one and all cores
    for rate in (1e9, 2.9e10, 3e10, 3.1e10, 6.1e10, 8.99e10, 9.1e10, 1e11, 1.3e11, 1e12 / 7):
        obs = observe(lim, "float32", rate, "op", threads=threads, save=False)
        assert obs.share <= 1.0 and obs.limits.share_of_peak(rate, "float32", threads) <= 1.0
        assert obs.raised == (rate > lim.peak_flops("float32", threads))
        # the ceilings only ever rise, and each thread count's stays a ceiling of its own
        for t in (None, 1, 2, 3, 4):
            assert obs.limits.peak_flops("float32", t) >= lim.peak_flops("float32", t)
        # ... and rise no further than the rate asks: one thread's by rate / threads, if at all
        one = obs.limits.peak_flops("float32", 1)
        assert one == 3e10 if threads in (None, 4, 7) else one <= max(3e10, rate / threads * (1 + 1e-12))


def test_observations_in_sequence_keep_every_ceiling(lim):
    cur = lim
    for rate, threads in ((3.5e10, 1), (1.1e11, None), (2e10, 1), (9e10, None)):
        cur = observe(cur, "float32", rate, "op", threads=threads, save=False).limits
    assert cur.peak_flops("float32") == 1.1e11 and cur.peak_flops("float32", 1) == 3.5e10
    assert cur.peak_flops("bfloat16") == 2e9


def test_cached_copy_bytes_is_the_largest_buffer_near_the_cache_ceiling():
    from perfkit.hw import CopyPoint

    # a VM reporting its host's 480 MiB L3; its copies fall to DRAM's rate past 1 MiB
    rates = {2**16: (60e9, 30e9), 2**18: (80e9, 40e9), 2**20: (30e9, 50e9), 2**22: (11e9, 9e9),
             2**24: (9e9, 44e9)}  # bytes -> (median on 1 thread, on 2)
    copies = [CopyPoint(n, 1e-3, r, r, t) for n, pair in rates.items() for t, r in zip((1, 2), pair)]
    copies += [CopyPoint(2**30, 1e-1, 14e9, 14e9, 1), CopyPoint(2**30, 1e-1, 90e9, 90e9, 1, op="add")]
    lim = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 1.4e10, copy_points=copies,
                           cache_bytes_per_s=8.6e10, llc_bytes=480 << 20, dram_nbytes=2**30)
    # 2**20 holds half the ceiling on 2 threads (the faster count), 2**22 on neither; 2**24 on 2
    # threads (44 GB/s) is above half: the largest such buffer wins, not the first to fall
    assert ceilings.cached_copy_bytes(lim) == 2**24
    assert ceilings.cached_copy_bytes(lim, share=0.6) == 2**18  # 80 of 86 GB/s; 2**20's 50 is below 52
    # an add, or a DRAM-sized buffer, is never the cache's
    assert ceilings.cached_copy_bytes(lim, share=0.1) == 2**24
    from dataclasses import replace
    assert ceilings.cached_copy_bytes(replace(lim, cache_bytes_per_s=None)) is None
    assert ceilings.cached_copy_bytes(lim, share=1.0) is None  # no median reaches the fastest tenth


def test_dram_copy_is_the_copys_own_rate_not_an_adds_ceiling():
    from perfkit.hw import CopyPoint

    # the DRAM ceiling came from x + y (37.4 GB/s counted); the fastest copy of the same buffers
    # ran 32.6 GB/s: a buffer copied once moves 16.3 GB/s, not the 18.7 GB/s half the ceiling gives
    copies = [CopyPoint(2**28, 1e-2, 30e9, 32.6e9, 2), CopyPoint(2**28, 1e-2, 20e9, 21e9, 1),
              CopyPoint(2**28, 1e-2, 35e9, 37.4e9, 2, op="add"), CopyPoint(2**22, 1e-4, 90e9, 99e9, 2)]
    lim = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 37.4e9, copy_points=copies, dram_nbytes=2**28,
                           sources={"dram": "add of 268,435,456 B buffers on 2 threads"})
    rate, source = ceilings.dram_copy(lim)
    assert rate == pytest.approx(32.6e9) and source == "copy of 268,435,456 B buffers on 2 threads"
    # without a copy of the DRAM buffers, the ceiling itself, and the words say so
    from dataclasses import replace
    rate, source = ceilings.dram_copy(replace(lim, copy_points=copies[2:]))
    assert rate == pytest.approx(37.4e9) and source.startswith("the DRAM ceiling") and "add of" in source
    # never above the DRAM ceiling (a ceiling lowered by a larger buffer's figure)
    assert ceilings.dram_copy(replace(lim, copy_bytes_per_s=30e9))[0] == pytest.approx(30e9)


def test_observe_copy_records_a_faster_copy_that_dram_copy_then_reads(tmp_path):
    from perfkit.hw import CopyPoint

    # the sweep's copies of 268 MB ran 28.4 GB/s at best (a slowed round); x + y raised the DRAM
    # ceiling to 53.8 GB/s; the copy, timed again beside x + y, reached 46.6 GB/s
    copies = [CopyPoint(2**28, 2e-2, 26e9, 28.4e9, 2), CopyPoint(2**28, 3e-2, 20e9, 21e9, 1),
              CopyPoint(2**16, 2e-6, 60e9, 70e9, 1)]
    lim = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 53.8e9, copy_points=copies, dram_nbytes=2**28,
                           method=hw.METHOD, sources={"dram": "x + y on 2 threads, measured after the sweep"})
    assert ceilings.dram_copy(lim)[0] == pytest.approx(28.4e9)  # what notebook 02 read before
    path = tmp_path / "l.json"
    out = ceilings.observe_copy(lim, 46.6e9, "copy of 268 MB buffers on 2 threads", threads=2, path=path)
    rate, source = ceilings.dram_copy(out)
    assert rate == pytest.approx(46.6e9)
    assert source == "copy of 268 MB buffers on 2 threads" + ceilings.AFTER_SWEEP
    assert ceilings.dram_copy(hw.MachineLimits.from_json(path.read_text())) == (rate, source)  # the file
    kept = next(p for p in out.copy_points if p.threads == 2 and p.nbytes == 2**28)
    assert kept.bytes_per_s == 26e9 and len(out.copy_points) == 3  # the sweep's median stays, no new point
    assert out.copy_bytes_per_s == 53.8e9 and out.sources == lim.sources  # the ceiling was not beaten
    # a slower copy changes nothing; a copy above the DRAM ceiling raises it too
    assert ceilings.observe_copy(lim, 20e9, "copy", threads=2, save=False) is lim
    high = ceilings.observe_copy(lim, 60e9, "copy", threads=2, save=False)
    assert high.copy_bytes_per_s == 60e9 and ceilings.dram_copy(high)[0] == pytest.approx(60e9)
    # a thread count the sweep did not copy on gets a point of its own
    three = ceilings.observe_copy(lim, 40e9, "copy", threads=3, save=False)
    assert len(three.copy_points) == 4 and ceilings.dram_copy(three)[0] == pytest.approx(40e9)


def test_copy_ratio_floor_is_what_a_cache_that_holds_nothing_still_reaches():
    from perfkit.hw import CopyPoint

    copies = [CopyPoint(2**16, 2.11e-6, 62e9, 70e9, 1), CopyPoint(2**16, 3e-6, 40e9, 50e9, 2),
              CopyPoint(2**20, 2e-5, 100e9, 135e9, 2), CopyPoint(2**28, 2e-2, 26e9, 28.4e9, 1)]
    lim = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 53.8e9, copy_points=copies, dram_nbytes=2**28)
    stream = 2 * 2**20 / 53.8e9  # s: 1 MiB's counted bytes at DRAM's fastest rate
    floor = ceilings.copy_ratio_floor(lim, 2**20)
    assert floor == pytest.approx(stream / (stream + 2.11e-6))  # the 1-thread smallest copy's time
    assert 0.9 < floor < 1 and 0.0286 < floor  # a ratio of 0.0286x says the run was disturbed
    assert ceilings.copy_ratio_floor(lim, 2**20, threads=2) == pytest.approx(stream / (stream + 3e-6))
    assert ceilings.copy_ratio_floor(lim, 2**20, threads=4) == pytest.approx(stream / (stream + 3e-6))
    assert ceilings.copy_ratio_floor(hw.MachineLimits("cpu", "t", {"float32": 1.0}, 1e9), 2**20) == 0.0


def test_observe_copy_reaches_the_file_whichever_run_set_the_dram_ceiling(tmp_path):
    from perfkit.hw import CopyPoint

    path = tmp_path / "l.json"
    # an earlier run: x + y set 31.9 GB/s, its sweep's copies of the same buffers 28.4 GB/s at best
    earlier = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 31.9e9, method=hw.METHOD, dram_nbytes=2**28,
                               copy_points=[CopyPoint(2**28, 2e-2, 26e9, 28.4e9, 2)])
    hw.save_limits(earlier, path)
    # this run: a slower DRAM ceiling (so the file keeps the earlier one), a faster copy
    run = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 30e9, method=hw.METHOD, dram_nbytes=2**28,
                           copy_points=[CopyPoint(2**28, 3e-2, 20e9, 22e9, 2)])
    ceilings.observe_copy(run, 29.5e9, "copy beside x + y", threads=2, path=path)
    held = hw.MachineLimits.from_json(path.read_text())
    # the file's copy point is this run's
    assert held.copy_bytes_per_s == 31.9e9 and ceilings.dram_copy(held) == (
        pytest.approx(29.5e9), "copy beside x + y" + ceilings.AFTER_SWEEP)
    # an earlier run's larger buffers win the merge; a copy of smaller buffers says nothing of them
    big = hw.MachineLimits("cpu", "t", {"float32": 1e11}, 23e9, method=hw.METHOD, dram_nbytes=2**30,
                           copy_points=[CopyPoint(2**30, 1e-1, 20e9, 21e9, 2)])
    hw.save_limits(big, tmp_path / "m.json")
    ceilings.observe_copy(run, 46.6e9, "copy beside x + y", threads=2, path=tmp_path / "m.json")
    kept = hw.MachineLimits.from_json((tmp_path / "m.json").read_text())
    assert kept.dram_nbytes == 2**30 and ceilings.dram_copy(kept)[0] == pytest.approx(21e9)
