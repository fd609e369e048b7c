"""zero_bench's ``settle`` option: a timed step waits for its own all-gathers only when asked."""

import json
from types import SimpleNamespace

import pytest
import torch

from perfkit.jobs import zero_bench


class _Opt:
    """An optimizer that counts its steps and its waits for all-gathers in flight."""

    def __init__(self):
        self.steps = self.waits = 0

    def step(self):
        self.steps += 1

    def zero_grad(self, set_to_none=True):
        pass

    def wait_params(self):
        self.waits += 1


def _variant(settle=None):
    v = zero_bench.Variant.__new__(zero_bench.Variant)
    v.name, v.losses, v.update_s, v.engine = "zero1", [], [], None
    w = torch.ones(1, requires_grad=True)
    v.net = lambda input_ids, labels: SimpleNamespace(loss=(w * input_ids.float()).sum())
    v.opt = _Opt()
    if settle is not None:
        v.settle = settle
    return v


def test_settle_makes_each_step_wait_for_its_all_gathers():
    v = _variant(settle=True)
    for _ in range(3):
        v.step(torch.ones(2, 4))
    assert (v.opt.steps, v.opt.waits) == (3, 3)


def test_default_step_leaves_the_all_gathers_in_flight():
    v = _variant(settle=False)
    v.step(torch.ones(2, 4))
    assert (v.opt.steps, v.opt.waits) == (1, 0)


def test_compare_passes_settle_to_the_workers(monkeypatch):
    seen = {}

    class _Stop(Exception):
        pass

    def launch(module, nproc, args, **kw):
        seen["cfg"] = json.loads(args[1])
        raise _Stop

    monkeypatch.setattr(zero_bench.pdist, "launch", launch)
    monkeypatch.setattr("perfkit.models.train_bpe_tokenizer", lambda *a, **k: None)
    monkeypatch.setattr("perfkit.models.encode_corpus", lambda *a, **k: torch.zeros(8, dtype=torch.long))
    for settle, expected in ((True, True), (False, False)):
        with pytest.raises(_Stop):
            zero_bench.compare(["zero1"], settle=settle)
        assert seen["cfg"]["settle"] is expected
    with pytest.raises(_Stop):
        zero_bench.compare(["zero1"])
    assert seen["cfg"]["settle"] is False
    with pytest.raises(TypeError, match="settle"):
        zero_bench.compare(["zero1"], settle=1)


def test_the_single_process_reference_steps_and_never_waits():
    cfg = {"batch": 2, "vocab_size": 64, "block_size": 8, "n_embd": 16, "n_layer": 1, "n_head": 2}
    ref = zero_bench.reference_adamw(cfg, zero_bench.batches(None, cfg, None, 1, 2))
    assert len(ref.losses) == 2 and ref.settle is False
