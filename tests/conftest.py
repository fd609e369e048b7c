"""Shared pytest setup: GPU tests skip cleanly on CPU-only machines; a one-thread fixture."""

import pytest
import torch


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
