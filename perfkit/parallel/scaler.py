"""Dynamic loss scaling for fp16 under ZeRO: the overflow check agreed by every rank.

fp16 gradients underflow unless the loss is scaled up (Micikevicius et al., *Mixed
Precision Training*, ICLR 2018), and then a too-large scale overflows them. A sharded
optimizer sees only its slice of the reduced gradient, so an ``inf`` lands on one rank:
as in FSDP's ``ShardedGradScaler``, the "found inf" flag is all-reduced (MAX) so that every
rank skips the same step and backs off the same scale; otherwise the ranks would step
different parts of one model from different iterations.

Usage::

    scaler = ShardedLossScaler(opt, init_scale=2.0**16)   # opt: a ZeroOptimizer
    scaler.scale(loss).backward()
    scaler.unscale_(); opt.clip_grad_norm_(1.0)            # optional: clip the true gradient
    stepped = scaler.step()                                # collective
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from perfkit._checks import check_int, check_real, check_type
from perfkit.parallel.zero import ZeroOptimizer

__all__ = ["ShardedLossScaler"]


class ShardedLossScaler:
    """``torch.amp.GradScaler``'s dynamic scale around a :class:`ZeroOptimizer`, any stage.

    :meth:`step` reduces the gradients (``optimizer.sync_grads()``), checks this rank's
    slices (and stage 3's unsharded parameters) for ``inf``/``NaN``, agrees on the result
    with one all-reduce, then either unscales the slices in place and steps, or drops
    them and steps nothing (no state advances: ``torch.optim`` skips a ``None`` grad). The
    scale is multiplied by ``backoff_factor`` after an overflow and by ``growth_factor``
    after ``growth_interval`` steps in a row without one. To clip, call :meth:`unscale_`
    first (as with ``GradScaler``), so that the norm is the unscaled gradient's.

    Args:
        optimizer: the :class:`ZeroOptimizer` whose gradients come from scaled losses.
        init_scale: the first scale (a finite number > 0).
        growth_factor: factor after ``growth_interval`` clean steps (> 1).
        backoff_factor: factor after an overflow (in ``(0, 1)``).
        growth_interval: clean steps before the scale grows (an int >= 1).

    Raises:
        TypeError, ValueError: for an ``optimizer`` that is not a :class:`ZeroOptimizer`
            or a number out of its range, each named.

    Warning:
        Collective: :meth:`step` must run on every rank (one all-reduce, and the step's).
    """

    def __init__(self, optimizer: ZeroOptimizer, init_scale: float = 2.0**16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000) -> None:
        self.optimizer = check_type("optimizer", optimizer, ZeroOptimizer)
        self.scale_value = float(check_real("init_scale", init_scale, 0, lo_open=True))
        self.growth_factor = check_real("growth_factor", growth_factor, 1, lo_open=True)
        self.backoff_factor = check_real("backoff_factor", backoff_factor, 0, 1, lo_open=True,
                                         hi_open=True)
        self.growth_interval = check_int("growth_interval", growth_interval, 1)
        self.clean_steps = 0  # steps since the last overflow or growth
        self.overflow: bool | None = None  # this step's, once unscale_() ran

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss`` times the current scale (call ``backward`` on the result)."""
        return loss * self.scale_value

    def _leaves(self) -> list[torch.Tensor]:
        """The tensors this rank steps: its slices' pieces, stage 3's unsharded parameters."""
        return [p for g in self.optimizer.optim.param_groups for p in g["params"]
                if p.grad is not None]

    def found_inf(self, leaves: list[torch.Tensor]) -> bool:
        """Whether any rank's slice of the reduced gradient holds ``inf`` or ``NaN``.

        Warning:
            Collective: one all-reduce (MAX) of this rank's flag.
        """
        opt = self.optimizer
        device = leaves[0].device if leaves else None
        flag = torch.zeros(1, device=device)
        for p in leaves:
            flag = torch.maximum(flag, (~torch.isfinite(p.grad)).any().float())
        if opt.world_size > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=opt.process_group)
        return bool(flag.item() > 0)

    @torch.no_grad()
    def unscale_(self) -> bool:
        """Reduce the gradients, check them and divide this rank's slices by the scale, or
        drop them all after an overflow; once per step (:meth:`step` does it if not done).

        Returns:
            ``True`` if some rank found ``inf``/``NaN``: :meth:`step` will skip.

        Warning:
            Collective: every rank must call it (the reduce-scatters, one all-reduce).
        """
        if self.overflow is None:
            self.optimizer.sync_grads()
            leaves = self._leaves()
            self.overflow = self.found_inf(leaves)
            for p in leaves:
                if self.overflow:
                    p.grad = None  # nothing is stepped, no state advances
                else:
                    p.grad.mul_(1.0 / self.scale_value)  # in place: the slices are the grads
        return self.overflow

    @torch.no_grad()
    def step(self) -> bool:
        """Unscale (unless :meth:`unscale_` ran) and step, or skip; then update the scale.

        Returns:
            ``True`` if the optimizer stepped, ``False`` if an overflow skipped the step.

        Warning:
            Collective: every rank must call it, every step.
        """
        overflow, self.overflow = self.unscale_(), None
        self.optimizer.step()
        if overflow:
            self.scale_value *= self.backoff_factor
            self.clean_steps = 0
        else:
            self.clean_steps += 1
            if self.clean_steps == self.growth_interval:
                self.scale_value *= self.growth_factor
                self.clean_steps = 0
        return not overflow

    def state_dict(self) -> dict[str, Any]:
        """The scale and the clean-step count (the same on every rank)."""
        return {"scale": self.scale_value, "clean_steps": self.clean_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`.

        Raises:
            TypeError, ValueError: for a ``state`` that is not such a dict.
        """
        check_type("state", state, dict)
        self.scale_value = float(check_real("state['scale']", state.get("scale"), 0,
                                            lo_open=True))
        self.clean_steps = check_int("state['clean_steps']", state.get("clean_steps"), 0)
