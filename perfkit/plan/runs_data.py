"""Published training runs, as their sources print them: Megatron-LM's Table 1 and llm-foundry's tables.

Rows are copied from the fetched sources by a script, never typed from memory:

* Megatron-LM: Narayanan et al., *Efficient Large-Scale Language Model Training on GPU
  Clusters Using Megatron-LM* (SC 2021, arXiv 2104.04473), Table 1, as NVIDIA/Megatron-LM's
  README showed it (``images/cases_april2021.png`` at commit ``2e90a342f5^``; the README's
  text: vocabulary 51,200, sequence 2048, 8 A100 80GB per node, and "for numbers larger than
  8, typically tensor parallel of size 8 was used": TP = min(MP, 8), PP = MP / TP).
* MosaicML llm-foundry ``scripts/train/benchmarking/README.md`` (commit ``8c8dd48f``), every
  BF16 row, and the MPT shapes of ``scripts/train/yamls/pretrain/mpt-<name>.yaml``.

Usage::

    from perfkit.plan.runs_data import FOUNDRY_ROWS, MEGATRON_ROWS
    print(len(MEGATRON_ROWS), len(FOUNDRY_ROWS), FOUNDRY_TABLES["a100-40gb"])
"""

__all__ = ["FOUNDRY_COMMIT", "FOUNDRY_EARLY_STOP", "FOUNDRY_FLASH2", "FOUNDRY_MB_SWEEP",
           "FOUNDRY_MB_SWEEP_SOURCE", "FOUNDRY_ROWS", "FOUNDRY_TABLES", "MEGATRON_HEADS", "MEGATRON_ROWS",
           "MPT_SHAPES"]

FOUNDRY_COMMIT = "8c8dd48f72168c5d51e2f7b151595892a8fba43d"

# (model, hidden, layers, parameters in billions, model-parallel size, GPUs, batch (sequences),
#  achieved TFLOP/s per GPU, % of theoretical peak, aggregate PFLOP/s)
MEGATRON_ROWS = (
    ("1.7B", 2304, 24, 1.7, 1, 32, 512, 137, 44, 4.4),
    ("3.6B", 3072, 30, 3.6, 2, 64, 512, 138, 44, 8.8),
    ("7.5B", 4096, 36, 7.5, 4, 128, 512, 142, 46, 18.2),
    ("18B", 6144, 40, 18.4, 8, 256, 1024, 135, 43, 34.6),
    ("39B", 8192, 48, 39.1, 16, 512, 1536, 138, 44, 70.8),
    ("76B", 10240, 60, 76.1, 32, 1024, 1792, 140, 45, 143.8),
    ("145B", 12288, 80, 145.6, 64, 1536, 2304, 148, 47, 227.1),
    ("310B", 16384, 96, 310.1, 128, 1920, 2160, 155, 50, 297.4),
    ("530B", 20480, 105, 529.6, 280, 2520, 2520, 163, 52, 410.2),
    ("1T", 25600, 128, 1008.0, 512, 3072, 3072, 163, 52, 502.0),
)

# Attention heads per model: the paper's Table 1 has this column, the README's image of it
# does not (head size hidden / heads: 96 for 1.7B and 3.6B, 160 for 530B and 1T, else 128;
# hidden / 128 is wrong for those four rows).
MEGATRON_HEADS = {"1.7B": 24, "3.6B": 32, "7.5B": 32, "18B": 48, "39B": 64, "76B": 80, "145B": 96,
                  "310B": 128, "530B": 128, "1T": 160}

FOUNDRY_TABLES = {  # key: the README's heading
    "h100-large": "H100 80GB BF16 (Large Scale, >= 128 GPUs)",
    "h100": "H100 80GB BF16",
    "a100-80gb": "A100 80GB with 1600 Gbps node-node interconnect (RoCE)",
    "a100-40gb": "A100 40GB with 1600 Gbps node-node interconnect (RoCE)",
}

# scripts/train/yamls/pretrain/mpt-<name>.yaml: (n_layers, d_model, n_heads, expansion_ratio, vocab_size)
MPT_SHAPES = {
    '125m': (12, 768, 12, 4, 50368),
    '350m': (24, 1024, 16, 4, 50368),
    '760m': (24, 1536, 12, 4, 50368),
    '1b': (24, 2048, 16, 4, 50368),
    '3b': (32, 2560, 20, 4, 50368),
    '7b': (32, 4096, 32, 4, 50368),
    '13b': (40, 5120, 40, 4, 50368),
    '30b': (48, 7168, 56, 4, 50368),
    '70b': (80, 8192, 64, 4, 50368),
}

