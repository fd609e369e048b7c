"""What the "fast storage: /dev/shm" claim's measurements say, in sentences computed from
:class:`perfkit.saving.StorageRates`: the plain writes' ratio between the claim's fast storage
and a disk (:func:`plain_write_note`), and what the fsync verdicts test of the claim
(:func:`fsync_scope_note`): what fsync costs on each filesystem, not which writes faster.
"""

from __future__ import annotations

from perfkit._checks import check_type
from perfkit.saving.claims import StorageRates

__all__ = ["fsync_scope_note", "plain_apart", "plain_write_note"]


def plain_apart(rates: StorageRates, fast: str, disk: str) -> bool:
    """Whether the two directories' plain-write rates have intervals apart."""
    check_type("rates", rates, StorageRates)
    a, b = rates.rate(fast, False), rates.rate(disk, False)
    return a.has_interval and b.has_interval and (a.high < b.low or b.high < a.low)


def plain_write_note(rates: StorageRates, fast: str, disk: str) -> str:
    """The plain write into ``fast`` (the claim's fast storage, tmpfs) against ``disk``: their
    rates' ratio, and whether their intervals lie apart."""
    a, b = rates.rate(fast, False), rates.rate(disk, False)
    apart = ("with intervals apart. Every write went to a fresh file, so what differs is how each "
             "allocates a fresh page (tmpfs's shared memory, the page cache), which this run does not time")
    return (f"Without fsync tmpfs wrote {a.value / b.value:.2g}x the disk's rate: both end in memory, "
            + (f"yet the {'disk' if a.value < b.value else 'tmpfs'} took the plain write faster, " + apart
               if plain_apart(rates, fast, disk) else
               "and their intervals overlap: the directory's name made no clear difference to a plain "
               "write"))


def fsync_scope_note(rates: StorageRates, fast: str, disk: str) -> str:
    """A sentence, starting with a space, on what the fsync verdicts test of the claim that
    ``fast`` is fast storage: what fsync costs on each, not which directory writes faster,
    with the plain writes' ratio and whether it tells them apart."""
    r = rates.rate(fast, False).value / rates.rate(disk, False).value
    said = (" This verdict and the next test what fsync costs on each filesystem, not the claim's "
            f"speed: without fsync tmpfs wrote {r:.2g}x the disk's rate, ")
    if not plain_apart(rates, fast, disk):
        return said + "their intervals overlapping, so this run does not tell their speed apart."
    return said + ("with intervals apart: on the plain write the claim's fast storage was the slower."
                   if r < 1 else "with intervals apart: on the plain write it was the faster.")
