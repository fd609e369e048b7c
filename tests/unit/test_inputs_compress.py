"""perfkit.compress refuses bad arguments: each public function and class raises
``TypeError`` (wrong type) or ``ValueError`` (wrong value) with a message naming the
argument and what is allowed, at the call, not later inside DDP's backward."""

import math

import pytest
import torch

from perfkit import compress
from perfkit.compress import (
    QSGD,
    Compressed,
    Compressor,
    ErrorFeedback,
    HookState,
    RandomK,
    Sign,
    TopK,
    check_fused,
    compression_hook,
    conservation_error,
    error_rows,
    gaussian_error,
    pack_bits,
    qsgd_decode,
    qsgd_encode,
    residual_norms,
    sign_decode,
    sign_encode,
    simulate_dp_training,
    time_codecs,
    unpack_bits,
    use_fused,
)

NAN, INF = math.nan, math.inf
_EST = type("E", (), {"value": 1.0, "low": 0.9, "high": 1.1})()  # a ratio estimate
X = torch.randn(16)
CODES = torch.full((16,), 128, dtype=torch.uint8)
POOL = torch.rand(16) + 128
ONE = torch.ones(1)
PACKED = torch.zeros(2, dtype=torch.uint8)
OK = Compressed((X,), torch.Size([16]), torch.float32)

