"""Failures at scale: what a checkpoint of the chosen layout costs, how often to save it, and
the effective training time left under a per-GPU failure rate.

A synchronous job stops whenever any of its GPUs fails, so its mean time between failures is
a GPU's divided by the GPU count. The checkpoint holds each parameter's weights and optimizer
state once (DCP writes a replicated tensor from one rank; gradients are not saved); it takes
that many bytes over the storage's write bandwidth. Daly's interval
(:func:`perfkit.saving.interval.daly_interval`) and the goodput model
(:func:`perfkit.saving.interval.goodput`) then give how often to save and the share of the
wall time spent on training that is kept.

The default failure rate is Llama 3's (Dubey et al. 2024, "The Llama 3 Herd of Models",
arXiv:2407.21783, section 3.3.4 and Table 5): 419 unexpected interruptions in a 54-day
snapshot of pre-training on 16,384 H100 GPUs, one every 3.1 hours, about 0.17 per GPU-year.
The default storage is Llama 3's share of Tectonic's sustained 2 TB/s (section 3.3.1) per GPU.
Llama 3 reports an effective training time above 90 %; :func:`llama3_check` gives the model's
figure at an assumed restart cost and the longest restart that keeps the model above 90 %.

Usage::

    fp = failure_plan(checkpoint_bytes(model), gpus=1024, step_s=4.0)
    print(fp.save_s, fp.interval_s / 60, fp.goodput)
    print("\\n".join(failure_lines(fp)))
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

from perfkit._checks import check_int, check_real, check_type
from perfkit.memory.model_states import RECIPES, StateRecipe
from perfkit.plan.model import ModelSpec
from perfkit.saving.interval import daly_goodput, daly_interval, goodput, young_interval
from perfkit.saving.per_step import per_step_goodput

__all__ = ["DEFAULT_RESTART_S", "LLAMA3_EFFECTIVE_TRAINING", "LLAMA3_FAILURES",
           "LLAMA3_GPU_FAILURES_PER_YEAR", "LLAMA3_STORAGE_BYTES_PER_S", "FailurePlan",
           "add_failure_arguments", "checkpoint_bytes", "failure_lines", "failure_options",
           "failure_plan", "llama3_check"]

YEAR_S = 365.25 * 86400.0
LLAMA3_FAILURES = {
    "unexpected_interruptions": 419, "days": 54, "gpus": 16384,
    "source": "Dubey et al. 2024, The Llama 3 Herd of Models (arXiv:2407.21783), section "
              "3.3.4 and Table 5: 419 unexpected interruptions in a 54-day snapshot of "
              "pre-training on 16,384 H100 GPUs",
}
# failures per GPU per year: 419 / (54 / 365.25 y * 16,384 GPUs) = 0.173
LLAMA3_GPU_FAILURES_PER_YEAR = 419 / (54 * 86400.0 / YEAR_S * 16384)
LLAMA3_STORAGE_BYTES_PER_S = 2e12  # Tectonic, sustained (section 3.3.1; 7 TB/s at peak)
LLAMA3_EFFECTIVE_TRAINING = 0.90  # "higher than 90%" (section 3.3.4)
LLAMA3_PARAMS = 405e9
# an assumption, not a published figure: Daly 2006's examples take R = 10 min
DEFAULT_RESTART_S = 600.0


@dataclass(frozen=True)
class FailurePlan:
    """A run's checkpoint cost, failure rate, best interval and expected effective training."""

    gpus: int
    checkpoint_bytes: float  # the whole job's, once
    storage_bytes_per_s: float  # write bandwidth of the storage, whole job
    save_s: float  # delta: one synchronous save
    gpu_failures_per_year: float
    mtbf_s: float  # M: the job's
    restart_s: float  # R
    interval_s: float  # Daly's
    young_s: float
    goodput: float  # first-order model at interval_s
    daly_goodput: float  # Daly's exact share at interval_s
    step_s: float | None = None
    gpu_state_bytes: float | None = None  # what the most loaded GPU holds of it

    @property
    def steps_per_save(self) -> int | None:
        """Steps between two saves (at least 1), or ``None`` without a step time."""
        return None if self.step_s is None else max(1, round(self.interval_s / self.step_s))

    @property
    def per_step_committed(self) -> float | None:
        """With per-step fault tolerance instead (torchft: each failure drops one replica
        group, and the others lose only the step in flight), the share of the surviving
        groups' steps that commit, ``1 - step / MTBF``
        (:func:`perfkit.saving.per_step_goodput`); ``None`` without a step time."""
        return None if self.step_s is None else per_step_goodput(self.step_s, self.mtbf_s)

    def as_dict(self) -> dict[str, Any]:
        """The fields, the steps between saves, and the per-step committed share."""
        return {**asdict(self), "steps_per_save": self.steps_per_save,
                "per_step_committed": self.per_step_committed}


