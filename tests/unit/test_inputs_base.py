"""perfkit's base modules (timing, hw, dist, models) refuse bad arguments: each public function
and class raises ``TypeError`` (wrong type) or ``ValueError`` (wrong value) with a message
naming the argument, at the call, before anything is measured, launched or built.

Each case is (id, call, exception, regex on the message); the regex names the argument.
"""

import math

import pytest
import torch
from torch.utils.data import DataLoader

from perfkit import dist, hw, imitate, models, timing
from perfkit.hw import MachineLimits, measure_copy, measure_h2d, measure_limits, measure_matmul
from perfkit.models import (
    DigitsDataset,
    SmallCNN,
    TokenBlockDataset,
    Workload,
    digits_workload,
    encode_corpus,
    gpt2_workload,
    text_corpus,
    tiny_gpt2,
    train_bpe_tokenizer,
    train_steps,
)
from perfkit.timing import Measurement, Timer, benchmark, calibrate_number, interleaved

NAN, INF = math.nan, math.inf
NOOP = lambda: None  # noqa: E731
M = Measurement((1.0, 2.0, 3.0), 0)
LIMITS = MachineLimits("cpu", "test", {"float32": 1e11}, 2e10)
SIZES = dict(dtypes=("float32",), matmul_sizes=[8], copy_sizes=[1 << 16])


class FakeTokenizer:
    def encode(self, text):
        return type("Encoding", (), {"ids": [ord(c) % 256 for c in text]})()


def workload():
    """A workload no case ever steps (each fails first), so the optimizer is a stand-in:
    building a real one costs a second of lazy imports."""
    return Workload("toy", torch.nn.Linear(2, 2), DataLoader([(torch.ones(2), torch.ones(2))]),
                    object(), lambda m, b: m(b[0]).sum(), torch.device("cpu"))


