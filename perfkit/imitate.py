"""Imitating a CPU without native bf16: kernel caps, and a compile cache of its own.

A CPU without ``avx512_bf16`` (an EPYC before Zen 4) is imitated by capping oneDNN and
ATen at AVX2 before torch's first op: bf16 matmuls then take the emulated path, ~100x
slower than fp32, as they do there. ``$PERFKIT_IMITATE=no-bf16`` asks for it;
:mod:`perfkit.hw` applies :func:`imitation_env` when it is imported.

A capped process must never share Inductor's disk cache with a native one. Inductor
generates each graph for the vector ISA the process picks (AVX2 loops step by 8 floats,
AVX-512 by 16), but its cache key does not name that ISA: a graph built under one and
loaded under the other writes past its buffers. So whenever ATen is capped, the compile
cache is the imitation's (``<cache>.no-bf16``), and a native process given an imitation's
cache goes back to the base one. The variable must be set explicitly: Inductor writes
``$TORCHINDUCTOR_CACHE_DIR`` into ``os.environ`` on its first compile, so every child of a
process that once compiled would otherwise inherit the native cache.

Usage::

    env = {**os.environ, **imitation_env("no-bf16")}    # a child that imitates the CPU
    env = {**os.environ, **imitation_env(None)}         # a native child: its own cache
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

__all__ = ["IMITATIONS", "imitation_env"]

IMITATIONS: dict[str, dict[str, str]] = {
    "no-bf16": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}}
"""Each imitation's kernel caps, as environment variables read at torch's first op."""


def _default_cache(environ: Mapping[str, str]) -> str:
    # Inductor's own default (torch._inductor.runtime.cache_dir_utils), without importing it
    user = environ.get("USER") or str(os.getuid())
    return os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")


def imitation_env(name: str | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables a process imitating ``name`` (``None``: none) needs.

    Args:
        name: a key of :data:`IMITATIONS`, or ``None`` for a native process.
        environ: the environment to start from (default ``os.environ``).

    Returns:
        The kernel caps (empty when native) and ``TORCHINDUCTOR_CACHE_DIR``: the base
        cache (``$TORCHINDUCTOR_CACHE_DIR`` without any imitation's suffix, else
        Inductor's default) followed by ``.<name>`` when imitating. Callers that start a
        native child should also drop the caps' variables.

    Raises:
        ValueError: ``name`` is not ``None`` or a key of :data:`IMITATIONS`.
        TypeError: ``environ`` is not a mapping.
    """
    if name is not None and name not in IMITATIONS:
        raise ValueError(f"name must be one of {sorted(IMITATIONS)} or None, got {name!r}")
    if environ is None:
        environ = os.environ
    elif not isinstance(environ, Mapping):
        raise TypeError(f"environ must be a mapping of environment variables, got "
                        f"{type(environ).__name__}")
    base = environ.get("TORCHINDUCTOR_CACHE_DIR") or _default_cache(environ)
    for other in IMITATIONS:
        base = base.removesuffix(f".{other}")
    return {**(IMITATIONS[name] if name else {}),
            "TORCHINDUCTOR_CACHE_DIR": f"{base}.{name}" if name else base}
