"""Start and stop JupyterLab and Debian's Chromium for browser tests, leaving nothing running.

    with running_lab(root_dir, tmp / "home") as server, running_browser(tmp / "profile") as b:
        page = b.new_page(); page.goto(server.lab_url("notebooks/00_measure_your_machine.ipynb"))
    # both are stopped here, however the block ended; a surviving process fails the block

JupyterLab runs from this interpreter on 127.0.0.1, a free port and a generated token,
with ``PERFKIT_QUICK=1``; its config, runtime, settings, workspace and perfkit cache live in
a private folder, so a test run neither reads nor changes the user's Jupyter setup or
measured limits, and autosave is off so the served notebooks are never written. Chromium
is the system one (``/usr/bin/chromium``, or ``$PERFKIT_CHROMIUM``) driven by Playwright:
Playwright's own browser download cannot work on a closed network.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "build" / "screenshots"
CHROMIUM = Path(os.environ.get("PERFKIT_CHROMIUM", "/usr/bin/chromium"))
# Without the background-networking flags Chromium keeps opening connections that the
# closed network refuses; --no-sandbox because CI runs as root.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SERVER_START_TIMEOUT_S = 90.0
SHUTDOWN_TIMEOUT_S = 20.0
# JupyterLab user settings written for the test server (JSON, one file per plugin).
LAB_SETTINGS = {
    # Never write the repository's notebooks: a test run leaves them as committed.
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    # Every cell in the DOM, so prompts and outputs of off-screen cells can be read.
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    # No news or update pop-ups (and no requests to the internet for them).
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


def missing_browser_tools() -> str | None:
    """Why browser tests cannot run here (what is missing and how to get it), or None."""
    missing = []
    if importlib.util.find_spec("playwright") is None:
        missing.append("Playwright for Python is not installed in this environment")
    if not CHROMIUM.exists():
        missing.append(f"no Chromium at {CHROMIUM} (Debian packages chromium, chromium-driver)")
    if not missing:
        return None
    return "; ".join(missing) + "; `make browser-deps` installs them"


# --- processes -----------------------------------------------------------------------


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a zombie has exited; only its exit status is left)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def describe(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid} {' '.join(proc.cmdline())[:160]}"
    except psutil.Error:
        return f"pid {proc.pid}"


def process_tree(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and its descendants (those that can still be read)."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def processes_mentioning(marker: str) -> list[psutil.Process]:
    """Processes whose command line contains ``marker`` (our temporary folder's path):
    kernels and browser helpers that were re-parented away from our process tree."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if proc.pid != os.getpid() and marker in " ".join(proc.info["cmdline"] or ()):
                found.append(proc)
    return found


def reap(procs: Iterable[psutil.Process], grace_s: float = 5.0) -> tuple[list[str], list[str]]:
    """Wait ``grace_s`` for ``procs`` to exit, then SIGKILL the ones still running.

    Returns:
        ``(killed, left)``: descriptions of the processes that had to be killed, and of
        those still alive after the kill (a leak the caller reports).
    """
    procs = list({p.pid: p for p in procs}.values())
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in procs):
        time.sleep(0.1)
    stubborn = [p for p in procs if alive(p)]
    killed = [describe(p) for p in stubborn]
    for p in stubborn:
        with contextlib.suppress(psutil.Error):
            p.kill()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(alive(p) for p in stubborn):
        time.sleep(0.1)
    return killed, [describe(p) for p in stubborn if alive(p)]


