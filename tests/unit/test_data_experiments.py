"""perfkit.data.experiments and perfkit.data.overlap: lecture 07's figures and their intervals.

The loader records are built by hand, so every expected figure is known exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from perfkit.data import LoaderConfig, LoaderRecord, ratio_explain
from perfkit.data import experiments as ex
from perfkit.data import overlap as ov
from perfkit.stats import Estimate
from perfkit.verdict import Prediction


def record(waits, computes, epochs=1):
    """A LoaderRecord of ``epochs`` identical epochs with these per-step seconds."""
    return LoaderRecord(LoaderConfig(8), (tuple(waits),) * epochs, (tuple(computes),) * epochs,
                        8 * len(waits) * epochs)


def test_wait_share_leaves_out_each_epochs_first_step():
    r = record([5.0, 1.0, 1.0, 1.0], [9.0, 3.0, 3.0, 3.0], epochs=2)   # first step: worker start-up
    est = ex.wait_share(r)
    assert est.value == pytest.approx(0.25) and est.spread == pytest.approx((0.25, 0.25))
    assert est.value == pytest.approx(r.steady_wait_share)
    with pytest.raises(ValueError, match="steady"):
        ex.wait_share(record([1.0], [1.0]))


def test_largest_gap_is_the_worst_run_not_the_mean():
    runs = [record([9, 1, 1, 1], [9, 3, 3, 3]), record([9, 2, 2, 2], [9, 2, 2, 2])]   # 0.25, 0.5
    est = ex.largest_gap(runs, [0.20, 0.49])
    assert est.value == pytest.approx(0.05) and est.low <= est.value <= est.high
    with pytest.raises(ValueError, match="equally long"):
        ex.largest_gap(runs, [0.2])


def test_largest_gap_names_each_intervals_exact_coverage():
    # 6 blocks each (the fewest at 95 %, the joint level of two runs): each interval is [min, max]
    # of 6 blocks, covering 1 - 2/2^6 = 96.9 %, so the two hold together at 93.75 %: the text names
    # the 96.9 % that joint figure comes from, not the 95 % asked
    runs = [record([9] + [1, 2] * 7, [9] + [3] * 14), record([9] + [2, 1] * 7, [9] + [2] * 14)]
    est = ex.largest_gap(runs, [0.2, 0.5])
    assert est.n == 6 and est.method.endswith("each at 96.9%") and est.label == "93% interval"



def test_largest_gap_pairs_a_replayed_model_with_its_run_block_by_block():
    from perfkit.data import PipelineRecord

    # one slow batch (step 3) in 21 steps; the replay has it where the run has it, 0.1 s shorter
    waits = [0.5] + [0.0] * 20
    waits[3] = 1.0
    computes = [1.0] * 21
    run = record(waits, computes)
    replayed = tuple(w * 0.9 if i == 3 else w for i, w in enumerate(waits))
    replay = PipelineRecord(1.0, 1.0, 4, 2, replayed, (sum(replayed) + 21 * 1.0) / 21)  # step_s: the mean
    paired = ex.largest_gap([run], [replay])
    unpaired = ex.largest_gap([run], [replay.steady_wait_share])   # a fixed share: only the run's blocks vary
    # 5 blocks of 4 steps (an interval at 90 % needs 5): the slow batch's block differs by 1/5 - 0.9/4.9,
    # the other four by nothing, so the median block's gap is 0 and the interval reaches that one block
    assert "median of 5 blocks of 4 consecutive steps" in ex.run_gaps([run], [replay])[0].method
    assert paired.value == pytest.approx(0.0) and paired.high == pytest.approx(1 / 5 - 0.9 / 4.9)
    assert paired.high - paired.low < 0.2 * (unpaired.high - unpaired.low)  # which step was slow: not noise


def test_blocks_keep_a_bursty_run_s_steps_together():
    # 8 busy workers on 2 cores: 7 quick steps, then one long wait, over and over (60 steady steps)
    burst = [0.0] + ([0.002] * 7 + [0.09]) * 7 + [0.002] * 4
    fast = record(burst, [0.01] * len(burst))
    even = record([0.0] + [0.013] * 60, [0.01] * 61)
    est = ex.rate_ratio(fast, even)
    # each block holds about a burst: the block means agree, where single steps ranged from 12 to 100 ms
    said = "ratio of two runs' median block means (6 and 6 blocks of 10 and 10 consecutive steps)"
    assert said in est.method
    assert est.high / est.low < 1.5
    gaps = ex.run_gaps([fast, even], [0.5, 0.5])
    assert len(gaps) == 2 and all("blocks" in g.method for g in gaps)
    assert ex.largest_gap([fast, even], [0.5, 0.5]).value == pytest.approx(max(abs(g.value) for g in gaps))


def test_balanced_max_is_the_median_step_of_two_independent_stages():
    assert ex.balanced_max([1.0, 3.0], [2.0, 2.0]) == pytest.approx(2.5)  # max over the pairs: 2, 2, 3, 3
    # two balanced stages that vary: the median step lies above the longer median
    a, b = [17.0, 18.0, 19.0, 20.0, 16.0], [18.5, 18.7, 19.5, 17.5, 18.9]
    assert ex.balanced_max(a, b) > max(np.median(a), np.median(b))
    with pytest.raises(ValueError, match="a entries"):
        ex.balanced_max([-1.0], [1.0])


def test_hidden_fraction_against_the_longer_part():
    t = {"serial, sleep load": 10.0, "Prefetcher, sleep load": 6.0, "load only": 4.0, "compute only": 5.0}
    assert ov.hidden_fraction(t, "sleep") == pytest.approx(0.8)   # (10 - 6) / (10 - max(4, 5))
    rounds = {k: [v, v * 1.0, v] for k, v in t.items()}
    est = ov.hidden_fraction_estimate(rounds, "sleep")
    assert est.value == pytest.approx(0.8) and est.spread == pytest.approx((0.8, 0.8))


def test_hidden_fraction_estimate_is_the_fraction_of_the_medians_the_bound_is_built_from():
    # 7 rounds of a GIL-holding load (ms/step): the prefetched loop's median, 11.3, lies above the
    # bound's least step, 11.2 (load 6.5, compute 6.3, a 5 ms spin, slowdown 50), so the bound held.
    # The median of each round's fraction (0.200) lies above the bound's 0.175 all the same: set
    # beside a bound built from the medians, it reported a crossing the medians do not show.
    serial, pre = [12.1, 14.0, 13.0, 12.0, 12.2, 12.6, 11.8], [11.4, 11.2, 11.7, 11.6, 10.5, 11.3, 10.8]
    rounds = {"serial, spin load": serial, "Prefetcher, spin load": pre,
              "load only": [6.5] * 7, "compute only": [6.3] * 7}
    est = ov.hidden_fraction_estimate(rounds, "spin")
    bound = ov.gil_hidden_bound(12.2, 6.5, 6.3, 50.0, 5.0)
    assert est.value == pytest.approx((12.2 - 11.3) / (12.2 - 6.5))
    assert est.value <= bound == pytest.approx((12.2 - 11.2) / (12.2 - 6.5))
    assert est.low < est.value < est.high and est.has_interval   # 7 rounds: each median at 97.5 %
    # its ends: the fraction at the corners of the four medians' intervals (at 97.5 %, 7 rounds give
    # [min, max]); it grows with the serial loop here (the prefetched loop is above the longer part)
    assert est.high == pytest.approx((14.0 - 10.5) / (14.0 - 6.5)) and est.low == pytest.approx(
        (11.8 - 11.7) / (11.8 - 6.5))
    # each at its exact coverage (7 rounds: [min, max], 1 - 2/2^7 = 98.4 %), not the 97.5 % asked: four
    # of them hold together at 1 - 4 x 1.6 % = 93.8 %, the joint figure the label prints
    assert "each at 98.4%" in est.method and est.label == "93% interval"
    few = ov.hidden_fraction_estimate({k: v[:5] for k, v in rounds.items()}, "spin")
    assert not few.has_interval and few.needs == 7
    with pytest.raises(ValueError, match="one time per round"):
        ov.hidden_fraction_estimate({**rounds, "load only": [6.5] * 6}, "spin")
    with pytest.raises(ValueError, match="longer part"):
        ov.hidden_fraction_estimate({**rounds, "compute only": [12.5] * 7}, "spin")


def test_gil_least_step_is_the_bound_in_time_per_step():
    # a 5 ms spin beside a step that runs at 1 / 50 of its rate meanwhile: 6.3 + 5 x 0.98 ms
    assert ov.gil_least_step(6.5, 6.3, 50.0, 5.0) == pytest.approx(11.2)
    assert ov.gil_least_step(6.5, 6.3, 1.0, 5.0) == pytest.approx(6.5)   # no slowdown: the longer part
    assert ov.gil_least_step(6.5, 6.3, 0.5, 0.0) == pytest.approx(6.5)


def test_spin_held_takes_the_measured_spin_when_it_ran_short():
    # a 6.57 ms spin that ran at 0.84x its planted time holds the GIL 5.52 ms, not 6.57 ms
    assert ov.spin_held(6.57, 8.0, 0.84) == pytest.approx(6.57 * 0.84)
    assert ov.spin_held(6.57, 8.0, 1.3) == pytest.approx(6.57)   # a slower spin is not carried over
    assert ov.spin_held(6.57, 5.0, 0.9) == pytest.approx(5.0)    # at most the whole load


def test_spin_load_note_names_the_sleep_load_time_and_its_bias():
    t = {"load only": 8.01, "compute only": 5.22, "serial, spin load": 12.51, "Prefetcher, spin load": 10.15}
    note = ov.spin_load_note(t, 1.05)   # the fraction 0.524 with the sleep load, 0.425 with a 6.96 ms load
    assert "8.01 ms" in note and "0.425" in note and "errs high by 0.099" in note
    assert "planted time" in ov.spin_load_note(t, 0.0)


def test_prefetch_loops_run_n_steps_each():
    batches = [(torch.tensor([i]), torch.tensor([i])) for i in range(5)]
    seen = []
    loops = ov.prefetch_loops(batches, lambda x, y: seen.append(int(x)), batches[0], n=3, delay_s=0.0)
    assert set(loops) == {"load only", "compute only", "serial, sleep load", "Prefetcher, sleep load",
                          "serial, spin load", "Prefetcher, spin load"}
    loops["serial, spin load"]()
    loops["Prefetcher, sleep load"]()
    loops["compute only"]()
    loops["load only"]()
    assert seen == [0, 1, 2, 0, 1, 2, 0, 0, 0]
    with pytest.raises(ValueError, match="n"):
        ov.prefetch_loops(batches, lambda x, y: None, batches[0], n=0, delay_s=0.0)
    with pytest.raises(TypeError, match="step"):
        ov.prefetch_loops(batches, None, batches[0], n=1, delay_s=0.0)


def test_padding_waste_counts_each_scheme():
    pad = ex.padding_waste([3, 5, 8, 8, 1], batch=2, max_len=8)   # the 5th sample fills no batch
    assert pad.waste["longest in batch"] == pytest.approx(1 - 24 / 26)
    assert pad.waste["longest, rounded up to x8"] == pytest.approx(0.25)
    assert pad.waste["fixed 256"] == pytest.approx(1 - 24 / 1024)
    assert pad.extra_per_row == pytest.approx(1.5) and pad.capped == pytest.approx(0.5)
    assert pad.mean_len == pytest.approx(6.0)
    with pytest.raises(ValueError, match="lengths"):
        ex.padding_waste([3], batch=2, max_len=8)
    with pytest.raises(ValueError, match="batch"):
        ex.padding_waste([3, 4], batch=0, max_len=8)


def test_monitored_steps_keeps_each_measured_step():
    from perfkit import models

    wl = models.digits_workload(batch_size=16)
    run = ex.monitored_steps(wl, wl.loader.dataset, steps=3, warmup=1)
    assert len(run.data_s) == len(run.step_s) == run.summary.steps == 3
    assert all(0 <= d <= s for d, s in zip(run.data_s, run.step_s))
    assert 0 < run.data_share().value < 1
    assert run.step_time().value == pytest.approx(float(np.median(run.step_s)))
    with pytest.raises(ValueError, match="steps"):
        ex.monitored_steps(wl, wl.loader.dataset, steps=0)


def test_sweep_lines_one_line_per_setting():
    from perfkit.viz.data import sweep_lines

    r = record([0, 0.01, 0.01], [0, 0.01, 0.01])   # 20 ms steps, half waiting
    text = sweep_lines(["workers=0", "workers=2"], [r, r], [r, r], batch_size=8)
    assert text.splitlines()[1] == ("workers=2: predicted   400 samples/s,  50% waiting | "
                                    "measured   400 samples/s,  50% waiting")
    # with the planted compute, each line gives the steady steps' measured compute (here 10 ms)
    assert sweep_lines(["w"], [r], [r], batch_size=8, compute_ms=10.0).endswith(
        "50% waiting, the 10 ms step took 10.0 ms")
    with pytest.raises(ValueError, match="compute_ms"):
        sweep_lines(["w"], [r], [r], batch_size=8, compute_ms=0.0)
    with pytest.raises(ValueError, match="equally long"):
        sweep_lines(["a"], [r, r], [r, r], batch_size=8)
    with pytest.raises(ValueError, match="batch_size"):
        sweep_lines(["a"], [r], [r], batch_size=0)


def test_thread_share_tells_a_step_that_releases_the_gil_from_one_that_holds_it():
    import time

    def python_step():  # pure Python for 3 ms: the thread runs only at the GIL's forced switches
        end = time.perf_counter() + 3e-3
        while time.perf_counter() < end:
            pass

    free = ov.thread_share(lambda: time.sleep(3e-3), n=5, repeat=5)
    held = ov.thread_share(python_step, n=5, repeat=5)
    assert free.low <= free.value <= free.high and free.value > 0.75
    assert held.value < 0.7 and held.value < free.value
    with pytest.raises(TypeError, match="step"):
        ov.thread_share(3, n=5)
    with pytest.raises(ValueError, match="repeat"):
        ov.thread_share(python_step, n=5, repeat=1)


def test_thread_probe_times_the_steps_slowdown_beside_a_busy_thread():
    import time

    def python_step():  # pure Python for 3 ms: it needs the GIL the busy thread holds
        end = time.perf_counter() + 3e-3
        while time.perf_counter() < end:
            pass

    # a step that sleeps 30 ms waits for the GIL only when it wakes (a switch interval, 5 ms, at most)
    free = ov.thread_probe(lambda: time.sleep(30e-3), n=1, repeat=5)
    held = ov.thread_probe(python_step, n=5, repeat=5)  # shares the GIL with the thread throughout
    # 5 ms of 30 allows 1.17x; the margin is for a loaded machine, whose wake-ups come late
    assert free.slowdown.value < 2.0
    assert held.slowdown.value > 1.3 and held.slowdown.value > free.slowdown.value
    assert held.share.value < free.share.value


def test_gil_hidden_bound_counts_only_the_part_of_the_load_that_holds_the_gil():
    # load 6.1 ms, of which 4 ms a pure-Python spin; compute 4.9 ms; serial loop 12.6 ms a step. A step
    # that does half its work beside the spin (slowdown 2) takes at least 4.9 + 4 / 2 = 6.9 ms; the
    # rest of the load may overlap it entirely. Counting the whole load as held (the old estimate,
    # 4.9 + 6.1 / 2 = 7.95 ms) put the edge below what such a loader can hide.
    assert ov.gil_hidden_bound(12.6e-3, 6.1e-3, 4.9e-3, 2.0, 4e-3) == pytest.approx((12.6 - 6.9) / 6.5)
    assert ov.gil_hidden_bound(12.6e-3, 6.1e-3, 4.9e-3, 2.0, 6.1e-3) == pytest.approx((12.6 - 7.95) / 6.5)
    assert ov.gil_hidden_bound(12.6e-3, 6.1e-3, 4.9e-3, 1.0, 4e-3) == pytest.approx(1.0)  # no slowdown: all
    assert ov.gil_hidden_bound(12.6e-3, 6.1e-3, 4.9e-3, 0.8, 4e-3) == pytest.approx(1.0)  # faster: as 1
    assert ov.gil_hidden_bound(12.6e-3, 6.1e-3, 4.9e-3, 100.0, 6.1e-3) < 0.27  # nearly in turn
    assert ov.gil_hidden_bound(12.6e-3, 6.1e-3, 4.9e-3, 100.0, 0.0) == pytest.approx(1.0)  # nothing held
    with pytest.raises(ValueError, match="serial_s"):
        ov.gil_hidden_bound(6.0e-3, 6.1e-3, 4.9e-3, 2.0, 4e-3)
    with pytest.raises(ValueError, match="slowdown"):
        ov.gil_hidden_bound(12.6e-3, 6.1e-3, 4.9e-3, 0.0, 4e-3)
    with pytest.raises(ValueError, match="held_s"):
        ov.gil_hidden_bound(12.6e-3, 6.1e-3, 4.9e-3, 2.0, 7e-3)  # more than the whole load


def test_overlap_floor_leaves_the_first_load_and_the_last_step_unhidden():
    # a load longer than the step (8.9 against 5.5 per step, 28 steps): a loop that ends its source
    # loads back to back, then computes the last batch: 28 x 8.9 + 5.5. The old model, the first load
    # plus 28 x max, charged one load too many and made the fraction 1 - 8.9 / (28 x 5.5) = 0.94.
    assert ov.overlap_floor(8.9, 5.5, 28, exhausts=True) == pytest.approx(28 * 8.9 + 5.5)
    assert ov.overlap_hidden(8.9 + 5.5, 8.9, 5.5, 28, exhausts=True) == pytest.approx(27 / 28)
    # stopping early, the prefetcher's close waits for the load its thread has begun: 29 loads
    assert ov.overlap_floor(8.9, 5.5, 28, exhausts=False) == pytest.approx(29 * 8.9)
    assert ov.overlap_hidden(8.9 + 5.5, 8.9, 5.5, 28, exhausts=False) == pytest.approx(1 - 8.9 / (28 * 5.5))
    # a step longer than the load: the first load, then the steps back to back, either way
    for exhausts in (True, False):
        assert ov.overlap_floor(5.5, 8.9, 28, exhausts) == pytest.approx(5.5 + 28 * 8.9)
        assert ov.overlap_hidden(14.4, 5.5, 8.9, 28, exhausts) == pytest.approx(27 / 28)
    # a serial loop dearer than its parts leaves more to hide: (15.1 - floor) / (15.1 - 8.9)
    assert ov.overlap_hidden(15.1, 8.9, 5.5, 28, True) == pytest.approx((15.1 - 8.9 - 5.5 / 28) / 6.2)
    assert ov.overlap_floor(3.0, 3.0, 1, True) == pytest.approx(6.0)  # one step: nothing overlaps




def test_a_hidden_fraction_past_1_within_its_noise_is_clipped_at_1():
    # 7 rounds: the prefetched loop's median (6.21 ms/step) beats its longer part (6.28) by less than
    # its own spread, so the fraction of the medians (1.01) lies past 1 while the interval reaches 0.77
    rounds = {"serial, sleep load": [11.8, 11.9, 11.7, 11.82, 12.0, 11.6, 11.85],
              "Prefetcher, sleep load": [6.21, 6.0, 7.3, 6.1, 6.5, 6.25, 6.15],
              "load only": [6.28, 6.3, 6.2, 6.35, 6.25, 6.29, 6.27], "compute only": [5.43] * 7}
    est = ov.hidden_fraction_estimate(rounds, "sleep")
    raw = (11.82 - 6.21) / (11.82 - 6.28)
    assert raw > 1 and est.value == 1.0 and est.high == 1.0 and est.low < 1
    assert f"the medians give {raw:.3g}" in est.method and "clipped at 1" in est.method
    # the old text said only "past 1 by the noise of the four loops": it now says by how much, against
    # the interval's width before clipping and its reach below 1
    lo = ov.hidden_fraction_estimate(rounds, "sleep").low
    assert f"above 1 by {raw - 1:.2g}, " in est.method and f"which reaches {1 - lo:.2g} below 1" in est.method
    assert "of the interval's width before clipping (" in est.method
    # a whole interval past 1 is no noise: left as it is, for the verdict to call disturbed
    far = Estimate(1.3, 1.2, 1.4, 0.9, 15, "fraction")
    assert ov.clip_at_one(far) is far
    top = ov.clip_at_one(Estimate(0.9, 0.8, 1.1, 0.9, 15, "fraction"))
    assert (top.value, top.high) == (0.9, 1.0) and "top end clipped at 1 from 1.1" in top.method


def test_sleep_explain_says_whether_the_loop_below_its_floor_is_noise():
    n = 28
    rounds = {"serial, sleep load": [11.8 * n / 1e3] * 7,
              "Prefetcher, sleep load": [x * n / 1e3 for x in (6.21, 6.0, 7.3, 6.1, 6.5, 6.25, 6.15)],
              "load only": [6.28 * n / 1e3] * 7, "compute only": [5.43 * n / 1e3] * 7}
    said = ex.sleep_explain(rounds, n, True)
    floor = ov.overlap_floor(6.28, 5.43, n, True) / n
    assert f"below that floor ({floor:.2f} ms/step)" in said["held"] and "within its noise" in said["held"]
    assert "does not explain" not in said["held"]
    assert said["disturbed"].startswith("The prefetched loop's 6.21 ms/step lies 0.07 ms")
    tight = {**rounds, "Prefetcher, sleep load": [6.0 * n / 1e3] * 7}
    assert "which this run does not explain" in ex.sleep_explain(tight, n, True)["held"]
    with pytest.raises(ValueError, match="missing"):
        ex.sleep_explain({"load only": [1.0]}, n, True)


def test_gil_explain_splits_the_miss_between_the_short_spin_and_the_step():
    slow = Estimate(74.6, 69.3, 84.3, 0.9, 11, "median of 11 samples")
    # the report's run: a spin of at least 3.15 ms here, against the 4.43 ms the bound takes
    said = ex.gil_explain(6.28, 5.43, 4.88, 4.43, slow, 11.82, 10.09, 8.46)
    fastest = ov.gil_least_step(6.28, 5.43, 69.3, 4.43)
    alt = ov.gil_least_step(6.28, 5.43, 69.3, 4.88 + 10.09 - 11.82)
    assert f"would be {alt:.2f} ms, which the loop still beats by {alt - 8.46:.2f} ms" in said["below"]
    assert f"accounts for {fastest - alt:.2f} ms of the {fastest - 8.46:.2f} ms miss" in said["below"]
    # a loop between the two least steps: the short spin accounts for the whole miss
    parts = (6.28, 5.43, 4.88, 4.43, slow, 11.82)
    assert "accounts for the whole miss" in ex.gil_explain(*parts, 10.09, 8.9)["below"]
    # a spin no shorter than the bound's: the step ran faster during the spins
    assert "no less than the bound takes" in ex.gil_explain(*parts, 11.5, 8.9)["below"]
    # the judged bound itself at the precision of the other least steps (the verdict's header rounds it)
    head = f"The least step, {fastest:.2f} ms, is the step's 5.43 ms plus the 4.43 ms spin"
    assert said["held"].startswith(head)


def test_gil_explain_says_where_the_least_step_at_the_median_slowdown_lies():
    # a probe interval 6.2x to 89x: the verdict judges at 6.2x; at the median, 32.4x, the least
    # step lies above the loop's whole interval, which the held text must say
    slow = Estimate(32.4, 6.21, 89.0, 0.9, 11, "median of 11 samples")
    loop = Estimate(11.07, 10.8, 11.2, 0.9, 15, "median of 15 samples")
    held = ex.gil_explain(7.49, 5.70, 6.0, 5.91, slow, 13.87, 13.61, loop)["held"]
    mid = ov.gil_least_step(7.49, 5.70, 32.4, 5.91)
    assert f"median slowdown, 32.4x, the least step is {mid:.2f} ms, above the loop's" in held
    assert "the bound would be missed" in held and "at most 0.357, against the 0.415 hidden" in held
    wide = Estimate(11.3, 10.8, 11.6, 0.9, 15, "m")
    inside = ex.gil_explain(7.49, 5.70, 6.0, 5.91, slow, 13.87, 13.61, wide)
    assert "above the loop's median 11.30 ms but inside" in inside["held"]
    # a plain median (no interval) prints no such sentence, as before
    assert "median slowdown" not in ex.gil_explain(7.49, 5.70, 6.0, 5.91, slow, 13.87, 13.61, 11.07)["held"]


def _monitored(waits_ms, rests_ms):
    return ex.MonitoredRun(None, tuple(w / 1e3 for w in waits_ms),
                           tuple((w + r) / 1e3 for w, r in zip(waits_ms, rests_ms)))


def test_worker_gain_puts_a_gain_down_to_the_loader_only_where_the_wait_fell():
    jig = [0.01 * (i % 7) for i in range(30)]   # a little spread, so each median has an interval
    one = _monitored([1.4 + j for j in jig], [21.9 + j for j in jig])
    compute = _monitored([1.2 + j for j in jig], [19.9 + j for j in jig])   # -2.2 ms, -0.2 of it waiting
    said = ex.worker_gain(one, compute, 2)
    assert "faster" in said and "mostly in the compute" in said and "did not keep up" not in said
    assert "the median wait -0.2 ms, the median rest, its compute, -2.0 ms" in said
    waiting = _monitored([0.2 + j for j in jig], [21.9 + j for j in jig])   # only the wait fell
    assert ex.worker_gain(one, waiting, 2).endswith(
        "mostly less waiting (100% of the change), so one worker did not keep up")
    # -2.8 ms of which the wait -0.4 and the compute -0.9 (medians do not add): neither is named as the cause
    w1 = [3.8, 0.2, 4.1, 0.9, 2.9, 3.3, 5.8, 0.9, 0.0, 5.1, 0.2, 0.3, 0.5, 4.9, 1.4]
    s1 = [18.7, 19.1, 21.7, 23.1, 21.4, 20.8, 21.9, 21.9, 20.4, 23.4, 23.9, 21.4, 22.4, 23.4, 22.6]
    w2 = [5.9, 2.4, 1.7, 2.2, 0.4, 0.0, 0.5, 1.5, 1.0, 0.8, 0.9, 1.9, 0.8, 1.1, 0.3]
    s2 = [22.1, 18.9, 19.7, 17.5, 19.7, 18.5, 19.6, 20.2, 22.0, 19.1, 23.0, 18.7, 17.1, 18.8, 17.8]
    one2, two2 = (_monitored(w, [t - x for t, x in zip(s, w)]) for w, s in ((w1, s1), (w2, s2)))
    split = ex.worker_gain(one2, two2, 2)
    assert "-2.8 ms at the median; the median wait -0.4 ms, the median rest, its compute, -0.9 ms" in split
    assert "mostly" not in split and "the wait 14% of the change, the compute 32%" in split
    assert split.endswith("do not say whether one worker kept up")
    slower = _monitored([1.4 + j for j in jig], [24.9 + j for j in jig])
    assert "slower" in ex.worker_gain(one, slower, 2) and "on 2 cores" in ex.worker_gain(one, slower, 2)
    assert ex.worker_gain(one, one, 2).endswith("the run cannot tell the two apart")
    with pytest.raises(TypeError):
        ex.worker_gain(one, [1.0], 2)


def test_ratio_explain_credits_the_shortfalls_with_the_mean_rates_ratio_alone():
    rates, model = {2: 759.0, 8: 800.0}, {2: 889.0, 8: 914.0}
    far = Estimate(1.30, 0.39, 2.32, 0.9, 6, "ratio of two runs' median block means")
    said = ratio_explain(rates, model, 2, 8, far)
    # the shortfalls (85 % and 88 %) move the mean rates' ratio from 1.028x to 1.05x, not to 1.30x
    assert "lifts the ratio of the runs' mean steady rates to 1.05x, against the model's 1.028x" \
        in said["above"]
    assert "the rest of the way to 1.30x is the statistic's" in said["above"]
    near = Estimate(1.06, 0.39, 2.32, 0.9, 6, "ratio of two runs' median block means")
    assert ratio_explain(rates, model, 2, 8, near)["above"].endswith("which accounts for the figure.")
    low = Estimate(0.80, 0.39, 2.32, 0.9, 6, "ratio of two runs' median block means")
    assert "does not lie below the model's 1.028x; the figure, 0.80x, lies below it through the statistic" \
        in ratio_explain(rates, model, 2, 8, low)["below"]
    with pytest.raises(ValueError, match="worker counts"):
        ratio_explain(rates, model, 2, 4, far)


def test_loader_gil_note_names_the_dataloaders_own_python_time():
    said = ov.loader_gil_note(7.02, 5.46)   # ms: the load-only loop's time per batch, the planted sleep
    assert "1.56 ms of it, 22%, beyond the planted 5.46 ms" in said and "holding the GIL" in said
    assert "lost in the noise" in ov.loader_gil_note(5.40, 5.46)


def test_beyond_model_says_waiting_without_jitter_is_not_all_jitter():
    from types import SimpleNamespace as NS
    said = ex.beyond_model(4, NS(steady_wait_share=0.1404), NS(steady_wait_share=0.0396))
    assert "4 workers waited 14% of the steady steps, the model with the handoff 4%" in said
    assert "10 points it leaves out with no jitter at all" in said and "not all waiting" in said
    level = ex.beyond_model(4, NS(steady_wait_share=0.041), NS(steady_wait_share=0.0396))  # both print 4%
    assert "left no waiting out there" in level and "points" not in level


def test_handoff_part_puts_only_the_measured_handoff_on_the_handoff():
    said = ex.handoff_part(0.38, 2.4)
    assert "left +2.4 ms unsplit" in said
    assert "is 0.38 ms: the other 2.0 ms is the worker taking longer per batch in the loop than alone" in said
    assert "covers" in ex.handoff_part(2.5, 2.4) and ex.handoff_part(0.38, 0.04) == ""
    # a handoff timed on other batches than the step's own is said to be theirs, not "this size"
    other = ex.handoff_part(0.54, 2.5, timed_on="2a's batches of 16 free samples")
    assert "as timed on 2a's batches of 16 free samples (not section 1's batches" in other
    assert "this size" not in other and "is 0.54 ms: the other 2.0 ms" in other
    with pytest.raises(TypeError, match="timed_on"):
        ex.handoff_part(0.38, 2.4, timed_on=16)
    with pytest.raises(ValueError, match="handoff_ms"):
        ex.handoff_part(-1.0, 2.4)


def test_a_hidden_fraction_past_1_whose_loop_beat_its_floor_beyond_noise_is_not_clipped():
    # the prefetched loop (7.41 ms/step, tight) beats the floor built from the load's and the
    # compute's lower ends (about 7.6 ms/step), while the four loops' joint interval still reaches
    # below 1: a part ran faster inside the loop than apart, which clipping at 1 would hide
    n, k = 28, 15
    wobble = [(i - 7) * 0.01 for i in range(k)]
    rounds = {"serial, sleep load": [(13.87 + 3 * w) * n / 1e3 for w in wobble],
              "Prefetcher, sleep load": [(7.41 + w) * n / 1e3 for w in wobble],
              "load only": [(7.49 + 4 * w) * n / 1e3 for w in wobble],
              "compute only": [(5.70 + w) * n / 1e3 for w in wobble]}
    old = ov.hidden_fraction_estimate(rounds, "sleep")
    assert old.value == 1.0 and old.low < 1 and "clipped at 1" in old.method
    new = ov.hidden_fraction_estimate(rounds, "sleep", n=n, exhausts=True)
    assert new.value == pytest.approx((13.87 - 7.41) / (13.87 - 7.49)) and new.value > 1
    assert new.low < 1 < new.high and "not clipped at 1" in new.method
    # a loop whose interval reaches its floor is noise still: clipped as before
    loose = {**rounds, "Prefetcher, sleep load": [(7.41 + 30 * w) * n / 1e3 for w in wobble]}
    assert ov.hidden_fraction_estimate(loose, "sleep", n=n).value == 1.0
    with pytest.raises(TypeError):
        ov.clip_at_one(Estimate(1.01, 0.98, 1.02, 0.9, 15, "fraction"), beaten=1)


def test_rates_held_says_when_the_mean_rates_lie_across_the_edge_the_block_means_do_not():
    rates, model = {1: 506.0, 2: 982.0, 4: 939.0, 8: 889.0}, {1: 506.0, 2: 1012.0, 4: 1012.0, 8: 1036.0}
    judged = Estimate(0.992, 0.452, 1.590, 0.9, 6, "ratio of two runs' median block means")
    bounds = (1.023 * 0.9, 1.023 * 1.1)
    said = ex.rates_held(rates, model, 2, [4, 8], judged, bounds)
    assert said.startswith("Samples/s at 2 workers 982 (97% of the model's), past it: 4: 939, 8: 889")
    assert "8 over 2, 0.905x (no interval), lies below the prediction (0.921x to 1.13x)" in said
    assert "0.992x, lies inside" in said and "opposite sides" in said
    near = ex.rates_held({**rates, 8: 960.0}, model, 2, [4, 8], judged, bounds)
    assert near.endswith("lies inside the prediction (0.921x to 1.13x).")
    with pytest.raises(ValueError):
        ex.rates_held(rates, model, 2, [], judged, bounds)


def test_near_edge_says_how_far_inside_its_edge_a_held_interval_ends_and_flags_a_thin_margin():
    pred = Prediction("1-worker step time", "m", value=18.38, rel_tol=0.25, unit=" ms")   # 13.8 to 23.0 ms
    thin = Estimate(22.2, 20.8, 22.93, 0.9, 30, "median of 30 samples")   # printed 20.8 to 22.9 ms
    assert ex.near_edge(pred, thin) == (
        " Its 90% interval ends 0.1 ms inside the prediction's upper edge, 23.0 ms, less than the interval's "
        "own width (2.1 ms): intervals that treat a run's steps as independent draws are narrower than its "
        "real uncertainty, so this held verdict is weaker than it reads.")
    clear = ex.near_edge(pred, Estimate(18.0, 17.5, 18.5, 0.9, 30, "m"))
    assert "ends 3.7 ms inside the prediction's lower edge, 13.8 ms" in clear
    assert clear.endswith("more than the interval's own width (1.0 ms).")
    assert ex.near_edge(pred, Estimate(22.2, 20.8, 23.1, 0.9, 30, "m")) == ""    # reaches past the edge
    assert ex.near_edge(pred, Estimate(22.2, 22.2, 22.2, None, 1, "exact")) == ""


def test_rate_context_prints_an_undecidable_ratio_as_context_and_names_a_miss():
    pred = Prediction("samples/s with 8 busy workers over 2", "the model's ratio", value=1.022, rel_tol=0.1,
                      unit="x")
    wide = Estimate(0.984, 0.625, 1.698, 0.9, 6, "ratio of two runs' median block means")
    said = ex.rate_context(pred, wide, "Why.", 1.004)
    assert said.startswith("[context] Context, not a verdict (the model's ratio): samples/s with 8 busy "
                           "workers over 2, 1.02x ± 10%. Measured, by the median block means: 0.984x (")
    # context, not a prediction: the model's range, never "predicted", and nothing to "hold"
    assert ("Why. Here the interval is 1.07 wide, 5.2x the model's range (0.92x to 1.12x, 0.204 wide): an "
            "interval that wide cannot lie inside the range, so this run could not have settled it") in said
    assert "predicted" not in said and "prediction" not in said
    assert "the point estimate lies inside the range, and the interval reaches across both its edges." in said
    assert ("The ratio of the runs' mean rates, 1.004x, lies inside this 90% interval "
            "(0.625x to 1.698x). The mean rates' ratio, each") in said
    assert said.endswith("(the throughput each run delivered), lies inside the model's range; the "
                         "median block means put the ratio on the other side of 1x, as a median leaves out "
                         "the slowest and fastest blocks, which throughput counts.")
    same = ex.rate_context(pred, wide, "Why.", 0.99)
    assert same.endswith("(the throughput each run delivered), lies inside the model's range.")
    # the median block means above 1x, the mean rates below it and below the range: said, not hidden
    apart = ex.rate_context(pred, Estimate(1.27, 0.26, 2.29, 0.93, 6, "m"), "Why.", 0.83)
    assert "lies below the model's range; the median block means put the ratio on the other side" in apart
    low = ex.rate_context(pred, Estimate(0.70, 0.65, 0.75, 0.9, 6, "m"), "Why.", 0.7)
    assert ("narrower than the range this time; its whole interval lies below the range, which a verdict "
            "would call a miss.") in low


def test_workers_note_charges_the_handoff_of_section_2a():
    # 1.43 ms a batch beside a 10 ms step, 0.84 ms a handoff: one worker hides it, but saves only
    # 0.59 ms a step (the old rule, ceil(B c / t_compute), said "1 worker to hide it" and nothing more)
    note = ex.workers_note(1.43e-3, 10e-3, 0.84e-3)
    assert note.startswith("14.3% of a 10 ms step per batch -> 1 worker to hide it")
    assert "saving 0.59 of its 1.43 ms a step (41%)" in note and "handoff of 0.84 ms" in note
    assert "no worker needed" in ex.workers_note(1e-3, 10e-3, 0.84e-3)
    assert "no worker pays" in ex.workers_note(1.5e-3, 10e-3, 2e-3)
    assert ex.workers_note(25e-3, 10e-3, 1e-3).split("-> ")[1].startswith("3 workers")  # ceil(25 / 11)
    with pytest.raises(ValueError, match="handoff_s"):
        ex.workers_note(1e-3, 10e-3, -1.0)
