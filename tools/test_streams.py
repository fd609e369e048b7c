"""Run the test suite as two pytest processes side by side, then a few tests alone: what
`make test` runs.

Run one after the other, the suite keeps a 2-core machine only about 60 % busy: its jobs
wait on rendezvous, timeouts and sleeps, and most notebook kernels and graders time their
steps on one thread. Two streams fill that idle time:

* ``labs+notebooks``: every lab graded with its mutants, every lecture notebook at QUICK size
  and the consistency scan over them (``tests/labs``, ``tests/notebooks``);
* ``rest``: everything else (unit, distributed, tools, ...) but ``tests/diagnose``.

The graders' speed checks compare the student's step with the reference's in the same
interleaved rounds, and every wait has its own timeout, so most tests do not need an idle
machine. Two kinds of test do depend on it, and run alone after the two streams, each kind in
its own pytest process (:data:`ALONE_PARTS`):

* ``perfkit diagnose``'s tests check that a planted cause is the top finding, and a process
  descheduled in one phase of a short window inflates that phase's share (a planted
  overhead-bound script once read as optimizer-bound beside the labs);
* lab 06's grading (:data:`ALONE_TESTS`) takes each 2-process job's fastest of two or three
  runs of a few seconds, and the other stream's bursts of 4-process jobs can hit every run
  of one job: beside it the solution once took 2.85 s at best against the reference's
  1.39 s, the same code (1.25 s and 1.27 s alone).

The ``labs+notebooks`` stream prints to a log that is shown when it ends; the others print
live. Each writes its JUnit report to ``build/test-reports/``.

    python -m tools.test_streams [--timeout-s 3600] [-- extra pytest arguments]

Exits 0 when every part passes, else 1 (2 for a part past the timeout, which is killed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "build" / "test-reports"
SIDE = ["tests/labs", "tests/notebooks"]  # the stream that runs beside the rest
# lab 06's two tests that run its grader (the solution's and the mutants', one grading run)
ALONE_TESTS = [f"tests/labs/{f}::{t}[lab06_capstone]" for f, t in (
    ("test_labs.py", "test_checks_pass_on_the_solution"),
    ("test_mutants.py", "test_every_mutant_fails_its_question_naming_the_mistake"))]
ALONE = ["tests/diagnose"]  # after both streams, on a machine nothing else loads
# each part run alone has its own pytest process, one after the other: tests/diagnose's modules
# import their conftest by name (`from conftest import SCRIPTS`), which a process that also
# loaded tests/labs' conftest resolves to the wrong file
ALONE_PARTS = {"alone": ALONE, "alone: lab 06": ALONE_TESTS}
COMMON = ["-q", "-ra", "--durations=15", "-m", "not browser", "-p", "no:cacheprovider"]


def commands(extra: list[str]) -> dict[str, list[str]]:
    """Each stream's pytest command line: the two side by side, then ``alone``."""
    py = [sys.executable, "-m", "pytest", *COMMON]
    rest = ["tests", *(f"--ignore={p}" for p in SIDE + ALONE)]
    side = [*SIDE, *(f"--deselect={t}" for t in ALONE_TESTS)]
    return {"labs+notebooks": [*py, f"--junitxml={REPORTS / 'labs-notebooks.xml'}", *side, *extra],
            "rest": [*py, f"--junitxml={REPORTS / 'rest.xml'}", *rest, *extra],
            **{name: [*py, f"--junitxml={REPORTS / (name.replace(': ', '-').replace(' ', '') + '.xml')}",
                      *tests, *extra] for name, tests in ALONE_PARTS.items()}}


def _end(proc: subprocess.Popen) -> None:
    """End a stream and every process it started (torchrun jobs run in their own sessions)."""
    from perfkit.dist import end_process_tree

    end_process_tree(proc.pid)
    proc.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--timeout-s", type=float, default=3600.0,
                   help="wall-clock limit for the streams and the tests run alone together (default 3600)")
    args, extra = p.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    if not args.timeout_s > 0:
        p.error(f"--timeout-s must be > 0, got {args.timeout_s}")
    REPORTS.mkdir(parents=True, exist_ok=True)
    cmds = commands(extra)
    log = REPORTS / "labs-notebooks.log"
    shown = os.path.relpath(log, ROOT)
    t0 = time.monotonic()
    with open(log, "wb") as fh:
        procs = {"labs+notebooks": subprocess.Popen(cmds["labs+notebooks"], cwd=ROOT, stdout=fh,
                                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL),
                 "rest": subprocess.Popen(cmds["rest"], cwd=ROOT, stdin=subprocess.DEVNULL)}
        print(f"test_streams: {' '.join(SIDE)} run beside the rest; their output is shown when they end "
              f"(live in {shown})", flush=True)
        codes: dict[str, int] = {}
        try:
            while len(codes) < len(procs):
                for name, proc in procs.items():
                    if name not in codes and proc.poll() is not None:
                        codes[name] = proc.returncode
                        print(f"test_streams: {name} ended (exit {proc.returncode}) after "
                              f"{time.monotonic() - t0:.0f} s", flush=True)
                if time.monotonic() - t0 > args.timeout_s:
                    for name, proc in procs.items():
                        if name not in codes:
                            _end(proc)
                            codes[name] = -1
                            print(f"test_streams: {name} ran past --timeout-s={args.timeout_s:g} s "
                                  "and was killed", flush=True)
                time.sleep(0.25)
        finally:  # an interrupted run leaves no stream (nor its torchrun jobs) behind
            for proc in procs.values():
                if proc.poll() is None:
                    _end(proc)
    print(f"\n===== labs+notebooks ({shown}) =====", flush=True)
    sys.stdout.write(log.read_text(errors="replace"))
    for name, tests in ALONE_PARTS.items():  # one after the other, each in its own process
        left = args.timeout_s - (time.monotonic() - t0)
        print(f"\n===== {name}: {' '.join(tests)} =====", flush=True)
        alone = subprocess.Popen(cmds[name], cwd=ROOT, stdin=subprocess.DEVNULL)
        try:
            codes[name] = alone.wait(timeout=max(left, 1.0))
        except subprocess.TimeoutExpired:
            _end(alone)
            codes[name] = -1
            print(f"test_streams: {name} ran past --timeout-s={args.timeout_s:g} s and was killed",
                  flush=True)
        finally:
            if alone.poll() is None:
                _end(alone)
    print(f"\ntest_streams: {time.monotonic() - t0:.0f} s in all; "
          + ", ".join(f"{n}: exit {c}" for n, c in codes.items()), flush=True)
    if -1 in codes.values():
        return 2
    return 0 if all(c == 0 for c in codes.values()) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
