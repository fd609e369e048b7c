"""What a framework and version could run: the search follows the software a run used.

A planner that admits options a run's framework did not have lifts the limits that shaped the
run. A ZeRO-sharded optimizer offered to Megatron-LM of 2021, which had none, or a state recipe
of 16 bytes per parameter where that framework kept 20, leaves room for less tensor parallelism
than the run had. A :class:`Framework` lists what a framework offered (ZeRO stages, sequence
and context parallelism, kinds of recomputation, pipelines whose stages do not divide the
layers), the bytes per parameter its mixed-precision optimizer keeps (a
:class:`perfkit.memory.model_states.StateRecipe`) and any copy of the gradients it makes after
the backward; :func:`framework_problems` says why a layout lies outside it, and
:func:`perfkit.plan.plan` searches only inside it.

:data:`MEGATRON_LM_2021` is Megatron-LM as Narayanan et al. 2021 ran Table 1's GPT runs, read
from NVIDIA/Megatron-LM@a8d172b3 (April 2021), fp16 (see its docstring for each item's file).

Usage::

    p = plan(model, cluster, gpus=128, global_batch=512, framework=MEGATRON_LM_2021)
    print(framework_problems(MEGATRON_LM_2021, model, Layout(dp=64, tp=2, zero=1)))
    print(MEGATRON_LM_2021.recipe.param_bytes + MEGATRON_LM_2021.recipe.grad_bytes)
"""

from __future__ import annotations

from dataclasses import dataclass

from perfkit._checks import check_choice, check_real, check_type
from perfkit.memory.model_states import RECIPES, StateRecipe
from perfkit.plan.layout import Layout
from perfkit.plan.model import RECOMPUTE, ModelSpec

__all__ = ["FRAMEWORKS", "MEGATRON_LM_2021", "MEGATRON_LM_2021_FP16", "Framework",
           "framework_problems", "recipe_words"]


@dataclass(frozen=True)
class Framework:
    """What one framework and version offers the search.

    Attributes:
        name: the framework and version, as a report names it.
        source: where each restriction is read (repository, commit and file, or paper).
        zero_stages: the ZeRO stages it can shard the model states with (0: none).
        sequence_parallel: it has sequence parallelism beside tensor parallelism.
        context_parallel: it has context parallelism (ring attention).
        recompute: the kinds of recomputation it has (:data:`perfkit.plan.model.RECOMPUTE`).
        uneven_stages: its pipeline stages may hold different numbers of blocks; ``False``:
            the stage count must divide the layers.
        recipe: bytes per parameter of its model states (weights, gradients, optimizer).
        grad_copy_bytes: bytes per parameter of a copy of the gradients it makes after the
            backward (once the activations are freed) and frees again, e.g. to flatten them
            for the data-parallel all-reduce; 0 for none.
    """

    name: str
    source: str
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    sequence_parallel: bool = True
    context_parallel: bool = True
    recompute: tuple[str, ...] = RECOMPUTE
    uneven_stages: bool = True
    recipe: StateRecipe = RECIPES["mixed_adam"]
    grad_copy_bytes: float = 0.0

    def __post_init__(self) -> None:
        check_type("name", self.name, str)
        check_type("source", self.source, str)
        check_type("zero_stages", self.zero_stages, tuple)
        if not self.zero_stages:
            raise ValueError("zero_stages must name at least one stage of 0, 1, 2, 3, got ()")
        for z in self.zero_stages:
            check_choice("zero_stages", z, (0, 1, 2, 3))
        check_type("sequence_parallel", self.sequence_parallel, bool)
        check_type("context_parallel", self.context_parallel, bool)
        check_type("recompute", self.recompute, tuple)
        if not self.recompute:
            raise ValueError(f"recompute must name at least one of {RECOMPUTE}, got ()")
        for r in self.recompute:
            check_choice("recompute", r, RECOMPUTE)
        check_type("uneven_stages", self.uneven_stages, bool)
        check_type("recipe", self.recipe, StateRecipe)
        check_real("grad_copy_bytes", self.grad_copy_bytes, 0)

    def options(self, axis: str, values: list, layers: int) -> list:
        """The ``values`` of a :class:`Layout` field ``axis`` that this framework offers
        (``layers``: the model's, for the pipeline's stage count); other fields pass whole."""
        allowed = {"zero": lambda v: v in self.zero_stages,
                   "sp": lambda v: self.sequence_parallel or not v,
                   "cp": lambda v: self.context_parallel or v == 1,
                   "recompute": lambda v: v in self.recompute,
                   "pp": lambda v: self.uneven_stages or layers % v == 0}.get(axis)
        return list(values) if allowed is None else [v for v in values if allowed(v)]

    def refusal(self, axis: str, value: object, layers: int) -> str:
        """Why this framework does not offer ``axis=value`` (``layers``: the model's), in the
        words of :func:`framework_problems`; empty for an axis it does not restrict."""
        return {"zero": f"it has no ZeRO stage {value} (it offers {self.zero_stages})",
                "sp": "it has no sequence parallelism",
                "cp": "it has no context parallelism",
                "recompute": f"it has no {value!r} recomputation (it offers {self.recompute})",
                "pp": f"it needs the pipeline's {value} stages to divide the {layers} layers",
                }.get(axis, "")