# Tables whose checkpointed runs recomputed with early stop (PyTorch 2.1's non-reentrant
# checkpoint), each with the source that says so. The large-scale H100 table was added by
# mosaicml/llm-foundry@5e85bd62 ("new benchmarks", Jan 2024), whose runs installed llm-foundry's
# main (``pip_install: '.[gpu-flash2]'`` in submit_benchmarks.py), whose setup.py pins
# ``torch>=2.1,<2.1.1``. The A100-80GB and H100 tables were re-run by b2a43a14
# ("Update_pretrain_benchmarks", Oct 2023), which changed them together with sweep.sh, the script
# that submits each table's runs: its ``IMAGE`` became ``mosaicml/pytorch:2.1.0_cu121-python3.10-
# ubuntu20.04`` (from 1.13.1), passed as ``--image`` to the a100_80gb and h100_80gb lines alike.
# Both commits' yamls ask for ``activation_checkpointing_reentrant: false``. The A100-40GB table
# was not re-run: its runs used PyTorch 1.13.1's image, before early stop.
FOUNDRY_EARLY_STOP = {
    "h100-large": "mosaicml/llm-foundry@5e85bd62 setup.py, scripts/train/benchmarking/"
                  "submit_benchmarks.py, scripts/train/yamls/pretrain/mpt-*.yaml",
    "a100-80gb": "mosaicml/llm-foundry@b2a43a14 scripts/train/benchmarking/sweep.sh (IMAGE), "
                 "scripts/train/yamls/pretrain/mpt-*.yaml",
    "h100": "mosaicml/llm-foundry@b2a43a14 scripts/train/benchmarking/sweep.sh (IMAGE), "
            "scripts/train/yamls/pretrain/mpt-*.yaml",
}

# The rows that ran FlashAttention-2; every other llm-foundry row ran ``attn_impl: triton``,
# the Triton port of the first generation (the MPT yamls' setting and submit_benchmarks.py's
# default; b2a43a14's sweep.sh passes no ``--attn_impl``). The large-scale H100 table's runs
# installed flash-attn 2.4.2 (``.[gpu-flash2]``, 5e85bd62 setup.py), and the script that
# submitted them (5e85bd62 scripts/train/benchmarking/sweep.py) passes ``--attn_impl flash``
# (FlashAttention-2) for 1b, 3b, 7b and 70b and ``triton`` for 13b and 30b. Its per-model lines
# (micro-batch, sharding, checkpointing) match the table's rows; its shared lines do not (they
# ask for ``PURE`` mixed precision, ``BACKWARD_PRE`` and forward prefetch, the table's MP Mode is
# ``DEFAULT``), so only the per-model settings are taken from it: the planner charges that table's
# prefetch as Composer's defaults (``BACKWARD_POST``, no forward prefetch), an assumption against
# the script.
FOUNDRY_FLASH2 = {"h100-large": ("1b", "3b", "7b", "70b")}

# llm-foundry's sweep of the micro-batch size with everything else held (8 A100-80GB, sequence
# 2048, FULL_SHARD, amp_bf16 DEFAULT, no activation checkpointing, gradient accumulation 2):
# not one of the tables the planner is held against; it measures what a micro-batch costs beyond its tokens.
FOUNDRY_MB_SWEEP_SOURCE = ("mosaicml/llm-foundry@beb8dee6 "
                           "scripts/train/benchmarking/ack_ckpt_limits.md, its a100_80gb rows "
                           "without checkpointing")
# (model, seq, GPUs, MFU %, micro-batch, grad accum, global batch, tokens/s per GPU, parameters)
FOUNDRY_MB_SWEEP = (
    ('13b', 2048, 8, 58.67, 2, 2, 32, 2228, 12853954560),
    ('13b', 2048, 8, 49.18, 1, 2, 16, 1867, 12853954560),
    ('7b', 2048, 8, 62.46, 4, 2, 64, 4513, 6658859008),
    ('7b', 2048, 8, 55.97, 2, 2, 32, 4044, 6658859008),
    ('7b', 2048, 8, 46.59, 1, 2, 16, 3366, 6658859008),
)