def checkpoint_bytes(model: ModelSpec, recipe: str | StateRecipe = "mixed_adam") -> float:
    """Bytes of one checkpoint: each parameter's weights and optimizer state, once
    (``"mixed_adam"``: 2 + 12 bytes per parameter; gradients are not saved).

    Raises:
        TypeError, ValueError: for a model that is not a :class:`ModelSpec` or an unknown recipe.
    """
    check_type("model", model, ModelSpec)
    if not isinstance(recipe, StateRecipe):
        if not isinstance(recipe, str) or recipe not in RECIPES:
            raise ValueError(f"recipe must be a StateRecipe or one of {sorted(RECIPES)}, "
                             f"got {recipe!r}")
        recipe = RECIPES[recipe]
    return model.num_params * (recipe.param_bytes + recipe.optimizer_bytes)


def failure_plan(state_bytes: float, gpus: int, step_s: float | None = None,
                 gpu_failures_per_year: float = LLAMA3_GPU_FAILURES_PER_YEAR,
                 storage_bytes_per_s: float | None = None,
                 restart_s: float = DEFAULT_RESTART_S,
                 gpu_state_bytes: float | None = None) -> FailurePlan:
    """The checkpoint's time, the job's MTBF, Daly's interval and the goodput there.

    Args:
        state_bytes: bytes of one checkpoint of the whole job (> 0; :func:`checkpoint_bytes`).
        gpus: GPUs in the job (>= 1); any one failing stops it.
        step_s: seconds per training step (> 0), to state the interval in steps, or ``None``.
        gpu_failures_per_year: failures per GPU per year that stop the job (> 0; default
            Llama 3's, :data:`LLAMA3_GPU_FAILURES_PER_YEAR`).
        storage_bytes_per_s: the storage's write bandwidth for the whole job, bytes/s (> 0;
            default: Llama 3's 2 TB/s over 16,384 GPUs, 122 MB/s per GPU, times ``gpus``).
        restart_s: seconds from a failure to the first resumed step (>= 0; default 600, an
            assumption).
        gpu_state_bytes: what the most loaded GPU holds of the checkpoint (>= 0), reported
            only, or ``None``.

    Returns:
        A :class:`FailurePlan`.

    Raises:
        TypeError, ValueError: for an argument of the wrong kind or out of its range.
    """
    state = check_real("state_bytes", state_bytes, 0, lo_open=True)
    check_int("gpus", gpus, 1)
    if step_s is not None:
        check_real("step_s", step_s, 0, lo_open=True)
    rate = check_real("gpu_failures_per_year", gpu_failures_per_year, 0, lo_open=True)
    bw = (LLAMA3_STORAGE_BYTES_PER_S / LLAMA3_FAILURES["gpus"] * gpus
          if storage_bytes_per_s is None
          else check_real("storage_bytes_per_s", storage_bytes_per_s, 0, lo_open=True))
    r = check_real("restart_s", restart_s, 0)
    if gpu_state_bytes is not None:
        check_real("gpu_state_bytes", gpu_state_bytes, 0)
    delta = state / bw  # s
    mtbf = YEAR_S / (rate * gpus)  # s: any GPU's failure stops the job
    tau = daly_interval(delta, mtbf)
    return FailurePlan(gpus, state, bw, delta, rate, mtbf, r, tau, young_interval(delta, mtbf),
                       goodput(tau, delta, r, mtbf), daly_goodput(tau, delta, r, mtbf),
                       step_s, gpu_state_bytes)


