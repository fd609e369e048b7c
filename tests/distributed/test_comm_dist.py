"""Collectives, ring all-reduce, data parallelism and compression hooks on real torchrun
processes. One 2-process job (perfkit.jobs.suite) serves several tests: starting a job
costs seconds, so the experiments share it."""

import json
import math

import pytest

from perfkit import comm, dist

pytestmark = pytest.mark.distributed

# sizes smaller than the world size, and sizes divisible by neither 2 nor 3
RING_SIZES = [0, 1, 2, 5, 7, 1001, 4099]
SWEEP = {"ops": list(comm.OPS), "sizes": [1024, 65536], "repeat": 2}
DP = {"model": {"width": 64, "depth": 4}, "batch": 8,
      "compare": {"repeat": 1, "bucket_cap_mb": 0.01},
      "buckets": {"caps_mb": [0.001, 0.01, 25], "repeat": 1},
      "accumulate": {"ks": [1, 3], "repeat": 1},
      "accumulate_synced": {"ks": [3], "repeat": 1}}
METHODS = ["none", "dense", "dense_ef", "topk_10pct_ef", "randomk_50pct", "qsgd", "sign_ef",
           "qsgd_fused", "sign_fused_ef"]
TRAIN = {"workload": "digits", "steps": 30, "batch": 16, "lr": 0.05, "methods": METHODS}


@pytest.fixture(scope="module")
def suite2():
    cfg = {"collectives": {"ring": {"sizes": RING_SIZES, "repeat": 2}, "sweep": SWEEP},
           "data_parallel": DP, "compression": TRAIN}
    return dist.launch("perfkit.jobs.suite", 2, ["--config", json.dumps(cfg)],
                       timeout_s=300)


def _check_ring_and_sweep(res, nproc):
    for rank, r in enumerate(res):
        assert r["world_size"] == nproc
        for rec in r["ring"]:
            assert rec["int_exact"], f"rank {rank}, numel {rec['numel']}: ring sum differs"
            assert rec["float_max_abs_err"] < 1e-5 * nproc, rec  # summation order only
            assert rec["in_place"]
            if "ratios" in rec:  # timed in alternation with dist.all_reduce, per repetition
                assert len(rec["ratios"]) == len(rec["times_s"]) == len(rec["ref_times_s"]) == 2
                assert rec["time_s"] > 0 and rec["ref_time_s"] > 0
                # the two series are seconds per call, pair by pair, and their medians
                assert rec["ratios"] == pytest.approx([a / b for a, b in zip(rec["times_s"],
                                                                              rec["ref_times_s"])])
                assert rec["time_s"] == pytest.approx(sum(rec["times_s"]) / 2)
                assert rec["ref_time_s"] == pytest.approx(sum(rec["ref_times_s"]) / 2)
    pts = [comm.CollectivePoint(**p) for p in res[0]["sweep"]]
    assert {p.op for p in pts} == set(comm.OPS)
    for p in pts:
        assert p.time_s > 0 and p.nbytes % (4 * nproc) == 0
        assert p.algbw == pytest.approx(p.nbytes / p.time_s)
        assert p.busbw == pytest.approx(p.algbw * comm.bus_factor(p.op, nproc))
        # the slowest rank's quantiles: maxima over ranks keep p10 <= median <= p90
        assert 0 < p.p10_s <= p.p90_s and p.p10_s <= p.time_s <= p.p90_s, p
    assert res[1]["sweep"] == res[0]["sweep"]  # the slowest rank's time, agreed by all


def test_ring_matches_all_reduce_on_2_processes(suite2):
    _check_ring_and_sweep([r["collectives"] for r in suite2], 2)


