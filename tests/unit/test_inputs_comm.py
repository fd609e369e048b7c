"""perfkit.comm refuses bad arguments: each public function and class raises ``TypeError``
(wrong type) or ``ValueError`` (wrong value) with a message naming the argument and what is
allowed, before any collective runs (a rank that fails later would leave the others waiting).

Each case is (id, call, exception, regex on the message); the regex names the argument.
Cases that need a process group run in a one-rank gloo group.
"""

import math

import pytest
import torch
import torch.distributed as dist

from perfkit import comm
from perfkit.comm import (
    AlphaBeta,
    CollectivePoint,
    Interconnect,
    all_gather_single,
    benchmark_collective,
    bucket_count_effect,
    bus_factor,
    busbw_share,
    encoding_pays,
    fit_alpha_beta,
    fit_quality,
    hidden_share,
    isolated_times,
    medians_against_pairs,
    reduce_scatter_single,
    ring_all_reduce,
    ring_allreduce_time,
    ring_check,
    ring_check_text,
    ring_regime_text,
    step_comm_text,
    sweep,
)
from perfkit.estimate import exact

NAN, INF = math.nan, math.inf
LINK = AlphaBeta(1e-5, 1e9)
T = torch.ones(4)
PT2 = CollectivePoint("all_reduce", 1024, 2, 1e-4, 1e7, 1e7)
FQ = comm.FitQuality(0.1, PT2, None, "")
PT3 = CollectivePoint("all_reduce", 1024, 3, 1e-4, 1e7, 1e7)
ROUNDS = {**{k: [1.0, 1.0] for k in ("compute_only", "overlapped", "backward_only")}, "bucketed": [2.0, 2.0]}
SAVING = dict(naive_calls=16, bucket_calls=3, grad_bytes=1e6, largest_bytes=1 << 20, naive_s=0.03,
              bucketed_s=0.02, copy_bytes_per_s=1e10)
PAYS = dict(codec_s=1e-3, nbytes=1 << 20, wire_ratio=0.02, loopback_busbw=1e9)