def framework_problems(framework: Framework, model: ModelSpec, layout: Layout) -> list[str]:
    """Every reason ``framework`` cannot run ``layout`` of ``model``.

    Args:
        framework: the :class:`Framework`.
        model: the :class:`ModelSpec` (its layers set whether the pipeline splits evenly).
        layout: the :class:`Layout`.

    Returns:
        Sentences naming the option and the framework; empty when it can.

    Raises:
        TypeError: for arguments of the wrong kind.
    """
    check_type("framework", framework, Framework)
    check_type("model", model, ModelSpec)
    check_type("layout", layout, Layout)
    fw, lay, out = framework, layout, []
    if lay.zero not in fw.zero_stages:
        out.append(f"{fw.name} has no ZeRO stage {lay.zero} (it offers {fw.zero_stages})")
    if lay.sp and not fw.sequence_parallel:
        out.append(f"{fw.name} has no sequence parallelism")
    if lay.cp > 1 and not fw.context_parallel:
        out.append(f"{fw.name} has no context parallelism")
    if lay.recompute not in fw.recompute:
        out.append(f"{fw.name} has no {lay.recompute!r} recomputation (it offers {fw.recompute})")
    if not fw.uneven_stages and (model.layers % lay.pp or len(set(lay.stages)) > 1):
        out.append(f"{fw.name} needs the pipeline's {lay.pp} stages to divide the "
                   f"{model.layers} layers")
    return out


# Megatron-LM's Float16OptimizerWithFloat16Params (megatron/optimizer/optimizer.py): fp16
# weights (2) and their fp16 gradients (2); an fp32 main copy of the weights (4) and Adam's fp32
# momentum and variance (8); and an fp32 copy of every gradient, ``main_param.grad =
# model_param.grad.float()`` in ``_copy_model_grads_to_main_grads``, which its ``zero_grad``
# never frees (it resets the fp16 groups only), so it stays allocated from one step to the
# next (4): 20 bytes per parameter, held as 2 weights + 6 gradients + 12 optimizer.
MEGATRON_LM_2021_FP16 = StateRecipe("megatron_lm_2021_fp16", 2, 6, 12)

MEGATRON_LM_2021 = Framework(
    "Megatron-LM (April 2021)",
    "NVIDIA/Megatron-LM@a8d172b3: megatron/optimizer/optimizer.py (Float16OptimizerWithFloat16Params: "
    "fp32 main weights and gradients, no sharded optimizer), megatron/model/distributed.py "
    "(local DDP: _flatten_dense_tensors of the gradients before the all-reduce, without "
    "--use-contiguous-buffers-in-ddp, off by default for fp16), megatron/arguments.py "
    "(--checkpoint-activations: full recomputation; no sequence or context parallelism), "
    "megatron/model/transformer.py ('num_layers must be divisible by "
    "pipeline_model_parallel_size')",
    zero_stages=(0,), sequence_parallel=False, context_parallel=False,
    recompute=("none", "full"), uneven_stages=False, recipe=MEGATRON_LM_2021_FP16,
    grad_copy_bytes=2.0)

# the names ``perfkit plan --framework`` takes
FRAMEWORKS: dict[str, Framework] = {"megatron-lm-2021": MEGATRON_LM_2021}


def recipe_words(framework: Framework) -> str:
    """The bytes per parameter ``framework`` keeps, in the words a plan's header uses.

    Raises:
        TypeError: if ``framework`` is not a :class:`Framework`.
    """
    check_type("framework", framework, Framework)
    r = framework.recipe
    copy = (f", and a {framework.grad_copy_bytes:g}-byte copy of the gradients after backward"
            if framework.grad_copy_bytes else "")
    return (f"bytes per parameter: {framework.name}'s weights {r.param_bytes:g} + gradients "
            f"{r.grad_bytes:g} + optimizer {r.optimizer_bytes:g}{copy} (read from "
            f"{framework.source.split(':', 1)[0]})")
