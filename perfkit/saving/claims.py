"""Claims about checkpoints, measured: where to write ("fast storage: /dev/shm, /tmp, NVMe")
and compression by a ``.gz`` name.

* :func:`storage_rates` writes one file into each directory with and without ``fsync``, in
  interleaved rounds (every configuration once per round, so a load drift hits all alike;
  which of the two writes goes first alternates, so an order effect cancels),
  and records each directory's filesystem. A write that ends in the page cache runs at
  memory speed on any filesystem; ``fsync`` waits for the device, and on tmpfs it has no
  device to wait for. What each filesystem keeps after a killed process, a killed container
  and a reboot is :func:`perfkit.saving.survives` (stated from the kernel's documentation,
  not measured: a reboot cannot be).
* :func:`same_disk_rates` sets one disk's write rate with fsync, measured twice at two sizes,
  side by side, and says whether their difference can be the sizes' alone.
* :func:`one_second_scope` says for what state sizes the "<1 s checkpoint save time" claim held
  among the saves a run measured: a claim without a size is judged only at one.
  :func:`one_second_sizes` is its short form, each size with its side of 1 s, for a verdict's
  label or a headline.
* :func:`gzip_costs` times saving float weights with ``torch.save`` to a plain file and
  through ``gzip.open`` (what a ``.gz`` name asks of Python), each ended with ``fsync``, in
  interleaved rounds, and compares the files' sizes. The 23 mantissa bits of a trained
  float32 weight are close to random, and so is the sign of a zero-mean weight, so a byte-wise
  compressor finds little to take out (at most the exponent's 8 bits of 32: the file keeps at
  least 24/32 of its bytes), at the speed of one core. That a ``.pt.gz``
  name alone compresses nothing (``torch.save`` writes its zip archive, stored, whatever the
  name) is :func:`perfkit.memory.claims.checkpoint_file_sizes`.

Usage::

    rates = storage_rates(["/dev/shm", "/tmp"], nbytes=32 * 2**20, rounds=5)
    print(rates.rate("/dev/shm", fsync=True), rates.fsync_over_plain("/tmp"))
    gz = gzip_costs([p.detach() for p in model.parameters()], "build/gz", max_bytes=4 * 2**20)
    print(gz.gz_ratio, gz.gz_over_plain())
"""

from __future__ import annotations

import gzip
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from perfkit import stats
from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.saving.experiments import SaveCosts
from perfkit.saving.storage import WriteBandwidth, filesystem_of, survives, write_bandwidth
from perfkit.stats import Estimate
from perfkit.timing import Timer
from perfkit.units import si

__all__ = ["GzipCosts", "StorageRates", "gzip_costs", "one_second_lines", "one_second_scope",
           "one_second_sizes", "same_disk_rates", "storage_rates"]


@dataclass(frozen=True)
class StorageRates:
    """Writes of one file of ``nbytes`` into each directory, with and without fsync.

    Attributes:
        nbytes: bytes per write.
        fstypes: each directory's filesystem (``tmpfs``, ``ext4``, ...).
        plain_s, fsync_s: per directory, each round's seconds without and with ``fsync`` (the
            median of the round's three writes).
    """

    nbytes: int
    fstypes: dict[str, str]
    plain_s: dict[str, list[float]]
    fsync_s: dict[str, list[float]]

    def rate(self, directory: str, fsync: bool) -> Estimate:
        """The median write rate into ``directory`` (B/s), with its interval."""
        times = (self.fsync_s if fsync else self.plain_s)[directory]
        return stats.median_interval([self.nbytes / t for t in times])

    def fsync_over_plain(self, directory: str) -> Estimate:
        """A write's seconds with fsync over without, the median of the rounds' paired ratios."""
        return stats.median_ratio(self.fsync_s[directory], self.plain_s[directory])

    def medians_note(self, directory: str) -> str:
        """Where the ratio of the two printed median rates (without fsync over with) lies outside
        :meth:`fsync_over_plain`'s interval as printed, a sentence that says so and why (a median
        of the rounds' paired ratios is not the ratio of two medians); ``""`` where it lies inside
        or there is no interval."""
        plain, synced = self.rate(directory, False), self.rate(directory, True)
        paired = self.fsync_over_plain(directory)
        of_medians = plain.value / synced.value
        side = paired.clear_of(of_medians, "x")
        if not side:
            return ""
        return (f"The printed median rates give {si(plain.value, 'B/s')} / {si(synced.value, 'B/s')} = "
                f"{of_medians:.3g}x, {'below' if side == 'above' else 'above'} this interval: that is a "
                "ratio of two medians, each over all rounds; the verdict's figure is the median of the "
                "rounds' own ratios, which pairs each round's writes.")

    def survives(self, directory: str) -> dict[str, bool]:
        """What a checkpoint in ``directory`` survives (:func:`perfkit.saving.survives`)."""
        return survives(self.fstypes[directory])


