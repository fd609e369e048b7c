"""Shared pytest setup: GPU tests skip cleanly on CPU-only machines."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA; this machine has no GPU (runs on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