CASES = [  # (name, call, exception, regex on the message)
    # Compressed
    ("Compressed.tensors", lambda: Compressed([X], (16,), torch.float32), TypeError, "tensors"),
    ("Compressed.tensors item", lambda: Compressed((X, 3), (16,), torch.float32), TypeError,
     "tensors"),
    ("Compressed.shape neg", lambda: Compressed((X,), (-1,), torch.float32), TypeError, "shape"),
    ("Compressed.shape type", lambda: Compressed((X,), "16", torch.float32), TypeError, "shape"),
    ("Compressed.dtype", lambda: Compressed((X,), (16,), "float32"), TypeError, "dtype"),
    ("Compressed.meta", lambda: Compressed((X,), (16,), torch.float32, [1]), TypeError, "meta"),
    # Compressor
    ("Compressor.compress type", lambda: Compressor().compress([1.0]), TypeError, "tensor"),
    ("Compressor.compress int", lambda: Compressor().compress(torch.arange(3)), TypeError,
     "floating"),
    ("Compressor.compress nan", lambda: Compressor().compress(torch.tensor([1.0, NAN])),
     ValueError, "NaN or inf"),
    ("Compressor.compress inf", lambda: Compressor().compress(torch.tensor([INF])), ValueError,
     "NaN or inf"),
    ("Compressor.decompress c", lambda: Compressor().decompress(X), TypeError, "c must be"),
    ("Compressor.decompress out size", lambda: Compressor().decompress(OK, out=torch.empty(3)),
     ValueError, "out must have 16"),
    ("Compressor.decompress out type", lambda: Compressor().decompress(OK, out=[0.0] * 16),
     TypeError, "out"),
    # TopK
    ("TopK.ratio zero", lambda: TopK(0), ValueError, r"ratio.*\(0, 1\]"),
    ("TopK.ratio negative", lambda: TopK(-0.5), ValueError, r"ratio.*\(0, 1\]"),
    ("TopK.ratio above 1", lambda: TopK(1.01), ValueError, r"ratio.*\(0, 1\]"),
    ("TopK.ratio nan", lambda: TopK(NAN), ValueError, "ratio"),
    ("TopK.ratio inf", lambda: TopK(INF), ValueError, "ratio"),
    ("TopK.ratio str", lambda: TopK("0.1"), TypeError, "ratio"),
    ("TopK.ratio bool", lambda: TopK(True), ValueError, "ratio"),
    ("TopK.method", lambda: TopK(0.1, "approx"), ValueError, "method.*'exact' or 'sampled'"),
    ("TopK.sample_ratio", lambda: TopK(0.1, "sampled", 0), ValueError, "sample_ratio"),
    ("TopK.seed negative", lambda: TopK(0.1, seed=-1), ValueError, r"seed.*\[0, 2\*\*63"),
    ("TopK.seed float", lambda: TopK(0.1, seed=1.5), TypeError, "seed"),
    ("TopK.k negative", lambda: TopK(0.1).k(-1), ValueError, "numel.*>= 0"),
    ("TopK.k float", lambda: TopK(0.1).k(10.0), ValueError, "numel"),
    ("TopK.decompress c", lambda: TopK(0.1).decompress((X, X)), TypeError, "c must be"),
    # RandomK
    ("RandomK.ratio", lambda: RandomK(0), ValueError, "ratio"),
    ("RandomK.ratio nan", lambda: RandomK(NAN), ValueError, "ratio"),
    ("RandomK.seed", lambda: RandomK(0.1, seed="0"), TypeError, "seed"),
    ("RandomK.seed too big", lambda: RandomK(0.1, seed=2**64), ValueError, "seed"),
    ("RandomK.k", lambda: RandomK(0.1).k(None), TypeError, "numel"),
    ("RandomK.decompress out", lambda: RandomK(0.5).decompress(
        RandomK(0.5).compress(X), out=torch.empty(4)), ValueError, "out must have 16"),
    # QSGD, Sign
    ("QSGD.seed", lambda: QSGD(seed=-3), ValueError, "seed"),
    ("QSGD.seed bool", lambda: QSGD(seed=True), TypeError, "seed"),
    ("QSGD.fused", lambda: QSGD(fused="yes"), TypeError, "fused.*None.*True.*False"),
    ("QSGD.compress nan", lambda: QSGD().compress(torch.tensor([NAN, 1.0])), ValueError,
     "NaN or inf"),
    ("QSGD.decompress c", lambda: QSGD().decompress(None), TypeError, "c must be"),
    ("Sign.fused", lambda: Sign(fused=1), TypeError, "fused"),
    ("Sign.compress type", lambda: Sign().compress(X.numpy()), TypeError, "tensor"),
    ("Sign.compress inf", lambda: Sign().compress(torch.tensor([-INF, 1.0])), ValueError,
     "NaN or inf"),
    ("Sign.decompress c", lambda: Sign().decompress("payload"), TypeError, "c must be"),
    # ErrorFeedback
    ("ErrorFeedback.inner", lambda: ErrorFeedback(TopK), TypeError, "inner"),
    ("ErrorFeedback.inner nested", lambda: ErrorFeedback(ErrorFeedback(Sign())), TypeError,
     "inner"),
    ("ErrorFeedback.compress key", lambda: ErrorFeedback(Sign()).compress(X, key=[1]),
     TypeError, "key must be hashable"),
    ("ErrorFeedback.compress nan", lambda: ErrorFeedback(Sign()).compress(
        torch.tensor([NAN])), ValueError, "NaN or inf"),
    ("ErrorFeedback.compress_parts sum", lambda: ErrorFeedback(Sign()).compress_parts(
        X, ["a", "b"], [8, 9]), ValueError, "numels must sum to"),
    ("ErrorFeedback.compress_parts len", lambda: ErrorFeedback(Sign()).compress_parts(
        X, ["a"], [8, 8]), ValueError, "keys must be distinct, one per entry of numels"),
    ("ErrorFeedback.compress_parts repeated", lambda: ErrorFeedback(Sign()).compress_parts(
        X, ["a", "a"], [8, 8]), ValueError, "keys must be distinct"),
    ("ErrorFeedback.compress_parts keys", lambda: ErrorFeedback(Sign()).compress_parts(
        X, "ab", [8, 8]), TypeError, "keys must be a sequence"),
    ("ErrorFeedback.compress_parts numels", lambda: ErrorFeedback(Sign()).compress_parts(
        X, ["a", "b"], [8, -8]), ValueError, "numels"),
    ("ErrorFeedback.compress_parts numels type", lambda: ErrorFeedback(Sign()).compress_parts(
        X, ["a", "b"], 16), TypeError, "numels must be a sequence"),
    # HookState, compression_hook
    ("HookState.compressor", lambda: HookState("topk"), TypeError,
     "compressor must be a perfkit.compress.Compressor"),
    ("HookState.compressor class", lambda: HookState(TopK), TypeError, "compressor"),
    ("HookState.process_group", lambda: HookState(Sign(), process_group="world"), TypeError,
     "process_group must be None"),
    ("HookState.wire_bytes", lambda: HookState(Sign(), wire_bytes=-1), ValueError,
     "wire_bytes.*>= 0"),
    ("HookState.calls", lambda: HookState(Sign(), calls=1.5), ValueError, "calls"),
    ("compression_hook.state", lambda: compression_hook(Sign(), None), TypeError,
     "state must be a HookState"),
    # simulate_dp_training, gaussian_error
    ("copy_share_range.method", lambda: compress.copy_share_range("topk"), ValueError, "method"),
    ("fused_default_note.fusion", lambda: compress.fused_default_note([1.0]), TypeError, "fusion"),
    ("fused_default_note.low", lambda: compress.fused_default_note({"qsgd": 1.0}), (TypeError, ValueError),
     "low"),
    ("resolution_note.ratio", lambda: compress.resolution_note(1.0, 0.99), (TypeError, ValueError),
     "ratio.low"),
    ("resolution_note.edge", lambda: compress.resolution_note(type("R", (), {"low": 0.9, "high": 1.1})(),
                                                              "0.99"), (TypeError, ValueError), "edge"),
    ("ef_gap_text.g0", lambda: compress.ef_gap_text(float("nan"), 0.0), ValueError, "g0"),
    ("slowdown_text.ratios", lambda: compress.slowdown_text([1.2], 1e-3, [1e-3]), TypeError, "ratios"),
    ("slowdown_text.call_s", lambda: compress.slowdown_text({}, 1e-3, []), ValueError, "call_s"),
    ("medians_outside.ratios", lambda: compress.medians_outside([1.2], {}), TypeError, "ratios"),
    ("medians_outside.medians", lambda: compress.medians_outside({"a": _EST}, {}), ValueError, "medians"),
    ("medians_outside_text.medians", lambda: compress.medians_outside_text({}, [1.0]), TypeError, "medians"),
    ("cast_floor_text.ratio", lambda: compress.cast_floor_text("h", 1.0, 0.99, 1.0), (TypeError, ValueError),
     "ratio"),
    ("cast_floor_text.floor", lambda: compress.cast_floor_text("h", _EST, 0.0, 1.0), ValueError, "floor"),
    ("cast_floor_text.name", lambda: compress.cast_floor_text(1, _EST, 0.99, 1.0), TypeError, "name"),
    ("narrow_miss_note.ratio", lambda: compress.narrow_miss_note(1.0, 1.0, 1.0), (TypeError, ValueError),
     "ratio"),
    ("narrow_miss_note.median_ratio", lambda: compress.narrow_miss_note(_EST, 0.0, 1.0), ValueError,
     "median_ratio"),
    ("narrow_miss_note.floor", lambda: compress.narrow_miss_note(_EST, 1.0, 0.0), ValueError, "floor"),
    ("fusion_text.ratio", lambda: compress.fusion_text(1.0, 2.0), (TypeError, ValueError), "ratio"),
    ("fusion_text.model_x", lambda: compress.fusion_text(_EST, 0.0), ValueError, "model_x"),
    ("medians_paid_text.margins", lambda: compress.medians_paid_text([1.0], 0.0), TypeError, "margins"),
    ("medians_paid_text.empty", lambda: compress.medians_paid_text({}, 0.0), TypeError, "margins"),
    ("medians_paid_text.noise_s", lambda: compress.medians_paid_text({"qsgd": 1e-3}, -1e-3), ValueError,
     "noise_s"),
    ("timing_noise_note.noise_s", lambda: compress.timing_noise_note(-1e-3, 1e-3, -1e-3), ValueError,
     "noise_s"),
    ("timing_noise_note.margin_s", lambda: compress.timing_noise_note("x", 1e-3, 1e-3),
     (TypeError, ValueError), "margin_s"),
    ("timing_noise_note.other", lambda: compress.timing_noise_note(-1e-3, 1e-3, 2e-3, other=""), ValueError,
     "other"),
    ("codec_split.times", lambda: compress.codec_split({"memcpy": 1.0}, "qsgd"), TypeError,
     "times must be a CodecTimes"),
    ("simulate_dp_training.make", lambda: simulate_dp_training("topk"), TypeError, "make"),
    ("simulate_dp_training.make result", lambda: simulate_dp_training(lambda: "topk"),
     TypeError, "make must return"),
    ("simulate_dp_training.steps", lambda: simulate_dp_training(None, steps=0), ValueError,
     "steps.*>= 1"),
    ("simulate_dp_training.workers", lambda: simulate_dp_training(None, workers=2.0),
     ValueError, "workers"),
    ("simulate_dp_training.batch", lambda: simulate_dp_training(None, batch=-4), ValueError,
     "batch"),
    ("simulate_dp_training.lr zero", lambda: simulate_dp_training(None, lr=0), ValueError,
     "lr.*finite number > 0"),
    ("simulate_dp_training.lr nan", lambda: simulate_dp_training(None, lr=NAN), ValueError,
     "lr"),
    ("simulate_dp_training.lr inf", lambda: simulate_dp_training(None, lr=INF), ValueError,
     "lr"),
    ("simulate_dp_training.lr str", lambda: simulate_dp_training(None, lr="0.5"), TypeError,
     "lr"),
    ("simulate_dp_training.seed", lambda: simulate_dp_training(None, seed=-1), ValueError,
     "seed"),
    ("gaussian_error.method", lambda: gaussian_error("powersgd"), ValueError,
     "method must be 'topk', 'randomk', 'sign' or 'qsgd'"),
    ("gaussian_error.method type", lambda: gaussian_error(None), TypeError, "method"),
    ("gaussian_error.ratio", lambda: gaussian_error("topk", NAN), ValueError, "ratio"),
    ("gaussian_error.numel", lambda: gaussian_error("topk", 0.1, 1), ValueError,
     "numel.*>= 2"),
    ("gaussian_error.numel type", lambda: gaussian_error("topk", 0.1, 1e6), ValueError, "numel"),
    # fused kernels
    ("check_fused", lambda: check_fused("auto"), TypeError, "fused must be None"),
    ("compile_for_isa", lambda: compress.compile_for_isa("x * 2"), TypeError,
     "fn must be a callable"),
    ("use_fused.fused", lambda: use_fused(0, X), TypeError, "fused"),
    ("use_fused.t", lambda: use_fused(None, [1.0]), TypeError, "t must be a torch.Tensor"),
    ("qsgd_encode.flat", lambda: qsgd_encode(X.view(4, 4), POOL, 1.0), ValueError,
     "flat must be 1-D"),
    ("qsgd_encode.flat dtype", lambda: qsgd_encode(CODES, POOL, 1.0), TypeError,
     "flat must be floating"),
    ("qsgd_encode.pool dtype", lambda: qsgd_encode(X, POOL.double(), 1.0), TypeError,
     "pool must have dtype torch.float32"),
    ("qsgd_encode.pool size", lambda: qsgd_encode(X, POOL[:3], 1.0), ValueError,
     "pool must hold"),
    ("qsgd_encode.s nan", lambda: qsgd_encode(X, POOL, NAN), ValueError, "s must be a finite"),
    ("qsgd_encode.s negative", lambda: qsgd_encode(X, POOL, -2.0), ValueError, "s must be"),
    ("qsgd_encode.s type", lambda: qsgd_encode(X, POOL, ONE), TypeError, "s must be"),
    ("qsgd_encode.scratch", lambda: qsgd_encode(X, POOL, 1.0, scratch={}), TypeError,
     "scratch must be None or a callable"),
    ("qsgd_decode.codes", lambda: qsgd_decode(X, ONE, torch.empty(16)), TypeError,
     "codes must have dtype torch.uint8"),
    ("qsgd_decode.inv_s", lambda: qsgd_decode(CODES, torch.ones(2), torch.empty(16)),
     ValueError, "inv_s must hold 1 value"),
    ("qsgd_decode.inv_s type", lambda: qsgd_decode(CODES, 0.5, torch.empty(16)), TypeError,
     "inv_s"),
    ("qsgd_decode.out", lambda: qsgd_decode(CODES, ONE, torch.empty(15)), ValueError,
     "out must hold 16 value"),
    ("qsgd_decode.fused", lambda: qsgd_decode(CODES, ONE, torch.empty(16), "on"), TypeError,
     "fused"),
    ("sign_encode.flat", lambda: sign_encode(X.view(2, 8)), ValueError, "flat must be 1-D"),
    ("sign_encode.fused", lambda: sign_encode(X, fused=2), TypeError, "fused"),
    ("sign_encode.scratch", lambda: sign_encode(X, scratch=1), TypeError, "scratch"),
    ("sign_decode.packed", lambda: sign_decode(torch.zeros(3, dtype=torch.uint8), ONE,
                                               torch.empty(16)), ValueError,
     r"packed must hold 2 value"),
    ("sign_decode.scale", lambda: sign_decode(PACKED, torch.ones(()).long(), torch.empty(16)),
     TypeError, "scale must be floating"),
    ("sign_decode.out", lambda: sign_decode(PACKED, ONE, torch.empty(16).long()), TypeError,
     "out must be floating"),
    ("pack_bits.bits", lambda: pack_bits(X), TypeError,
     "bits must have dtype torch.bool"),
    ("pack_bits.bits 2-D", lambda: pack_bits(torch.ones(2, 8, dtype=torch.bool)), ValueError,
     "bits must be 1-D"),
    ("unpack_bits.n", lambda: unpack_bits(PACKED, -1), ValueError, "n must be an int >= 0"),
    ("unpack_bits.n type", lambda: unpack_bits(PACKED, 16.0), ValueError, "n must be an int"),
    ("unpack_bits.packed", lambda: unpack_bits(PACKED, 40), ValueError,
     r"packed must hold 5 value"),
    # experiments: notebook 03's measurements on one gradient
    ("error_rows.grad list", lambda: error_rows([1.0, 2.0], [0.1]), TypeError,
     "grad must be a torch.Tensor"),
    ("error_rows.grad zero", lambda: error_rows(torch.zeros(16), [0.1]), ValueError,
     "grad must be a non-empty, finite, non-zero"),
    ("error_rows.grad 2-D", lambda: error_rows(torch.ones(4, 4), [0.1]), ValueError,
     "grad must be 1-D"),
    ("error_rows.grad int", lambda: error_rows(torch.ones(16, dtype=torch.int64), [0.1]),
     TypeError, "grad must be floating point"),
    ("error_rows.ratios float", lambda: error_rows(X, 0.1), TypeError, "ratios must be a list"),
    ("error_rows.ratios zero", lambda: error_rows(X, [0.1, 0.0]), ValueError,
     r"ratios must be a finite number in \(0, 1\]"),
    ("conservation_error.grad nan", lambda: conservation_error(torch.full((16,), NAN)),
     ValueError, "grad must be a non-empty, finite"),
    ("conservation_error.steps", lambda: conservation_error(X, steps=0), ValueError,
     "steps must be an int >= 1"),
    ("conservation_error.ratio", lambda: conservation_error(X, ratio=1.5), ValueError, "ratio"),
    ("residual_norms.grad", lambda: residual_norms(None), TypeError, "grad must be a torch.Tensor"),
    ("residual_norms.steps bool", lambda: residual_norms(X, steps=True), ValueError, "steps"),
    ("residual_norms.ratio nan", lambda: residual_norms(X, ratio=NAN), ValueError, "ratio"),
    ("time_codecs.numel small", lambda: time_codecs(16), ValueError,
     "numel must be an int >= 1024"),
    ("time_codecs.numel float", lambda: time_codecs(4096.0), ValueError, "numel"),
    ("time_codecs.repeat", lambda: time_codecs(4096, repeat=0), ValueError,
     "repeat must be an int >= 1"),
    ("time_codecs.ratio", lambda: time_codecs(4096, ratio=0), ValueError, "ratio"),
    ("time_codecs.seed", lambda: time_codecs(4096, seed="0"), TypeError, "seed must be an int"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_every_public_callable_has_a_case():
    # the constants (BYTES_PER_VALUE, DITHER_POOL, FUSED_MIN_NUMEL, WRITTEN_PER_VALUE) take no
    # arguments; CodecTimes and CodecSplit are records time_codecs and codec_split return;
    # isa_options takes no arguments
    callables = {n for n in compress.__all__ if callable(getattr(compress, n))} - {
        "CodecTimes", "CodecSplit", "isa_options"}
    covered = {c[0].split(".")[0].split(" ")[0] for c in CASES}
    assert callables <= covered, f"no bad-input case for {sorted(callables - covered)}"
