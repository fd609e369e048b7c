"""Gradient compression (module 03): codecs, fused kernels, the DDP hook, a simulation.

Compressors (TopK, RandomK, QSGD, Sign) with ErrorFeedback, their one-pass kernels, the DDP
communication hook that sends their payloads, and a one-process model of compressed training.

Usage::

    ddp.register_comm_hook(HookState(ErrorFeedback(TopK(0.01))), compression_hook)
    c = QSGD(levels=256).compress(grad)
    print(c.wire_bytes, grad.numel() * 4)
"""

from perfkit.compress.codecs import (
    QSGD,
    Compressed,
    Compressor,
    RandomK,
    Sign,
    TopK,
)
from perfkit.compress.experiments import (
    CodecSplit,
    CodecTimes,
    codec_split,
    conservation_error,
    copy_share_range,
    error_rows,
    fused_default_note,
    medians_paid_text,
    residual_norms,
    time_codecs,
)
from perfkit.compress.feedback import (
    ErrorFeedback,
)
from perfkit.compress.fused import (
    BYTES_PER_VALUE,
    DITHER_POOL,
    FUSED_MIN_NUMEL,
    WRITTEN_PER_VALUE,
    check_fused,
    pack_bits,
    qsgd_decode,
    qsgd_encode,
    sign_decode,
    sign_encode,
    unpack_bits,
    use_fused,
)
from perfkit.compress.hook import (
    HookState,
    compression_hook,
)
from perfkit.compress.isa_compile import (
    compile_for_isa,
    isa_options,
)
from perfkit.compress.narrate import (
    cast_floor_text,
    ef_gap_text,
    fusion_text,
    medians_outside,
    medians_outside_text,
    narrow_miss_note,
    resolution_note,
    slowdown_text,
    timing_noise_note,
)
from perfkit.compress.simulate import (
    gaussian_error,
    simulate_dp_training,
)

__all__ = [
    "BYTES_PER_VALUE",
    "check_fused",
    "codec_split",
    "CodecSplit",
    "CodecTimes",
    "compile_for_isa",
    "conservation_error",
    "copy_share_range",
    "Compressed",
    "compression_hook",
    "Compressor",
    "DITHER_POOL",
    "ef_gap_text",
    "error_rows",
    "fused_default_note",
    "fusion_text",
    "ErrorFeedback",
    "FUSED_MIN_NUMEL",
    "gaussian_error",
    "HookState",
    "medians_outside",
    "medians_outside_text",
    "cast_floor_text",
    "narrow_miss_note",
    "medians_paid_text",
    "timing_noise_note",
    "isa_options",
    "pack_bits",
    "QSGD",
    "qsgd_decode",
    "qsgd_encode",
    "RandomK",
    "residual_norms",
    "resolution_note",
    "Sign",
    "sign_decode",
    "sign_encode",
    "simulate_dp_training",
    "slowdown_text",
    "time_codecs",
    "TopK",
    "unpack_bits",
    "use_fused",
    "WRITTEN_PER_VALUE",
]
