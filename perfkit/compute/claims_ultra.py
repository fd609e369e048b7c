"""Everything on at once against a tuned subset (course module 09, the "ultra" claim).

A setting of a tiny GPT-2's training step is a :class:`Setting`: attention kernel, GELU
kernel, precision, DataLoader workers, micro-batches, compiled blocks. :func:`time_switches`
times each switch alone against the plain setting; :func:`time_ultra` times the tuned subset
(the switches that were faster beyond their interval) against everything-on, with the plain
step beside them so that each added switch's cost alone can be added up as a prediction.

Usage::

    alone = time_switches(samples=8, accumulate=8, workers=8, repeat=5)
    ultra = time_ultra(alone, compile_speedup=None, repeat=5)
    print(ultra.speedup(), ultra.predicted())
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch.utils.data import DataLoader, TensorDataset

from perfkit import stats, timing
from perfkit._checks import check_choice, check_int, check_type
from perfkit.models import ACTIVATIONS, ATTENTIONS, tiny_gpt2
from perfkit.timing import Measurement

__all__ = ["Setting", "SwitchTiming", "UltraTiming", "setting_step", "switches", "time_switches",
           "time_ultra"]

VOCAB = 1024


@dataclass(frozen=True)
class Setting:
    """One training setting. The defaults are the plain one: fp32, attention op by op,
    GPT-2's GELU as separate elementwise ops, no workers, no accumulation, no compile."""

    attention: str = "eager"
    activation: str = "gelu_new"
    precision: str = "fp32"
    workers: int = 0
    accumulate: int = 1
    compiled: bool = False

    def __post_init__(self) -> None:
        check_choice("attention", self.attention, ATTENTIONS)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("precision", self.precision, ("fp32", "bf16"))
        check_int("workers", self.workers, 0)
        check_int("accumulate", self.accumulate, 1)
        check_type("compiled", self.compiled, bool)


def switches(workers: int = 8, accumulate: int = 8) -> dict[str, dict]:
    """The advice's switches, each as the fields it changes in a :class:`Setting` (compile apart).

    Raises:
        ValueError, TypeError: for ``workers`` or ``accumulate`` not an int >= 1.
    """
    check_int("workers", workers, 1)
    check_int("accumulate", accumulate, 1)
    return {"fused attention": {"attention": "sdpa"}, "fused GELU": {"activation": "gelu_pytorch_tanh"},
            "bf16 autocast": {"precision": "bf16"}, f"{workers} workers": {"workers": workers},
            f"accumulation {accumulate}": {"accumulate": accumulate}}


def setting_step(setting: Setting, samples: int = 8, seq: int = 64, model_kw: dict | None = None,
                 device: torch.device | str | None = None) -> Callable[[], None]:
    """One optimizer step over ``samples`` samples in ``setting``, as a no-argument callable.

    The tokens come from a ``DataLoader`` (workers persist across steps, so they start once);
    ``setting.accumulate`` micro-batches share the ``samples``; compiling is regional
    (``block.compile()``: the identical blocks share one graph).

    Raises:
        TypeError: for ``setting`` that is not a :class:`Setting`.
        ValueError: for ``samples`` not a positive multiple of ``setting.accumulate``.
    """
    check_type("setting", setting, Setting)
    check_int("samples", samples, 1)
    check_int("seq", seq, 1)
    check_type("model_kw", model_kw, dict, optional=True)
    if samples % setting.accumulate:
        raise ValueError(f"samples ({samples}) must be a multiple of accumulate ({setting.accumulate})")
    dev = timing.resolve_device(device)
    torch.manual_seed(0)
    tokens = TensorDataset(torch.randint(0, VOCAB, (8 * samples, seq)))  # (N, T) token ids, cycled
    m = tiny_gpt2(block_size=seq, **(model_kw or {}), attention=setting.attention,
                  activation=setting.activation).to(dev)
    if setting.compiled:
        for block in m.transformer.h:
            block.compile()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    loader = DataLoader(tokens, batch_size=samples // setting.accumulate, shuffle=True,
                        num_workers=setting.workers, persistent_workers=setting.workers > 0)
    batches = itertools.chain.from_iterable(itertools.repeat(loader))  # epoch after epoch
    bf16 = setting.precision == "bf16"

    def step() -> None:
        for _ in range(setting.accumulate):
            ids = next(batches)[0].to(dev)  # (micro-batch, T)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                loss = m(input_ids=ids, labels=ids).loss / setting.accumulate  # the mean over the batch
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


@dataclass(frozen=True)
class SwitchTiming:
    """The plain setting and each switch alone, timed in alternation."""

    plain: Measurement
    alone: dict[str, Measurement]
    changes: dict[str, dict]
    samples: int
    seq: int
    model_kw: dict

    def speedup(self, name: str) -> stats.Estimate:
        """Plain time over the switch's time (> 1: the switch alone is faster)."""
        return stats.median_ratio(self.plain.times_s, self.alone[name].times_s)

    def kept(self) -> list[str]:
        """The switches faster beyond the interval: their whole interval above 1, as printed
        (``1.00x to 1.06x`` does not lie above 1x, though its unrounded low end may)."""
        def above(e: stats.Estimate) -> bool:
            if e.has_interval and e.low < e.high:
                return e.clear_of(1.0, "x") == "above"
            return e.low > 1  # rounds that all agree: the figure is the interval
        return [n for n in self.alone if above(self.speedup(n))]