def storage_rates(directories: Sequence[str | os.PathLike], nbytes: int = 32 * 2**20,
                  rounds: int = 5) -> StorageRates:
    """Write ``nbytes`` into each directory without and with ``fsync``, ``rounds`` times each,
    interleaved, the plain writes first in even rounds and the fsynced ones first in odd ones;
    each round's figure is the median of three writes (:func:`perfkit.saving.write_bandwidth`
    with ``repeat=3``, one untimed write before them): a write of a few MB lasts a few
    scheduler time slices, and one preemption would otherwise decide a round.

    Args:
        directories: existing directories (at least one).
        nbytes: bytes per file (>= 1); rounds: timed writes per configuration (>= 1; an
            interval needs 5).

    Raises:
        TypeError, ValueError: a bad argument, or a directory that does not exist.
    """
    dirs = check_items("directories", directories)
    for i, d in enumerate(dirs):
        check_type(f"directories[{i}]", d, (str, os.PathLike))
        if not Path(d).is_dir():
            raise ValueError(f"directories[{i}] must be an existing directory, got {str(d)!r}")
    check_int("nbytes", nbytes, 1)
    check_int("rounds", rounds, 1)
    names = [str(d) for d in dirs]
    plain: dict[str, list[float]] = {d: [] for d in names}
    synced: dict[str, list[float]] = {d: [] for d in names}
    for r in range(rounds):
        for d in names:
            for fsync, into in ((False, plain), (True, synced))[:: 1 if r % 2 == 0 else -1]:
                times = sorted(write_bandwidth(d, nbytes, fsync=fsync, repeat=3).times_s)
                into[d].append(times[1])  # the median of three
    return StorageRates(nbytes, {d: filesystem_of(d)[1] for d in names}, plain, synced)


def same_disk_rates(first: WriteBandwidth, later: Estimate, later_nbytes: int) -> str:
    """One disk's rate with fsync, measured twice: ``first`` (section 1's writes) against
    ``later`` (:meth:`StorageRates.rate`'s median and interval, writes of ``later_nbytes``).

    A write that pays a fixed cost per file (the fsync, the journal's commit) besides its bytes
    shows a rate that grows with its size, so two rates from writes of different sizes differ by
    that alone: a difference says the disk's rate moved only where the sizes are alike, or where
    the larger writes ran slower (which no fixed cost per file explains), and only where every one
    of ``first``'s writes lies clear of ``later``'s interval: its median has no interval of its own.

    Raises:
        TypeError, ValueError: ``first`` not a :class:`WriteBandwidth`, ``later`` not an
            :class:`Estimate`, or ``later_nbytes`` not an int >= 1.
    """
    check_type("first", first, WriteBandwidth)
    check_type("later", later, Estimate)
    check_int("later_nbytes", later_nbytes, 1)
    rate, size = first.bytes_per_s, first.nbytes
    where = ("inside" if not later.has_interval or later.low <= rate <= later.high
             else "above" if rate > later.high else "below")
    head = (f"Section 1 measured this disk with fsync at {si(rate, 'B/s')} (the median of "
            f"{len(first.times_s)} writes of {si(size, 'B')}), {where} the interval just measured (writes of "
            f"{si(later_nbytes, 'B')})")
    if where == "inside":
        return head + ": the two measurements agree."
    slow, fast = size / max(first.times_s), size / min(first.times_s)   # section 1's own spread
    spread = f"its {len(first.times_s)} writes ran at {si(slow, 'B/s')} to {si(fast, 'B/s')}"
    if fast >= later.low and slow <= later.high:
        return (head + f", yet {spread}, a range that reaches into that interval: a median of so few "
                "writes, without an interval of its own, cannot tell whether the disk's rate moved.")
    if abs(size - later_nbytes) <= 0.05 * max(size, later_nbytes):
        return (head + f"; {spread}, all {where} it: at the same size, the disk's rate with fsync moved "
                f"between the two measurements, as far as {len(first.times_s)} writes can show.")
    if (size > later_nbytes) == (where == "above"):  # the larger writes ran faster
        return (head + ": a fixed cost per file (the fsync, the journal's commit) weighs more on the "
                "smaller writes, so the two rates differ by size as well as by time, and do not show that "
                "the disk's rate moved.")
    return (head + f"; {spread}, all {where} it: the larger writes ran slower, which no fixed cost per file "
            f"explains, so the disk's rate with fsync moved between the two measurements, as far as "
            f"{len(first.times_s)} writes can show.")


