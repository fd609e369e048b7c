"""The plan report's memory columns add up as printed (mem GB = states + acts + buffers), and
the usable memory names the figure it is a share of and what the driver shows of it."""

import math

import pytest

from perfkit.plan import MemoryBreakdown, model_from_config, named_cluster, plan
from perfkit.plan.command import header_lines, report_text

LLAMA = model_from_config({"model_type": "llama", "hidden_act": "silu", "hidden_size": 8192,
                           "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
                           "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False},
                          seq=8192, name="Llama-style 70B")


def test_each_row_of_the_report_adds_up_to_its_mem_column():
    p = plan(LLAMA, named_cluster("h100-sxm", efficiency=0.5), gpus=512, global_batch=512)
    lines = report_text(p, top=5).splitlines()
    head = next(i for i, x in enumerate(lines) if x.lstrip().startswith("# layout"))
    assert lines[head].split()[-5:] == ["GB", "states", "acts", "buffers", "limiter"]
    for row in lines[head + 1:head + 6]:
        total, states, acts, buffers = (float(x) for x in row.split()[-5:-1])
        assert total == pytest.approx(states + acts + buffers, abs=1e-9), row
        assert buffers > 0  # ZeRO-3's gathered weights: in no other column


@pytest.mark.parametrize("parts", [(2.2048e9, 58.2358e9, 1.7113e9), (2.26e9, 58.26e9, 0.0),
                                   (0.04e9, 0.04e9, 0.04e9), (1e9, 2e9, 3e9)])
def test_table_gb_parts_sum_to_the_rounded_total_none_below_zero_none_off_by_more_than_a_tenth(parts):
    m = MemoryBreakdown(parts[0], 0.0, 0.0, parts[1], parts[2])
    total, *shown = m.table_gb()
    assert total == pytest.approx(round(sum(parts) / 1e8) / 10)
    assert sum(shown) == pytest.approx(total)
    for got, x in zip(shown, parts):
        assert got >= 0 and abs(got - x / 1e9) < 0.1 + 1e-12 and math.isclose(got * 10, round(got * 10))


def test_usable_memory_names_the_80_gib_it_is_a_share_of_and_what_nvidia_smi_shows():
    p = plan(LLAMA, named_cluster("h100-sxm", efficiency=0.5), gpus=512, global_batch=512)
    line = next(x for x in header_lines(p) if x.startswith("cluster:"))
    assert "usable memory 77.3 GB per GPU (90% of 85.9 GB, 80 GiB, of which nvidia-smi shows 79.65 GiB " \
           "(81,559 MiB)" in line
    a100 = plan(LLAMA, named_cluster("a100-80gb", efficiency=0.5), gpus=512, global_batch=512)
    assert "80 GiB: the rest" in next(x for x in header_lines(a100) if x.startswith("cluster:"))
