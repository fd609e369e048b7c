"""Tests for perfkit.datasets: slow and real-cost datasets, padding, sharded streams."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from perfkit.data import PadCollate, ShardedStream, SlowDataset, datasets, write_shards

# --- datasets --------------------------------------------------------------------------------


def test_spend_and_slow_dataset():
    ds = SlowDataset(5, 0.0, kind="spin", shape=(2, 2))
    assert len(ds) == 5 and ds[3].tolist() == [[3.0, 3.0], [3.0, 3.0]]
    with pytest.raises(IndexError):
        ds[5]
    with pytest.raises(ValueError, match="kind"):
        SlowDataset(5, 0.0, kind="nap")
    with pytest.raises(ValueError, match="cost_s"):
        SlowDataset(5, -1.0)
    with pytest.raises(ValueError, match="n must"):
        SlowDataset(0, 0.0)
    with pytest.raises(ValueError, match="seconds"):
        datasets.spend(-0.1)


def test_slow_dataset_jitter_is_seeded_by_index_with_the_requested_mean():
    ds = SlowDataset(4000, 0.001, jitter=1.0)
    costs = [ds.cost(i) for i in range(4000)]
    assert costs == [SlowDataset(4000, 0.001, jitter=1.0).cost(i) for i in range(4000)]
    mean = sum(costs) / len(costs)
    cv = (sum((c - mean) ** 2 for c in costs) / len(costs)) ** 0.5 / mean
    assert mean == pytest.approx(0.001, rel=0.1) and cv == pytest.approx(1.0, rel=0.25)
    assert SlowDataset(3, 0.002).cost(1) == 0.002
    with pytest.raises(ValueError, match="jitter"):
        SlowDataset(3, 0.0, jitter=-1)


def test_delayed_adds_a_cost_per_item_and_keeps_len():
    d = datasets.Delayed([1, 2, 3], 0.0, kind="spin")
    assert list(d) == list(d) == [1, 2, 3] and len(d) == 3
    with pytest.raises(ValueError, match="seconds"):
        datasets.Delayed([1], -1.0)
    with pytest.raises(ValueError, match="kind"):
        datasets.Delayed([1], 0.0, kind="io")


class FakeTokenizer:
    class Enc:
        def __init__(self, ids):
            self.ids = ids

    def encode(self, text):
        return self.Enc([ord(c) % 97 for c in text])


def test_text_chunks_tokenize_per_sample_and_pad_to_a_multiple_of_8():
    text = "\n\n".join("x" * n for n in (50, 61, 10, 100, 45))
    ds = datasets.TextChunks(text, FakeTokenizer(), max_len=64, min_chars=40)
    assert [len(ds[i]) for i in range(len(ds))] == [50, 61, 64, 45]
    batch = next(iter(DataLoader(ds, batch_size=4, collate_fn=PadCollate())))
    assert batch["input_ids"].shape == (4, 64)
    with pytest.raises(ValueError, match="paragraph"):
        datasets.TextChunks("short", FakeTokenizer())


def test_text_chunks_with_the_real_corpus_and_bpe_tokenizer(tmp_path):
    from perfkit import models

    text = models.text_corpus(20_000)
    tok = models.train_bpe_tokenizer(300, 20_000, cache_dir=tmp_path)
    ds = datasets.TextChunks(text, tok, max_len=128)
    sample = ds[0]
    assert sample.dtype == torch.int64 and 0 < len(sample) <= 128
    assert tok.decode(sample.tolist()).strip()[:10] == ds.chunks[0].strip()[:10]


def test_augmented_digits_are_deterministic_per_index():
    ds = datasets.AugmentedDigits(size=16, seed=1)
    x, y = ds[5]
    assert x.shape == (1, 16, 16) and x.dtype == torch.float32
    assert torch.equal(x, ds[5][0]) and int(y) == int(ds.base[5][1])
    assert not torch.equal(x, datasets.AugmentedDigits(size=16, seed=2)[5][0])
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0 + 1e-6


# --- padding collation ----------------------------------------------------------------------


def test_pad_collate_rounds_up_to_a_multiple_of_8_with_masks_and_labels():
    out = PadCollate(pad_id=5)([torch.tensor([1, 2, 3]), [4] * 9, torch.arange(8)])
    assert out["input_ids"].shape == (3, 16)
    assert out["attention_mask"].sum(1).tolist() == [3, 9, 8]
    assert out["input_ids"][0].tolist() == [1, 2, 3] + [5] * 13
    assert out["labels"][0, 3:].eq(-100).all() and out["labels"][1, :9].eq(4).all()
    assert PadCollate()([torch.arange(8)])["input_ids"].shape == (1, 8)  # already a multiple
    assert PadCollate(multiple_of=1)([[1, 2, 3]])["input_ids"].shape == (1, 3)
    assert "labels" not in PadCollate(label_pad_id=None)([[1]])


def test_pad_collate_bad_input():
    with pytest.raises(ValueError, match="multiple_of"):
        PadCollate(multiple_of=0)
    with pytest.raises(ValueError, match="at least one"):
        PadCollate()([])
    with pytest.raises(ValueError, match="1-D"):
        PadCollate()([torch.zeros(2, 2)])


# --- sharded streams: no sample duplicated or lost across ranks x workers -----------------


def all_shards(files, world, workers, by="auto", **kw):
    """What every (rank, worker) of a simulated job reads."""
    out = []
    for rank in range(world):
        ds = ShardedStream(files, rank=rank, world_size=world, by=by, **kw)
        for w in range(workers):
            out.append(list(ds.shard(rank * workers + w, world * workers)))
    return out


@pytest.mark.parametrize("n_files", [1, 3, 4, 12])
@pytest.mark.parametrize("world, workers", [(1, 1), (1, 3), (2, 1), (2, 2), (3, 2), (4, 3)])
def test_every_sample_is_read_exactly_once(tmp_path, n_files, world, workers):
    samples = list(range(101))
    files = write_shards(samples, tmp_path, n_files)
    shards = all_shards(files, world, workers)
    got = [s for shard in shards for s in shard]
    assert sorted(got) == samples, "samples were duplicated or lost"
    sizes = [len(s) for s in shards]
    if len(files) % (world * workers):  # sample striding: shards differ by at most one
        assert max(sizes) - min(sizes) <= 1


def test_real_dataloader_workers_and_simulated_ranks(tmp_path):
    samples = [{"id": i, "text": f"line {i}"} for i in range(90)]
    files = write_shards(samples, tmp_path, 4)
    seen = []
    for rank in range(2):
        ds = ShardedStream(files, rank=rank, world_size=2, transform=lambda s: s["id"])
        loader = DataLoader(ds, batch_size=None, num_workers=2)
        seen += list(loader)
    assert sorted(seen) == list(range(90))


def test_naive_iterable_dataset_duplicates_samples_across_workers(tmp_path):
    """The bug ShardedStream prevents: each worker replays the whole stream."""
    files = write_shards(range(20), tmp_path, 2)
    naive = ShardedStream(files)

    class Naive(torch.utils.data.IterableDataset):
        def __iter__(self):
            return naive.shard(0, 1)

    assert len(list(DataLoader(Naive(), batch_size=None, num_workers=2))) == 40
    assert len(list(DataLoader(ShardedStream(files), batch_size=None, num_workers=2))) == 20


def test_shuffled_file_order_is_shared_by_ranks_and_changes_with_the_epoch(tmp_path):
    files = write_shards(range(64), tmp_path, 8)

    def run(epoch):
        shards = []
        for rank in range(2):
            ds = ShardedStream(files, rank=rank, world_size=2, shuffle_files=True, seed=3)
            ds.set_epoch(epoch)
            shards.append(list(ds))
        return shards

    e0, e1 = run(0), run(1)
    for shards in (e0, e1):
        assert sorted(shards[0] + shards[1]) == list(range(64))
    assert e0 != e1 and run(0) == e0


def test_sharded_stream_bad_input(tmp_path):
    files = write_shards(range(10), tmp_path, 3)
    with pytest.raises(ValueError, match="files"):
        ShardedStream([])
    with pytest.raises(ValueError, match="by must"):
        ShardedStream(files, by="lines")
    with pytest.raises(ValueError, match="rank"):
        ShardedStream(files, rank=2, world_size=2)
    with pytest.raises(ValueError, match="divisible"):
        list(ShardedStream(files, rank=0, world_size=2, by="files"))
    with pytest.raises(ValueError, match="n_files"):
        write_shards([1], tmp_path, 0)