CASES = [  # (id, call, exception, regex on the message)
    # count_traffic
    ("count_traffic.extra", lambda: comm.count_traffic([("obj", "x")]).__enter__(), TypeError,
     r"extra must hold \(object, attribute, name\) tuples"),
    # ring_factor
    ("ring_factor.world_size", lambda: comm.ring_factor("all_reduce", 0), ValueError,
     "world_size must be an int >= 1, got 0"),
    # bus_factor
    ("bus_factor.op", lambda: bus_factor("alltoall", 2), ValueError,
     "op must be one of 'all_reduce'"),
    ("bus_factor.op int", lambda: bus_factor(3, 2), ValueError, "op must be one of"),
    ("bus_factor.op list", lambda: bus_factor(["all_reduce"], 2), ValueError, "op"),
    ("bus_factor.world_size zero", lambda: bus_factor("all_reduce", 0), ValueError,
     "world_size must be an int >= 1"),
    ("bus_factor.world_size bool", lambda: bus_factor("all_reduce", True), ValueError,
     "world_size"),
    ("bus_factor.world_size float", lambda: bus_factor("all_reduce", 2.0), ValueError,
     "world_size"),
    ("bus_factor.world_size str", lambda: bus_factor("all_reduce", "2"), TypeError,
     "world_size"),
    # AlphaBeta
    ("AlphaBeta.alpha_s negative", lambda: AlphaBeta(-1e-6, 1e9), ValueError,
     "alpha_s must be a finite number >= 0"),
    ("AlphaBeta.alpha_s nan", lambda: AlphaBeta(NAN, 1e9), ValueError, "alpha_s"),
    ("AlphaBeta.alpha_s str", lambda: AlphaBeta("0", 1e9), TypeError, "alpha_s"),
    ("AlphaBeta.bandwidth zero", lambda: AlphaBeta(0.0, 0.0), ValueError,
     "bandwidth must be a finite number > 0"),
    ("AlphaBeta.bandwidth negative", lambda: AlphaBeta(0.0, -1.0), ValueError, "bandwidth"),
    ("AlphaBeta.bandwidth inf", lambda: AlphaBeta(0.0, INF), ValueError, "bandwidth"),
    ("AlphaBeta.predict negative", lambda: LINK.predict(-5), ValueError,
     "nbytes must be a finite number >= 0"),
    ("AlphaBeta.predict nan", lambda: LINK.predict(NAN), ValueError, "nbytes"),
    ("AlphaBeta.predict str", lambda: LINK.predict("1k"), TypeError, "nbytes"),
    # fit_alpha_beta
    ("fit_alpha_beta.nbytes empty", lambda: fit_alpha_beta([], []), ValueError,
     "nbytes must hold at least one"),
    ("fit_alpha_beta.nbytes int", lambda: fit_alpha_beta(3, [1.0]), TypeError,
     "nbytes must be a list"),
    ("fit_alpha_beta.nbytes nan", lambda: fit_alpha_beta([1, NAN], [1.0, 2.0]), ValueError,
     r"nbytes\[1\] must be a finite number >= 0"),
    ("fit_alpha_beta.nbytes inf", lambda: fit_alpha_beta([1, INF], [1.0, 2.0]), ValueError,
     r"nbytes\[1\]"),
    ("fit_alpha_beta.nbytes negative", lambda: fit_alpha_beta([-1, 2], [1.0, 2.0]), ValueError,
     r"nbytes\[0\]"),
    ("fit_alpha_beta.nbytes str", lambda: fit_alpha_beta(["a", "b"], [1.0, 2.0]), TypeError,
     r"nbytes\[0\]"),
    ("fit_alpha_beta.nbytes bool", lambda: fit_alpha_beta([True, False], [1.0, 2.0]),
     ValueError, r"nbytes\[0\]"),
    ("fit_alpha_beta.nbytes one size", lambda: fit_alpha_beta([8, 8], [1.0, 2.0]), ValueError,
     "nbytes needs at least two distinct sizes"),
    ("fit_alpha_beta.times_s length", lambda: fit_alpha_beta([1, 2], [1.0]), ValueError,
     "nbytes and times_s differ in length"),
    ("fit_alpha_beta.times_s zero", lambda: fit_alpha_beta([1, 2], [0.0, 1.0]), ValueError,
     "times_s must all be finite and > 0"),
    ("fit_alpha_beta.times_s nan", lambda: fit_alpha_beta([1, 2], [NAN, 1.0]), ValueError,
     "times_s"),
    ("fit_alpha_beta.times_s str", lambda: fit_alpha_beta([1, 2], ["1", "2"]), TypeError,
     "times_s must hold numbers"),
    ("fit_alpha_beta.times_s dict", lambda: fit_alpha_beta([1, 2], {1: 1.0}), TypeError,
     "times_s must be a list"),
    # ring_allreduce_time
    ("ring_allreduce_time.nbytes negative", lambda: ring_allreduce_time(-10, 2, LINK),
     ValueError, "nbytes must be a finite number >= 0"),
    ("ring_allreduce_time.nbytes nan", lambda: ring_allreduce_time(NAN, 2, LINK), ValueError,
     "nbytes"),
    ("ring_allreduce_time.world_size zero", lambda: ring_allreduce_time(10, 0, LINK),
     ValueError, "world_size must be an int >= 1"),
    ("ring_allreduce_time.world_size float", lambda: ring_allreduce_time(10, 2.5, LINK),
     ValueError, "world_size"),
    ("ring_allreduce_time.world_size bool", lambda: ring_allreduce_time(10, True, LINK),
     ValueError, "world_size"),
    ("ring_allreduce_time.world_size str", lambda: ring_allreduce_time(10, "2", LINK),
     TypeError, "world_size"),
    ("ring_allreduce_time.link", lambda: ring_allreduce_time(10, 2, None), TypeError,
     "link must be an AlphaBeta"),
    # benchmark_collective and sweep: refused before the first collective (no group needed)
    ("benchmark_collective.op", lambda: benchmark_collective("gather", 1024), ValueError,
     "op must be one of"),
    ("benchmark_collective.nbytes zero", lambda: benchmark_collective("all_reduce", 0),
     ValueError, "nbytes must be an int >= 1"),
    ("benchmark_collective.nbytes bool", lambda: benchmark_collective("all_reduce", True),
     ValueError, "nbytes"),
    ("benchmark_collective.nbytes float", lambda: benchmark_collective("all_reduce", 1e3),
     ValueError, "nbytes"),
    ("benchmark_collective.warmup", lambda: benchmark_collective("all_reduce", 64, warmup=-1),
     ValueError, "warmup must be an int >= 0"),
    ("benchmark_collective.repeat", lambda: benchmark_collective("all_reduce", 64, repeat=0),
     ValueError, "repeat must be an int >= 1"),
    ("benchmark_collective.device", lambda: benchmark_collective("all_reduce", 64,
                                                                 device="bogus"),
     ValueError, "device"),
    ("sweep.ops str", lambda: sweep("all_reduce", [64]), TypeError,
     "ops must be a list or tuple"),
    ("sweep.ops empty", lambda: sweep([], [64]), ValueError, "ops must hold at least one"),
    ("sweep.ops unknown", lambda: sweep(["all_reduce", "gather"], [64]), ValueError,
     r"ops\[1\] must be one of"),
    ("sweep.sizes int", lambda: sweep(["all_reduce"], 64), TypeError, "sizes must be a list"),
    ("sweep.sizes empty", lambda: sweep(["all_reduce"], []), ValueError,
     "sizes must hold at least one"),
    ("sweep.sizes zero", lambda: sweep(["all_reduce"], [64, 0]), ValueError,
     r"sizes\[1\] must be an int >= 1"),
    ("sweep.warmup", lambda: sweep(["all_reduce"], [64], warmup=-1), ValueError, "warmup"),
    ("sweep.repeat", lambda: sweep(["all_reduce"], [64], repeat=0), ValueError, "repeat"),
    ("isolated_times.op", lambda: isolated_times("gather", [64]), ValueError, "op must be one of"),
    ("isolated_times.sizes empty", lambda: isolated_times("all_reduce", []), ValueError,
     "sizes must hold at least one"),
    ("isolated_times.sizes zero", lambda: isolated_times("all_reduce", [64, 0]), ValueError,
     r"sizes\[1\]"),
    ("isolated_times.gap_s", lambda: isolated_times("all_reduce", [64], gap_s=-1e-3), ValueError,
     "gap_s"),
    ("isolated_times.gap_s nan", lambda: isolated_times("all_reduce", [64], gap_s=NAN), ValueError,
     "gap_s"),
    ("isolated_times.repeat", lambda: isolated_times("all_reduce", [64], repeat=0), ValueError,
     "repeat"),
    ("isolated_times.warmup", lambda: isolated_times("all_reduce", [64], warmup=-1), ValueError,
     "warmup"),
    ("isolated_times.stagger_s", lambda: isolated_times("all_reduce", [64], stagger_s=-1.0),
     ValueError, "stagger_s"),
    # experiments: what notebook 02 computes from a job's records
    ("bucket_saving.points empty", lambda: comm.bucket_saving([], LINK, **SAVING), ValueError,
     "points must hold at least one"),
    ("bucket_saving.fit", lambda: comm.bucket_saving([PT2], None, **SAVING), TypeError,
     "fit must be an AlphaBeta"),
    ("bucket_saving.naive_calls below buckets",
     lambda: comm.bucket_saving([PT2], LINK, **{**SAVING, "naive_calls": 2}), ValueError,
     "naive_calls must be an int >= 3"),
    ("bucket_saving.grad_bytes", lambda: comm.bucket_saving([PT2], LINK, **{**SAVING, "grad_bytes": 0.0}),
     ValueError, "grad_bytes"),
    ("bucket_saving.naive_s nan", lambda: comm.bucket_saving([PT2], LINK, **{**SAVING, "naive_s": NAN}),
     ValueError, "naive_s"),
    ("bucket_saving.copy_bytes_per_s",
     lambda: comm.bucket_saving([PT2], LINK, **{**SAVING, "copy_bytes_per_s": -1.0}), ValueError,
     "copy_bytes_per_s"),
    ("fit_quality.points empty", lambda: fit_quality([], LINK), ValueError,
     "points must hold at least one"),
    ("fit_quality.points dict", lambda: fit_quality([{"nbytes": 8}], LINK), TypeError,
     r"points\[0\] must be a CollectivePoint"),
    ("fit_quality.fit", lambda: fit_quality([PT2], (1e-5, 1e9)), TypeError,
     "fit must be an AlphaBeta"),
    ("small_call_cost.points empty", lambda: comm.small_call_cost([], LINK), ValueError,
     "points must hold at least one"),
    ("small_call_cost.fit", lambda: comm.small_call_cost([PT2], (1e-5, 1e9)), TypeError,
     "fit must be an AlphaBeta"),
    ("small_call_cost.tol", lambda: comm.small_call_cost([PT2], LINK, tol=1.0), ValueError, "tol"),
    ("small_call_cost.also", lambda: comm.small_call_cost([PT2], LINK, also=1e-3), TypeError, "also"),
    ("small_call_cost.also time", lambda: comm.small_call_cost([PT2], LINK, also=("x", 0.0)), ValueError,
     r"also\[1\]"),
    ("bucket_saving.ratio", lambda: comm.bucket_saving([PT2], LINK, **SAVING, ratio=1.2), TypeError,
     "ratio must be an Estimate or None"),
    ("small_sizes_text.points empty", lambda: comm.small_sizes_text([], LINK), ValueError,
     "points must hold at least one"),
    ("small_sizes_text.fit", lambda: comm.small_sizes_text([PT2], (1e-5, 1e9)), TypeError,
     "fit must be an AlphaBeta"),
    ("gloo_reduce_scatter_text.rs_s", lambda: comm.gloo_reduce_scatter_text(0.0, 1e-3, 1024, 2, 1e9),
     ValueError, "rs_s"),
    ("gloo_reduce_scatter_text.world_size", lambda: comm.gloo_reduce_scatter_text(1e-3, 1e-3, 1024, 1, 1e9),
     ValueError, "world_size"),
    ("gloo_reduce_scatter_text.buffer_bytes_per_s",
     lambda: comm.gloo_reduce_scatter_text(1e-3, 1e-3, 1024, 2, NAN), ValueError, "buffer_bytes_per_s"),
    ("ring_check.points str", lambda: ring_check("points", LINK), TypeError,
     "points must be a list"),
    ("ring_check.points world_size", lambda: ring_check([PT2, PT3], LINK), ValueError,
     "points must share one world_size"),
    ("ring_check.fit2", lambda: ring_check([PT3], None), TypeError, "fit2 must be an AlphaBeta"),
    ("ring_check.cores zero", lambda: ring_check([PT3], LINK, cores=0), ValueError,
     "cores must be an int >= 1"),
    ("ring_check_text.check", lambda: ring_check_text("check", [PT3, PT3], LINK), TypeError,
     "check must be"),
    ("ring_check_text.fit2", lambda: ring_check_text(ring_check([PT3], LINK), [PT3, PT3], None), TypeError,
     "fit2 must be"),
    ("ring_check_text.points one", lambda: ring_check_text(ring_check([PT3], LINK), [PT3], LINK), ValueError,
     "at least 2 sizes"),
    ("ring_regime_text.check", lambda: ring_regime_text("check", True), TypeError, "check must be"),
    ("ring_regime_text.latency_bound none there", lambda: ring_regime_text(ring_check([PT3], LINK), False),
     ValueError, "no size lies above the crossover"),
    ("busbw_share.point", lambda: busbw_share({"busbw": 1.0}, 1e9, 5), TypeError, "point must be"),
    ("busbw_share.bytes_per_s", lambda: busbw_share(PT2, 0.0, 5), ValueError, "bytes_per_s"),
    ("busbw_share.repeat", lambda: busbw_share(PT2, 1e9, 0), ValueError, "repeat must be an int >= 1"),
    ("medians_against_pairs.b unequal", lambda: medians_against_pairs([1.0, 2.0], [1.0]), ValueError,
     "same number of rounds"),
    ("hidden_share.times_s list", lambda: hidden_share([[1.0]] * 4), TypeError,
     "times_s must be a Mapping"),
    ("hidden_share.times_s missing", lambda: hidden_share({"compute_only": [1.0]}), ValueError,
     r"times_s must hold the series .* missing \['bucketed', 'overlapped', 'backward_only'\]"),
    ("hidden_share.times_s zero", lambda: hidden_share({**ROUNDS, "backward_only": [1.0, 0.0]}),
     ValueError, r"times_s\['backward_only'\] must be a finite number > 0"),
    ("hidden_share.times_s no communication", lambda: hidden_share({**ROUNDS, "bucketed": [1.0, 1.0]}),
     ValueError, r"times_s\['bucketed'\] must take longer than times_s\['compute_only'\]"),
    ("hidden_share.times_s unequal", lambda: hidden_share({**ROUNDS, "overlapped": [1.0]}),
     ValueError, "times_s series must hold the same number of rounds"),
    ("step_comm_text.times_s list", lambda: step_comm_text([[1.0]] * 3), TypeError,
     "times_s must be a Mapping"),
    ("step_comm_text.times_s missing", lambda: step_comm_text({"compute_only": [1.0]}), ValueError,
     r"times_s must hold the series .* missing \['bucketed', 'comm_only'\]"),
    ("step_comm_text.times_s zero", lambda: step_comm_text({**ROUNDS, "comm_only": [1.0, 0.0]}),
     ValueError, r"times_s\['comm_only'\] must be a finite number > 0"),
    ("together_share.times_s missing", lambda: comm.together_share(ROUNDS), ValueError,
     r"times_s must hold the series .* missing \['comm_only', 'comm_together'\]"),
    ("together_share.times_s no communication", lambda: comm.together_share(
        {**ROUNDS, "bucketed": [1.0, 1.0], "comm_only": [1.0, 1.0], "comm_together": [1.0, 1.0]}),
     ValueError, "no communication showed"),
    ("overlap_apart_text.hidden", lambda: comm.overlap_apart_text(0.2, exact(0.1)), TypeError,
     "hidden must be"),
    ("overlap_held_text.hidden", lambda: comm.overlap_held_text(0.2, 0.3), TypeError, "hidden must be"),
    ("overlap_held_text.ceiling", lambda: comm.overlap_held_text(exact(0.1), 0.0), ValueError, "ceiling"),
    ("overlap_said.outcome", lambda: comm.overlap_said("maybe", exact(0.1), 0.3, 1e-3, 1e-3),
     ValueError, "outcome must be held"),
    ("backward_reading.times_s list", lambda: comm.backward_reading([[1.0]]), TypeError, "times_s must be"),
    ("backward_reading.times_s missing", lambda: comm.backward_reading({"compute_only": [1.0]}), ValueError,
     "backward_only"),
    ("backward_reading.times_s zero", lambda: comm.backward_reading({**ROUNDS, "forward_only": [0.0, 1.0]}),
     ValueError, "forward_only"),
    ("ddp_against_text.ratio", lambda: comm.ddp_against_text(1.5, [], 0.25, 2), TypeError, "ratio must be"),
    ("ddp_against_text.cores", lambda: comm.ddp_against_text(exact(1.5), [{"calls_per_step": 1, "step_s": 1}],
                                                             0.25, 0), ValueError, "cores"),
    ("ddp_against_text.caps", lambda: comm.ddp_against_text(exact(1.5), [{"step_s": 1.0}], 0.25, 2),
     TypeError, r"caps\[0\] must be a mapping"),
    ("fits_text.points", lambda: comm.fits_text({"all_reduce": None}, {}), ValueError, "same collectives"),
    ("fits_text.quality", lambda: comm.fits_text({"all_reduce": None}, {"all_reduce": [PT2]}), TypeError,
     "FitQuality"),
    ("fits_text.limit", lambda: comm.fits_text({}, {}, 0.0), ValueError, "limit"),
    ("fits_text.fits", lambda: comm.fits_text({"all_reduce": FQ}, {"all_reduce": [PT2]}, 0.25, {}),
     ValueError, "fits must name"),
    ("fits_text.fits item", lambda: comm.fits_text({"all_reduce": FQ}, {"all_reduce": [PT2]}, 0.25,
                                                   {"all_reduce": (1e-5, 1e9)}), TypeError, "fits"),
    ("fits_table.buffer_rate", lambda: comm.fits_table({"all_reduce": FQ}, {"all_reduce": [PT2]},
                                                       {"all_reduce": LINK}, 0.0), ValueError, "buffer_rate"),
    ("fits_table.fits", lambda: comm.fits_table({"all_reduce": FQ}, {"all_reduce": [PT2]}, {}, 1e9),
     ValueError, "same collectives"),
    ("fits_table.fits item", lambda: comm.fits_table({"all_reduce": FQ}, {"all_reduce": [PT2]},
                                                     {"all_reduce": (1e-5, 1e9)}, 1e9), TypeError, "fits"),
    ("loopback_copy_share.op", lambda: comm.loopback_copy_share("gather", 2), ValueError, "op"),
    ("loopback_copy_share.world_size", lambda: comm.loopback_copy_share("broadcast", 1), ValueError,
     "world_size"),
    ("alpha_used_text.fit", lambda: comm.alpha_used_text((1e-5, 1e9), 1e-3), TypeError, "fit"),
    ("alpha_used_text.cost_s", lambda: comm.alpha_used_text(LINK, -1.0), ValueError, "cost_s"),
    ("alone_against_model_text.model_s", lambda: comm.alone_against_model_text(1e-3, 0.0, 7), ValueError,
     "model_s"),
    ("alone_against_model_text.buckets", lambda: comm.alone_against_model_text(1e-3, 1e-3, 0), ValueError,
     "buckets"),
    ("busbw_fall_text.points empty", lambda: comm.busbw_fall_text([]), ValueError, "points"),
    ("busbw_fall_text.points item", lambda: comm.busbw_fall_text([1.0]), TypeError, "points"),
    ("peak_busbw_text.points empty", lambda: comm.peak_busbw_text([], PT2, 1e9, 0.25), ValueError, "points"),
    ("peak_busbw_text.judged", lambda: comm.peak_busbw_text([PT2], 1.0, 1e9, 0.25), TypeError, "judged"),
    ("peak_busbw_text.expected", lambda: comm.peak_busbw_text([PT2], PT2, 1e9, 0.0), ValueError, "expected"),
    ("fit_below_text.points empty", lambda: comm.fit_below_text([], LINK), ValueError, "points"),
    ("fit_below_text.fit", lambda: comm.fit_below_text([PT2], (1e-5, 1e9)), TypeError, "fit"),
    ("fit_below_text.below", lambda: comm.fit_below_text([PT2], LINK, below=0.0), ValueError, "below"),
    ("held_by_text.ratios empty", lambda: comm.held_by_text([], 1.5, (0.75, 3)), ValueError, "ratios"),
    ("held_by_text.stretch", lambda: comm.held_by_text([1.0], 0.0, (0.75, 3)), ValueError, "stretch"),
    ("measured_rate_text.points2 empty", lambda: comm.measured_rate_text([], 3, LINK), ValueError, "points2"),
    ("measured_rate_text.n", lambda: comm.measured_rate_text([PT2], 1, LINK), ValueError, "n"),
    ("measured_rate_text.fit", lambda: comm.measured_rate_text([PT2], 3, None), TypeError, "fit"),
    ("small_call_cost.up_to_bytes", lambda: comm.small_call_cost([PT2], LINK, up_to_bytes=-1.0), ValueError,
     "up_to_bytes"),
    ("bucket_count_effect.call_range_s", lambda: bucket_count_effect(
        [{"calls_per_step": 1, "step_s": 1.0}, {"calls_per_step": 2, "step_s": 1.0}], 1e-5,
        call_range_s=(-1.0, 1.0)), ValueError, "call_range_s"),
    ("bucket_count_effect.buckets empty", lambda: bucket_count_effect([], 1e-5), ValueError,
     "buckets must hold at least one"),
    ("bucket_count_effect.buckets item", lambda: bucket_count_effect([{"step_s": 1.0}], 1e-5),
     TypeError, r"buckets\[0\] must be a mapping with 'calls_per_step'"),
    ("bucket_count_effect.alpha_s", lambda: bucket_count_effect(
        [{"calls_per_step": 1, "step_s": 1.0}], -1.0), ValueError, "alpha_s must be a finite number >= 0"),
    ("bucket_count_effect.hidden_s", lambda: bucket_count_effect(
        [{"calls_per_step": 1, "step_s": 1.0}], 1e-5, hidden_s=math.nan), ValueError, "hidden_s must be"),
    # networks
    ("Interconnect.bandwidth zero", lambda: Interconnect("x", 0.0, "q", "s"), ValueError,
     "bandwidth must be a finite number > 0"),
    ("Interconnect.bandwidth str", lambda: Interconnect("x", "10 Gb/s", "q", "s"), TypeError,
     "bandwidth"),
    ("Interconnect.name", lambda: Interconnect(None, 1e9, "q", "s"), TypeError,
     "name must be a str"),
    ("encoding_pays.codec_s zero", lambda: encoding_pays(**PAYS | {"codec_s": 0.0}), ValueError,
     "codec_s must be a finite number > 0"),
    ("encoding_pays.nbytes float", lambda: encoding_pays(**PAYS | {"nbytes": 1e6}), ValueError,
     "nbytes must be an int >= 1"),
    ("encoding_pays.wire_ratio above 1", lambda: encoding_pays(**PAYS | {"wire_ratio": 2.0}),
     ValueError, r"wire_ratio must be a finite number in \(0, 1\]"),
    ("encoding_pays.loopback_busbw nan", lambda: encoding_pays(**PAYS | {"loopback_busbw": NAN}),
     ValueError, "loopback_busbw"),
    ("encoding_pays.gathered int", lambda: encoding_pays(**PAYS, gathered=1), TypeError,
     "gathered must be a bool"),
    ("encoding_pays.world_size one", lambda: encoding_pays(**PAYS, world_size=1), ValueError,
     "world_size must be an int >= 2"),
    ("encoding_pays.links int", lambda: encoding_pays(**PAYS, links=3), TypeError,
     "links must be a list or tuple"),
    ("encoding_pays.links item", lambda: encoding_pays(**PAYS, links=("10 GbE",)), TypeError,
     r"links\[0\] must be an Interconnect"),
    # collectives on tensors: the types are checked before the group is asked its size
    ("reduce_scatter_single.output", lambda: reduce_scatter_single([1.0], T), TypeError,
     "output must be a torch.Tensor"),
    ("reduce_scatter_single.input", lambda: reduce_scatter_single(T, "x"), TypeError,
     "input must be a torch.Tensor"),
    ("all_gather_single.output", lambda: all_gather_single(None, T), TypeError,
     "output must be a torch.Tensor"),
    ("ring_all_reduce.tensor", lambda: ring_all_reduce([1.0, 2.0]), TypeError,
     "tensor must be a torch.Tensor"),
]

