"""Run an unchanged training script under a :class:`StepRecorder` and write the report.

:func:`run_diagnosis` is ``python -m perfkit diagnose``: it runs the script in this
process (``runpy``, as ``python script.py`` would, with its own ``sys.argv``), records
``skip`` + ``steps`` optimizer steps, writes ``report.json``, ``report.md``,
``report.html`` (with the plots that ``plots`` draws, embedded; an SVG bar of the shares
without them), the plots as ``report.<name>.png`` and the Chrome trace to ``out_dir`` and
prints the report. Under ``torchrun`` every rank records and
writes ``rank<R>.json``; rank 0 waits for the other ranks' files and writes the one
merged report (files, not a collective: the script's own process group is left alone).

Exit codes: 0 when the window was recorded; the script's own non-zero code, or 1 when
it raised or ended before the window was complete (its traceback is printed, and a
partial report is written with what was recorded); 2 for a script, module or
``--step-marker`` that does not exist; 124 at the timeout (the script is stopped, its
child processes killed, and what was recorded is reported).

Usage::

    code = run_diagnosis("train.py", ["--epochs", "1"], DiagnoseConfig(skip=3, steps=10))
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit._checks import check_callable, check_choice, check_int, check_real, check_type
from perfkit.dist import end_process_tree
from perfkit.profiling.recorder import StepRecorder, WindowDone
from perfkit.profiling.render import render_html, render_markdown, render_text
from perfkit.profiling.report import build_report, rank_record

Plots = Callable[[dict[str, Any]], Mapping[str, bytes]]  # report -> name -> PNG bytes

__all__ = ["DiagnoseConfig", "run_diagnosis"]

TIMEOUT_EXIT = 124  # as coreutils' timeout(1)
# ranks of one job start within this many seconds of each other; a rank record older
# than that (plain torchrun's rendezvous id is "none" for every job) is from another job
_START_SKEW_S = 30.0


@dataclass(frozen=True)
class DiagnoseConfig:
    """The options of ``perfkit diagnose`` (see ``python -m perfkit diagnose --help``)."""

    skip: int = 3
    steps: int = 10
    then: str = "stop"
    out_dir: str | os.PathLike = "build/diagnose"
    timeout_s: float = 300.0
    step_marker: str | None = None
    merge_wait_s: float = 60.0  # how long rank 0 waits for the other ranks' records

    def __post_init__(self) -> None:
        check_int("skip", self.skip, 0)
        check_int("steps", self.steps, 1)
        check_choice("then", self.then, ("stop", "continue"))
        check_type("out_dir", self.out_dir, (str, os.PathLike))
        check_real("timeout_s", self.timeout_s, 0, lo_open=True)
        check_type("step_marker", self.step_marker, str, optional=True)
        check_real("merge_wait_s", self.merge_wait_s, 0)


def _peak_flops() -> tuple[float, int] | None:
    """fp32 ceiling from perfkit.hw's cache at the intra-op threads this process runs on
    (torchrun sets ``OMP_NUM_THREADS=1``: one thread's ceiling, not all cores'), and that
    thread count; only if this machine was measured (never measure inside someone's training
    run: it takes minutes and loads the cores)."""
    import torch

    from perfkit import hw

    path = hw.default_limits_path()
    if not path.exists():
        return None
    try:
        limits = hw.MachineLimits.from_json(path.read_text())
        dev = hw.resolve_device(None)
        if (limits.device, limits.name) != (str(dev), hw.device_name(dev)):
            return None
        threads = torch.get_num_threads()
        return limits.peak_flops("float32", threads), threads
    except (ValueError, KeyError, TypeError):
        return None


def _print_script_traceback(e: BaseException) -> None:
    """The traceback as ``python script.py`` shows it: without runpy's and perfkit's frames."""
    tb = e.__traceback__
    here = str(Path(__file__).parent)
    while tb is not None and (tb.tb_frame.f_code.co_filename.startswith(here)
                              or "runpy" in tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb, file=sys.stderr)
    sys.stderr.flush()


class _Session:
    def __init__(self, target: str, module: bool, args: list[str], cfg: DiagnoseConfig,
                 plots: Plots | None = None) -> None:
        self.target, self.module, self.args, self.cfg = target, module, args, cfg
        self.plots = plots
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.out = Path(cfg.out_dir)
        self.command = " ".join(["perfkit diagnose", *(["-m"] if module else []), target,
                                 *args])
        self.reported = threading.Lock()
        self.started_at = time.time()  # wall clock: compared across processes
        # torchrun's rendezvous id (and restart count) names this job
        self.run_id = (f"{os.environ.get('TORCHELASTIC_RUN_ID', 'local')}/"
                       f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{self.world}")
        self.rec = StepRecorder(cfg.skip, cfg.steps, self.out, cfg.then, cfg.step_marker,
                                self.rank, on_window_end=lambda r: self.report("complete"))

    def report(self, status: str) -> None:
        """Write this rank's record; on rank 0 merge every rank's and print (once)."""
        if not self.reported.acquire(blocking=False):
            return
        self.out.mkdir(parents=True, exist_ok=True)
        record = rank_record(self.rec, self.rank, status)
        record["needed"] = self.cfg.skip + self.cfg.steps
        record["run_id"], record["started_at"] = self.run_id, self.started_at
        tmp = self.out / f"rank{self.rank}.json.tmp"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.out / f"rank{self.rank}.json")
        if self.rank != 0:
            return
        records = [record]
        deadline = time.monotonic() + self.cfg.merge_wait_s
        for r in range(1, self.world):
            f = self.out / f"rank{r}.json"
            while not (got := self._read(f)) and time.monotonic() < deadline:
                time.sleep(0.05)
            if got:
                records.append(got)
        peak = _peak_flops()
        rep = build_report(records, peak_flops=peak[0] if peak else None, command=self.command)
        if peak and isinstance(rep["mfu"], float):  # the ceiling the share divides by, named
            rep["mfu_ceiling"] = {"flops_per_s": peak[0], "threads": peak[1]}
        if len(records) < self.world:
            rep["notes"].append(f"only {len(records)} of {self.world} ranks reported within "
                                f"{self.cfg.merge_wait_s:.0f} s")
        images: dict[str, bytes] = {}
        try:
            images = dict(self.plots(rep)) if self.plots else {}
        except Exception as e:  # a plot must not cost the report
            rep["notes"].append(f"the plots could not be drawn: {e!r}")
        for name, png in images.items():
            (self.out / f"report.{name}.png").write_bytes(png)
        (self.out / "report.json").write_text(json.dumps(rep, indent=1))
        (self.out / "report.md").write_text(
            render_markdown(rep, [f"report.{name}.png" for name in images]) + "\n")
        (self.out / "report.html").write_text(render_html(rep, images))
        print(render_text(rep), file=sys.stderr if self.cfg.then == "continue" else sys.stdout,
              flush=True)

    def _read(self, f: Path) -> dict | None:
        """A rank's record if it is this job's (an --out reused by an earlier job holds
        stale ones)."""
        try:
            record = json.loads(f.read_text())
        except (OSError, ValueError):
            return None
        fresh = record.get("started_at", 0.0) > self.started_at - _START_SKEW_S
        return record if record.get("run_id") == self.run_id and fresh else None

    def watchdog(self, done: threading.Event) -> None:
        if done.wait(self.cfg.timeout_s) or self.rec.window_done:
            return
        n = len(self.rec.step_ends_s)
        if n == 0:
            what = "no step" if self.cfg.step_marker else "no optimizer step"
            msg = (f"perfkit diagnose: {what} in {self.cfg.timeout_s:g} s. If the script's "
                   "step is not a torch.optim optimizer step, name the function that ends a "
                   "step: --step-marker module:function (or raise --timeout).")
        else:
            msg = (f"perfkit diagnose: timed out after {self.cfg.timeout_s:g} s with {n} of "
                   f"{self.cfg.skip + self.cfg.steps} steps recorded (a hang, or a step slower "
                   "than --timeout allows); the script was stopped.")
        print(msg, file=sys.stderr, flush=True)
        try:
            self.report(f"timed out after {n} steps")
        finally:  # the main thread may be stuck in C code: end the process from here
            end_process_tree(grace_s=0)  # DataLoader workers this process started
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(TIMEOUT_EXIT)

    def run(self) -> int:
        done = threading.Event()
        threading.Thread(target=self.watchdog, args=(done,), daemon=True).start()
        argv0 = self.target if not self.module else importlib.util.find_spec(self.target).origin
        old_argv, old_path0 = sys.argv, sys.path[0]
        sys.argv = [str(argv0), *self.args]
        if not self.module:  # as `python script.py`: its folder first on sys.path
            sys.path[0] = str(Path(self.target).resolve().parent)
        code = 0
        try:
            self.rec.__enter__()
        except (ImportError, ValueError) as e:  # a --step-marker that cannot be found
            print(f"perfkit diagnose: --step-marker {self.cfg.step_marker}: {e}",
                  file=sys.stderr)
            done.set()
            sys.argv, sys.path[0] = old_argv, old_path0
            return 2
        try:
            try:
                if self.module:
                    runpy.run_module(self.target, run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(self.target, run_name="__main__")
            finally:
                self.rec.finish()
        except WindowDone:
            pass
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException as e:  # the script's error (KeyboardInterrupt included)
            _print_script_traceback(e)
            code = 1
        finally:
            done.set()
            sys.argv, sys.path[0] = old_argv, old_path0
        if not self.rec.window_done:
            n = len(self.rec.step_ends_s)
            why = "raised" if code == 1 else f"exited with code {code}" if code else "ended"
            print(f"perfkit diagnose: the script {why} after {n} of "
                  f"{self.cfg.skip + self.cfg.steps} steps (--skip {self.cfg.skip} + "
                  f"--steps {self.cfg.steps}); partial report.", file=sys.stderr, flush=True)
            if n == 0 and not self.cfg.step_marker and code == 0:
                print("perfkit diagnose: no optimizer step ran; pass --step-marker "
                      "module:function to name the function that ends a step.",
                      file=sys.stderr, flush=True)
            self.report(f"partial: the script {why} after {n} steps")
            code = code or 1
        return code


def run_diagnosis(target: str, args: list[str] | tuple[str, ...] = (),
                  config: DiagnoseConfig | None = None, module: bool = False,
                  exit_process: bool = False, plots: Plots | None = None) -> int:
    """Run ``target`` (a script path, or a module with ``module=True``) and diagnose it.

    Returns the exit code (see the module docstring); prints the report on rank 0. With
    ``exit_process`` (the command line) the process ends with ``os._exit`` instead when a
    process group is still up or the script was stopped (see below). ``plots`` draws the
    report's figures (the command passes :func:`perfkit.viz.report_pngs` when matplotlib
    is installed); ``None`` writes the report without them.

    Raises:
        TypeError, ValueError: for a bad ``target``, ``args``, ``config`` or ``plots``.
    """
    check_type("target", target, str)
    cfg = check_type("config", config, DiagnoseConfig, optional=True) or DiagnoseConfig()
    check_callable("plots", plots, optional=True)
    args = [check_type("args item", a, str) for a in args]
    if module:
        try:
            found = importlib.util.find_spec(target) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            print(f"perfkit diagnose: no module named {target!r}", file=sys.stderr)
            return 2
    elif not Path(target).is_file():
        print(f"perfkit diagnose: no such script: {target!r}", file=sys.stderr)
        return 2
    session = _Session(target, module, list(args), cfg, plots)
    code = session.run()
    import torch.distributed as dist

    if exit_process and (dist.is_available() and dist.is_initialized() or cfg.then == "stop"):
        # perfkit.dist's clean exit: a gloo group torn down during interpreter finalisation
        # can abort (SIGABRT) after the work is done, and a stopped script may leave
        # DataLoader workers or non-daemon threads behind
        end_process_tree(grace_s=0)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
