"""Published interconnect bandwidths, each with its source, and what fewer bytes are worth on each.

Notebook 03 asks whether encoding a gradient pays: whether encode + decode take less time
than the all-reduce time the smaller payload saves. That depends on the network. This
module holds the figures a cluster's links are sold at (one direction of one link, the unit
nccl-tests' busbw is comparable with), each quoted with the document it comes from, and
compares them with a bandwidth measured here (gloo over loopback TCP).

How the payload travels decides what it saves. A payload every rank can sum (fp16, random-k
with a shared seed, PowerSGD's low-rank factors, Vogels et al. 2019) is all-reduced: each rank
sends ``2 (n-1)/n * p`` bytes, a constant share of the dense ``2 (n-1)/n * S``. A payload
that differs between ranks and cannot be summed as it is (top-k's indices, QSGD's and sign's
per-rank scales) is all-gathered: each rank sends ``(n-1) * p``, which grows with ``n``, and
passes the dense all-reduce's bytes at ``n = 2 S / p`` (8 processes for a quarter-size
payload). Agarwal et al., "On the Utility of Gradient Compression in Distributed Training
Systems" (MLSys 2022), measure this limit; it is why PowerSGD was designed all-reduce
compatible.

Usage::

    for row in encoding_pays(codec_s=0.02, nbytes=64 << 20, wire_ratio=0.25, loopback_busbw=0.7e9):
        print(row.name, row.bandwidth / 0.7e9, row.pays)
"""

from __future__ import annotations

from dataclasses import dataclass

from perfkit._checks import check_int, check_items, check_real, check_type

__all__ = ["INTERCONNECTS", "Interconnect", "PaysOn", "encoding_pays"]


@dataclass(frozen=True)
class Interconnect:
    """One link as published: ``bandwidth`` is bytes/s in one direction (what busbw measures);
    ``quoted`` the figure as the source states it; ``source`` the document."""

    name: str
    bandwidth: float  # bytes/s, one direction
    quoted: str
    source: str

    def __post_init__(self) -> None:
        for name in ("name", "quoted", "source"):
            check_type(name, getattr(self, name), str)
        check_real("bandwidth", self.bandwidth, 0, lo_open=True)


# One direction each: a full-duplex link carries this each way at once.
INTERCONNECTS: tuple[Interconnect, ...] = (
    Interconnect("10 GbE", 10e9 / 8, "10 Gb/s per port", "IEEE Std 802.3ae-2002 (10 Gb/s Ethernet)"),
    Interconnect("InfiniBand NDR", 400e9 / 8, "400 Gb/s per port",
                 "NVIDIA ConnectX-7 adapter datasheet (InfiniBand NDR 400Gb/s)"),
    Interconnect("NVLink 4 (H100 SXM)", 900e9 / 2, "900 GB/s per GPU, both directions together",
                 "NVIDIA H100 Tensor Core GPU datasheet (NVLink 900GB/s)"),
)


@dataclass(frozen=True)
class PaysOn:
    """Encoding on one network: the dense all-reduce's byte time there, what the payload
    saves of it, the measured codec time, and whether the codec is the cheaper of the two."""

    name: str
    bandwidth: float  # bytes/s, one direction
    dense_s: float    # s: the dense buffer's all-reduce bytes over the bandwidth
    saved_s: float    # s: the part of it the smaller payload removes (< 0: it sends more)
    codec_s: float    # s: measured encode + decode
    pays: bool


def encoding_pays(codec_s: float, nbytes: int, wire_ratio: float, loopback_busbw: float,
                  world_size: int = 2, links: tuple[Interconnect, ...] = INTERCONNECTS,
                  gathered: bool = False) -> list[PaysOn]:
    """Whether a codec's measured time beats the bytes it removes, here and on each link.

    The bandwidth term of a ring all-reduce, ``2 (n-1)/n * nbytes / bandwidth``
    (nccl-tests' busbw definition), against the payload's: all-reduced, the same term
    shrinks by ``1 - wire_ratio``; all-gathered (``gathered``), each rank sends
    ``(n-1) * wire_ratio * nbytes``, so the saving shrinks as ``n`` grows and turns negative
    past ``n = 2 / wire_ratio``. The latency term is not removed, so this is what fewer bytes
    can save at most.

    Args:
        codec_s: measured encode + decode time of the buffer, s (> 0).
        nbytes: the dense buffer, bytes (>= 1).
        wire_ratio: payload bytes over dense bytes, in (0, 1].
        loopback_busbw: this machine's measured all-reduce busbw, bytes/s (> 0); the first row.
        world_size: processes in the all-reduce (>= 2).
        links: the networks to compare with (:class:`Interconnect` records).
        gathered: the payload is all-gathered (it differs between ranks), not all-reduced.

    Returns:
        One :class:`PaysOn` for ``"loopback (measured)"`` and one per link, in that order.

    Raises:
        ValueError, TypeError: for an argument outside the ranges above.
    """
    check_real("codec_s", codec_s, 0, lo_open=True)
    check_int("nbytes", nbytes, 1)
    check_real("wire_ratio", wire_ratio, 0, 1, lo_open=True)
    check_real("loopback_busbw", loopback_busbw, 0, lo_open=True)
    check_int("world_size", world_size, 2)
    check_type("gathered", gathered, bool)
    links = [check_type(f"links[{i}]", x, Interconnect)
             for i, x in enumerate(check_items("links", links, nonempty=False))]
    here = Interconnect("loopback (measured)", float(loopback_busbw), "measured", "this machine")
    rows = []
    for link in (here, *links):
        dense = 2 * (world_size - 1) / world_size * nbytes / link.bandwidth  # s
        sent = ((world_size - 1) * wire_ratio * nbytes / link.bandwidth if gathered
                else dense * wire_ratio)  # s: the payload's bytes per rank over the bandwidth
        saved = dense - sent
        rows.append(PaysOn(link.name, link.bandwidth, dense, saved, float(codec_s), codec_s < saved))
    return rows