@dataclass
class Shutdown:
    """What stopping a server or a browser took: processes killed, and any left alive."""

    what: str
    killed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)

    def check(self) -> None:
        """Raise ``AssertionError`` when a process outlived its shutdown."""
        if self.left:
            raise AssertionError(f"{self.what} left processes behind: " + "; ".join(self.left))
        if self.killed:  # not a leak (they are gone), but a shutdown that did not work
            print(f"\n[browser harness] {self.what}: had to SIGKILL " + "; ".join(self.killed))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition: Callable[[], Any], timeout_s: float, what: str,
               interval_s: float = 0.25, detail: Callable[[], str] | None = None) -> Any:
    """Poll ``condition`` until it returns something truthy, and return that.

    Raises:
        TimeoutError: after ``timeout_s``, naming ``what`` (and ``detail()``'s text).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{detail()}" if detail else ""
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}{extra}")
        time.sleep(interval_s)


# --- JupyterLab ----------------------------------------------------------------------


@dataclass
class LabServer:
    """A running JupyterLab: its address, token, process and private folder."""

    url: str  # ends with "/"
    token: str
    root_dir: Path
    home: Path
    process: subprocess.Popen
    log_path: Path

    def api(self, method: str, path: str, timeout_s: float = 10.0) -> Any:
        """Call the server's REST API (``path`` like ``api/sessions``); parsed JSON or None."""
        req = urllib.request.Request(self.url + path, method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def lab_url(self, rel_path: str) -> str:
        """The address that opens ``rel_path`` (relative to the root) in a fresh workspace."""
        return f"{self.url}lab/tree/{urllib.parse.quote(rel_path)}?reset&token={self.token}"

    def kernel_of(self, rel_path: str) -> dict | None:
        """The kernel of the session open on ``rel_path``, or None."""
        for s in self.api("GET", "api/sessions"):
            if s["path"] == rel_path and s.get("kernel"):
                return s["kernel"]
        return None

    def close_sessions(self, rel_path: str) -> None:
        """Shut down the kernels of the sessions open on ``rel_path`` (frees CPU and memory)."""
        for s in self.api("GET", "api/sessions"):
            if s["path"] == rel_path:
                self.api("DELETE", f"api/sessions/{s['id']}", timeout_s=30)

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server's log, for failure messages."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no server log)"
        return "\n".join(text[-lines:])


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it if the test process dies (Linux), so even a
    killed pytest leaves no server; its kernels exit with it (they watch their parent)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _lab_env(home: Path) -> dict[str, str]:
    """The server's environment: ours without Jupyter settings, its folders under ``home``,
    QUICK sizes. Kernels start in the notebook's folder, as under ``make lab``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER", "JPY_")) and k not in ("MPLBACKEND", "PYTHONSTARTUP")}
    env.update(
        JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTER_DATA_DIR=str(home / "data"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), IPYTHONDIR=str(home / "ipython"),
        PERFKIT_CACHE=str(home / "perfkit-cache"), PERFKIT_QUICK="1",
    )
    return env


def start_lab(root_dir: Path, home: Path, attempts: int = 3) -> LabServer:
    """Start JupyterLab on ``root_dir`` and wait until ``/api/status`` answers.

    Args:
        root_dir: the folder the server serves (notebooks open relative to it).
        home: an empty private folder for config, runtime files, settings and the log.
        attempts: tries with a new port when the chosen one was taken in between.

    Raises:
        RuntimeError: the server exited or did not answer within the time limit (with
            the end of its log).
    """
    for name, values in LAB_SETTINGS.items():
        path = home / "settings" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    token = secrets.token_hex(24)
    for attempt in range(1, attempts + 1):
        port = free_port()
        log_path = home / f"jupyterlab-{attempt}.log"
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}",
               "--ServerApp.terminals_enabled=False",
               # JupyterLab checkpoints a notebook when it opens it: not into the repository
               f"--FileCheckpoints.checkpoint_dir={home / 'checkpoints'}",
               # no language servers: they would write .virtual_documents into the repository
               "--ServerApp.jpserver_extensions=jupyter_lsp=False",
               "--LabApp.news_url=", "--LabApp.extension_manager=readonly",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               # lets tests read cell outputs from the notebook model (window.jupyterapp)
               "--LabApp.expose_app_in_browser=True"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        with open(log_path, "wb") as log:
            # Own process group, so the whole server can be signalled at once.
            proc = subprocess.Popen(cmd, cwd=root_dir, env=_lab_env(home), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True,
                                    preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        server = LabServer(f"http://127.0.0.1:{port}/", token, root_dir, home, proc, log_path)

        def ready(server: LabServer = server) -> bool:
            if server.process.poll() is not None:
                return True  # exited: stop waiting, handled below
            try:
                return server.api("GET", "api/status", timeout_s=2) is not None
            except (urllib.error.URLError, OSError, ValueError):
                return False

        try:
            wait_until(ready, SERVER_START_TIMEOUT_S, "JupyterLab to answer /api/status")
        except TimeoutError:
            stop_lab(server)
            raise RuntimeError(f"JupyterLab did not answer within {SERVER_START_TIMEOUT_S:.0f} s; "
                               f"log:\n{server.log_tail()}") from None
        if proc.poll() is None:
            return server
        port_taken = any(s in server.log_tail() for s in ("is not available", "already in use"))
        if not port_taken or attempt == attempts:
            raise RuntimeError(f"JupyterLab exited with status {proc.returncode}; "
                               f"log:\n{server.log_tail()}")
    raise AssertionError("unreachable")


def stop_lab(server: LabServer) -> Shutdown:
    """Stop the server and its kernels: ``/api/shutdown``, then SIGTERM, then SIGKILL.

    Never raises; the returned ``Shutdown`` says what had to be killed or survived.
    """
    result = Shutdown("JupyterLab")
    try:
        root = psutil.Process(server.process.pid)
        procs = process_tree(root)  # kernels run in their own sessions but are the server's children
    except psutil.NoSuchProcess:
        procs = []
    if server.process.poll() is None:
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
            server.api("POST", "api/shutdown", timeout_s=5)
        try:
            server.process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.process.pid, signal.SIGTERM)
            try:
                server.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                result.killed.append(f"server pid {server.process.pid} (process group)")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(server.process.pid, signal.SIGKILL)
                server.process.wait(timeout=10)
    killed, left = reap([*procs, *processes_mentioning(str(server.home))])
    result.killed += killed
    result.left += left
    return result


@contextlib.contextmanager
def running_lab(root_dir: Path, home: Path) -> Iterator[LabServer]:
    """JupyterLab for the duration of a ``with`` block; stopped however the block ends.

    Raises:
        AssertionError: on a normal exit, when a server or kernel process survived.
    """
    server = start_lab(root_dir, home)
    try:
        yield server
    finally:
        result = stop_lab(server)
    result.check()


# --- Chromium ------------------------------------------------------------------------


@dataclass
class BrowserSession:
    """Playwright driving one headless Chromium with an empty profile."""

    playwright: Any
    context: Any  # playwright.sync_api.BrowserContext
    profile: Path
    processes: list[psutil.Process]  # the Playwright driver and Chromium, started by us

    def new_page(self) -> Any:
        """A new tab whose console errors are collected in ``page.console_errors``."""
        page = self.context.new_page()
        page.console_errors = []
        page.on("console", lambda m: page.console_errors.append(m.text) if m.type == "error" else None)
        return page


def start_browser(profile: Path) -> BrowserSession:
    """Launch Debian's Chromium through Playwright with a new profile in ``profile``."""
    from playwright.sync_api import sync_playwright

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    pw = sync_playwright().start()
    try:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900}, timeout=60_000)
    except Exception:
        pw.stop()
        raise
    context.set_default_timeout(30_000)
    procs = [p for p in me.children(recursive=True) if p.pid not in before]
    return BrowserSession(pw, context, profile, procs)


def stop_browser(session: BrowserSession) -> Shutdown:
    """Close the browser and the Playwright driver; never raises."""
    result = Shutdown("Chromium")
    procs = [q for p in session.processes for q in process_tree(p)]  # renderers started since launch
    for close in (session.context.close, session.playwright.stop):
        try:
            close()
        except Exception as e:  # keep going: the processes are killed below either way
            result.killed.append(f"({close.__qualname__} failed: {e})")
    killed, left = reap([*procs, *processes_mentioning(str(session.profile))])
    result.killed += killed
    result.left += left
    return result


@contextlib.contextmanager
def running_browser(profile: Path) -> Iterator[BrowserSession]:
    """Chromium for the duration of a ``with`` block; closed however the block ends."""
    session = start_browser(profile)
    try:
        yield session
    finally:
        result = stop_browser(session)
    result.check()
