"""Shared pytest setup: GPU tests skip cleanly on CPU-only machines; a one-thread fixture;
fixed machine limits for tests of code that only scales by them."""

import os

import matplotlib
import pytest
import torch

from perfkit import hw
from perfkit.imitate import imitation_env


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA; this machine has no GPU (runs on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def one_thread():
    """One intra-op thread for the test, restored after.

    Tiny models on a shared 2-core machine: two intra-op threads that wait on each other at
    every op ran a CNN step 30x slower under load than one thread did (measured).
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def limits():
    """Invented, round ceilings (fp32 100 GFLOP/s, bf16 400 GFLOP/s, copy 20 GB/s): tests
    that only scale by the limits must not depend on this machine's measured ones."""
    return hw.MachineLimits(device="cpu", name="test", copy_bytes_per_s=2e10,
                            matmul_flops={"float32": 1e11, "bfloat16": 4e11})


@pytest.fixture(autouse=True)
def no_overlapping_text(monkeypatch):
    """Every figure a test draws is checked for overlapping text before it is closed.

    Catches tick labels over each other, legends over titles or axis labels, annotations on
    top of one another: what a reader of the notebook or the site would see.
    """
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from perfkit.viz import text_overlaps

    found = []
    real_close = plt.close

    def check(fig):
        for pair in text_overlaps(fig):
            found.append((fig.axes[0].get_title() if fig.axes else "", *pair))

    def close(fig=None):
        figs = ([plt.figure(n) for n in plt.get_fignums()] if fig == "all"
                else [fig] if isinstance(fig, matplotlib.figure.Figure)
                else [plt.gcf()] if fig is None and plt.get_fignums() else [])
        for f in figs:
            check(f)
        return real_close(fig)

    monkeypatch.setattr(plt, "close", close)
    yield
    for n in plt.get_fignums():
        check(plt.figure(n))
    real_close("all")
    if found:
        raise AssertionError("figures with overlapping text (title; text; text): "
                             + "; ".join(" | ".join(map(repr, f)) for f in found[:8]))


# --- the CPU that `make test` imitates ----------------------------------------------------
# The course was once tuned on a CPU with native bf16 and then overran its budgets on one
# without it. So `make test` runs the QUICK course and the lab graders as on that CPU:
# PERFKIT_IMITATE=no-bf16 (perfkit.hw: oneDNN and ATen capped at AVX2, bf16 on emulated
# kernels) plus the caps themselves, so a process that runs a torch op before importing
# perfkit is capped too. PERFKIT_TEST_IMITATE= (empty) runs them natively; `make course`
# runs natively unless PERFKIT_IMITATE is set.


def imitated() -> str:
    """The imitation `make test` uses: ``$PERFKIT_TEST_IMITATE`` (default ``no-bf16``; empty: none)."""
    name = os.environ.get("PERFKIT_TEST_IMITATE", "no-bf16")
    if name and name not in hw.IMITATIONS:
        raise ValueError(f"PERFKIT_TEST_IMITATE must be one of {sorted(hw.IMITATIONS)} or empty, "
                         f"got {name!r}")
    return name


@pytest.fixture
def imitate(monkeypatch):
    """Child processes started in the test (kernels, torchrun jobs) run on the imitated CPU."""
    name = imitated()
    if name:
        monkeypatch.setenv("PERFKIT_IMITATE", name)
    # the caps and, always, the imitation's own compile cache: this process's Inductor wrote
    # the native one into os.environ on its first compile, and a capped child that inherits
    # it loads native graphs (perfkit.imitate)
    for key, value in imitation_env(name or None).items():
        monkeypatch.setenv(key, value)
    return name