def _step_of(setting: Setting, t: SwitchTiming) -> Callable[[], None]:
    return setting_step(setting, t.samples, t.seq, t.model_kw)


def time_switches(samples: int = 8, accumulate: int = 8, workers: int = 8, seq: int = 64,
                  model_kw: dict | None = None, repeat: int = 5) -> SwitchTiming:
    """Time the plain setting and each of :func:`switches` alone against it, interleaved in
    balanced orders (``repeat`` rounded up to whole cycles, :func:`perfkit.timing.interleaved_balanced`).

    Raises:
        ValueError: for counts that are not ints >= 1.
    """
    check_int("repeat", repeat, 1)
    changes = switches(workers, accumulate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # more workers than cores: the advice
        steps = [setting_step(Setting(), samples, seq, model_kw)]
        steps += [setting_step(replace(Setting(), **c), samples, seq, model_kw) for c in changes.values()]
        plain, *alone = timing.interleaved_balanced(steps, warmup=1, repeat=repeat)
    alone_by_name = dict(zip(changes, alone, strict=True))
    return SwitchTiming(plain, alone_by_name, changes, samples, seq, dict(model_kw or {}))


@dataclass(frozen=True)
class UltraTiming:
    """The tuned subset against everything-on, the plain step timed beside them."""

    switches: SwitchTiming
    tuned: Setting
    ultra: Setting
    added: list[str]      # switches everything-on adds to the tuned subset ("compile" included)
    plain: Measurement
    tuned_times: Measurement
    ultra_times: Measurement
    first_step_s: float   # everything-on's first step: workers' start-up, and compile when on
    compile_speedup: float | None  # the factor compile is credited with, when it is added
    tuned_with_acc: Measurement | None = None  # the tuned subset plus accumulation, when that is added

    def accumulation_cost_s(self) -> tuple[float, float] | None:
        """Seconds accumulation added (medians) to the plain step and to the tuned one, when it is
        among the added switches: whether its cost depends on the setting it joins."""
        acc = next((n for n in self.added if n.startswith("accumulation")), None)
        if acc is None or self.tuned_with_acc is None:
            return None
        return (self.switches.alone[acc].median_s - self.switches.plain.median_s,
                self.tuned_with_acc.median_s - self.tuned_times.median_s)

    def speedup(self) -> stats.Estimate:
        """The tuned subset's time over everything-on's (> 1: everything-on is faster)."""
        return stats.median_ratio(self.tuned_times.times_s, self.ultra_times.times_s)

    def added_share(self) -> dict[str, float]:
        """Each added switch's cost alone, as a share of the plain step (negative: it saved time)."""
        return {n: 1 / self.switches.speedup(n).value - 1 for n in self.added if n != "compile"}

    def predicted(self) -> float:
        """The speedup predicted if the added switches' costs alone add up: the tuned time over
        (tuned + plain x the added shares), divided by compile's factor when compile is added."""
        t = self.tuned_times.median_s + self.plain.median_s * sum(self.added_share().values())
        return self.tuned_times.median_s / (t / (self.compile_speedup if "compile" in self.added else 1.0))


def time_ultra(alone: SwitchTiming, compile_speedup: float | None = None, compile_kept: bool = False,
               repeat: int = 5) -> UltraTiming:
    """Build the tuned subset from ``alone`` (its kept switches; compile when ``compile_kept``) and
    everything-on (every switch; compile when ``compile_speedup`` is given), then time the plain
    step, the tuned subset and everything-on interleaved in balanced orders (and the tuned subset
    with accumulation, when that is added), after one untimed first step of everything-on
    (reported: it starts the workers and compiles).

    Raises:
        TypeError: if ``alone`` is not a :class:`SwitchTiming`.
    """
    if not isinstance(alone, SwitchTiming):
        raise TypeError(f"alone must be a SwitchTiming (time_switches), got {type(alone).__name__}")
    check_int("repeat", repeat, 1)
    keep = alone.kept()
    compile_on = compile_speedup is not None
    tuned = replace(Setting(), **{k: v for n in keep for k, v in alone.changes[n].items()},
                    compiled=compile_on and compile_kept)
    every = {k: v for c in alone.changes.values() for k, v in c.items()}
    ultra = replace(Setting(), **every, compiled=compile_on)
    added = [n for n in alone.changes if n not in keep]
    added += ["compile"] if compile_on and not compile_kept else []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        steps = [_step_of(s, alone) for s in (Setting(), tuned, ultra)]
        acc = next((n for n in added if n.startswith("accumulation")), None)
        if acc is not None:
            steps.append(_step_of(replace(tuned, **alone.changes[acc]), alone))
        with timing.Timer() as first:
            steps[2]()  # everything-on: starts the workers, and compiles when compile is on
        plain, tuned_t, ultra_t, *acc_t = timing.interleaved_balanced(steps, warmup=1, repeat=repeat)
    return UltraTiming(alone, tuned, ultra, added, plain, tuned_t, ultra_t, first.elapsed_s, compile_speedup,
                       acc_t[0] if acc_t else None)