CASES_IN_A_GROUP = [  # (id, call, exception, regex), run in a one-rank gloo group
    ("reduce_scatter_single.sizes", lambda: reduce_scatter_single(torch.ones(3), torch.ones(2)),
     ValueError, r"input must hold world_size \(1\) times as many elements"),
    ("reduce_scatter_single.dtype",
     lambda: reduce_scatter_single(torch.ones(2), torch.ones(2, dtype=torch.float64)),
     ValueError, "same dtype"),
    ("all_gather_single.sizes", lambda: all_gather_single(torch.ones(3), torch.ones(2)),
     ValueError, r"output must hold world_size \(1\) times as many elements"),
    ("ring_all_reduce.contiguous", lambda: ring_all_reduce(torch.ones(4, 4).t()), ValueError,
     "tensor must be contiguous"),
    ("benchmark_collective.op in a group", lambda: benchmark_collective("alltoall", 64),
     ValueError, "op must be one of"),
]

# Records perfkit returns; OPS and INTERCONNECTS are constants.
RECORDS = {"CollectivePoint", "BucketSaving", "FitQuality", "PaysOn", "RingCheck", "Traffic"}
NO_ARGUMENTS = set()


@pytest.fixture
def single_process_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.timeout(10)  # a collective that starts with a bad argument could hang
@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES_IN_A_GROUP],
                         ids=[c[0] for c in CASES_IN_A_GROUP])
def test_bad_argument_in_a_group_is_refused_naming_it(single_process_group, call, exc,
                                                       pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES + CASES_IN_A_GROUP]
    assert len(ids) == len(set(ids))


def test_every_public_callable_has_a_case():
    callables = {n for n in comm.__all__ if callable(getattr(comm, n))}
    covered = {c[0].split(".")[0].split(" ")[0] for c in CASES + CASES_IN_A_GROUP}
    missing = callables - covered - RECORDS - NO_ARGUMENTS
    assert not missing, f"no bad-input case for {sorted(missing)}"
