"""perfkit.saving.storage refuses bad arguments with a TypeError or ValueError naming the
argument, before it writes. Each case is (id, call, exception, regex). Also: the filesystem
lookup and the durability table on known cases."""

import math

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit.saving import storage
from perfkit.saving.storage import filesystem_of, save_seconds, survives, write_bandwidth

CASES = [
    ("write_bandwidth.directory int", lambda: write_bandwidth(3), TypeError, "directory must be a str"),
    ("write_bandwidth.directory missing", lambda: write_bandwidth("/no/such/dir"), ValueError,
     "directory must be an existing directory"),
    ("write_bandwidth.nbytes zero", lambda: write_bandwidth("/tmp", 0), ValueError,
     "nbytes must be an int >= 1"),
    ("write_bandwidth.nbytes float", lambda: write_bandwidth("/tmp", 1.5), ValueError, "nbytes"),
    ("write_bandwidth.fsync int", lambda: write_bandwidth("/tmp", 8, 1), TypeError, "fsync must be a bool"),
    ("write_bandwidth.repeat zero", lambda: write_bandwidth("/tmp", 8, True, 0), ValueError, "repeat"),
    ("filesystem_of.path int", lambda: filesystem_of(3), TypeError, "path must be a str"),
    ("survives.fstype None", lambda: survives(None), TypeError, "fstype must be a str"),
    ("save_seconds.state_bytes negative", lambda: save_seconds(-1, 1.0), ValueError,
     "state_bytes must be a finite number >= 0"),
    ("save_seconds.state_bytes nan", lambda: save_seconds(math.nan, 1.0), ValueError, "state_bytes"),
    ("save_seconds.bytes_per_s zero", lambda: save_seconds(1, 0), ValueError,
     "bytes_per_s must be a finite number > 0"),
    ("save_seconds.bytes_per_s inf", lambda: save_seconds(1, math.inf), ValueError, "bytes_per_s"),
]

RECORDS = {"WriteBandwidth"}


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    assert not uncovered(storage, CASES, RECORDS)


def test_filesystems_and_what_survives(tmp_path):
    assert filesystem_of("/proc/self")[1] == "proc"
    assert filesystem_of("/")[0] == "/"
    assert survives("tmpfs") == {"killed_process": True, "killed_container": False, "reboot": False}
    assert survives("ext4")["reboot"] and survives("xfs")["killed_container"]
    rec = write_bandwidth(tmp_path, 4096, fsync=True, repeat=2)
    assert rec.nbytes == 4096 and len(rec.times_s) == 2 and rec.bytes_per_s > 0
    assert list(tmp_path.iterdir()) == []  # its files are deleted
    assert save_seconds(2e9, 1e9) == 2.0
