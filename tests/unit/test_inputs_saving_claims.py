"""perfkit.saving.claims refuses bad arguments with a TypeError or ValueError naming the
argument, before it writes. Each case is (id, call, exception, regex)."""

import pytest
import torch
from inputs_cases import duplicate_ids, uncovered

from perfkit.saving import claims
from perfkit.saving.claims import (
    gzip_costs,
    one_second_lines,
    one_second_scope,
    one_second_sizes,
    same_disk_rates,
    storage_rates,
)
from perfkit.saving.experiments import SaveCosts
from perfkit.saving.storage import WriteBandwidth
from perfkit.stats import Estimate

W = [torch.ones(4)]
COSTS = SaveCosts(10**7, {"sync": [0.1], "thread": [0.01]}, {"sync": [0.1], "thread": [0.1]},
                  WriteBandwidth("d", "/", "ext4", 1, True, (1e-3,)), 1e10)

RATE = Estimate(1e9, 0.9e9, 1.1e9, 0.9, 9, "median")

CASES = [
    ("storage_rates.directories empty", lambda: storage_rates([]), ValueError, "directories"),
    ("storage_rates.directories str", lambda: storage_rates("/tmp"), TypeError, "directories"),
    ("storage_rates.directory int", lambda: storage_rates([3]), TypeError, r"directories\[0\]"),
    ("storage_rates.directory missing", lambda: storage_rates(["/tmp", "/no/such/dir"]), ValueError,
     r"directories\[1\] must be an existing directory"),
    ("storage_rates.nbytes zero", lambda: storage_rates(["/tmp"], 0), ValueError,
     "nbytes must be an int >= 1"),
    ("storage_rates.rounds zero", lambda: storage_rates(["/tmp"], 8, 0), ValueError, "rounds"),
    ("one_second_lines.costs dict", lambda: one_second_lines({}, 1e8, {"sync": 1.0, "thread": 0.1}),
     TypeError, "costs"),
    ("one_second_lines.stored_bytes zero", lambda: one_second_lines(COSTS, 0, {"sync": 1.0, "thread": 0.1}),
     ValueError, "stored_bytes"),
    ("one_second_lines.stored_blocked_s negative",
     lambda: one_second_lines(COSTS, 1e8, {"sync": -1.0, "thread": 0.1}), ValueError, "stored_blocked_s"),
    ("one_second_lines.mode missing", lambda: one_second_lines(COSTS, 1e8, {"sync": 1.0}), ValueError,
     "thread"),
    ("one_second_sizes.saves list", lambda: one_second_sizes([(1e6, 0.1)]), TypeError, "saves"),
    ("one_second_sizes.seconds zero", lambda: one_second_sizes({1e6: 0.0}), ValueError, "saves"),
    ("one_second_sizes.limit_s zero", lambda: one_second_sizes({1e6: 0.1}, 0.0), ValueError, "limit_s"),
    ("one_second_scope.saves list", lambda: one_second_scope([(1e6, 0.1)]), TypeError, "saves"),
    ("one_second_scope.saves empty", lambda: one_second_scope({}), ValueError, "saves"),
    ("one_second_scope.seconds zero", lambda: one_second_scope({1e6: 0.0}), ValueError, "saves"),
    ("one_second_scope.limit_s nan", lambda: one_second_scope({1e6: 0.1}, float("nan")), ValueError,
     "limit_s"),
    ("gzip_costs.tensors empty", lambda: gzip_costs([], "/tmp"), ValueError, "tensors"),
    ("gzip_costs.tensor list", lambda: gzip_costs([[1.0]], "/tmp"), TypeError, r"tensors\[0\]"),
    ("gzip_costs.tensors ints", lambda: gzip_costs([torch.ones(4, dtype=torch.int64)], "/tmp"), ValueError,
     "floating tensors of one dtype"),
    ("gzip_costs.tensors mixed", lambda: gzip_costs([torch.ones(4), torch.ones(4).double()], "/tmp"),
     ValueError, "one dtype"),
    ("gzip_costs.tensors no elements", lambda: gzip_costs([torch.ones(0)], "/tmp"), ValueError,
     "with elements"),
    ("gzip_costs.directory None", lambda: gzip_costs(W, None), TypeError, "directory"),
    ("gzip_costs.directory missing", lambda: gzip_costs(W, "/no/such/dir"), ValueError,
     "directory must be an existing directory"),
    ("gzip_costs.max_bytes below an element", lambda: gzip_costs(W, "/tmp", max_bytes=3), ValueError,
     "max_bytes must be an int >= 4"),
    ("gzip_costs.level ten", lambda: gzip_costs(W, "/tmp", level=10), ValueError,
     r"level must be an int in \[1, 9\]"),
    ("gzip_costs.rounds zero", lambda: gzip_costs(W, "/tmp", rounds=0), ValueError, "rounds"),
    ("same_disk_rates.first float", lambda: same_disk_rates(1e9, RATE, 8), TypeError, "first"),
    ("same_disk_rates.later float", lambda: same_disk_rates(COSTS.write, 1e9, 8), TypeError, "later"),
    ("same_disk_rates.later_nbytes zero", lambda: same_disk_rates(COSTS.write, RATE, 0), ValueError,
     "later_nbytes"),
]

RECORDS = {"StorageRates", "GzipCosts"}


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    assert not uncovered(claims, CASES, RECORDS)
