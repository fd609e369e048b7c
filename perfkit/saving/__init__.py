"""Saving and failures (module 14): the whole training state through
``torch.distributed.checkpoint``, and how often to save it.

Not activation checkpointing (``torch.utils.checkpoint``, module 04): this wing saves a run
so that it survives a killed process. Each rank writes its own shard with DCP; a checkpoint
counts once every rank's files and a manifest with checksums are complete (``store``); the
step, scheduler, loss scaler, RNG states and data position travel with the model and the
optimizer (``training_state``); a save can be synchronous or a blocking copy to CPU memory
followed by a background persist (``checkpointer``); a SIGTERM saves at the next step
boundary (``preempt``); perfkit's ZeRO stages, ``ShardedModule`` and tensor-parallel
modules, and torch's DDP and FSDP2, load onto another number of ranks (``layouts``); and
Young's and Daly's intervals and the goodput model choose how often, with how far what feeds
them is known (``interval``); a
replicated job that survives a failed replica per step, as torchft does, loses only the step
in flight (``per_step``). Where to write and whether to compress are measured in ``storage``
and ``claims``.

Usage::

    ckpt = Checkpointer("runs/ckpt", keep=2, mode="thread")
    state = TrainState(model=model_state(model), optim=optim_state(opt, model), step=step)
    ckpt.save(step, state)                 # blocks only for the copy to CPU memory
    step = ckpt.load_latest(state)          # the last complete checkpoint, resharded
    print(young_interval(save_s=20.0, mtbf_s=3600.0))
"""

from perfkit.saving import (
    checkpointer,
    claims,
    experiments,
    interval,
    layouts,
    per_step,
    preempt,
    restart_experiments,
    storage,
    storage_notes,
    store,
    training_state,
)
from perfkit.saving.checkpointer import *  # noqa: F403
from perfkit.saving.claims import *  # noqa: F403
from perfkit.saving.experiments import *  # noqa: F403
from perfkit.saving.interval import *  # noqa: F403
from perfkit.saving.layouts import *  # noqa: F403
from perfkit.saving.per_step import *  # noqa: F403
from perfkit.saving.preempt import *  # noqa: F403
from perfkit.saving.restart_experiments import *  # noqa: F403
from perfkit.saving.storage import *  # noqa: F403
from perfkit.saving.storage_notes import *  # noqa: F403
from perfkit.saving.store import *  # noqa: F403
from perfkit.saving.training_state import *  # noqa: F403

__all__ = [*checkpointer.__all__, *claims.__all__, *experiments.__all__, *interval.__all__, *layouts.__all__,
           *per_step.__all__, *preempt.__all__, *restart_experiments.__all__, *storage.__all__,
           *storage_notes.__all__, *store.__all__, *training_state.__all__]
