"""Clusters for the planner: GPUs from their datasheets, links as alpha-beta models, this machine.

A :class:`Cluster` is GPUs of one kind (:class:`GPU`: dense 16-bit matmul peak, memory, memory
bandwidth, each quoted with its datasheet), ``gpus_per_node`` of them joined by one link
(NVLink: :class:`perfkit.comm.alpha_beta.AlphaBeta`), the nodes by another (the network,
per GPU), and the share of the matmul peak that kernels achieve (``efficiency``: the one
figure the planner lets a user fit per GPU type). :func:`local_cluster` builds "this machine"
from the ceilings notebook 00 measures (:func:`perfkit.hw.cached_limits`) and an alpha-beta
fit of all-reduces issued as a step issues them (:func:`perfkit.plan.local_link`).

Usage::

    c = named_cluster("h100-sxm", inter_gbps=400)           # 8 GPUs per node, NDR per GPU
    print(c.gpu.peak_flops, c.intra.bandwidth, c.inter.bandwidth)
    here = local_cluster(hw.cached_limits(), comm.AlphaBeta(20e-6, 1e9), processes=2)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from perfkit._checks import check_choice, check_int, check_real, check_type
from perfkit.comm.alpha_beta import AlphaBeta
from perfkit.hw import MachineLimits
from perfkit.plan.overlap import OVERLAP_RULES, OverlapRule

__all__ = ["ASSUMED_LATENCY_S", "ATTENTION_EFFICIENCY", "GPU", "GPUS", "MEMORY_EFFICIENCY", "Cluster",
           "local_cluster", "named_cluster"]


_GIB = 2**30


@dataclass(frozen=True)
class GPU:
    """One accelerator as its datasheet sells it (dense 16-bit Tensor Core FLOP/s, no sparsity)."""

    name: str
    peak_flops: float  # FLOP/s, bf16/fp16 dense
    memory_bytes: float  # bytes
    hbm_bytes_per_s: float  # bytes/s
    nvlink_bytes_per_s: float  # bytes/s, one direction (half the datasheet's both-ways figure)
    source: str
    shown_bytes: float | None = None  # bytes nvidia-smi reports as the total, where below memory_bytes

    def __post_init__(self) -> None:
        check_type("name", self.name, str)
        check_type("source", self.source, str)
        for k in ("peak_flops", "memory_bytes", "hbm_bytes_per_s", "nvlink_bytes_per_s"):
            check_real(k, getattr(self, k), 0, lo_open=True)
        if self.shown_bytes is not None:
            check_real("shown_bytes", self.shown_bytes, 0, self.memory_bytes, lo_open=True)

    def memory_words(self) -> str:
        """``memory_bytes`` in GB and GiB, and where the driver shows less of it, how much:
        ``"85.9 GB, 80 GiB, of which nvidia-smi shows 79.65 GiB (81,559 MiB)"``."""
        out = f"{self.memory_bytes / 1e9:.1f} GB, {self.memory_bytes / _GIB:.4g} GiB"
        if self.shown_bytes is None:
            return out
        return (out + f", of which nvidia-smi shows {self.shown_bytes / _GIB:.4g} GiB "
                f"({self.shown_bytes / 2**20:,.0f} MiB)")


_A100 = ("NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): "
         "BF16 Tensor Core 312 TFLOPS (624 with sparsity), NVLink 600 GB/s")
_H100 = ("NVIDIA H100 Tensor Core GPU datasheet, SXM: BF16 Tensor Core 1,979 TFLOPS with "
         "sparsity (989 dense), 80 GB, 3.35 TB/s, NVLink 900 GB/s")
# The memory sizes in these names are binary: an A100 80GB holds 80 GiB (nvidia-smi reports
# 81,920 MiB), an A100 40GB 40 GiB, an H100 80GB 80 GiB (of which nvidia-smi shows 81,559 MiB,
# some kept by the driver: inside the 10 % that Cluster.memory_share leaves), an H200 about 141 GiB.
GPUS: dict[str, GPU] = {
    "a100-40gb": GPU("A100 SXM4 40GB", 312e12, 40 * _GIB, 1.555e12, 300e9, _A100 + ", 40GB HBM2 1,555 GB/s"),
    "a100-80gb": GPU("A100 SXM4 80GB", 312e12, 80 * _GIB, 2.039e12, 300e9, _A100 + ", 80GB HBM2e 2,039 GB/s"),
    "h100-sxm": GPU("H100 SXM5 80GB", 989e12, 80 * _GIB, 3.35e12, 450e9, _H100, 81559 * 2**20),
    "h200": GPU("H200 SXM 141GB", 989e12, 141 * _GIB, 4.8e12, 450e9,
                "NVIDIA H200 Tensor Core GPU datasheet: the H100's Tensor Cores (BF16 1,979 "
                "TFLOPS with sparsity), 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s"),
}

# Fused attention kernels' achieved share of the 16-bit peak, forward and backward, on the FLOPs
# each pass runs (causal: half the square; backward 2.5x the forward's). Dao 2023,
# FlashAttention-2 (arXiv 2307.08691), section 1: FlashAttention's "forward pass only reaches
# 30-50% of the theoretical maximum FLOPs/s" and "the backward pass ... only 25-35%" on A100;
# FlashAttention-2 "50-73%" (abstract), "up to 73% ... in the forward pass, and up to 63% ...
# in the backward pass" (section 1): the middle of its range forward, and backward that times
# the passes' ratio 63/73. Shah et al. 2024, FlashAttention-3, abstract: FlashAttention-2
# "achieves only 35% utilization on H100", backward in the same ratio. The middle of each
# stated range; which generation a run used is the run's own fact. An Ampere-era kernel of
# the first generation on H100 is measured in neither paper: FA2's H100 share over its A100
# share (0.35 / 0.615) times the first generation's A100 shares.
_FA2_BACK = 63 / 73
_FA2_H100 = 0.35 / 0.615
ATTENTION_EFFICIENCY: dict[str, tuple[float, float]] = {
    "flash1-a100": (0.40, 0.30),
    "flash2-a100": (0.615, round(0.615 * _FA2_BACK, 3)),
    "flash2-h100": (0.35, round(0.35 * _FA2_BACK, 3)),
    "flash1-h100": (round(0.40 * _FA2_H100, 3), round(0.30 * _FA2_H100, 3)),
}

# Memory-bound kernels do not reach the datasheet's HBM bandwidth. llm-analysis's FasterTransformer
# example (cli99/llm-analysis@b60b392f, examples/fastertransformer/README.md) takes
# hbm_memory_efficiency = 0.9 on A100 40GB, "the highest efficiency numbers observed in
# profiling" by kipply's "Transformer Inference Arithmetic" (2022): the best share streaming
# kernels reached, so an upper bound for a training step's norms and activations. The same share
# is assumed for the other GPUs (no source measures them).
MEMORY_EFFICIENCY = 0.9

# Start-up latencies are not on datasheets: NCCL's small-message times on NVLink and on
# InfiniBand are a few and about ten microseconds. Assumed, and named as such in reports.
ASSUMED_LATENCY_S = {"nvlink": 5e-6, "network": 10e-6}


@dataclass(frozen=True)
class Cluster:
    """GPUs, their two links and the share of the matmul peak kernels reach.

    Attributes:
        name: a label.
        gpu: the :class:`GPU`.
        gpus_per_node: GPUs joined by ``intra``.
        intra: the link inside a node, one direction, per GPU.
        inter: the network between nodes, one direction, per GPU (a node's NICs / its GPUs).
        efficiency: achieved over peak matmul FLOP/s, in (0, 1].
        attention_efficiency: the share of the peak a fused attention kernel's forward pass
            reaches, on the FLOPs it runs (:meth:`perfkit.plan.model.ModelSpec.attention_flops_split`);
            ``None``: ``efficiency``. Softmax, masking and rescaling run on the CUDA cores and
            special-function units beside the Tensor Cores, so these kernels stay below a
            GEMM: FlashAttention-2's paper puts FlashAttention (1) at 30-50 % of the A100's
            peak forward and 25-35 % backward (:data:`ATTENTION_EFFICIENCY`).
        attention_backward_efficiency: the same kernel's backward pass (it recomputes the
            scores and runs five matmuls to the forward's two); ``None``: ``attention_efficiency``.
            A recomputed forward (full recomputation) runs at the forward's share.
        memory_efficiency: the share of ``gpu.hbm_bytes_per_s`` memory-bound kernels (the
            norms, activations, residual adds, the loss, the optimizer) reach, in (0, 1]
            (:data:`MEMORY_EFFICIENCY` for datasheet GPUs; 1 for :func:`local_cluster`, whose
            bandwidth is measured by copying).
        memory_share: the share of ``gpu.memory_bytes`` a layout may plan to use (the rest:
            the CUDA context, the allocator's fragmentation).
        overlap: communication can run beside compute (GPUs: copy engines and NCCL's own
            SMs); on a CPU the collectives' threads take the cores the compute needs.
        dp_overlap: the framework whose overlap of the data-parallel and ZeRO collectives
            with compute the step follows (:data:`perfkit.plan.overlap.OVERLAP_RULES`:
            ``"pytorch"`` DDP and FSDP, ``"megatron"``, ``"deepspeed"``, or ``"none"``): chunk
            by chunk, one chunk exposed, no more hidden than the compute there is
            (:func:`perfkit.plan.overlap.exposed_time`). Only where ``overlap`` holds.
        sharded_hidden: ``None`` (default): ``dp_overlap`` decides. A share in [0, 1] instead
            states outright how much of the compute ZeRO-2's and ZeRO-3's collectives hide
            behind, as one block (0: none, what llm-foundry's micro-batch sweep suggests for
            its FSDP runs, :func:`perfkit.plan.overlap.micro_batch_overhead`; 1: all of it).
        zero2_per_block: ZeRO-2's reduce-scatter and all-gather go block by block (and one
            for the embedding or head), as FSDP's ``SHARD_GRAD_OP`` wraps them; ``False``: in
            DDP's 25 MiB buckets, as :mod:`perfkit.parallel.zero`'s flat buffer (one collective
            while it fits; :func:`local_cluster`, the course's own ZeRO).
        ddp_after_backward: data parallelism all-reduces the whole gradient buffer once,
            after the backward, with nothing hidden (Megatron-LM 2021's default
            ``--DDP-impl local``: ``train_step`` in megatron/training.py calls
            ``allreduce_gradients()`` once ``forward_backward_func`` returns); ``False``:
            PyTorch's DDP, 25 MiB buckets beside the backward.
        full_reduce_scatter: the backend reduce-scatters by all-reducing the whole buffer and
            keeping its chunk (gloo: ``ProcessGroupGloo::reduce_scatter_tensor_coalesced`` in
            pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupGloo.cpp), so a
            reduce-scatter costs a whole all-reduce instead of half one (NCCL's ring).
        note: where the link figures come from.
    """

    name: str
    gpu: GPU
    gpus_per_node: int
    intra: AlphaBeta
    inter: AlphaBeta
    efficiency: float = 0.5
    attention_efficiency: float | None = None
    attention_backward_efficiency: float | None = None
    memory_efficiency: float = 1.0
    memory_share: float = 0.9
    overlap: bool = True
    dp_overlap: str = "pytorch"
    sharded_hidden: float | None = None
    full_reduce_scatter: bool = False
    ddp_after_backward: bool = False
    zero2_per_block: bool = True
    note: str = ""

    def __post_init__(self) -> None:
        check_type("gpu", self.gpu, GPU)
        check_int("gpus_per_node", self.gpus_per_node, 1)
        check_type("intra", self.intra, AlphaBeta)
        check_type("inter", self.inter, AlphaBeta)
        check_real("efficiency", self.efficiency, 0, 1, lo_open=True)
        check_real("memory_share", self.memory_share, 0, 1, lo_open=True)
        check_real("memory_efficiency", self.memory_efficiency, 0, 1, lo_open=True)
        for k in ("attention_efficiency", "attention_backward_efficiency"):
            if getattr(self, k) is not None:
                check_real(k, getattr(self, k), 0, 1, lo_open=True)
        check_type("overlap", self.overlap, bool)
        check_choice("dp_overlap", self.dp_overlap, tuple(OVERLAP_RULES))
        if self.sharded_hidden is not None:
            check_real("sharded_hidden", self.sharded_hidden, 0, 1)
        check_type("full_reduce_scatter", self.full_reduce_scatter, bool)
        check_type("ddp_after_backward", self.ddp_after_backward, bool)
        check_type("zero2_per_block", self.zero2_per_block, bool)

    @property
    def overlap_rule(self) -> OverlapRule:
        """The :class:`perfkit.plan.overlap.OverlapRule` of ``dp_overlap`` (``"none"`` where
        ``overlap`` does not hold)."""
        return OVERLAP_RULES[self.dp_overlap if self.overlap else "none"]

    @property
    def usable_memory(self) -> float:
        """Bytes a layout may plan to use per GPU."""
        return self.gpu.memory_bytes * self.memory_share

    @property
    def achievable_flops(self) -> float:
        """FLOP/s per GPU at the cluster's efficiency."""
        return self.gpu.peak_flops * self.efficiency

    @property
    def achievable_bytes_per_s(self) -> float:
        """Bytes/s per GPU memory-bound kernels move: HBM at the cluster's memory efficiency."""
        return self.gpu.hbm_bytes_per_s * self.memory_efficiency

    @property
    def attention_flops(self) -> float:
        """FLOP/s per GPU of the fused attention kernel's forward pass."""
        share = self.efficiency if self.attention_efficiency is None else self.attention_efficiency
        return self.gpu.peak_flops * share

    @property
    def attention_backward_flops(self) -> float:
        """FLOP/s per GPU of the fused attention kernel's backward pass."""
        if self.attention_backward_efficiency is None:
            return self.attention_flops
        return self.gpu.peak_flops * self.attention_backward_efficiency

    def attention_words(self) -> str:
        """The attention kernel's share of the peak, forward and backward, and whose it is:
        its own where given, else the matmul efficiency's (a plan's header says which)."""
        fwd = self.attention_flops / self.gpu.peak_flops
        bwd = self.attention_backward_flops / self.gpu.peak_flops
        shares = f"{fwd:.2f} forward" + (f", {bwd:.2f} backward" if bwd != fwd else " and backward")
        if self.attention_efficiency is None:
            return (f"attention kernel at the matmul efficiency ({shares}: no kernel's own share given, "
                    "--attention-efficiency)")
        return f"attention kernel {shares} (given)"

    def with_efficiency(self, efficiency: float) -> Cluster:
        """The same cluster with another achievable share of the peak."""
        return replace(self, efficiency=check_real("efficiency", efficiency, 0, 1, lo_open=True))


def named_cluster(gpu: str, gpus_per_node: int = 8, inter_gbps: float | None = None,
                  efficiency: float = 0.5, attention_efficiency: float | None = None,
                  attention_backward_efficiency: float | None = None,
                  memory_efficiency: float = MEMORY_EFFICIENCY) -> Cluster:
    """A cluster of a datasheet GPU (:data:`GPUS`): NVLink inside each node, a network between.

    Args:
        gpu: a :data:`GPUS` key (``"a100-40gb"``, ``"a100-80gb"``, ``"h100-sxm"``, ``"h200"``).
        gpus_per_node: GPUs per NVLink domain (>= 1; 8 on HGX boards).
        inter_gbps: network Gb/s per GPU (one NIC per GPU); default 200 (HDR InfiniBand)
            for A100s and 400 (NDR) for H100/H200.
        efficiency: the achievable share of the matmul peak, in (0, 1].
        attention_efficiency: the fused attention kernel's share forward (``None``: ``efficiency``).
        attention_backward_efficiency: its share backward (``None``: ``attention_efficiency``).
        memory_efficiency: memory-bound kernels' share of the HBM bandwidth, in (0, 1].

    Returns:
        A :class:`Cluster`.

    Raises:
        ValueError: for an unknown ``gpu`` or a value out of range.
    """
    check_choice("gpu", gpu, tuple(GPUS))
    g = GPUS[gpu]
    gbps = (200.0 if gpu.startswith("a100") else 400.0) if inter_gbps is None else inter_gbps
    check_real("inter_gbps", gbps, 0, lo_open=True)
    return Cluster(
        name=f"{check_int('gpus_per_node', gpus_per_node, 1)}x {g.name} per node, {gbps:g} Gb/s per GPU",
        gpu=g, gpus_per_node=gpus_per_node,
        intra=AlphaBeta(ASSUMED_LATENCY_S["nvlink"], g.nvlink_bytes_per_s),
        inter=AlphaBeta(ASSUMED_LATENCY_S["network"], gbps * 1e9 / 8),
        efficiency=efficiency, attention_efficiency=attention_efficiency,
        attention_backward_efficiency=attention_backward_efficiency,
        memory_efficiency=memory_efficiency,
        note="bandwidths from the datasheets; latencies assumed (ASSUMED_LATENCY_S)")


def local_cluster(limits: MachineLimits, link: AlphaBeta, processes: int = 2,
                  memory_bytes: float | None = None, dtype: str = "float32",
                  efficiency: float = 1.0) -> Cluster:
    """"This machine": ``processes`` CPU processes, each with an equal share of the measured
    matmul ceiling and copy bandwidth, joined by the measured point-to-point ``link``.

    Args:
        limits: the measured ceilings (:func:`perfkit.hw.cached_limits`).
        link: one point-to-point step's alpha-beta fit (gloo over loopback:
            :func:`perfkit.plan.local_link`).
        processes: processes sharing the machine (>= 1); each gets ``1/processes`` of it.
        memory_bytes: memory per process (default: the host's RAM / processes).
        dtype: the matmul dtype whose ceiling is the peak.
        efficiency: share of that peak a training step's matmuls reach, in (0, 1].

    Returns:
        A one-node :class:`Cluster` with ``intra == inter == link``, no overlap of
        communication with compute (gloo's threads run on the same cores), and gloo's
        reduce-scatter, a whole all-reduce (``full_reduce_scatter``); ZeRO-2 in one flat
        buffer, as the course's ZeRO runs it (``zero2_per_block=False``).

    Raises:
        TypeError, ValueError: for arguments of the wrong kind or out of range.
    """
    check_type("limits", limits, MachineLimits)
    check_type("link", link, AlphaBeta)
    check_int("processes", processes, 1)
    if memory_bytes is None:
        import psutil

        memory_bytes = psutil.virtual_memory().total / processes
    check_real("memory_bytes", memory_bytes, 0, lo_open=True)
    gpu = GPU(f"{limits.name} / {processes}", limits.peak_flops(dtype) / processes,
              float(memory_bytes), limits.copy_bytes_per_s / processes, link.bandwidth,
              f"measured by perfkit.hw ({limits.measured_at or 'cached'}), {dtype} matmul")
    return Cluster(name=f"this machine ({processes} processes)", gpu=gpu, gpus_per_node=processes,
                   intra=link, inter=link, efficiency=efficiency, memory_share=1.0,
                   overlap=False, full_reduce_scatter=True, zero2_per_block=False,
                   note="ceilings from perfkit.hw, link from the alpha-beta fit")