@dataclass(frozen=True)
class GzipCosts:
    """One float tensor saved plainly and through gzip (each file fsynced).

    Attributes:
        dtype: the tensor's dtype; raw_bytes: its bytes.
        plain_bytes, gz_bytes: the file's size from ``torch.save`` to a plain file and
            through ``gzip.open`` at ``level``.
        plain_s, gz_s: each round's seconds for the ``.pt`` save and the gzip save.
        level: gzip's compression level (Python's ``gzip.open`` defaults to 9).
    """

    dtype: str
    raw_bytes: int
    plain_bytes: int
    gz_bytes: int
    plain_s: list[float]
    gz_s: list[float]
    level: int

    @property
    def gz_ratio(self) -> float:
        """The gzip file's size over the ``.pt`` one's (1 - the share gzip saved)."""
        return self.gz_bytes / self.plain_bytes

    def gz_over_plain(self) -> Estimate:
        """The gzip save's seconds over the plain save's, the median of the paired ratios."""
        return stats.median_ratio(self.gz_s, self.plain_s)

    def gzip_bytes_per_s(self) -> float:
        """The gzip save's rate in uncompressed bytes per second (its median round)."""
        return self.raw_bytes / sorted(self.gz_s)[len(self.gz_s) // 2]


def _save(obj: torch.Tensor, path: Path, level: int | None) -> float:
    """``torch.save`` into ``path`` (through gzip at ``level`` unless None), fsynced; seconds."""
    with Timer("cpu") as t:
        with open(path, "wb") as f:
            if level is None:
                torch.save(obj, f)
            else:
                with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=level) as g:
                    torch.save(obj, g)
            f.flush()
            os.fsync(f.fileno())
    return t.elapsed_s