def test_ring_matches_all_reduce_on_3_processes():
    # isolated calls: rank r works r * 20 ms longer before each, so the ranks wait 40, 20
    # and 0 ms for the last one: their mean, 20 ms, plus the call itself (the slowest rank's
    # time would be 40 ms and more, the last arrival's a few ms)
    iso = {"op": ["all_reduce", "all_gather"], "sizes": [1024, 65536], "repeat": 3, "gap_s": 0.0,
           "stagger_s": 0.02}  # one op per size
    cfg = {"ring": {"sizes": RING_SIZES}, "sweep": SWEEP, "isolated": iso}
    res = dist.launch("perfkit.jobs.collectives", 3, ["--config", json.dumps(cfg)],
                      timeout_s=180)
    _check_ring_and_sweep(res, 3)
    got = res[0]["isolated"]
    assert got["op"] == iso["op"] and got["sizes"] == iso["sizes"]
    assert [len(t) for t in got["times_s"]] == [3, 3]
    assert all(r["isolated"] == got for r in res)  # one mean over ranks, agreed by all
    for ts in got["times_s"]:
        assert 0.018 < sorted(ts)[1] < 0.035, ts


def test_data_parallel_from_scratch_equals_ddp(suite2):
    for r in (x["data_parallel"] for x in suite2):
        c = r["compare"]
        for name, diff in c["max_abs_diff_vs_ddp"].items():
            # same reduction (sum of grad / 2 over two ranks): identical up to fp32 rounding
            assert diff <= 1e-6 * c["grad_scale"], f"{name} gradients differ from DDP: {diff}"
        assert c["buckets"] > 1  # a 0.01 MB cap really splits this model
        assert set(c["time_s"]) >= {"ddp", "naive", "bucketed", "overlapped"}
        # every repetition's time, timed in alternation, so ratios come with a spread
        assert {k: len(v) for k, v in c["times_s"].items()} == {k: 1 for k in c["time_s"]}
        # backward alone, in the same rounds: what the overlap ceiling needs from this run
        assert {"compute_only", "comm_only", "forward_only", "backward_only"} <= set(c["times_s"])
        assert 0 < c["time_s"]["backward_only"] and 0 < c["time_s"]["forward_only"]
    r0 = suite2[0]["data_parallel"]
    acc = r0["accumulate"]
    assert acc[0]["allreduce_calls"] == acc[1]["allreduce_calls"]  # once per k micro-batches
    assert acc[1]["allreduce_bytes_per_sample"] == pytest.approx(
        acc[0]["allreduce_bytes_per_sample"] / 3)
    for a in acc:
        assert a["max_abs_diff_vs_big_batch"] < 1e-6
        assert a["times_s"] == [a["step_s"]]  # repeat 1: the one repetition is the median
    # without no_sync() every micro-batch all-reduces: k times the calls, the same gradient
    (synced,) = r0["accumulate_synced"]
    assert synced["allreduce_calls"] == 3 * acc[1]["allreduce_calls"]
    assert synced["max_abs_diff_vs_big_batch"] < 1e-6
    calls = [b["calls_per_step"] for b in r0["buckets"]]
    assert calls[0] > calls[-1] == 1
    for b in r0["buckets"]:  # perfkit.parallel.assign_buckets models DDP's reducer exactly
        assert b["calls_per_step"] == b["predicted_calls"], b
        assert len(b["times_s"]) == 1 and b["step_s"] == b["times_s"][0]