# (table, model, seq, GPUs, MFU %, micro-batch, grad accum, global batch (sequences),
#  tokens/s per GPU, FSDP mixed-precision mode, sharding strategy, activation checkpointing,
#  parameters). The mode is the README's "MP Mode" column: Composer's ``DEFAULT`` reduces
#  gradients in fp32, ``PURE`` in bf16 (mosaicml/composer composer/distributed/
#  mosaic_parallelism.py, ``get_mixed_precision``).
FOUNDRY_ROWS = (
    ('h100-large', '70b', 2048, 512, 41.25, 8, 1, 4096, 1007, 'DEFAULT', 'FULL_SHARD', True, 64862437376),
    ('h100-large', '70b', 2048, 256, 42.42, 8, 1, 2048, 1035, 'DEFAULT', 'FULL_SHARD', True, 64862437376),
    ('h100-large', '70b', 2048, 128, 43.36, 8, 1, 1024, 1058, 'DEFAULT', 'FULL_SHARD', True, 64862437376),
    ('h100-large', '30b', 2048, 512, 40.27, 8, 1, 4096, 2115, 'DEFAULT', 'FULL_SHARD', True, 29975214080),
    ('h100-large', '30b', 2048, 256, 40.89, 8, 1, 2048, 2148, 'DEFAULT', 'FULL_SHARD', True, 29975214080),
    ('h100-large', '30b', 2048, 128, 41.85, 8, 1, 1024, 2199, 'DEFAULT', 'FULL_SHARD', True, 29975214080),
    ('h100-large', '13b', 2048, 512, 41.12, 16, 1, 8192, 4952, 'DEFAULT', 'FULL_SHARD', True, 12853954560),
    ('h100-large', '13b', 2048, 256, 41.42, 16, 1, 4096, 4989, 'DEFAULT', 'FULL_SHARD', True, 12853954560),
    ('h100-large', '13b', 2048, 128, 42.18, 16, 1, 2048, 5080, 'DEFAULT', 'FULL_SHARD', True, 12853954560),
    ('h100-large', '7b', 2048, 512, 42.2, 6, 1, 3072, 9670, 'DEFAULT', 'FULL_SHARD', False, 6658859008),
    ('h100-large', '7b', 2048, 256, 44.15, 6, 1, 1536, 10119, 'DEFAULT', 'FULL_SHARD', False, 6658859008),
    ('h100-large', '7b', 2048, 128, 45.71, 6, 1, 768, 10475, 'DEFAULT', 'FULL_SHARD', False, 6658859008),
    ('h100-large', '3b', 2048, 512, 39.24, 8, 1, 4096, 21664, 'DEFAULT', 'SHARD_GRAD_OP', False, 2651837440),
    ('h100-large', '3b', 2048, 256, 41.25, 8, 1, 2048, 22772, 'DEFAULT', 'SHARD_GRAD_OP', False, 2651837440),
    ('h100-large', '3b', 2048, 128, 42.43, 8, 1, 1024, 23422, 'DEFAULT', 'SHARD_GRAD_OP', False, 2651837440),
    ('h100-large', '1b', 2048, 512, 36.65, 12, 1, 6144, 39837, 'DEFAULT', 'SHARD_GRAD_OP', False, 1315950592),
    ('h100-large', '1b', 2048, 256, 39.15, 12, 1, 3072, 42555, 'DEFAULT', 'SHARD_GRAD_OP', False, 1315950592),
    ('h100-large', '1b', 2048, 128, 40.6, 12, 1, 1536, 44123, 'DEFAULT', 'SHARD_GRAD_OP', False, 1315950592),
    ('h100', '70b', 2048, 64, 42.57, 8, 4, 2048, 1039, 'DEFAULT', 'FULL_SHARD', True, 64862437376),
    ('h100', '70b', 2048, 32, 36.15, 2, 16, 1024, 882, 'DEFAULT', 'FULL_SHARD', True, 64862437376),
    ('h100', '30b', 8192, 8, 29.92, 1, 21, 168, 1384, 'DEFAULT', 'FULL_SHARD', True, 30019254272),
    ('h100', '30b', 4096, 8, 35.86, 1, 21, 168, 1802, 'DEFAULT', 'FULL_SHARD', True, 29989894144),
    ('h100', '30b', 2048, 32, 43.92, 14, 3, 1344, 2308, 'DEFAULT', 'FULL_SHARD', True, 29975214080),
    ('h100', '30b', 2048, 16, 43.07, 10, 3, 480, 2263, 'DEFAULT', 'FULL_SHARD', True, 29975214080),
    ('h100', '30b', 2048, 8, 38.11, 3, 21, 504, 2002, 'DEFAULT', 'FULL_SHARD', True, 29975214080),
    ('h100', '30b', 1024, 8, 38.76, 6, 21, 1008, 2084, 'DEFAULT', 'FULL_SHARD', True, 29967874048),
    ('h100', '13b', 32768, 8, 31.68, 1, 3, 24, 1976, 'DEFAULT', 'FULL_SHARD', True, 13011240960),
    ('h100', '13b', 16384, 8, 35.55, 3, 3, 72, 2985, 'DEFAULT', 'FULL_SHARD', True, 12927354880),
    ('h100', '13b', 4096, 8, 41.6, 10, 3, 240, 4717, 'DEFAULT', 'FULL_SHARD', True, 12864440320),
    ('h100', '13b', 2048, 64, 39.86, 2, 1, 128, 4800, 'DEFAULT', 'FULL_SHARD', False, 12853954560),
    ('h100', '13b', 2048, 32, 39.95, 2, 1, 64, 4811, 'DEFAULT', 'FULL_SHARD', False, 12853954560),
    ('h100', '13b', 2048, 16, 39.58, 2, 1, 32, 4767, 'DEFAULT', 'FULL_SHARD', False, 12853954560),
    ('h100', '13b', 2048, 8, 39.79, 2, 1, 16, 4792, 'DEFAULT', 'FULL_SHARD', False, 12853954560),
    ('h100', '13b', 1024, 8, 44.27, 40, 3, 960, 5502, 'DEFAULT', 'FULL_SHARD', True, 12848711680),
    ('h100', '7b', 65536, 8, 28.59, 1, 2, 16, 1956, 'DEFAULT', 'FULL_SHARD', True, 6918905856),
    ('h100', '7b', 32768, 8, 30.94, 2, 2, 32, 3318, 'DEFAULT', 'FULL_SHARD', True, 6784688128),
    ('h100', '7b', 8192, 8, 37.14, 8, 2, 128, 6935, 'DEFAULT', 'FULL_SHARD', True, 6684024832),
    ('h100', '7b', 4096, 8, 40.42, 16, 2, 256, 8611, 'DEFAULT', 'FULL_SHARD', True, 6667247616),
    ('h100', '7b', 2048, 8, 46.44, 6, 1, 48, 10643, 'DEFAULT', 'FULL_SHARD', False, 6658859008),
    ('h100', '7b', 1024, 8, 42.83, 64, 2, 1024, 10203, 'DEFAULT', 'FULL_SHARD', True, 6654664704),
    ('h100', '3b', 65536, 8, 26.81, 1, 2, 16, 3262, 'DEFAULT', 'FULL_SHARD', True, 2814366720),
    ('h100', '3b', 32768, 8, 28.84, 3, 6, 144, 5873, 'DEFAULT', 'FULL_SHARD', True, 2730480640),
    ('h100', '3b', 16384, 8, 36.34, 1, 6, 48, 11152, 'DEFAULT', 'FULL_SHARD', False, 2688537600),
    ('h100', '3b', 8192, 8, 40.31, 3, 6, 144, 16578, 'DEFAULT', 'FULL_SHARD', False, 2667566080),
    ('h100', '3b', 4096, 8, 42.31, 5, 6, 240, 20964, 'DEFAULT', 'FULL_SHARD', False, 2657080320),
    ('h100', '3b', 2048, 64, 40.8, 6, 3, 1152, 22525, 'DEFAULT', 'FULL_SHARD', False, 2651837440),
    ('h100', '3b', 2048, 32, 41.7, 6, 3, 576, 23021, 'DEFAULT', 'FULL_SHARD', False, 2651837440),
    ('h100', '3b', 2048, 16, 43.73, 10, 3, 480, 24142, 'DEFAULT', 'FULL_SHARD', False, 2651837440),
    ('h100', '3b', 1024, 8, 46.2, 20, 6, 960, 27046, 'DEFAULT', 'FULL_SHARD', False, 2649216000),
    ('h100', '3b', 512, 8, 46.32, 40, 6, 1920, 27965, 'DEFAULT', 'FULL_SHARD', False, 2647905280),
    ('h100', '1b', 65536, 8, 26.34, 1, 2, 16, 5506, 'DEFAULT', 'FULL_SHARD', True, 1445974016),
    ('h100', '1b', 32768, 8, 33.54, 1, 4, 32, 12025, 'DEFAULT', 'FULL_SHARD', False, 1378865152),
    ('h100', '1b', 16384, 8, 35.22, 2, 4, 64, 19649, 'DEFAULT', 'FULL_SHARD', False, 1345310720),
    ('h100', '1b', 8192, 8, 37.73, 3, 4, 96, 29157, 'DEFAULT', 'FULL_SHARD', False, 1328533504),
    ('h100', '1b', 4096, 8, 40.26, 7, 4, 224, 38535, 'DEFAULT', 'FULL_SHARD', False, 1320144896),
    ('h100', '1b', 2048, 64, 40.85, 20, 1, 1280, 44402, 'DEFAULT', 'FULL_SHARD', False, 1315950592),
    ('h100', '1b', 2048, 32, 41.52, 20, 1, 640, 45130, 'DEFAULT', 'FULL_SHARD', False, 1315950592),
    ('h100', '1b', 2048, 16, 42.36, 20, 1, 320, 46037, 'DEFAULT', 'FULL_SHARD', False, 1315950592),
    ('h100', '1b', 2048, 8, 41.82, 14, 1, 112, 45455, 'DEFAULT', 'FULL_SHARD', False, 1315950592),
    ('h100', '1b', 1024, 8, 41.95, 18, 4, 576, 48910, 'DEFAULT', 'FULL_SHARD', False, 1313853440),
    ('h100', '1b', 512, 8, 43.21, 56, 4, 1792, 52275, 'DEFAULT', 'FULL_SHARD', False, 1312804864),
    ('h100', '760m', 32768, 8, 31.84, 1, 2, 16, 16291, 'DEFAULT', 'FULL_SHARD', False, 807656448),
    ('h100', '760m', 16384, 8, 33.57, 3, 2, 48, 27815, 'DEFAULT', 'FULL_SHARD', False, 782490624),
    ('h100', '760m', 8192, 8, 34.84, 6, 2, 96, 41825, 'DEFAULT', 'FULL_SHARD', False, 769907712),
    ('h100', '760m', 4096, 8, 35.83, 12, 2, 192, 55459, 'DEFAULT', 'FULL_SHARD', False, 763616256),
    ('h100', '760m', 2048, 32, 37.57, 24, 1, 768, 67971, 'DEFAULT', 'FULL_SHARD', False, 760470528),
    ('h100', '760m', 2048, 16, 37.89, 24, 1, 384, 68551, 'DEFAULT', 'FULL_SHARD', False, 760470528),
    ('h100', '760m', 2048, 8, 34.9, 24, 2, 384, 63147, 'DEFAULT', 'FULL_SHARD', False, 760470528),
    ('h100', '760m', 1024, 8, 39.76, 48, 2, 768, 78581, 'DEFAULT', 'FULL_SHARD', False, 758897664),
    ('h100', '760m', 512, 8, 40.42, 96, 2, 1536, 83749, 'DEFAULT', 'FULL_SHARD', False, 758111232),
    ('a100-80gb', '70b', 2048, 64, 53.33, 8, 4, 2048, 410, 'PURE', 'FULL_SHARD', True, 64862437376),
    ('a100-80gb', '70b', 2048, 32, 48.56, 2, 16, 1024, 373, 'PURE', 'FULL_SHARD', True, 64862437376),
    ('a100-80gb', '30b', 8192, 8, 39.38, 1, 21, 168, 574, 'DEFAULT', 'FULL_SHARD', True, 30019254272),
    ('a100-80gb', '30b', 4096, 8, 51.37, 1, 21, 168, 814, 'DEFAULT', 'FULL_SHARD', True, 29989894144),
    ('a100-80gb', '30b', 2048, 8, 55.3, 3, 21, 504, 916, 'DEFAULT', 'FULL_SHARD', True, 29975214080),
    ('a100-80gb', '30b', 1024, 8, 55.82, 6, 21, 1008, 946, 'DEFAULT', 'FULL_SHARD', True, 29967874048),
    ('a100-80gb', '30b', 512, 8, 56.4, 12, 21, 2016, 967, 'DEFAULT', 'FULL_SHARD', True, 29964204032),
    ('a100-80gb', '13b', 32768, 8, 51.69, 1, 3, 24, 1016, 'DEFAULT', 'FULL_SHARD', True, 13011240960),
    ('a100-80gb', '13b', 16384, 8, 54.07, 3, 3, 72, 1431, 'DEFAULT', 'FULL_SHARD', True, 12927354880),
    ('a100-80gb', '13b', 8192, 8, 56.07, 5, 3, 120, 1795, 'DEFAULT', 'FULL_SHARD', True, 12885411840),
    ('a100-80gb', '13b', 4096, 8, 57.62, 10, 3, 240, 2060, 'DEFAULT', 'FULL_SHARD', True, 12864440320),
    ('a100-80gb', '13b', 2048, 8, 59.57, 2, 3, 48, 2262, 'DEFAULT', 'FULL_SHARD', False, 12853954560),
    ('a100-80gb', '13b', 1024, 8, 59.48, 40, 3, 960, 2330, 'DEFAULT', 'FULL_SHARD', True, 12848711680),
    ('a100-80gb', '7b', 65536, 8, 46.97, 1, 2, 16, 1013, 'DEFAULT', 'FULL_SHARD', True, 6918905856),
    ('a100-80gb', '7b', 32768, 8, 49.46, 2, 2, 32, 1672, 'DEFAULT', 'FULL_SHARD', True, 6784688128),
    ('a100-80gb', '7b', 16384, 8, 51.96, 4, 2, 64, 2453, 'DEFAULT', 'FULL_SHARD', True, 6717579264),
    ('a100-80gb', '7b', 8192, 8, 54.47, 8, 2, 128, 3206, 'DEFAULT', 'FULL_SHARD', True, 6684024832),
    ('a100-80gb', '7b', 4096, 8, 54.84, 16, 2, 256, 3684, 'DEFAULT', 'FULL_SHARD', True, 6667247616),
    ('a100-80gb', '7b', 2048, 8, 64.23, 6, 2, 96, 4641, 'DEFAULT', 'FULL_SHARD', False, 6658859008),
    ('a100-80gb', '7b', 1024, 8, 58.01, 64, 2, 1024, 4357, 'DEFAULT', 'FULL_SHARD', True, 6654664704),
    ('a100-80gb', '3b', 65536, 8, 46.05, 1, 2, 16, 1767, 'DEFAULT', 'FULL_SHARD', True, 2814366720),
    ('a100-80gb', '3b', 32768, 8, 47.18, 3, 6, 144, 3029, 'DEFAULT', 'FULL_SHARD', True, 2730480640),
    ('a100-80gb', '3b', 16384, 8, 57.13, 1, 6, 48, 5529, 'DEFAULT', 'FULL_SHARD', False, 2688537600),
    ('a100-80gb', '3b', 8192, 8, 59.34, 3, 6, 144, 7695, 'DEFAULT', 'FULL_SHARD', False, 2667566080),
    ('a100-80gb', '3b', 4096, 8, 60.53, 5, 6, 240, 9457, 'DEFAULT', 'FULL_SHARD', False, 2657080320),
    ('a100-80gb', '3b', 2048, 8, 62.11, 10, 2, 160, 10811, 'DEFAULT', 'FULL_SHARD', False, 2651837440),
    ('a100-80gb', '3b', 1024, 8, 62.73, 20, 6, 960, 11580, 'DEFAULT', 'FULL_SHARD', False, 2649216000),
    ('a100-80gb', '3b', 512, 8, 63.71, 40, 6, 1920, 12127, 'DEFAULT', 'FULL_SHARD', False, 2647905280),
    ('a100-80gb', '1b', 65536, 8, 46.18, 1, 2, 16, 3044, 'DEFAULT', 'FULL_SHARD', True, 1445974016),
    ('a100-80gb', '1b', 32768, 8, 55.52, 1, 4, 32, 6275, 'DEFAULT', 'FULL_SHARD', False, 1378865152),
    ('a100-80gb', '1b', 16384, 8, 56.6, 2, 4, 64, 9956, 'DEFAULT', 'FULL_SHARD', False, 1345310720),
    ('a100-80gb', '1b', 8192, 8, 56.69, 3, 4, 96, 13814, 'DEFAULT', 'FULL_SHARD', False, 1328533504),
    ('a100-80gb', '1b', 4096, 8, 59.0, 7, 4, 224, 17807, 'DEFAULT', 'FULL_SHARD', False, 1320144896),
    ('a100-80gb', '1b', 2048, 8, 59.86, 14, 4, 448, 20513, 'DEFAULT', 'FULL_SHARD', False, 1315950592),
    ('a100-80gb', '1b', 1024, 8, 60.15, 18, 4, 576, 22112, 'DEFAULT', 'FULL_SHARD', False, 1313853440),
    ('a100-80gb', '1b', 512, 8, 60.68, 56, 4, 1792, 23148, 'DEFAULT', 'FULL_SHARD', False, 1312804864),
    ('a100-80gb', '760m', 65536, 8, 45.34, 1, 2, 16, 4143, 'DEFAULT', 'FULL_SHARD', True, 857988096),
    ('a100-80gb', '760m', 32768, 8, 54.57, 1, 2, 16, 8802, 'DEFAULT', 'FULL_SHARD', False, 807656448),
    ('a100-80gb', '760m', 16384, 8, 54.64, 3, 2, 48, 14274, 'DEFAULT', 'FULL_SHARD', False, 782490624),
    ('a100-80gb', '760m', 8192, 8, 55.31, 6, 2, 96, 20933, 'DEFAULT', 'FULL_SHARD', False, 769907712),
    ('a100-80gb', '760m', 4096, 8, 56.05, 12, 2, 192, 27351, 'DEFAULT', 'FULL_SHARD', False, 763616256),
    ('a100-80gb', '760m', 2048, 8, 56.85, 24, 2, 384, 32434, 'DEFAULT', 'FULL_SHARD', False, 760470528),
    ('a100-80gb', '760m', 1024, 8, 47.76, 48, 2, 768, 29765, 'DEFAULT', 'FULL_SHARD', False, 758897664),
    ('a100-80gb', '760m', 512, 8, 45.07, 96, 2, 1536, 29446, 'DEFAULT', 'FULL_SHARD', False, 758111232),
    ('a100-80gb', '350m', 65536, 8, 52.7, 1, 2, 16, 7524, 'DEFAULT', 'FULL_SHARD', False, 420997120),
    ('a100-80gb', '350m', 32768, 8, 52.46, 2, 2, 32, 13652, 'DEFAULT', 'FULL_SHARD', False, 387442688),
    ('a100-80gb', '350m', 16384, 8, 53.28, 4, 2, 64, 23559, 'DEFAULT', 'FULL_SHARD', False, 370665472),
    ('a100-80gb', '350m', 8192, 8, 53.8, 8, 2, 128, 36569, 'DEFAULT', 'FULL_SHARD', False, 362276864),
    ('a100-80gb', '350m', 4096, 8, 53.31, 16, 2, 256, 49555, 'DEFAULT', 'FULL_SHARD', False, 358082560),
    ('a100-80gb', '350m', 2048, 8, 51.62, 32, 2, 512, 58782, 'DEFAULT', 'FULL_SHARD', False, 355985408),
    ('a100-80gb', '350m', 1024, 8, 50.51, 64, 2, 1024, 64813, 'DEFAULT', 'FULL_SHARD', False, 354936832),
    ('a100-80gb', '350m', 512, 8, 50.61, 128, 2, 2048, 69330, 'DEFAULT', 'FULL_SHARD', False, 354412544),
    ('a100-80gb', '125m', 65536, 8, 54.13, 1, 2, 16, 20368, 'DEFAULT', 'FULL_SHARD', False, 174070272),
    ('a100-80gb', '125m', 32768, 8, 52.71, 2, 2, 32, 36407, 'DEFAULT', 'FULL_SHARD', False, 148904448),
    ('a100-80gb', '125m', 16384, 8, 50.61, 4, 2, 64, 60040, 'DEFAULT', 'FULL_SHARD', False, 136321536),
    ('a100-80gb', '125m', 8192, 8, 48.85, 8, 2, 128, 90392, 'DEFAULT', 'FULL_SHARD', False, 130030080),
    ('a100-80gb', '125m', 4096, 8, 46.08, 16, 2, 256, 118396, 'DEFAULT', 'FULL_SHARD', False, 126884352),
    ('a100-80gb', '125m', 2048, 8, 44.79, 40, 2, 640, 142830, 'DEFAULT', 'FULL_SHARD', False, 125311488),
    ('a100-80gb', '125m', 2048, 8, 44.45, 32, 2, 512, 141737, 'DEFAULT', 'FULL_SHARD', False, 125311488),
    ('a100-80gb', '125m', 1024, 8, 43.15, 64, 2, 1024, 156468, 'DEFAULT', 'FULL_SHARD', False, 124525056),
    ('a100-80gb', '125m', 512, 8, 42.56, 128, 2, 2048, 165681, 'DEFAULT', 'FULL_SHARD', False, 124131840),
    ('a100-40gb', '70b', 2048, 128, 48.91, 4, 1, 512, 376, 'PURE', 'FULL_SHARD', True, 64862437376),
    ('a100-40gb', '70b', 2048, 64, 35.87, 2, 1, 128, 276, 'PURE', 'FULL_SHARD', True, 64862437376),
    ('a100-40gb', '30b', 2048, 128, 52.25, 6, 1, 768, 865, 'PURE', 'FULL_SHARD', True, 29975214080),
    ('a100-40gb', '30b', 2048, 32, 51.74, 4, 1, 128, 857, 'PURE', 'FULL_SHARD', True, 29975214080),
    ('a100-40gb', '13b', 8192, 8, 43.95, 1, 16, 128, 1407, 'PURE', 'FULL_SHARD', True, 12885411840),
    ('a100-40gb', '13b', 4096, 8, 44.85, 2, 16, 256, 1603, 'PURE', 'FULL_SHARD', True, 12864440320),
    ('a100-40gb', '13b', 2048, 128, 51.93, 16, 1, 2048, 1972, 'PURE', 'FULL_SHARD', True, 12853954560),
    ('a100-40gb', '13b', 2048, 64, 52.04, 16, 1, 1024, 1976, 'PURE', 'FULL_SHARD', True, 12853954560),
    ('a100-40gb', '13b', 2048, 32, 52.62, 14, 1, 448, 1998, 'PURE', 'FULL_SHARD', True, 12853954560),
    ('a100-40gb', '13b', 2048, 16, 52.5, 10, 1, 160, 1993, 'PURE', 'FULL_SHARD', True, 12853954560),
    ('a100-40gb', '13b', 2048, 8, 43.94, 4, 16, 512, 1668, 'PURE', 'FULL_SHARD', True, 12853954560),
    ('a100-40gb', '13b', 1024, 8, 44.07, 8, 16, 1024, 1727, 'PURE', 'FULL_SHARD', True, 12848711680),
    ('a100-40gb', '13b', 512, 8, 44.28, 16, 16, 2048, 1763, 'PURE', 'FULL_SHARD', True, 12846090240),
    ('a100-40gb', '7b', 16384, 8, 47.65, 1, 4, 32, 2249, 'PURE', 'FULL_SHARD', True, 6717579264),
    ('a100-40gb', '7b', 8192, 8, 49.04, 3, 4, 96, 2887, 'PURE', 'FULL_SHARD', True, 6684024832),
    ('a100-40gb', '7b', 4096, 8, 50.11, 6, 4, 192, 3366, 'PURE', 'FULL_SHARD', True, 6667247616),
    ('a100-40gb', '7b', 2048, 128, 50.14, 18, 1, 2304, 3623, 'PURE', 'FULL_SHARD', True, 6658859008),
    ('a100-40gb', '7b', 2048, 64, 50.73, 18, 1, 1152, 3665, 'PURE', 'FULL_SHARD', True, 6658859008),
    ('a100-40gb', '7b', 2048, 32, 51.55, 18, 1, 576, 3725, 'PURE', 'FULL_SHARD', True, 6658859008),
    ('a100-40gb', '7b', 2048, 16, 50.44, 16, 1, 256, 3645, 'PURE', 'FULL_SHARD', True, 6658859008),
    ('a100-40gb', '7b', 2048, 8, 50.92, 12, 4, 384, 3679, 'PURE', 'FULL_SHARD', True, 6658859008),
    ('a100-40gb', '7b', 1024, 8, 51.31, 24, 4, 768, 3854, 'PURE', 'FULL_SHARD', True, 6654664704),
    ('a100-40gb', '7b', 512, 8, 50.85, 48, 4, 1536, 3895, 'PURE', 'FULL_SHARD', True, 6652567552),
    ('a100-40gb', '3b', 32768, 8, 46.03, 1, 4, 32, 2955, 'PURE', 'FULL_SHARD', True, 2730480640),
    ('a100-40gb', '3b', 16384, 8, 46.14, 2, 8, 128, 4465, 'PURE', 'FULL_SHARD', True, 2688537600),
    ('a100-40gb', '3b', 8192, 8, 55.13, 1, 8, 64, 7149, 'PURE', 'FULL_SHARD', False, 2667566080),
    ('a100-40gb', '3b', 4096, 8, 56.18, 2, 8, 128, 8777, 'PURE', 'FULL_SHARD', False, 2657080320),
    ('a100-40gb', '3b', 2048, 128, 54.8, 6, 1, 768, 9538, 'PURE', 'FULL_SHARD', False, 2651837440),
    ('a100-40gb', '3b', 2048, 64, 55.94, 6, 1, 384, 9736, 'PURE', 'FULL_SHARD', False, 2651837440),
    ('a100-40gb', '3b', 2048, 32, 56.96, 6, 1, 192, 9914, 'PURE', 'FULL_SHARD', False, 2651837440),
    ('a100-40gb', '3b', 2048, 16, 56.02, 5, 1, 80, 9750, 'PURE', 'FULL_SHARD', False, 2651837440),
    ('a100-40gb', '3b', 2048, 8, 57.82, 5, 8, 320, 10065, 'PURE', 'FULL_SHARD', False, 2651837440),
    ('a100-40gb', '3b', 1024, 8, 58.14, 10, 8, 640, 10731, 'PURE', 'FULL_SHARD', False, 2649216000),
    ('a100-40gb', '3b', 512, 8, 59.49, 20, 8, 1280, 11324, 'PURE', 'FULL_SHARD', False, 2647905280),
    ('a100-40gb', '1b', 32768, 8, 45.07, 1, 4, 32, 5095, 'PURE', 'FULL_SHARD', True, 1378865152),
    ('a100-40gb', '1b', 16384, 8, 55.23, 1, 8, 64, 9715, 'PURE', 'FULL_SHARD', False, 1345310720),
    ('a100-40gb', '1b', 8192, 8, 55.29, 2, 8, 128, 13474, 'PURE', 'FULL_SHARD', False, 1328533504),
    ('a100-40gb', '1b', 4096, 8, 55.85, 4, 8, 256, 16856, 'PURE', 'FULL_SHARD', False, 1320144896),
    ('a100-40gb', '1b', 2048, 128, 54.41, 10, 1, 1280, 18647, 'PURE', 'FULL_SHARD', False, 1315950592),
    ('a100-40gb', '1b', 2048, 64, 55.44, 10, 1, 640, 19001, 'PURE', 'FULL_SHARD', False, 1315950592),
    ('a100-40gb', '1b', 2048, 32, 45.39, 10, 1, 320, 15555, 'PURE', 'FULL_SHARD', False, 1315950592),
    ('a100-40gb', '1b', 2048, 16, 55.69, 8, 1, 128, 19085, 'PURE', 'FULL_SHARD', False, 1315950592),
    ('a100-40gb', '1b', 2048, 8, 56.23, 8, 8, 512, 19271, 'PURE', 'FULL_SHARD', False, 1315950592),
    ('a100-40gb', '1b', 1024, 8, 57.02, 16, 8, 1024, 20959, 'PURE', 'FULL_SHARD', False, 1313853440),
    ('a100-40gb', '1b', 512, 8, 57.1, 32, 8, 2048, 21782, 'PURE', 'FULL_SHARD', False, 1312804864),
    ('a100-40gb', '760m', 32768, 8, 44.53, 1, 4, 32, 7183, 'PURE', 'FULL_SHARD', True, 807656448),
    ('a100-40gb', '760m', 16384, 8, 53.26, 1, 4, 32, 13914, 'PURE', 'FULL_SHARD', False, 782490624),
    ('a100-40gb', '760m', 8192, 8, 53.12, 3, 4, 96, 20106, 'PURE', 'FULL_SHARD', False, 769907712),
    ('a100-40gb', '760m', 4096, 8, 53.0, 6, 4, 192, 25863, 'PURE', 'FULL_SHARD', False, 763616256),
    ('a100-40gb', '760m', 2048, 128, 50.73, 12, 1, 1536, 28940, 'PURE', 'FULL_SHARD', False, 760470528),
    ('a100-40gb', '760m', 2048, 64, 51.44, 12, 1, 768, 29344, 'PURE', 'FULL_SHARD', False, 760470528),
    ('a100-40gb', '760m', 2048, 32, 51.97, 12, 1, 384, 29648, 'PURE', 'FULL_SHARD', False, 760470528),
    ('a100-40gb', '760m', 2048, 16, 51.9, 12, 1, 192, 29607, 'PURE', 'FULL_SHARD', False, 760470528),
    ('a100-40gb', '760m', 2048, 8, 52.89, 12, 4, 384, 30173, 'PURE', 'FULL_SHARD', False, 760470528),
    ('a100-40gb', '760m', 1024, 8, 53.63, 24, 4, 768, 33422, 'PURE', 'FULL_SHARD', False, 758897664),
    ('a100-40gb', '760m', 512, 8, 53.47, 48, 4, 1536, 34938, 'PURE', 'FULL_SHARD', False, 758111232),
    ('a100-40gb', '350m', 32768, 8, 51.55, 1, 4, 32, 13416, 'PURE', 'FULL_SHARD', False, 387442688),
    ('a100-40gb', '350m', 16384, 8, 51.78, 2, 4, 64, 22896, 'PURE', 'FULL_SHARD', False, 370665472),
    ('a100-40gb', '350m', 8192, 8, 51.39, 4, 4, 128, 34933, 'PURE', 'FULL_SHARD', False, 362276864),
    ('a100-40gb', '350m', 4096, 8, 50.38, 8, 4, 256, 46833, 'PURE', 'FULL_SHARD', False, 358082560),
    ('a100-40gb', '350m', 2048, 128, 45.61, 18, 1, 2304, 51934, 'PURE', 'FULL_SHARD', False, 355985408),
    ('a100-40gb', '350m', 2048, 64, 46.27, 18, 1, 1152, 52689, 'PURE', 'FULL_SHARD', False, 355985408),
    ('a100-40gb', '350m', 2048, 32, 47.26, 18, 1, 576, 53811, 'PURE', 'FULL_SHARD', False, 355985408),
    ('a100-40gb', '350m', 2048, 16, 48.66, 18, 1, 288, 55413, 'PURE', 'FULL_SHARD', False, 355985408),
    ('a100-40gb', '350m', 2048, 8, 49.17, 16, 4, 512, 55995, 'PURE', 'FULL_SHARD', False, 355985408),
    ('a100-40gb', '350m', 1024, 8, 48.73, 32, 4, 1024, 62523, 'PURE', 'FULL_SHARD', False, 354936832),
    ('a100-40gb', '350m', 512, 8, 48.39, 64, 4, 2048, 66284, 'PURE', 'FULL_SHARD', False, 354412544),
    ('a100-40gb', '125m', 32768, 8, 47.27, 1, 4, 32, 32651, 'PURE', 'FULL_SHARD', False, 148904448),
    ('a100-40gb', '125m', 16384, 8, 46.77, 2, 3, 48, 55484, 'PURE', 'FULL_SHARD', False, 136321536),
    ('a100-40gb', '125m', 8192, 8, 46.94, 5, 3, 120, 86858, 'PURE', 'FULL_SHARD', False, 130030080),
    ('a100-40gb', '125m', 4096, 8, 44.82, 13, 3, 312, 115162, 'PURE', 'FULL_SHARD', False, 126884352),
    ('a100-40gb', '125m', 2048, 128, 38.86, 26, 1, 3328, 123936, 'PURE', 'FULL_SHARD', False, 125311488),
    ('a100-40gb', '125m', 2048, 64, 39.27, 26, 1, 1664, 125234, 'PURE', 'FULL_SHARD', False, 125311488),
    ('a100-40gb', '125m', 2048, 32, 39.86, 26, 1, 832, 127122, 'PURE', 'FULL_SHARD', False, 125311488),
    ('a100-40gb', '125m', 2048, 16, 40.93, 26, 1, 416, 130535, 'PURE', 'FULL_SHARD', False, 125311488),
    ('a100-40gb', '125m', 2048, 8, 42.75, 26, 3, 624, 136334, 'PURE', 'FULL_SHARD', False, 125311488),
    ('a100-40gb', '125m', 1024, 8, 40.89, 52, 3, 1248, 148289, 'PURE', 'FULL_SHARD', False, 124525056),
    ('a100-40gb', '125m', 512, 8, 40.26, 104, 3, 2496, 156735, 'PURE', 'FULL_SHARD', False, 124131840),
)