def gzip_costs(tensors: Sequence[torch.Tensor], directory: str | os.PathLike, max_bytes: int = 4 * 2**20,
               level: int = 9, rounds: int = 5) -> GzipCosts:
    """Save the first ``max_bytes`` of ``tensors`` (flattened, joined) to a plain file and
    through ``gzip.open``, ``rounds`` times each, interleaved with the first of each round
    alternating (after one untimed save of each).

    Args:
        tensors: floating tensors of one dtype (at least one element in all).
        directory: an existing directory (a sub-directory is written and removed).
        max_bytes: bytes of the sample (>= the dtype's size); level: gzip's level, 1-9;
        rounds: timed saves per way (>= 1; an interval needs 5).

    Raises:
        TypeError, ValueError: a bad argument, tensors of mixed or non-floating dtypes.
    """
    items = check_items("tensors", tensors)
    for i, t in enumerate(items):
        check_type(f"tensors[{i}]", t, torch.Tensor)
    dtypes = {t.dtype for t in items}
    if len(dtypes) != 1 or not items[0].is_floating_point() or not sum(t.numel() for t in items):
        raise ValueError("tensors must be floating tensors of one dtype with elements, got "
                         f"{sorted(map(str, dtypes))}")
    check_type("directory", directory, (str, os.PathLike))
    if not Path(directory).is_dir():
        raise ValueError(f"directory must be an existing directory, got {str(directory)!r}")
    size = items[0].element_size()
    check_int("max_bytes", max_bytes, size)
    check_int("level", level, 1, 9)
    check_int("rounds", rounds, 1)
    flat = torch.cat([t.detach().reshape(-1).cpu() for t in items])[: max_bytes // size].clone()  # (n,)
    work = Path(directory) / ".perfkit-gzip"
    work.mkdir(exist_ok=True)
    try:
        plain, gz = work / "w.pt", work / "g.pt.gz"
        _save(flat, plain, None), _save(flat, gz, level)  # untimed: the first call allocates
        plain_s, gz_s = [], []
        for r in range(rounds):
            ways = ((plain_s, plain, None), (gz_s, gz, level))
            for into, path, lvl in ways[:: 1 if r % 2 == 0 else -1]:
                into.append(_save(flat, path, lvl))
        sizes = [p.stat().st_size for p in (plain, gz)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    dtype = str(flat.dtype).removeprefix("torch.")
    return GzipCosts(dtype, flat.numel() * size, *sizes, plain_s, gz_s, level)


def _under_1s(fixed: float, rate: float) -> str:
    """The state that fits in 1 s after ``fixed`` seconds at ``rate`` bytes per second."""
    return (f"up to about {si((1 - fixed) * rate, 'B')} ({fixed:.2g} s fixed, then {si(rate, 'B/s')})"
            if fixed < 1 else f"for no state at all (its fixed costs alone took {fixed:.2g} s)")


def one_second_lines(costs: SaveCosts, stored_bytes: float,
                     stored_blocked_s: Mapping[str, float]) -> list[str]:
    """The "<1 s checkpoint save time" claim at other sizes, one line per mode (``sync``,
    ``thread``). Each mode's model is this run's fixed costs (the blocked time beyond the bytes
    at the write bandwidth, or beyond the staging copy), then the bytes at that rate; a stored
    run of ``stored_bytes`` (its median blocked seconds per mode) holds it at another size.
    The size that fits in 1 s is stated from the model only where the stored run took no longer
    than the model says there; otherwise in proportion to the stored run alone. Beside it, the
    line through the two saves, where one with a non-negative fixed part passes through both.

    Raises:
        TypeError, ValueError: ``costs`` not a :class:`SaveCosts`, ``stored_bytes`` not > 0, or
            a mode missing from either.
    """
    check_type("costs", costs, SaveCosts)
    b2 = check_real("stored_bytes", stored_bytes, 0, lo_open=True)
    b1, out = costs.state_bytes, []
    rates = {"sync": (costs.sync_model_s, costs.write.best_bytes_per_s, "bytes over the write bandwidth"),
             "thread": (costs.staging_floor_s, costs.copy_bytes_per_s / 2, "the staging copy")}
    for mode, (floor, rate, what) in rates.items():
        if mode not in costs.blocked_s or mode not in stored_blocked_s:
            raise ValueError(f"mode {mode!r} must be in costs.blocked_s and stored_blocked_s")
        t1 = costs.blocked(mode).value
        t2 = check_real(f"stored_blocked_s[{mode!r}]", stored_blocked_s[mode], 0, lo_open=True)
        fixed = max(0.0, t1 - floor)
        at_b2 = fixed + b2 / rate                  # the model at the stored run's size
        slope = (t2 - t1) / (b2 - b1) if b2 != b1 else 0.0   # s per byte, the line through both
        fixed_line = t1 - slope * b1               # its fixed part: negative where no such line fits
        line = (f"gives under 1 s {_under_1s(fixed_line, 1 / slope)}" if slope > 0 and fixed_line >= 0 else
                "gives no size for 1 s: the larger save took more than in proportion to its bytes, and no "
                "line with a non-negative fixed part passes through both")
        out.append(f"{mode}: its model ({what}, with this run's fixed costs) gives {at_b2:.3g} s at the "
                   f"stored run's {si(b2, 'B')}; the stored run blocked {t2:.3g} s, {t2 / at_b2:.2g}x that. "
                   + (f"By the model, under 1 s {_under_1s(fixed, rate)}." if t2 <= at_b2 else
                      "The model does not hold at that size, so no size for 1 s follows from it; in "
                      f"proportion to the stored run alone, 1 s is reached near {si(b2 / t2, 'B')} (a fixed "
                      f"part would put it {'higher' if t2 < 1 else 'lower'}).")
                   + f" The line through the two saves ({si(b1, 'B')} in {t1:.3g} s, {si(b2, 'B')} in "
                   f"{t2:.3g} s) {line}.")
    return out


def one_second_scope(saves: Mapping[float, float], limit_s: float = 1.0, judged: float | None = None,
                     same_as: str = "") -> str:
    """For what state sizes "<``limit_s`` s save time" held among measured ``saves`` (state bytes
    to seconds): the largest size that took less and the smallest that took at least as long.
    Each save ran under its own run's load, so the two do not place a size where the claim
    stops holding: the larger may have missed for its load as much as for its bytes.

    ``judged`` (a size in ``saves``): the size a verdict judges; the text then opens with its time
    and each larger save's, with its side of ``limit_s``, so a verdict held at a small size is read
    at that size, beside what a larger one took. ``same_as`` (with ``judged``): the earlier verdict
    that judged the same measurement; the text then opens by saying this verdict re-reads it.

    Raises:
        TypeError, ValueError: ``saves`` empty, a size or a time not a finite number > 0, or
            ``judged`` not one of the sizes.
    """
    check_type("saves", saves, Mapping)
    if not saves:
        raise ValueError("saves must hold at least one (bytes, seconds) pair")
    for b, t in saves.items():
        check_real("saves' bytes", b, 0, lo_open=True)
        check_real(f"saves[{b!r}]", t, 0, lo_open=True)
    check_real("limit_s", limit_s, 0, lo_open=True)
    if judged is not None and judged not in saves:
        raise ValueError(f"judged must be one of the sizes in saves, got {judged!r}")
    under = [b for b, t in saves.items() if t < limit_s]
    over = [b for b, t in saves.items() if t >= limit_s]
    said = " (" + ", ".join(f"{si(b, 'B')} in {saves[b]:.3g} s" for b in sorted(saves)) + ")"
    lead = ""
    if judged is not None:   # the judged size's time and every larger one's, each with its side

        def side(b: float) -> str:
            return f"{si(b, 'B')}, {saves[b]:.3g} s, " + (f"under {limit_s:g} s" if saves[b] < limit_s
                                                           else f"{limit_s:g} s or more")
        larger = sorted(b for b in saves if b > judged)
        lead = (f"At the size judged, {side(judged)}"
                + (f"; at the larger size{'s' * (len(larger) > 1)} shown, " + "; ".join(map(side, larger))
                   if larger else "; no larger save is shown") + ". ")
        said = ""   # the lead has listed them
        if same_as:
            lead = (f"The same measurement as {same_as}, read against the claim's {limit_s:g} s instead: "
                    "no second measurement, and a test of the claim at this one size, not of the claim "
                    "without a size. " + lead)
    if not over:
        return lead + (f"Under {limit_s:g} s at every size measured{said}: the claim holds up to "
                       f"{si(max(under), 'B')} at least, and these saves say nothing of larger states.")
    if not under:
        return lead + (f"At {limit_s:g} s or more at every size measured{said}: the claim holds at none "
                       "of them.")
    lo, hi = max(under), min(over)
    if lo < hi:
        return lead + (f"Of the saves measured{said}, the claim holds up to {si(lo, 'B')} and not at "
                       f"{si(hi, 'B')}. Each ran under its own run's load, so they place no size at which it "
                       "stops holding: the larger may have missed for its load as much as for its bytes.")
    return lead + (f"The saves measured{said} disagree: a larger state took less than {limit_s:g} s where "
                   "a smaller one did not, so the runs' loads differ too much to place a size.")


def one_second_sizes(saves: Mapping[float, float], limit_s: float = 1.0, skip: float | None = None) -> str:
    """Each measured save (state bytes to seconds), smallest first, with its side of
    ``limit_s`` ("under 1 s" or "1 s or more"): :func:`one_second_scope`'s facts in a few words,
    for a verdict's label or a headline. ``skip`` leaves out one size (the one a verdict judges).

    Raises:
        TypeError, ValueError: ``saves`` empty (after ``skip``), or a size or a time not a finite
            number > 0.
    """
    check_type("saves", saves, Mapping)
    check_real("limit_s", limit_s, 0, lo_open=True)
    kept = {b: t for b, t in saves.items() if b != skip}
    if not kept:
        raise ValueError("saves must hold at least one (bytes, seconds) pair besides skip")
    for b, t in kept.items():
        check_real("saves' bytes", b, 0, lo_open=True)
        check_real(f"saves[{b!r}]", t, 0, lo_open=True)
    return "; ".join(f"{si(b, 'B')} in {kept[b]:.3g} s, "
                     + (f"under {limit_s:g} s" if kept[b] < limit_s else f"{limit_s:g} s or more")
                     for b in sorted(kept))
