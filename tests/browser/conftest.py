"""Browser tests: the ``browser`` marker, its skip rule, and the shared fixtures.

Tests marked ``browser`` skip, with the reason, only when Chromium or Playwright is
missing (``make browser-deps`` installs both). Fixtures, module-scoped so one server and
one browser serve a module's tests: ``lab_server`` (JupyterLab on the repository root,
QUICK sizes) and ``browser`` (headless Chromium); both are stopped even when a test fails,
and their teardown fails the run if a process they started is still alive.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_harness import (
    ROOT,
    SCREENSHOTS,
    BrowserSession,
    LabServer,
    missing_browser_tools,
    running_browser,
    running_lab,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "browser: drives JupyterLab or the site in a real Chromium; skipped only "
        "when Chromium or Playwright is missing")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = missing_browser_tools()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"browser test: {reason}")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


# --- fixtures ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """JupyterLab on the repository root (QUICK sizes), for the tests of one module."""
    with running_lab(ROOT, tmp_path_factory.mktemp("jupyterlab")) as server:
        yield server


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserSession]:
    """Headless Chromium through Playwright, for the tests of one module."""
    with running_browser(tmp_path_factory.mktemp("chromium-profile")) as session:
        yield session


@pytest.fixture
def page(browser: BrowserSession) -> Iterator[Any]:
    """A fresh browser tab, closed after the test."""
    tab = browser.new_page()
    try:
        yield tab
    finally:
        with contextlib.suppress(Exception):
            tab.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    """``build/screenshots/``, created if needed."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
