"""perfkit.saving.store refuses bad arguments with a TypeError or ValueError naming the
argument, before it touches a directory. Each case is (id, call, exception, regex)."""

import math

import pytest
from inputs_cases import duplicate_ids, uncovered

from perfkit.saving import store
from perfkit.saving.store import (
    Manifest,
    check_layout,
    commit,
    complete_steps,
    latest,
    partial_dir,
    prune,
    remove_partials,
    step_dir,
    verify,
)

MANIFEST = Manifest(step=1, world_size=2, layout=None)

CASES = [
    ("step_dir.root int", lambda: step_dir(3, 1), TypeError, "root must be a directory path"),
    ("step_dir.root empty", lambda: step_dir("", 1), TypeError, "root"),
    ("step_dir.step negative", lambda: step_dir("/tmp/x", -1), ValueError, "step must be an int >= 0"),
    ("step_dir.step float", lambda: step_dir("/tmp/x", 1.0), ValueError, "step"),
    ("step_dir.step bool", lambda: step_dir("/tmp/x", True), ValueError, "step"),
    ("partial_dir.step str", lambda: partial_dir("/tmp/x", "1"), TypeError, "step"),
    ("partial_dir.root None", lambda: partial_dir(None, 1), TypeError, "root"),
    ("commit.partial None", lambda: commit(None, 1, 1), TypeError, "partial must be a directory path"),
    ("commit.step negative", lambda: commit("/tmp/x/step_000000001.partial", -1, 1), ValueError,
     "step must be"),
    ("commit.world_size zero", lambda: commit("/tmp/x/step_000000001.partial", 1, 0), ValueError,
     "world_size must be an int >= 1"),
    ("commit.layout set", lambda: commit("/tmp/x/step_000000001.partial", 1, 1, {1, 2}), TypeError,
     "layout must be JSON-serialisable"),
    ("commit.partial wrong name", lambda: commit("/tmp/x/step_000000002.partial", 1, 1), ValueError,
     "partial must be step_000000001.partial for step 1"),
    ("latest.root list", lambda: latest(["/tmp"]), TypeError, "root"),
    ("complete_steps.root float", lambda: complete_steps(1.5), TypeError, "root"),
    ("verify.path int", lambda: verify(3), TypeError, "path must be a checkpoint directory"),
    ("verify.files str", lambda: verify("/tmp/x", files="a"), TypeError, "files must be None or a list"),
    ("verify.files ints", lambda: verify("/tmp/x", files=[1]), TypeError, "files"),
    ("check_layout.manifest dict", lambda: check_layout({"step": 1}, 2), TypeError,
     "manifest must be a Manifest"),
    ("check_layout.world_size zero", lambda: check_layout(MANIFEST, 0), ValueError,
     "world_size must be an int >= 1"),
    ("check_layout.world_size nan", lambda: check_layout(MANIFEST, math.nan), ValueError, "world_size"),
    ("prune.keep zero", lambda: prune("/tmp/x", 0), ValueError, "keep must be an int >= 1"),
    ("prune.keep float", lambda: prune("/tmp/x", 2.0), ValueError, "keep"),
    ("prune.root None", lambda: prune(None, 1), TypeError, "root"),
    ("remove_partials.root int", lambda: remove_partials(0), TypeError, "root"),
    ("remove_partials.below negative", lambda: remove_partials("/tmp/x", -1), ValueError,
     "below must be an int >= 0"),
]

RECORDS = {"Manifest", "CheckpointError"}


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_every_public_callable_has_a_case():
    assert not uncovered(store, CASES, RECORDS)
