"""perfkit.data refuses bad arguments: each public function and class raises ``TypeError``
(wrong type) or ``ValueError`` (wrong value) with a message naming the argument and what is
allowed, at the call, not inside a DataLoader worker or a prefetch thread epochs later.

Each case is (id, call, exception, regex on the message); the regex names the argument.
"""

import math

import pytest
import torch
from inputs_cases import duplicate_ids, uncovered
from torch.utils.data import TensorDataset

from perfkit import data
from perfkit.data import (
    AugmentedDigits,
    Delayed,
    LoaderConfig,
    PadCollate,
    Prefetcher,
    ShardedStream,
    SlowDataset,
    TextChunks,
    map_tensors,
    measure_loader,
    simulate_pipeline,
    spend,
    write_shards,
)

NAN, INF = math.nan, math.inf
DS = TensorDataset(torch.ones(4, 2))
TEXT = "a paragraph long enough to be kept as one sample of the corpus\n\nshort"


class FakeTokenizer:
    def encode(self, text):
        return type("Encoding", (), {"ids": [ord(c) % 256 for c in text]})()


CASES = [  # (id, call, exception, regex on the message)
    # spend, SlowDataset, Delayed
    ("spend.seconds nan", lambda: spend(NAN), ValueError,
     "seconds must be a finite number >= 0"),
    ("spend.seconds inf", lambda: spend(INF), ValueError, "seconds"),
    ("spend.seconds negative", lambda: spend(-0.1), ValueError, "seconds"),
    ("spend.seconds bool", lambda: spend(True, "spin"), ValueError, "seconds"),
    ("spend.seconds str", lambda: spend("0.1"), TypeError, "seconds"),
    ("spend.kind", lambda: spend(0.0, "nap"), ValueError, "kind must be one of 'sleep', 'spin'"),
    ("spend.kind list", lambda: spend(0.0, ["sleep"]), ValueError, "kind"),
    ("SlowDataset.n zero", lambda: SlowDataset(0, 0.0), ValueError, "n must be an int >= 1"),
    ("SlowDataset.n bool", lambda: SlowDataset(True, 0.0), ValueError, "n must be"),
    ("SlowDataset.cost_s negative", lambda: SlowDataset(4, -1.0), ValueError,
     "cost_s must be a finite number >= 0"),
    ("SlowDataset.cost_s nan", lambda: SlowDataset(4, NAN), ValueError, "cost_s"),
    ("SlowDataset.cost_s inf", lambda: SlowDataset(4, INF), ValueError, "cost_s"),
    ("SlowDataset.cost_s bool", lambda: SlowDataset(4, True), ValueError, "cost_s"),
    ("SlowDataset.cost_s str", lambda: SlowDataset(4, "0.1"), TypeError, "cost_s"),
    ("SlowDataset.kind", lambda: SlowDataset(4, 0.0, kind="nap"), ValueError, "kind"),
    ("SlowDataset.shape int", lambda: SlowDataset(4, 0.0, shape=3), TypeError,
     "shape must be a list or tuple"),
    ("SlowDataset.shape str", lambda: SlowDataset(4, 0.0, shape="ab"), TypeError, "shape"),
    ("SlowDataset.shape negative", lambda: SlowDataset(4, 0.0, shape=(-1,)), ValueError,
     "shape entries must be an int >= 0"),
    ("SlowDataset.shape float", lambda: SlowDataset(4, 0.0, shape=(2.0,)), ValueError, "shape"),
    ("SlowDataset.jitter negative", lambda: SlowDataset(4, 0.0, jitter=-1), ValueError,
     "jitter must be a finite number >= 0"),
    ("SlowDataset.jitter nan", lambda: SlowDataset(4, 0.0, jitter=NAN), ValueError, "jitter"),
    ("SlowDataset.cost i out of range", lambda: SlowDataset(4, 0.1, jitter=0.5).cost(4),
     ValueError, r"i must be an int in \[0, 3\]"),
    ("SlowDataset.cost i str", lambda: SlowDataset(4, 0.1, jitter=0.5).cost("1"), TypeError,
     "i must be"),
    ("Delayed.source", lambda: Delayed(3, 0.0), TypeError, "source must be iterable"),
    ("Delayed.seconds inf", lambda: Delayed([1], INF), ValueError,
     "seconds must be a finite number >= 0"),
    ("Delayed.seconds nan", lambda: Delayed([1], NAN), ValueError, "seconds"),
    ("Delayed.seconds negative", lambda: Delayed([1], -1.0), ValueError, "seconds"),
    ("Delayed.seconds str", lambda: Delayed([1], "1"), TypeError, "seconds"),
    ("Delayed.kind", lambda: Delayed([1], 0.0, kind="io"), ValueError, "kind"),
    # TextChunks, AugmentedDigits, PadCollate
    ("TextChunks.text", lambda: TextChunks(3, FakeTokenizer()), TypeError, "text must be a str"),
    ("TextChunks.tokenizer", lambda: TextChunks(TEXT, None), TypeError,
     "tokenizer must be a tokenizers.Tokenizer"),
    ("TextChunks.max_len", lambda: TextChunks(TEXT, FakeTokenizer(), 0), ValueError,
     "max_len must be an int >= 1"),
    ("TextChunks.min_chars negative", lambda: TextChunks(TEXT, FakeTokenizer(), 8, -1),
     ValueError, "min_chars must be an int >= 0"),
    ("TextChunks.min_chars str", lambda: TextChunks(TEXT, FakeTokenizer(), 8, "40"), TypeError,
     "min_chars"),
    ("TextChunks.text without paragraphs", lambda: TextChunks("short", FakeTokenizer()),
     ValueError, "text holds no paragraph of at least 40 characters"),
    ("AugmentedDigits.size", lambda: AugmentedDigits(4), ValueError, "size must be an int >= 8"),
    ("AugmentedDigits.size bool", lambda: AugmentedDigits(True), ValueError, "size"),
    ("AugmentedDigits.max_degrees nan", lambda: AugmentedDigits(max_degrees=NAN), ValueError,
     "max_degrees must be a finite number >= 0"),
    ("AugmentedDigits.max_degrees inf", lambda: AugmentedDigits(max_degrees=INF), ValueError,
     "max_degrees"),
    ("AugmentedDigits.max_shift nan", lambda: AugmentedDigits(max_shift=NAN), ValueError,
     "max_shift"),
    ("AugmentedDigits.max_shift str", lambda: AugmentedDigits(max_shift="0.1"), TypeError,
     "max_shift"),
    ("AugmentedDigits.seed negative", lambda: AugmentedDigits(seed=-1), ValueError,
     r"seed must be an int in \[0, 4294967295\]"),
    ("AugmentedDigits.seed float", lambda: AugmentedDigits(seed=1.5), ValueError, "seed"),
    ("AugmentedDigits.seed str", lambda: AugmentedDigits(seed="0"), TypeError, "seed"),
    ("AugmentedDigits.cost_ms", lambda: AugmentedDigits(cost_ms=NAN), ValueError, "cost_ms"),
    ("PadCollate.multiple_of zero", lambda: PadCollate(multiple_of=0), ValueError,
     "multiple_of must be an int >= 1"),
    ("PadCollate.multiple_of bool", lambda: PadCollate(multiple_of=True), ValueError,
     "multiple_of"),
    ("PadCollate.pad_id negative", lambda: PadCollate(pad_id=-1), ValueError,
     "pad_id must be an int >= 0"),
    ("PadCollate.pad_id str", lambda: PadCollate(pad_id="0"), TypeError, "pad_id"),
    ("PadCollate.label_pad_id str", lambda: PadCollate(label_pad_id="-100"), TypeError,
     "label_pad_id must be an int or None"),
    ("PadCollate.label_pad_id float", lambda: PadCollate(label_pad_id=-100.0), TypeError,
     "label_pad_id"),
    ("PadCollate.batch empty", lambda: PadCollate()([]), ValueError,
     "batch must hold at least one"),
    ("PadCollate.batch int", lambda: PadCollate()(3), TypeError, "batch must be a list"),
    ("PadCollate.batch 2-D", lambda: PadCollate()([torch.ones(2, 2)]), ValueError,
     "every sample must be a 1-D sequence"),
    # write_shards, ShardedStream
    ("write_shards.samples", lambda: write_shards(3, "unused", 1), TypeError,
     "samples must be an iterable"),
    ("write_shards.samples str", lambda: write_shards("abc", "unused", 1), TypeError, "samples"),
    ("write_shards.directory", lambda: write_shards([1], 3, 1), TypeError,
     "directory must be a str or os.PathLike"),
    ("write_shards.n_files zero", lambda: write_shards([1], "unused", 0), ValueError,
     "n_files must be an int >= 1"),
    ("write_shards.n_files bool", lambda: write_shards([1], "unused", True), ValueError,
     "n_files"),
    ("ShardedStream.files str", lambda: ShardedStream("shard-00000.jsonl"), TypeError,
     "files must be a list or tuple"),
    ("ShardedStream.files empty", lambda: ShardedStream([]), ValueError,
     "files must hold at least one"),
    ("ShardedStream.files int", lambda: ShardedStream(3), TypeError, "files"),
    ("ShardedStream.by", lambda: ShardedStream(["a"], by="lines"), ValueError,
     "by must be one of 'auto', 'files', 'samples'"),
    ("ShardedStream.rank bool", lambda: ShardedStream(["a"], rank=True, world_size=2),
     ValueError, "rank"),
    ("ShardedStream.rank out of range", lambda: ShardedStream(["a"], rank=2, world_size=2),
     ValueError, r"rank must be an int in \[0, 1\]"),
    ("ShardedStream.world_size", lambda: ShardedStream(["a"], rank=0, world_size=0), ValueError,
     "world_size must be an int >= 1"),
    ("ShardedStream.transform", lambda: ShardedStream(["a"], transform=3), TypeError,
     "transform must be None or a callable"),
    ("ShardedStream.seed", lambda: ShardedStream(["a"], seed=-1), ValueError,
     "seed must be an int >= 0"),
    ("ShardedStream.set_epoch str", lambda: ShardedStream(["a"]).set_epoch("1"), TypeError,
     "epoch must be an int >= 0"),
    ("ShardedStream.set_epoch negative", lambda: ShardedStream(["a"]).set_epoch(-1), ValueError,
     "epoch"),
    ("ShardedStream.shard count", lambda: ShardedStream(["a"]).shard(0, 0), ValueError,
     "count must be an int >= 1"),
    ("ShardedStream.shard index", lambda: ShardedStream(["a"]).shard(2, 2), ValueError,
     r"index must be an int in \[0, 1\]"),
    ("ShardedStream.shard index str", lambda: ShardedStream(["a"]).shard("0", 1), TypeError,
     "index"),
    ("ShardedStream.shard by files", lambda: ShardedStream(["a", "b", "c"], by="files").shard(0, 2),
     ValueError, "by='files' needs len"),
    # LoaderConfig, measure_loader, simulate_pipeline
    ("LoaderConfig.batch_size zero", lambda: LoaderConfig(batch_size=0), ValueError,
     "batch_size must be an int >= 1"),
    ("LoaderConfig.batch_size bool", lambda: LoaderConfig(batch_size=True), ValueError,
     "batch_size"),
    ("LoaderConfig.num_workers", lambda: LoaderConfig(num_workers=-1), ValueError,
     "num_workers must be an int >= 0"),
    ("LoaderConfig.num_workers float", lambda: LoaderConfig(num_workers=1.5), ValueError,
     "num_workers"),
    ("LoaderConfig.prefetch_factor", lambda: LoaderConfig(num_workers=1, prefetch_factor=0),
     ValueError, "prefetch_factor must be an int >= 1"),
    ("LoaderConfig.prefetch_factor bool",
     lambda: LoaderConfig(num_workers=1, prefetch_factor=True), ValueError, "prefetch_factor"),
    ("LoaderConfig.prefetch_factor without workers", lambda: LoaderConfig(prefetch_factor=2),
     ValueError, "prefetch_factor need num_workers >= 1"),
    ("LoaderConfig.start_method", lambda: LoaderConfig(num_workers=1, start_method="thread"),
     ValueError, "start_method must be one of None, 'fork', 'spawn', 'forkserver'"),
    ("LoaderConfig.start_method without workers", lambda: LoaderConfig(start_method="fork"),
     ValueError, "start_method needs num_workers >= 1"),
    ("LoaderConfig.loader dataset", lambda: LoaderConfig().loader(3), TypeError,
     "dataset must be a map-style or iterable dataset"),
    ("LoaderConfig.loader collate_fn", lambda: LoaderConfig().loader(DS, 3), TypeError,
     "collate_fn must be None or a callable"),
    ("measure_loader.config", lambda: measure_loader(DS, {"batch_size": 2}), TypeError,
     "config must be a LoaderConfig"),
    ("measure_loader.epochs", lambda: measure_loader(DS, LoaderConfig(), epochs=0), ValueError,
     "epochs must be an int >= 1"),
    ("measure_loader.epochs bool", lambda: measure_loader(DS, LoaderConfig(), epochs=True),
     ValueError, "epochs"),
    ("measure_loader.max_steps", lambda: measure_loader(DS, LoaderConfig(), max_steps=0),
     ValueError, "max_steps"),
    ("measure_loader.compute nan", lambda: measure_loader(DS, LoaderConfig(), compute=NAN),
     ValueError, "compute must be a finite number >= 0"),
    ("measure_loader.compute inf", lambda: measure_loader(DS, LoaderConfig(), compute=INF),
     ValueError, "compute"),
    ("measure_loader.compute negative", lambda: measure_loader(DS, LoaderConfig(), compute=-1),
     ValueError, "compute"),
    ("measure_loader.compute str", lambda: measure_loader(DS, LoaderConfig(), compute="0"),
     TypeError, "compute"),
    ("measure_loader.collate_fn", lambda: measure_loader(DS, LoaderConfig(), collate_fn=3),
     TypeError, "collate_fn"),
    ("measure_loader.dataset empty",
     lambda: measure_loader(TensorDataset(torch.ones(0, 2)), LoaderConfig()), ValueError,
     "dataset must yield at least one sample"),
    ("simulate_pipeline.load_s nan", lambda: simulate_pipeline(NAN, 0.01), ValueError,
     "load_s must be a finite number >= 0"),
    ("simulate_pipeline.load_s inf", lambda: simulate_pipeline(INF, 0.01), ValueError, "load_s"),
    ("simulate_pipeline.load_s bool", lambda: simulate_pipeline(True, 0.01), ValueError,
     "load_s"),
    ("simulate_pipeline.load_s str", lambda: simulate_pipeline("0.1", 0.01), TypeError,
     "load_s"),
    ("simulate_pipeline.compute_s negative", lambda: simulate_pipeline(0.1, -0.01), ValueError,
     "compute_s"),
    ("simulate_pipeline.jitter", lambda: simulate_pipeline(0.1, 0.01, jitter=-1), ValueError,
     "jitter"),
    ("simulate_pipeline.handoff_s", lambda: simulate_pipeline(0.1, 0.01, handoff_s=NAN),
     ValueError, "handoff_s"),
    ("simulate_pipeline.workers", lambda: simulate_pipeline(0.1, 0.01, workers=-1), ValueError,
     "workers must be an int >= 0"),
    ("simulate_pipeline.workers bool", lambda: simulate_pipeline(0.1, 0.01, workers=True),
     ValueError, "workers"),
    ("simulate_pipeline.depth", lambda: simulate_pipeline(0.1, 0.01, depth=0), ValueError,
     "depth must be an int >= 1"),
    ("simulate_pipeline.steps", lambda: simulate_pipeline(0.1, 0.01, steps=0), ValueError,
     "steps"),
    ("simulate_pipeline.cores", lambda: simulate_pipeline(0.1, 0.01, cores=0), ValueError,
     "cores must be an int >= 1"),
    ("simulate_pipeline.seed negative", lambda: simulate_pipeline(0.1, 0.01, seed=-1),
     ValueError, "seed must be an int >= 0"),
    ("simulate_pipeline.seed str", lambda: simulate_pipeline(0.1, 0.01, seed="0"), TypeError,
     "seed"),
    # Prefetcher, map_tensors
    ("Prefetcher.source", lambda: Prefetcher(3), TypeError, "source must be iterable"),
    ("Prefetcher.depth zero", lambda: Prefetcher([1], depth=0), ValueError,
     "depth must be an int >= 1"),
    ("Prefetcher.depth bool", lambda: Prefetcher([1], depth=True), ValueError, "depth"),
    ("Prefetcher.device", lambda: Prefetcher([1], device="bogus"), ValueError, "device"),
    ("map_tensors.fn", lambda: map_tensors([torch.ones(1)], 3), TypeError,
     "fn must be a callable"),
    ("map_tensors.fn without tensors", lambda: map_tensors([1], None), TypeError, "fn"),
]

# Records perfkit returns.
RECORDS = {"LoaderRecord", "PipelineRecord"}


@pytest.mark.timeout(10)  # spend(inf) or a loop of inf seconds would never end
@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    assert not duplicate_ids(CASES)


def test_a_pipeline_of_free_steps_has_no_wait_and_no_division_by_zero():
    rec = simulate_pipeline(0.0, 0.0, workers=2, steps=5)
    assert rec.wait_share == 0.0 and rec.batches_per_s == math.inf


def test_every_public_callable_has_a_case():
    missing = uncovered(data, CASES, RECORDS)
    assert not missing, f"no bad-input case for {missing}"
