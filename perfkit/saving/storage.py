"""Where a checkpoint is written: the write bandwidth of a directory, with and without fsync,
and what survives a killed process, a killed container and a reboot.

"Use fast storage for checkpoints: /dev/shm, /tmp, NVMe" is a claim about two different
things. Speed: a write that ends in the page cache runs at memory speed on any filesystem;
``fsync`` waits until the device has the data, and only then is a disk as slow as it is.
Durability: data written with ``write()`` belongs to the kernel once the call returns, so
it survives the process being killed (SIGKILL included) on every filesystem; tmpfs
(``/dev/shm``, often ``/tmp``) keeps its files only in memory and swap, so they are lost at
a reboot ("Everything in tmpfs is temporary in the sense that no files will be created on
your hard drive ... everything stored therein is lost" on unmount: the Linux kernel's
Documentation/filesystems/tmpfs.rst), and a container's own tmpfs mount is removed when the
container stops (Docker's documentation, "tmpfs mounts"); on a disk, what was not fsynced
can be lost in a power failure or a kernel crash (dirty pages are written back after
``vm.dirty_expire_centisecs``, 30 s by default: Documentation/admin-guide/sysctl/vm.rst).

Usage::

    rec = write_bandwidth("/dev/shm", nbytes=256 * 2**20, fsync=True)
    print(rec.fstype, rec.bytes_per_s, survives(rec.fstype))
    print(save_seconds(16e9, rec.bytes_per_s))    # a 16 GB shard at that rate
"""

from __future__ import annotations

import os
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from perfkit._checks import check_int, check_real, check_type
from perfkit.timing import Timer

__all__ = ["WriteBandwidth", "filesystem_of", "save_seconds", "survives", "write_bandwidth"]

MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")


@dataclass(frozen=True)
class WriteBandwidth:
    """Writes of one file of ``nbytes`` into ``directory``.

    Attributes:
        directory, mountpoint, fstype: where, and the filesystem it lies on.
        nbytes: bytes per write; fsync: whether each write ended with ``os.fsync``.
        times_s: each repetition's seconds (open, write, fsync if asked, close).
        bytes_per_s: ``nbytes`` over the median time (B/s).
        best_bytes_per_s: ``nbytes`` over the fastest time (B/s): the rate a floor takes.
    """

    directory: str
    mountpoint: str
    fstype: str
    nbytes: int
    fsync: bool
    times_s: tuple[float, ...]

    @property
    def bytes_per_s(self) -> float:
        return self.nbytes / statistics.median(self.times_s)

    @property
    def best_bytes_per_s(self) -> float:
        return self.nbytes / min(self.times_s)


def filesystem_of(path: str | os.PathLike) -> tuple[str, str]:
    """The mount point and filesystem type (``tmpfs``, ``ext4``, ...) that ``path`` lies on,
    from ``/proc/mounts`` (the longest mount point that contains it); ``("?", "?")`` where
    that file does not exist.

    Raises:
        TypeError: ``path`` not a str or os.PathLike.
    """
    check_type("path", path, (str, os.PathLike))
    p = str(Path(path).resolve())
    best = ("?", "?")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        inside = p == mnt or p.startswith(mnt.rstrip("/") + "/")
        if inside and (best[0] == "?" or len(mnt) >= len(best[0])):  # the last, longest mount wins
            best = (mnt, parts[2])
    return best


def survives(fstype: str) -> dict[str, bool]:
    """What a checkpoint that was written (and, on a disk, fsynced) on ``fstype`` survives:
    the writing process killed, its container removed, a reboot (see the module docstring).
    A container's removal is judged for a filesystem of the container's own (tmpfs) or a
    mounted volume (any other).

    Raises:
        TypeError: ``fstype`` not a str.
    """
    check_type("fstype", fstype, str)
    memory = fstype in MEMORY_FILESYSTEMS
    return {"killed_process": True, "killed_container": not memory, "reboot": not memory}


def write_bandwidth(directory: str | os.PathLike, nbytes: int = 64 * 2**20, fsync: bool = True,
                    repeat: int = 3) -> WriteBandwidth:
    """Time writing a file of ``nbytes`` into ``directory`` ``repeat`` times (after one
    untimed write), deleting it after each; with ``fsync`` each write waits for the device.

    Args:
        directory: an existing directory; nbytes: bytes per file (at least 1).
        fsync: end each write with ``os.fsync`` (a checkpoint's commit does).
        repeat: timed writes (at least 1).

    Raises:
        TypeError, ValueError: a bad argument, or ``directory`` not an existing directory.
    """
    check_type("directory", directory, (str, os.PathLike))
    check_int("nbytes", nbytes, 1)
    check_int("repeat", repeat, 1)
    if not isinstance(fsync, bool):
        raise TypeError(f"fsync must be a bool, got {fsync!r}")
    if not Path(directory).is_dir():
        raise ValueError(f"directory must be an existing directory, got {str(directory)!r}")
    data = os.urandom(min(nbytes, 2**24))  # incompressible, reused in chunks
    times = []
    for i in range(repeat + 1):
        fd, name = tempfile.mkstemp(dir=directory, prefix=".perfkit-write-")
        try:
            with Timer("cpu") as t:
                left = nbytes
                while left:
                    left -= os.write(fd, data[:min(left, len(data))])
                if fsync:
                    os.fsync(fd)
                os.close(fd)
        finally:
            os.unlink(name)
        if i:
            times.append(t.elapsed_s)
    mnt, fstype = filesystem_of(directory)
    return WriteBandwidth(str(directory), mnt, fstype, nbytes, fsync, tuple(times))


def save_seconds(state_bytes: float, bytes_per_s: float) -> float:
    """Seconds to write ``state_bytes`` at ``bytes_per_s`` (a lower bound for a save: no
    serialisation, no staging, no commit).

    Raises:
        TypeError, ValueError: ``state_bytes`` not a finite number >= 0, ``bytes_per_s`` not
            a finite number > 0.
    """
    check_real("state_bytes", state_bytes, 0)
    check_real("bytes_per_s", bytes_per_s, 0, lo_open=True)
    return state_bytes / bytes_per_s
