"""The whole training state beside the model: what a resumed run needs to continue bit for bit.

A run resumes exactly only if it restores more than the weights: the optimizer's moments,
the step, the LR scheduler, the loss scaler, every rank's random generators (torch, numpy,
python, CUDA where present; dropout and data augmentation draw from them) and the position
in the data (the sampler's epoch and how many batches of it were used). :class:`TrainState`
gathers them into one DCP ``Stateful``; :class:`ResumableSampler` is a distributed batch
sampler whose position is part of that state and which, after a load, continues with the
batch that comes next, also on another number of ranks (the position counts global batches).

Each rank's RNG states are saved under a key of their own (``rng.rank3``), so DCP writes
them from that rank; a job with more ranks than the checkpoint keeps its new ranks' seeds.

Usage::

    sampler = ResumableSampler(len(dataset), global_batch=32, rank=rank, world_size=world)
    state = TrainState(model=ddp_model, optim=opt, scheduler=sched, sampler=sampler)
    state.step = 10                        # the loop keeps it current
    ckpt.save(state.step, state)           # perfkit.saving.Checkpointer
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from perfkit._checks import check_int, check_seed
from perfkit.saving.layouts import model_state, optim_state

__all__ = ["ResumableSampler", "TrainState", "get_rng_state", "set_rng_state"]


def get_rng_state() -> dict[str, Any]:
    """This process's random generators: torch's CPU generator, numpy's global one,
    python's ``random``, and every CUDA device's where CUDA is present."""
    out = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
           "python": random.getstate()}
    if torch.cuda.is_available():
        out["cuda"] = torch.stack(torch.cuda.get_rng_state_all())  # (devices, state bytes)
    return out


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`get_rng_state` returned (the CUDA part only where CUDA is present).

    Raises:
        TypeError: ``state`` not a dict with ``torch``, ``numpy`` and ``python`` entries.
    """
    if not isinstance(state, dict) or not {"torch", "numpy", "python"} <= set(state):
        raise TypeError(f"state must be a dict from get_rng_state() (torch, numpy, python), "
                        f"got {type(state).__name__}")
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if torch.cuda.is_available() and "cuda" in state:
        torch.cuda.set_rng_state_all(list(state["cuda"]))