def test_compression_hook_trains_a_real_model_under_torchrun(suite2):
    runs = {r["method"]: r for r in suite2[0]["compression"]["runs"]}
    for r in runs.values():  # every step's time, the median among them
        assert len(r["step_times_s"]) == TRAIN["steps"]
        assert min(r["step_times_s"]) <= r["step_s"] <= max(r["step_times_s"])
        # the median of that series itself (each step the slower rank's), not the slower
        # rank's own median: a ratio of step_times_s and step_s then speak of one statistic
        assert r["step_s"] == sorted(r["step_times_s"])[TRAIN["steps"] // 2]
    assert suite2[1]["compression"]["runs"][0]["step_times_s"] == runs["none"]["step_times_s"]
    # the losses are all-reduced: every rank reports the same curve
    assert suite2[1]["compression"]["runs"][0]["losses"] == runs["none"]["losses"]
    # the identity through perfkit's hook (all-reduce, divide after) == DDP's all-reduce
    assert runs["dense"]["losses"] == pytest.approx(runs["none"]["losses"], rel=1e-4)
    # error feedback around the identity sends every gradient whole: the same training to
    # fp32 rounding (it used to zero its own payload and train on zero gradients)
    assert runs["dense_ef"]["losses"] == pytest.approx(runs["dense"]["losses"], rel=0, abs=1e-6)
    assert runs["dense_ef"]["final_loss"] == pytest.approx(runs["dense"]["final_loss"], abs=1e-6)
    ratio = {m: r["wire_bytes_per_step"] / r["dense_bytes_per_step"] for m, r in runs.items()}
    n = runs["none"]["n_params"]
    assert ratio["none"] == ratio["dense"] == ratio["dense_ef"] == 1.0
    assert ratio["topk_10pct_ef"] == pytest.approx(8 * -(-n // 10) / (4 * n))  # ceil(n / 10)
    assert ratio["randomk_50pct"] == pytest.approx((4 * -(-n // 2) + 8) / (4 * n))
    assert ratio["qsgd"] == pytest.approx((n + 4) / (4 * n))
    assert ratio["sign_ef"] == pytest.approx((math.ceil(n / 8) + 4) / (4 * n))
    # the fused kernels inside DDP's hook, during backward, train like the eager ones: same
    # dither and bits, so the same curve up to a rare one-level code difference
    assert runs["qsgd_fused"]["losses"] == pytest.approx(runs["qsgd"]["losses"], rel=1e-3)
    assert runs["sign_fused_ef"]["losses"] == pytest.approx(runs["sign_ef"]["losses"], rel=1e-4)
    for m, r in runs.items():
        first, last = sum(r["losses"][:5]) / 5, sum(r["losses"][-5:]) / 5
        assert last < 0.9 * first, f"{m} did not train: {first:.3f} -> {last:.3f}"


def test_interleaved_compression_pairs_rounds_and_trains_as_alone(suite2):
    cfg = {**TRAIN, "steps": 7, "methods": ["none", "topk_10pct_ef"], "interleave": True,
           "round_steps": 3}
    res = dist.launch("perfkit.jobs.compression", 2, ["--config", json.dumps(cfg)], timeout_s=180)
    assert res[0]["interleaved"] and res[0]["runs"][0]["losses"] == res[1]["runs"][0]["losses"]
    runs = {r["method"]: r for r in res[0]["runs"]}
    alone = {r["method"]: r for r in suite2[0]["compression"]["runs"]}
    # each method has its own model and optimizer on the same batches: the all-reduce trains
    # exactly as in a run of its own (the first 7 of its 30 steps)
    assert runs["none"]["losses"] == pytest.approx(alone["none"]["losses"][:7], rel=1e-6)
    for r in runs.values():  # rounds of 3, 3 and 1 steps: each the sum of its steps' times
        t = r["step_times_s"]
        assert len(t) == 7 and r["round_times_s"] == pytest.approx([sum(t[:3]), sum(t[3:6]), t[6]])


def test_torch_hooks_payload_is_counted_at_the_all_reduce():
    # fp16/bf16 and PowerSGD bytes are what the hooks hand to dist.all_reduce, not a formula of
    # the job's own: they match the byte model computed apart (PowerSGD's dense first steps too)
    from perfkit.jobs.compression import powersgd_wire_ratio
    from perfkit.models import SmallCNN

    cfg = {**TRAIN, "steps": 4, "methods": ["none", "fp16_hook", "bf16_hook", "powersgd_r1", "powersgd_r4"]}
    res = dist.launch("perfkit.jobs.compression", 2, ["--config", json.dumps(cfg)], timeout_s=180)
    ratio = {r["method"]: r["wire_bytes_per_step"] / r["dense_bytes_per_step"] for r in res[0]["runs"]}
    assert ratio["none"] == 1.0 and ratio["fp16_hook"] == ratio["bf16_hook"] == 0.5
    for r in (1, 4):
        assert ratio[f"powersgd_r{r}"] == pytest.approx(powersgd_wire_ratio(SmallCNN(), r, 4), rel=1e-12)
    assert ratio["powersgd_r1"] < ratio["powersgd_r4"] < 1.0
    assert powersgd_wire_ratio(SmallCNN(), 1, 2) == 1.0  # both steps before compression starts