CASES = [  # (id, call, exception, regex on the message)
    # --- timing -------------------------------------------------------------------------
    ("resolve_device unknown", lambda: timing.resolve_device("bogus"), ValueError,
     "device must be None, a torch.device or a device string"),
    ("resolve_device list", lambda: timing.resolve_device([0]), TypeError, "device must be"),
    ("resolve_device bool", lambda: timing.resolve_device(True), TypeError, "device must be"),
    ("resolve_device missing cuda", lambda: timing.resolve_device("cuda:99"), ValueError,
     "device='cuda:99'"),
    ("synchronize.device", lambda: timing.synchronize("bogus"), ValueError, "device"),
    ("Timer.device", lambda: Timer("bogus"), ValueError, "device"),
    ("Measurement.times_s empty", lambda: Measurement((), 0), ValueError,
     "times_s must hold at least one"),
    ("Measurement.times_s str", lambda: Measurement("12", 0), TypeError, "times_s"),
    ("Measurement.times_s item", lambda: Measurement(("1",), 0), TypeError, "times_s"),
    ("Measurement.times_s nan", lambda: Measurement((NAN,), 0), ValueError, "times_s"),
    ("Measurement.times_s inf", lambda: Measurement((INF,), 0), ValueError, "times_s"),
    ("Measurement.times_s negative", lambda: Measurement((-1.0,), 0), ValueError, "times_s"),
    ("Measurement.warmup negative", lambda: Measurement((1.0,), -1), ValueError,
     "warmup must be an int >= 0"),
    ("Measurement.warmup bool", lambda: Measurement((1.0,), True), ValueError, "warmup"),
    ("Measurement.quantile nan", lambda: M.quantile(NAN), ValueError, r"q must be in \[0, 1\]"),
    ("Measurement.quantile above 1", lambda: M.quantile(2), ValueError, "q must be"),
    ("Measurement.quantile str", lambda: M.quantile("0.5"), TypeError, "q must be"),
    ("Measurement.rate nan", lambda: M.rate(NAN), ValueError, "work must be a finite number"),
    ("Measurement.rate negative", lambda: M.rate(-1.0), ValueError, "work"),
    ("Measurement.rate str", lambda: M.rate("1"), TypeError, "work"),
    ("benchmark.fn", lambda: benchmark(42), TypeError, "fn must be callable"),
    ("benchmark.min_time_s inf", lambda: benchmark(NOOP, min_time_s=INF), ValueError,
     "min_time_s must be a finite number >= 0, got inf"),
    ("benchmark.min_time_s nan", lambda: benchmark(NOOP, min_time_s=NAN), ValueError,
     "min_time_s"),
    ("benchmark.min_time_s negative", lambda: benchmark(NOOP, min_time_s=-1.0), ValueError,
     "min_time_s"),
    ("benchmark.min_time_s str", lambda: benchmark(NOOP, min_time_s="1"), TypeError,
     "min_time_s"),
    ("benchmark.warmup negative", lambda: benchmark(NOOP, warmup=-1), ValueError, "warmup"),
    ("benchmark.warmup bool", lambda: benchmark(NOOP, warmup=True), ValueError, "warmup"),
    ("benchmark.repeat zero", lambda: benchmark(NOOP, repeat=0), ValueError,
     "repeat must be an int >= 1"),
    ("benchmark.repeat float", lambda: benchmark(NOOP, repeat=2.0), ValueError, "repeat"),
    ("benchmark.repeat bool", lambda: benchmark(NOOP, repeat=True), ValueError, "repeat"),
    ("benchmark.repeat str", lambda: benchmark(NOOP, repeat="3"), TypeError, "repeat"),
    ("benchmark.number zero", lambda: benchmark(NOOP, number=0), ValueError, "number"),
    ("benchmark.number bool", lambda: benchmark(NOOP, number=True), ValueError, "number"),
    ("benchmark.device", lambda: benchmark(NOOP, device="bogus"), ValueError, "device"),
    ("calibrate_number.fn", lambda: calibrate_number(3), TypeError, "fn must be callable"),
    ("calibrate_number.target_s inf", lambda: calibrate_number(NOOP, INF), ValueError,
     "target_s must be a finite number > 0"),
    ("calibrate_number.target_s nan", lambda: calibrate_number(NOOP, NAN), ValueError,
     "target_s"),
    ("calibrate_number.target_s zero", lambda: calibrate_number(NOOP, 0), ValueError,
     "target_s"),
    ("calibrate_number.target_s str", lambda: calibrate_number(NOOP, "x"), TypeError,
     "target_s"),
    ("interleaved.fns empty", lambda: interleaved([]), ValueError, "fns must hold at least one"),
    ("interleaved.fns item", lambda: interleaved([NOOP, 3]), TypeError,
     r"fns\[1\] must be callable"),
    ("interleaved.fns callable", lambda: interleaved(NOOP), TypeError, "fns must be a list"),
    ("interleaved.fns str", lambda: interleaved("ab"), TypeError, "fns must be a list"),
    ("interleaved.warmup", lambda: interleaved([NOOP], warmup=-1), ValueError, "warmup"),
    ("interleaved.repeat", lambda: interleaved([NOOP], repeat=0), ValueError, "repeat"),
    # --- hw -----------------------------------------------------------------------------
    ("measure_matmul.n zero", lambda: measure_matmul(0), ValueError,
     "n must be an int >= 1"),
    ("measure_matmul.n negative", lambda: measure_matmul(-8), ValueError, "n must be"),
    ("measure_matmul.n bool", lambda: measure_matmul(True), ValueError, "n must be"),
    ("measure_matmul.n float", lambda: measure_matmul(8.0), ValueError, "n must be"),
    ("measure_matmul.dtype", lambda: measure_matmul(8, "int8"), ValueError,
     "dtype must be one of"),
    ("measure_matmul.dtype torch", lambda: measure_matmul(8, torch.int8), ValueError,
     "dtype must be one of"),
    ("measure_matmul.dtype list", lambda: measure_matmul(8, ["float32"]), TypeError, "dtype"),
    ("measure_matmul.repeat", lambda: measure_matmul(8, repeat=0), ValueError, "repeat"),
    ("measure_matmul.device", lambda: measure_matmul(8, device="bogus"), ValueError, "device"),
    ("measure_copy.nbytes", lambda: measure_copy(0), ValueError, "nbytes must be"),
    ("measure_copy.nbytes str", lambda: measure_copy("1k"), TypeError, "nbytes"),
    ("measure_copy.repeat", lambda: measure_copy(64, repeat=-1), ValueError, "repeat"),
    ("measure_h2d.nbytes", lambda: measure_h2d(-1), ValueError, "nbytes"),
    ("measure_h2d.repeat", lambda: measure_h2d(64, repeat=0), ValueError, "repeat"),
    ("last_level_cache_bytes.device", lambda: hw.last_level_cache_bytes("bogus"), ValueError,
     "device"),
    ("device_name.device", lambda: hw.device_name("bogus"), ValueError, "device"),
    ("measure_limits.dtypes str", lambda: measure_limits(**SIZES | {"dtypes": "float32"}),
     TypeError, "dtypes must be a list"),
    ("measure_limits.dtypes empty", lambda: measure_limits(**SIZES | {"dtypes": ()}),
     ValueError, "dtypes must hold at least one"),
    ("measure_limits.dtypes unknown", lambda: measure_limits(**SIZES | {"dtypes": ["int8"]}),
     ValueError, "dtype must be one of"),
    ("measure_limits.matmul_sizes empty", lambda: measure_limits(**SIZES | {"matmul_sizes": []}),
     ValueError, "matmul_sizes must hold at least one"),
    ("measure_limits.matmul_sizes zero", lambda: measure_limits(**SIZES | {"matmul_sizes": [8, 0]}),
     ValueError, r"matmul_sizes\[1\] must be an int >= 1"),
    ("measure_limits.matmul_sizes int", lambda: measure_limits(**SIZES | {"matmul_sizes": 8}),
     TypeError, "matmul_sizes must be a list"),
    ("measure_limits.copy_sizes empty", lambda: measure_limits(**SIZES | {"copy_sizes": []}),
     ValueError, "copy_sizes must hold at least one"),
    ("measure_limits.copy_sizes negative", lambda: measure_limits(**SIZES | {"copy_sizes": [-1]}),
     ValueError, r"copy_sizes\[0\]"),
    ("measure_limits.device", lambda: measure_limits(**SIZES, device="bogus"), ValueError,
     "device"),
    ("measure_limits.max_call_s zero", lambda: measure_limits(**SIZES, max_call_s=0), ValueError,
     "max_call_s must be a finite number > 0"),
    ("measure_limits.max_call_s nan", lambda: measure_limits(**SIZES, max_call_s=float("nan")),
     ValueError, "max_call_s"),
    ("measure_limits.max_call_s str", lambda: measure_limits(**SIZES, max_call_s="1s"), TypeError,
     "max_call_s"),
    ("MachineLimits.copy_bytes_per_s zero", lambda: MachineLimits("cpu", "x", {"float32": 1.0}, 0),
     ValueError, "copy_bytes_per_s must be a finite number > 0"),
    ("MachineLimits.copy_bytes_per_s nan", lambda: MachineLimits("cpu", "x", {"float32": 1.0}, NAN),
     ValueError, "copy_bytes_per_s"),
    ("MachineLimits.copy_bytes_per_s str", lambda: MachineLimits("cpu", "x", {"float32": 1.0}, "1"),
     TypeError, "copy_bytes_per_s"),
    ("MachineLimits.matmul_flops nan", lambda: MachineLimits("cpu", "x", {"float32": NAN}, 1.0),
     ValueError, r"matmul_flops\['float32'\]"),
    ("MachineLimits.matmul_flops negative", lambda: MachineLimits("cpu", "x", {"float32": -1}, 1.0),
     ValueError, "matmul_flops"),
    ("MachineLimits.matmul_flops list", lambda: MachineLimits("cpu", "x", [1e9], 1.0), TypeError,
     "matmul_flops must be a dict"),
    ("MachineLimits.peak_flops dtype", lambda: LIMITS.peak_flops("int8"), ValueError,
     "dtype must be one of"),
    ("MachineLimits.peak_flops unmeasured", lambda: LIMITS.peak_flops("bfloat16"), ValueError,
     "dtype 'bfloat16' was not measured"),
    ("MachineLimits.ridge_point dtype", lambda: LIMITS.ridge_point(["float32"]), TypeError,
     "dtype"),
    ("MachineLimits.attainable nan", lambda: LIMITS.attainable(NAN), ValueError, "intensity"),
    ("MachineLimits.share_of_peak nan", lambda: LIMITS.share_of_peak(NAN), ValueError,
     "flops_per_s must be a finite number >= 0"),
    ("MachineLimits.share_of_peak negative", lambda: LIMITS.share_of_peak(-1.0), ValueError,
     "flops_per_s"),
    ("MachineLimits.share_of_peak str", lambda: LIMITS.share_of_peak("1e9"), TypeError,
     "flops_per_s"),
    ("MachineLimits.share_of_bandwidth inf", lambda: LIMITS.share_of_bandwidth(INF), ValueError,
     "bytes_per_s"),
    ("MachineLimits.from_json list", lambda: MachineLimits.from_json("[]"), ValueError,
     "text must hold a JSON object"),
    ("MachineLimits.from_json zero ceiling",
     lambda: MachineLimits.from_json('{"device": "cpu", "name": "x", "matmul_flops": '
                                     '{"float32": 1.0}, "copy_bytes_per_s": 0}'),
     ValueError, "copy_bytes_per_s"),
    ("matmul_roofline.n", lambda: hw.matmul_roofline(0, "float32", LIMITS), ValueError,
     "n must be an int >= 1"),
    ("matmul_roofline.dtype", lambda: hw.matmul_roofline(8, "int8", LIMITS), ValueError, "dtype"),
    ("matmul_roofline.limits", lambda: hw.matmul_roofline(8, "float32", None), TypeError,
     "limits must be a MachineLimits"),
    ("save_limits.limits", lambda: hw.save_limits({"float32": 1e9}, "unused.json"), TypeError,
     "limits must be a MachineLimits"),
    # --- dist ---------------------------------------------------------------------------
    ("launch.target empty", lambda: dist.launch(""), TypeError, "target must be"),
    ("launch.target type", lambda: dist.launch(3), TypeError, "target must be"),
    ("launch.target missing script", lambda: dist.launch("no/such/worker.py"), ValueError,
     "target 'no/such/worker.py'"),
    ("launch.nproc zero", lambda: dist.launch("m", nproc=0), ValueError, "nproc must be"),
    ("launch.nproc bool", lambda: dist.launch("m", nproc=True), ValueError, "nproc"),
    ("launch.nproc float", lambda: dist.launch("m", nproc=1.5), ValueError, "nproc"),
    ("launch.timeout_s inf", lambda: dist.launch("m", timeout_s=INF), ValueError,
     "timeout_s must be a finite number > 0"),
    ("launch.timeout_s nan", lambda: dist.launch("m", timeout_s=NAN), ValueError, "timeout_s"),
    ("launch.timeout_s zero", lambda: dist.launch("m", timeout_s=0), ValueError, "timeout_s"),
    ("launch.timeout_s str", lambda: dist.launch("m", timeout_s="60"), TypeError, "timeout_s"),
    ("launch.args str", lambda: dist.launch("m", args="--size"), TypeError,
     "args must be a list or tuple"),
    ("launch.args int", lambda: dist.launch("m", args=3), TypeError, "args"),
    ("launch.env list", lambda: dist.launch("m", env=["A=1"]), TypeError, "env must be None"),
    ("launch.env value", lambda: dist.launch("m", env={"A": 1}), TypeError, "env"),
    ("launch.pythonpath str", lambda: dist.launch("m", pythonpath="/tmp"), TypeError,
     "pythonpath must be a list or tuple"),
    ("launch.backend", lambda: dist.launch("m", backend="mpi"), ValueError,
     "backend must be None, 'gloo' or 'nccl'"),
    ("init_worker.backend", lambda: dist.init_worker("mpi"), ValueError,
     "backend must be 'gloo' or 'nccl'"),
    ("init_worker.timeout_s", lambda: dist.init_worker("gloo", timeout_s=-1), ValueError,
     "timeout_s"),
    ("init_worker.timeout_s inf", lambda: dist.init_worker("gloo", timeout_s=INF), ValueError,
     "timeout_s"),
    ("worker_result.obj", lambda: dist.worker_result({1, 2}), TypeError,
     "JSON-serialisable obj"),
    ("shutdown.exit_code large", lambda: dist.shutdown(256), ValueError,
     r"exit_code must be an int in \[0, 255\]"),
    ("shutdown.exit_code negative", lambda: dist.shutdown(-1), ValueError, "exit_code"),
    ("shutdown.exit_code str", lambda: dist.shutdown("1"), TypeError, "exit_code"),
    ("shutdown.exit_code bool", lambda: dist.shutdown(True), ValueError, "exit_code"),
    ("worker_main.run", lambda: dist.worker_main(3), TypeError, "run must be callable"),
    ("end_process_tree.pid zero", lambda: dist.end_process_tree(0), ValueError,
     "pid must be an int >= 1"),
    ("end_process_tree.pid str", lambda: dist.end_process_tree("123"), TypeError, "pid"),
    ("end_process_tree.pid bool", lambda: dist.end_process_tree(True), ValueError, "pid"),
    ("end_process_tree.grace_s negative", lambda: dist.end_process_tree(None, -1.0), ValueError,
     "grace_s must be a finite number >= 0"),
    ("end_process_tree.grace_s inf", lambda: dist.end_process_tree(None, INF), ValueError,
     "grace_s"),
    # --- models -------------------------------------------------------------------------
    ("DigitsDataset.cost_ms nan", lambda: DigitsDataset(NAN), ValueError,
     r"cost_ms must be a number in \[0, 1000\]"),
    ("DigitsDataset.cost_ms inf", lambda: DigitsDataset(INF), ValueError, "cost_ms"),
    ("DigitsDataset.cost_ms negative", lambda: DigitsDataset(-1), ValueError, "cost_ms"),
    ("DigitsDataset.cost_ms bool", lambda: DigitsDataset(True), ValueError, "cost_ms"),
    ("DigitsDataset.cost_ms str", lambda: DigitsDataset("1"), ValueError, "cost_ms"),
    ("SmallCNN.channels zero", lambda: SmallCNN(0), ValueError, "channels must be an int >= 1"),
    ("SmallCNN.channels negative", lambda: SmallCNN(-1), ValueError, "channels"),
    ("SmallCNN.channels float", lambda: SmallCNN(1.5), ValueError, "channels"),
    ("SmallCNN.classes", lambda: SmallCNN(8, 0), ValueError, "classes"),
    ("text_corpus.max_bytes zero", lambda: text_corpus(0), ValueError,
     "max_bytes must be an int >= 1"),
    ("text_corpus.max_bytes bool", lambda: text_corpus(True), ValueError, "max_bytes"),
    ("text_corpus.max_bytes list", lambda: text_corpus([1]), TypeError, "max_bytes"),
    ("train_bpe_tokenizer.vocab_size", lambda: train_bpe_tokenizer(10), ValueError,
     "vocab_size must be an int >= 300"),
    ("train_bpe_tokenizer.vocab_size bool", lambda: train_bpe_tokenizer(True), ValueError,
     "vocab_size"),
    ("train_bpe_tokenizer.max_bytes", lambda: train_bpe_tokenizer(300, 0), ValueError,
     "max_bytes"),
    ("train_bpe_tokenizer.cache_dir", lambda: train_bpe_tokenizer(300, 1000, 3), TypeError,
     "cache_dir"),
    ("encode_corpus.text", lambda: encode_corpus(FakeTokenizer(), 3), TypeError,
     "text must be a str"),
    ("encode_corpus.tokenizer", lambda: encode_corpus(None, "x"), TypeError, "tokenizer"),
    ("TokenBlockDataset.block_size", lambda: TokenBlockDataset("a" * 99, FakeTokenizer(), 1),
     ValueError, "block_size must be an int >= 2"),
    ("TokenBlockDataset.block_size bool",
     lambda: TokenBlockDataset("a" * 99, FakeTokenizer(), True), ValueError, "block_size"),
    ("TokenBlockDataset.text", lambda: TokenBlockDataset(3, FakeTokenizer(), 4), TypeError,
     "text must be a str"),
    ("TokenBlockDataset.tokenizer", lambda: TokenBlockDataset("a" * 99, None, 4), TypeError,
     "tokenizer"),
    ("TokenBlockDataset.cost_ms", lambda: TokenBlockDataset("a" * 99, FakeTokenizer(), 4,
                                                            cost_ms=NAN), ValueError, "cost_ms"),
    ("TokenBlockDataset.text too short", lambda: TokenBlockDataset("ab", FakeTokenizer(), 4),
     ValueError, "too few for block_size"),
    ("tiny_gpt2.n_head", lambda: tiny_gpt2(n_embd=64, n_head=3), ValueError,
     "n_embd must be a multiple of n_head"),
    ("tiny_gpt2.vocab_size", lambda: tiny_gpt2(vocab_size=0), ValueError, "vocab_size"),
    ("tiny_gpt2.n_layer", lambda: tiny_gpt2(n_layer=-1), ValueError, "n_layer"),
    ("tiny_gpt2.block_size", lambda: tiny_gpt2(block_size=0), ValueError, "block_size"),
    ("tiny_gpt2.n_embd float", lambda: tiny_gpt2(n_embd=64.0), ValueError, "n_embd"),
    ("tiny_gpt2.attention", lambda: tiny_gpt2(attention="flash"), ValueError, "attention must be one of"),
    ("tiny_gpt2.attention None", lambda: tiny_gpt2(attention=None), ValueError, "attention"),
    ("tiny_gpt2.activation", lambda: tiny_gpt2(activation="relu"), ValueError,
     "activation must be one of"),
    ("digits_workload.batch_size bool", lambda: digits_workload(batch_size=True), ValueError,
     "batch_size must be an int >= 1"),
    ("digits_workload.batch_size zero", lambda: digits_workload(batch_size=0), ValueError,
     "batch_size"),
    ("digits_workload.batch_size str", lambda: digits_workload(batch_size="8"), TypeError,
     "batch_size"),
    ("digits_workload.num_workers", lambda: digits_workload(num_workers=-1), ValueError,
     "num_workers"),
    ("digits_workload.cost_ms", lambda: digits_workload(cost_ms=NAN), ValueError, "cost_ms"),
    ("digits_workload.lr nan", lambda: digits_workload(lr=NAN), ValueError,
     "lr must be a finite number > 0"),
    ("digits_workload.lr zero", lambda: digits_workload(lr=0), ValueError, "lr"),
    ("digits_workload.lr str", lambda: digits_workload(lr="1e-3"), TypeError, "lr"),
    ("digits_workload.seed float", lambda: digits_workload(seed=1.5), ValueError, "seed"),
    ("digits_workload.seed str", lambda: digits_workload(seed="0"), TypeError, "seed"),
    ("digits_workload.device", lambda: digits_workload(device="bogus"), ValueError, "device"),
    ("gpt2_workload.vocab_size", lambda: gpt2_workload(vocab_size=10), ValueError,
     "vocab_size must be an int >= 300"),
    ("gpt2_workload.n_head", lambda: gpt2_workload(n_embd=64, n_head=3), ValueError,
     "n_embd must be a multiple of n_head"),
    ("gpt2_workload.block_size", lambda: gpt2_workload(block_size=0), ValueError, "block_size"),
    ("gpt2_workload.cost_ms", lambda: gpt2_workload(cost_ms=-1), ValueError, "cost_ms"),
    ("gpt2_workload.lr", lambda: gpt2_workload(lr=INF), ValueError, "lr"),
    ("train_steps.wl", lambda: train_steps(None, 1), TypeError, "wl must be a"),
    ("train_steps.steps zero", lambda: train_steps(workload(), 0), ValueError,
     "steps must be an int >= 1"),
    ("train_steps.steps bool", lambda: train_steps(workload(), True), ValueError, "steps"),
    ("train_steps.monitor", lambda: train_steps(workload(), 1, monitor=3), TypeError,
     "monitor must be None or have phase"),
    ("train_steps.on_step", lambda: train_steps(workload(), 1, on_step=3), TypeError,
     "on_step"),
    ("imitation_env.name", lambda: imitate.imitation_env("no-avx"), ValueError,
     r"name must be one of \['no-bf16'\] or None"),
    ("imitation_env.environ", lambda: imitate.imitation_env(None, [("A", "b")]), TypeError,
     "environ must be a mapping"),
]

# Public names without a case, and why: they take no arguments, are exceptions perfkit
# raises, or are records perfkit returns (plain data, built by perfkit from checked input).
NO_ARGUMENTS = {"cpu_bf16", "default_backend", "default_limits_path", "digits_data", "imitation"}
EXCEPTIONS = {"LaunchTimeout", "WorkerError"}
RECORDS = {"CopyPoint", "MatmulPoint", "RooflinePoint", "WorkerContext", "Workload"}
# Known gap: a path of the wrong type fails in pathlib with a TypeError that does not name
# ``path`` (hw.py is at the layout test's line limit).
LEFT_ALONE = {"cached_limits"}


@pytest.mark.timeout(10)  # a bad argument that is not refused could hang (min_time_s=inf)
@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("module", [timing, hw, dist, models, imitate], ids=lambda m: m.__name__)
def test_every_public_callable_has_a_case(module):
    callables = {n for n in module.__all__ if callable(getattr(module, n))}
    covered = {c[0].split(".")[0].split(" ")[0] for c in CASES}
    missing = callables - covered - NO_ARGUMENTS - EXCEPTIONS - RECORDS - LEFT_ALONE
    assert not missing, f"no bad-input case for {sorted(missing)}"