def _is_stateful(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


class TrainState:
    """Everything a run needs to continue where it stopped, as one DCP ``Stateful``.

    Args:
        model: a ``torch.nn.Module`` (plain or torch DDP), or any object with
            ``state_dict``/``load_state_dict`` whose state DCP can save (for perfkit's
            sharded layouts and FSDP2: ``perfkit.saving.model_state``).
        optim: a ``torch.optim.Optimizer`` for a module ``model``, a ``Stateful`` (e.g.
            ``perfkit.saving.optim_state``), or ``None``.
        scheduler: an LR scheduler (anything with ``state_dict``/``load_state_dict``) or ``None``.
        scaler: a loss scaler (``torch.amp.GradScaler``) or ``None``.
        sampler: a :class:`ResumableSampler` (or any ``Stateful`` data position) or ``None``.
        step: the step the state is at; the training loop keeps it current.
        rank: this process's rank, which names its RNG entry; ``None``: the process group's
            (0 without one).

    Attributes:
        rng_restored: after a load, whether this rank's RNG states were in the checkpoint.

    Raises:
        TypeError, ValueError: a part that has no ``state_dict``/``load_state_dict``, an
            optimizer without a module, a bad ``step`` or ``rank``.
    """

    def __init__(self, model: Any, optim: Any = None, scheduler: Any = None, scaler: Any = None,
                 sampler: Any = None, step: int = 0, rank: int | None = None) -> None:
        if isinstance(optim, torch.optim.Optimizer) and not isinstance(model, torch.nn.Module):
            raise TypeError("optim is a torch optimizer: model must then be its torch.nn.Module "
                            f"(got {type(model).__name__}); or pass both as Stateful objects")
        for name, part in (("model", model), ("optim", optim), ("scheduler", scheduler),
                           ("scaler", scaler), ("sampler", sampler)):
            if not (part is None and name != "model") and not _is_stateful(part):
                raise TypeError(f"{name} must have state_dict() and load_state_dict()"
                                f"{'' if name == 'model' else ' (or be None)'}, got "
                                f"{type(part).__name__}")
        self.step = check_int("step", step, 0)
        if rank is None:
            import torch.distributed as dist

            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.rank = check_int("rank", rank, 0)
        if isinstance(model, torch.nn.Module) and (optim is None or isinstance(optim, torch.optim.Optimizer)):
            # the layouts' name-keyed format: a DDP job's checkpoint loads into ZeRO, FSDP2 or TP
            self._weights: dict[str, Any] = {"model": model_state(model), **(
                {"optim": optim_state(optim, model)} if optim is not None else {})}
        else:
            self._weights = {"model": model, **({"optim": optim} if optim is not None else {})}
        self._parts = {k: v for k, v in (("scheduler", scheduler), ("scaler", scaler),
                                         ("sampler", sampler)) if v is not None}
        self.rng_restored = False

    @property
    def rng_key(self) -> str:
        """The key of this rank's RNG states in the state dict (``rng.rank<r>``)."""
        return f"rng.rank{self.rank}"

    def state_dict(self) -> dict[str, Any]:
        """The nested state DCP saves: ``model`` and ``optim``, ``step``, the
        scheduler's, scaler's and sampler's states, and ``rng`` -> ``rank<r>`` -> generators."""
        out: dict[str, Any] = {k: v.state_dict() for k, v in self._weights.items()}
        out["step"] = self.step
        for k, v in self._parts.items():
            sd = v.state_dict()
            if sd:  # a disabled GradScaler's state is empty and refuses to load {}
                out[k] = sd
        out["rng"] = {f"rank{self.rank}": get_rng_state()}
        return out

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore from what :meth:`state_dict` produced (after DCP loaded into it). A missing
        ``rng`` entry (a rank the checkpoint did not have) keeps this rank's generators."""
        for k, v in self._weights.items():
            v.load_state_dict(sd[k])
        self.step = int(sd["step"])
        for k, v in self._parts.items():
            if k in sd:
                v.load_state_dict(sd[k])
        mine = sd.get("rng", {}).get(f"rank{self.rank}")
        self.rng_restored = mine is not None
        if mine is not None:
            set_rng_state(mine)


class ResumableSampler(torch.utils.data.Sampler):
    """A distributed batch sampler that resumes mid-epoch: yields this rank's share of each
    global batch, in an order fixed by ``seed`` and the epoch, and counts the batches handed out.

    Each epoch permutes ``range(n)`` (``shuffle``) or keeps it, cuts it into global batches
    of ``global_batch`` (the last incomplete one dropped) and gives rank ``r`` the items
    ``r::world_size`` of each. The position (``epoch``, global ``batch``) is counted when a
    batch is handed out, so a loop that saves after using a batch resumes with the next one;
    use it as a DataLoader's ``batch_sampler`` with ``num_workers=0`` or iterate it directly
    (worker processes fetch ahead, and the count would run ahead with them).

    Args:
        n: the dataset's length.
        global_batch: items per step over all ranks; a multiple of ``world_size``.
        rank: this rank; world_size: the number of ranks.
        seed: the permutation's seed; shuffle: permute each epoch (else keep the order).

    Raises:
        TypeError, ValueError: a bad count, ``rank`` not in ``[0, world_size)``,
            ``global_batch`` not a multiple of ``world_size`` or above ``n``.
    """

    def __init__(self, n: int, global_batch: int, rank: int = 0, world_size: int = 1,
                 seed: int = 0, shuffle: bool = True) -> None:
        self.n = check_int("n", n, 1)
        self.world_size = check_int("world_size", world_size, 1)
        self.rank = check_int("rank", rank, 0, world_size - 1)
        self.global_batch = check_int("global_batch", global_batch, 1, n)
        if global_batch % world_size:
            raise ValueError(f"global_batch must be a multiple of world_size={world_size}, "
                             f"got {global_batch}")
        self.seed = check_seed("seed", seed)
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be a bool, got {shuffle!r}")
        self.shuffle = shuffle
        self.epoch = 0
        self.batch = 0  # global batches of this epoch handed out

    def __len__(self) -> int:
        """Batches per epoch."""
        return self.n // self.global_batch

    def _order(self) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.n)
        g = torch.Generator().manual_seed(self.seed + self.epoch)  # its own: the run's RNG untouched
        return torch.randperm(self.n, generator=g)

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's indices of each remaining batch of the epoch (the next epoch's when
        this one was used up: a position at an epoch's end is the next one's start)."""
        if self.batch >= len(self):
            self.epoch, self.batch = self.epoch + 1, 0
        order = self._order()
        while self.batch < len(self):
            start = self.batch * self.global_batch
            mine = order[start + self.rank:start + self.global_batch:self.world_size]
            self.batch += 1
            yield mine.tolist()

    def state_dict(self) -> dict[str, int]:
        """The position: ``epoch`` and global ``batch`` (the same on every rank), and ``seed``."""
        return {"epoch": self.epoch, "batch": self.batch, "seed": self.seed}

    def load_state_dict(self, sd: dict[str, int]) -> None:
        """Continue at the saved position; refuses a checkpoint taken with another seed."""
        if int(sd["seed"]) != self.seed:
            raise ValueError(f"the checkpoint's sampler used seed {sd['seed']}, this one "
                             f"{self.seed}: the data order would differ")
        self.epoch, self.batch = int(sd["epoch"]), int(sd["batch"])