def _duration(s: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if s >= size:
            return f"{s / size:.3g} {unit}"
    return f"{s:.3g} s"


def _bytes(b: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.3g} B"


def llama3_check(restart_s: float = DEFAULT_RESTART_S) -> dict[str, float]:
    """The model on Llama 3 405B's own run: 405e9 parameters (2 + 12 bytes each), 16,384 GPUs,
    Llama 3's failure rate and storage; the expected effective training time against the
    reported "higher than 90%", and the largest restart cost that keeps the model above it.

    Returns:
        ``{"goodput", "daly_goodput", "reported", "interval_s", "save_s", "mtbf_s",
        "restart_s", "max_restart_s"}``.

    Raises:
        TypeError, ValueError: for a restart cost that is not a finite number >= 0.
    """
    fp = failure_plan(LLAMA3_PARAMS * 14, LLAMA3_FAILURES["gpus"],
                      storage_bytes_per_s=LLAMA3_STORAGE_BYTES_PER_S, restart_s=restart_s)
    # goodput falls by 1/M per second of restart: the restart that leaves exactly 90 %
    slack = goodput(fp.interval_s, fp.save_s, 0.0, fp.mtbf_s) - LLAMA3_EFFECTIVE_TRAINING
    return {"goodput": fp.goodput, "daly_goodput": fp.daly_goodput,
            "reported": LLAMA3_EFFECTIVE_TRAINING, "interval_s": fp.interval_s,
            "save_s": fp.save_s, "mtbf_s": fp.mtbf_s, "restart_s": fp.restart_s,
            "max_restart_s": max(0.0, slack * fp.mtbf_s)}


def failure_lines(fp: FailurePlan) -> list[str]:
    """The ``perfkit plan`` section: checkpoint, failures, interval, effective training time,
    and Llama 3's run held against the same model."""
    check_type("fp", fp, FailurePlan)
    held = fp.gpu_state_bytes is not None
    every = "" if fp.steps_per_save is None else f", every {fp.steps_per_save} steps"
    ll = llama3_check(fp.restart_s)
    return [
        "saving and failures (the best layout; a synchronous save, Poisson failures):",
        f"  checkpoint {_bytes(fp.checkpoint_bytes)} (weights and optimizer state"
        + (f"; the most loaded GPU holds {_bytes(fp.gpu_state_bytes)}" if held else "")
        + f") at {_bytes(fp.storage_bytes_per_s)}/s: {_duration(fp.save_s)} per save",
        f"  failures {fp.gpu_failures_per_year:.3g} per GPU-year: one every "
        f"{_duration(fp.mtbf_s)} on {fp.gpus:,} GPUs; restart {_duration(fp.restart_s)}",
        f"  best interval {_duration(fp.interval_s)} (Daly; Young {_duration(fp.young_s)})"
        f"{every}",
        f"  expected effective training time {fp.goodput:.1%} (goodput model; Daly's exact "
        f"{fp.daly_goodput:.1%})",
        f"  Llama 3 405B on 16,384 GPUs by the same model: {ll['goodput']:.1%}, reported above "
        f"{ll['reported']:.0%} (the model stays above it for restarts under "
        f"{_duration(ll['max_restart_s'])})",
    ] + ([] if fp.per_step_committed is None else [
        f"  with per-step fault tolerance instead (torchft: a failed replica group drops out, the "
        f"others lose the step in flight): {fp.per_step_committed:.4%} of the survivors' steps "
        "commit (1 - step / MTBF; not counted: the failed group's GPUs idle while it restarts, "
        "the survivors' wait for its heartbeat timeout; benchmarks/torchft_goodput.py measures "
        "it on this machine)"])


def add_failure_arguments(ap: argparse.ArgumentParser) -> None:
    """Add the ``saving and failures`` argument group to ``perfkit plan``'s parser.

    Raises:
        TypeError: for ``ap`` that is not an ``argparse.ArgumentParser``.
    """
    check_type("ap", ap, argparse.ArgumentParser)
    g = ap.add_argument_group("saving and failures")
    g.add_argument("--storage-gb-per-s", type=float,
                   help="checkpoint storage write bandwidth for the whole job, GB/s (default: "
                        "Llama 3's 2 TB/s over 16,384 GPUs, 0.122 GB/s per GPU)")
    g.add_argument("--gpu-failures-per-year", type=float, default=LLAMA3_GPU_FAILURES_PER_YEAR,
                   help="failures per GPU per year that stop the job (default "
                        f"{LLAMA3_GPU_FAILURES_PER_YEAR:.3g}: Llama 3's 419 unexpected "
                        "interruptions in 54 days on 16,384 GPUs)")
    g.add_argument("--restart-minutes", type=float, default=DEFAULT_RESTART_S / 60,
                   help="minutes from a failure to the first resumed step (default 10, assumed)")


def failure_options(args: argparse.Namespace) -> dict[str, float | None]:
    """``perfkit plan``'s failure flags as :func:`failure_plan`'s keyword arguments, checked
    (before the search, so that a bad flag fails at once): ValueError names the flag."""
    gbs, rate, minutes = args.storage_gb_per_s, args.gpu_failures_per_year, args.restart_minutes
    return {"gpu_failures_per_year": check_real("--gpu-failures-per-year", rate, 0, lo_open=True),
            "storage_bytes_per_s": None if gbs is None else
            check_real("--storage-gb-per-s", gbs, 0, lo_open=True) * 1e9,
            "restart_s": check_real("--restart-minutes", minutes, 0) * 60}
