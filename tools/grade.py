"""Grade a lab notebook: a score per question, with the reason for every failure.

    python -m tools.grade labs/lab00_measure_your_machine.ipynb

The notebook's code cells run in a separate worker process with ``PERFKIT_QUICK=1``
(a cell that raises is recorded and the following cells still run, so one unfinished
question does not hide the others). Then each question's check from
``tools/labs/checks_labNN.py`` runs against the namespace the cells left, under its own
timeout. The parent process enforces an overall deadline and kills the worker's whole
process group when it passes, so a student's infinite loop or a deadlocked collective
costs at most the time limit and never hangs the grader.

Check modules define ``QUESTIONS = {name: check}`` where ``check(ns)`` raises
``AssertionError`` with a hint on failure, and optionally ``TIMEOUT_S = {name: seconds}``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
CHECKS_DIR = ROOT / "tools" / "labs"
DEFAULT_QUESTION_TIMEOUT_S = 60.0
# The notebook's cells share one budget: the labs' solution cells take 6-8 s in all (one cell
# at most 3.5 s) on an idle 2-core machine, so 40 s leaves a 5x margin for a loaded one. One
# cell gets at most CELL_TIMEOUT_S of it, so a demo cell that spins on an unfinished answer
# leaves time for the others; once the budget is spent, each remaining cell still gets
# CELL_MIN_S (enough to define the later answers).
CELLS_BUDGET_S = 40.0
CELL_TIMEOUT_S = 20.0
CELL_MIN_S = 5.0


@dataclass
class QuestionResult:
    """One question's outcome. ``kind``: passed, NotImplementedError, AssertionError,
    timeout, or error (any other exception: a bug in the answer or a missing name)."""

    name: str
    kind: str
    message: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.kind == "passed"


@dataclass
class GradeReport:
    notebook: str
    questions: list[QuestionResult] = field(default_factory=list)
    cell_errors: list[str] = field(default_factory=list)
    error: str = ""  # why grading could not run at all

    @property
    def score(self) -> int:
        return sum(q.passed for q in self.questions)

    def format(self) -> str:
        lines = [f"Grading {self.notebook}"]
        if self.error:
            lines.append(f"  error: {self.error}")
        for e in self.cell_errors:
            lines.append(f"  note: {e}")
        width = max((len(q.name) for q in self.questions), default=0)
        for q in self.questions:
            tag = "PASS" if q.passed else "FAIL"
            why = "" if q.passed else f"  {q.kind}: {q.message}".rstrip(": ")
            lines.append(f"  [{tag}] {q.name:<{width}}  {q.seconds:5.1f} s{why}")
        lines.append(f"score: {self.score}/{len(self.questions)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Mutant:
    """A plausible wrong answer to one question, kept in ``tools/labs/mutants_labNN.py``.

    ``code`` runs in the solution's namespace after its cells (redefining the answer,
    or a helper it calls); then ``question``'s check must fail with a message matching the
    regular expression ``expect``, which names the mistake.
    """

    question: str
    mistake: str
    code: str
    expect: str


@dataclass
class MutantResult:
    """How a question's check judged one mutant (``kind`` as in :class:`QuestionResult`)."""

    mutant: Mutant
    kind: str
    message: str = ""
    seconds: float = 0.0

    @property
    def caught(self) -> bool:
        """Failed its question with a message that names the mistake."""
        import re

        return self.kind in ("AssertionError", "timeout") and bool(
            re.search(self.mutant.expect, self.message))


def require(ns: dict, name: str):
    """The student's ``name`` from the notebook namespace, or a failure that says why.

    Checks call this instead of ``ns[name]`` so that a missing definition fails as an
    assertion with a hint, not as an unrelated ``KeyError``.
    """
    if name not in ns:
        raise AssertionError(f"{name} is not defined: keep its cell, run it without errors, "
                             "and do not rename it")
    return ns[name]


@contextlib.contextmanager
def pickled(obj: object, name: str = "impl.pkl") -> Iterator[str]:
    """A temporary cloudpickle file of ``obj`` for launched workers; removed afterwards.

    cloudpickle copies a function or class defined in the notebook *by value* (workers
    cannot import the notebook), and the modules it uses by reference.
    """
    import cloudpickle

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        with open(path, "wb") as fh:
            cloudpickle.dump(obj, fh)
        yield path


def launch_checked(module: str, nproc: int, cfg: object, timeout_s: float, what: str,
                   hang_hint: str, impl_name: str | None = None) -> list:
    """``perfkit.dist.launch`` for a check, with failures a student can act on.

    A hang becomes an AssertionError naming ``what`` and ``hang_hint``: the launch past
    ``timeout_s``, or a worker's own deadline on the student's call reported as
    ``GradingHang: ...`` (``tools.labs.ring_check``), which ends sooner. A rank's exception
    becomes one that shows its traceback, except a ``NotImplementedError`` (a blank
    answer), which stays one when ``impl_name`` names the student's function.
    """
    from perfkit import dist

    try:
        # ROOT on the path: the graded jobs (tools.labs.*) run from any working directory
        return dist.launch(module, nproc, ["--config", json.dumps(cfg)], timeout_s=timeout_s,
                           pythonpath=[ROOT])
    except dist.LaunchTimeout as e:
        raise AssertionError(f"on {nproc} processes {what} did not finish in "
                             f"{timeout_s:g} s: {hang_hint}") from e
    except dist.WorkerError as e:
        from tools.labs.ring_check import HANG  # the marker a worker's own deadline writes

        if f"{HANG}: " in e.worker_traceback:
            raise AssertionError(f"on {nproc} processes {what} did not return: "
                                 f"{e.worker_traceback.split(f'{HANG}: ')[-1].strip()}: "
                                 f"{hang_hint}") from e
        if impl_name and "NotImplementedError" in e.worker_traceback:
            raise NotImplementedError(f"{impl_name} is not implemented") from e
        raise AssertionError(f"on {nproc} processes a rank raised:\n"
                             f"{e.worker_traceback[-1500:]}") from e


class GradingTimeout(BaseException):
    """Raised by the alarm inside student code; a BaseException so ``except Exception``
    in the student's code cannot swallow it."""


def checks_for(notebook: Path, checks_dir: Path = CHECKS_DIR) -> Path:
    """The checks module of a lab, from the ``labNN`` prefix of the notebook's name."""
    prefix = notebook.name.split("_", 1)[0]
    if not (prefix.startswith("lab") and prefix[3:].isdigit()):
        raise ValueError(f"notebook name must start with labNN_ (e.g. lab00_...), got {notebook.name!r}")
    path = checks_dir / f"checks_{prefix}.py"
    if not path.exists():
        known = sorted(p.name for p in checks_dir.glob("checks_lab*.py"))
        raise ValueError(f"no checks for {prefix} in {checks_dir} (have: {', '.join(known)})")
    return path


def load_checks(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_checks_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    if not isinstance(getattr(module, "QUESTIONS", None), dict) or not module.QUESTIONS:
        raise ValueError(f"{path} must define a non-empty QUESTIONS dict")
    return module


def _run_worker(nb: Path, checks_path: Path, extra: list[str], budget: float
                ) -> tuple[list[dict], str]:
    """Run the worker process on ``nb``; return its records and why it stopped early, if it did."""
    from perfkit.dist import end_process_tree

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.jsonl"
        cmd = [sys.executable, "-m", "tools.grade", str(nb.resolve()),
               "--worker", str(checks_path.resolve()), str(out), *extra]
        env = {**os.environ, "PERFKIT_QUICK": "1", "MPLBACKEND": "Agg",
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        error = ""
        try:
            log, _ = proc.communicate(timeout=budget)
        except subprocess.TimeoutExpired:
            end_process_tree(proc.pid, grace_s=0)  # the worker and anything it launched
            log, _ = proc.communicate()
            error = f"grading stopped after {budget:.0f} s (the time limit)"
        records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
        if proc.returncode not in (0, None) and not error and not any(
                r["type"] == "done" for r in records):
            tail = log.decode(errors="replace").strip().splitlines()[-5:]
            error = "the grader's worker crashed: " + " | ".join(tail)
    return records, error


def _cells_deadline(nb: Path) -> float:
    """The longest the worker can spend on ``nb``'s cells (the shared budget, then
    CELL_MIN_S for each code cell after it), plus 30 s to start and import."""
    try:
        import nbformat

        cells = sum(c.cell_type == "code" for c in nbformat.read(nb, as_version=4).cells)
    except Exception:  # noqa: BLE001 - an unreadable notebook is reported by the worker
        cells = 0
    return CELLS_BUDGET_S + CELL_MIN_S * cells + 30.0


def grade(notebook: str | os.PathLike, checks: str | os.PathLike | None = None,
          load_timeout_s: float | None = None) -> GradeReport:
    """Run the notebook and its checks in a worker process; never raises for bad labs.

    Args:
        notebook: path of the lab notebook.
        checks: checks module path; by default ``tools/labs/checks_labNN.py``.
        load_timeout_s: time allowed for running the notebook's cells before the whole
            worker is killed; by default what the cells' own timeouts allow at most
            (:data:`CELLS_BUDGET_S` and :data:`CELL_MIN_S` per cell) plus 30 s.
    """
    nb = Path(notebook)
    report = GradeReport(str(notebook))
    try:
        checks_path = Path(checks) if checks else checks_for(nb)
        module = load_checks(checks_path)
    except ValueError as e:
        report.error = str(e)
        return report
    names = list(module.QUESTIONS)
    timeouts = getattr(module, "TIMEOUT_S", {})
    if not nb.exists():
        report.error = f"no notebook at {nb} (run `make labs` to create the student labs)"
        report.questions = [QuestionResult(n, "error", "notebook not found") for n in names]
        return report
    if load_timeout_s is None:
        load_timeout_s = _cells_deadline(nb)
    budget = load_timeout_s + sum(timeouts.get(n, DEFAULT_QUESTION_TIMEOUT_S) for n in names)
    records, report.error = _run_worker(nb, checks_path, [], budget)
    return _fill_report(report, records, names)


def _fill_report(report: GradeReport, records: list[dict], names: list[str]) -> GradeReport:
    """The worker's cell errors and question records, in the checks' order, into ``report``."""
    for rec in records:
        if rec["type"] == "cell_error":
            report.cell_errors.append(rec["message"])
    done = {r["name"]: QuestionResult(r["name"], r["kind"], r["message"], r["seconds"])
            for r in records if r["type"] == "question"}
    for n in names:
        report.questions.append(done.get(n) or QuestionResult(
            n, "timeout", "not graded: the run was stopped before this question"))
    return report


def load_mutants(path: Path) -> list[Mutant]:
    """The ``MUTANTS`` list of a ``mutants_labNN.py`` module."""
    spec = importlib.util.spec_from_file_location(f"_mutants_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    mutants = getattr(module, "MUTANTS", None)
    # by fields, not isinstance: the worker runs this module as __main__
    fields = ("question", "mistake", "code", "expect")
    if not isinstance(mutants, list) or not all(all(hasattr(m, f) for f in fields) for m in mutants):
        raise ValueError(f"{path} must define MUTANTS, a list of tools.grade.Mutant")
    return mutants


def grade_mutants(notebook: str | os.PathLike, mutants: str | os.PathLike,
                  checks: str | os.PathLike | None = None, load_timeout_s: float = 300.0
                  ) -> list[MutantResult]:
    """Run the solution's cells once, then each mutant against its question's check.

    Every mutant runs in the worker process, in the namespace the cells left (restored
    after each mutant), under its question's timeout, so one grading run covers a lab.
    """
    nb = Path(notebook)
    checks_path = Path(checks) if checks else checks_for(nb)
    module = load_checks(checks_path)
    listed = load_mutants(Path(mutants))
    unknown = sorted({m.question for m in listed} - set(module.QUESTIONS))
    if unknown:
        raise ValueError(f"mutants target unknown questions {unknown}; have {list(module.QUESTIONS)}")
    timeouts = getattr(module, "TIMEOUT_S", {})
    budget = load_timeout_s + sum(timeouts.get(m.question, DEFAULT_QUESTION_TIMEOUT_S) + 5
                                  for m in listed)
    records, error = _run_worker(nb, checks_path, ["--mutants", str(Path(mutants).resolve())], budget)
    return _mutant_results(records, listed, error)


def _mutant_results(records: list[dict], listed: list[Mutant], error: str) -> list[MutantResult]:
    done = {r["index"]: r for r in records if r["type"] == "mutant"}
    return [MutantResult(m, done[i]["kind"], done[i]["message"], done[i]["seconds"]) if i in done
            else MutantResult(m, "not run", error or "the worker stopped before this mutant")
            for i, m in enumerate(listed)]


def grade_with_mutants(notebook: str | os.PathLike, mutants: str | os.PathLike,
                       checks: str | os.PathLike | None = None
                       ) -> tuple[GradeReport, list[MutantResult]]:
    """:func:`grade` and :func:`grade_mutants` in one worker: the solution's cells run once,
    then every question's check, then (from the namespace the cells left) every mutant.

    The test suite grades each solution both ways; running the cells once saves their
    time, and the checks and mutants see exactly what they would see apart.
    """
    nb = Path(notebook)
    checks_path = Path(checks) if checks else checks_for(nb)
    module = load_checks(checks_path)
    listed = load_mutants(Path(mutants))
    names = list(module.QUESTIONS)
    timeouts = getattr(module, "TIMEOUT_S", {})
    budget = (_cells_deadline(nb) + sum(timeouts.get(n, DEFAULT_QUESTION_TIMEOUT_S) for n in names)
              + sum(timeouts.get(m.question, DEFAULT_QUESTION_TIMEOUT_S) + 5 for m in listed))
    records, error = _run_worker(nb, checks_path, ["--mutants", str(Path(mutants).resolve()),
                                                   "--with-questions"], budget)
    report = GradeReport(str(notebook))
    report.error = error
    return _fill_report(report, records, names), _mutant_results(records, listed, error)


# --- worker side ------------------------------------------------------------------------


def _alarm(seconds: float) -> None:
    def on_alarm(signum: int, frame: object) -> None:
        raise GradingTimeout(f"took longer than {seconds:.0f} s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _clear_alarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


def _kill_children() -> None:
    """Kill every process this worker started and left running: after a timeout in a cell or
    a check, ``perfkit.dist.launch``'s workers (in their own sessions, out of reach of the
    parent's kill of our process group) would otherwise spin on forever. SIGKILL at once:
    the answer already ran out of time."""
    from perfkit.dist import end_process_tree

    end_process_tree(grace_s=0)


class _LimitExceeded(BaseException):
    """Raised inside the code under :func:`time_limit` (a BaseException, like
    GradingTimeout, so the student's ``except Exception`` cannot swallow it)."""


@contextlib.contextmanager
def time_limit(seconds: float, message: str) -> Iterator[None]:
    """Fail with ``AssertionError(message)`` if the block runs longer than ``seconds``.

    For checks: call the student's answer on a small input under a short limit first, so an
    answer that never returns fails in seconds instead of after the question's whole
    timeout. Nests inside the grader's question alarm: that alarm is suspended meanwhile
    and re-armed with what was left of it (if it was due first, it fires as usual).
    """
    left, _ = signal.getitimer(signal.ITIMER_REAL)
    if left and left <= seconds:  # the question's own alarm comes first
        yield
        return
    previous = signal.getsignal(signal.SIGALRM)
    t0 = time.monotonic()

    def on_alarm(signum: int, frame: object) -> None:
        raise _LimitExceeded

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _LimitExceeded:
        _kill_children()
        raise AssertionError(message) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if left:
            signal.setitimer(signal.ITIMER_REAL, max(left - (time.monotonic() - t0), 1e-3))


def _describe(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, GradingTimeout):
        return "timeout", str(exc)
    if isinstance(exc, NotImplementedError):
        return "NotImplementedError", "not implemented yet (the cell still raises NotImplementedError)"
    if isinstance(exc, AssertionError):
        return "AssertionError", str(exc) or "a check failed"
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (line {tb[-1].lineno} of {Path(tb[-1].filename).name})" if tb else ""
    return "error", f"{type(exc).__name__}: {exc}{where}"


def _run_cells(nb_path: Path, ns: dict, emit) -> None:
    import nbformat

    try:
        nb = nbformat.read(nb_path, as_version=4)
    except Exception as e:  # not JSON, not a notebook
        emit({"type": "cell_error", "message": f"cannot read the notebook: {e}"})
        return
    deadline = time.monotonic() + CELLS_BUDGET_S  # shared by all cells
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        # IPython magics and shell escapes are not Python; the labs do not need them.
        src = "\n".join(ln for ln in cell.source.splitlines()
                        if not ln.lstrip().startswith(("%", "!")))
        try:
            code = compile(src, f"<cell {i + 1}>", "exec")
            _alarm(min(CELL_TIMEOUT_S, max(deadline - time.monotonic(), CELL_MIN_S)))
            try:
                exec(code, ns)
            finally:
                _clear_alarm()
        except SyntaxError as e:
            emit({"type": "cell_error",
                  "message": f"code cell {i + 1} has a syntax error at line {e.lineno}: {e.msg}"})
        except BaseException as e:  # noqa: BLE001 - a student's cell may raise anything
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            kind, msg = _describe(e)
            if kind == "timeout":
                _kill_children()
            if kind != "NotImplementedError":
                emit({"type": "cell_error", "message": f"code cell {i + 1} raised {kind}: {msg}"})


def _judge(check, ns: dict, seconds: float) -> tuple[str, str, float]:
    """Run one check under its timeout: (kind, message, seconds)."""
    t0 = time.perf_counter()
    try:
        _alarm(seconds)
        try:
            check(ns)
        finally:
            _clear_alarm()
        kind, msg = "passed", ""
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        kind, msg = _describe(e)
        if kind == "timeout":
            _kill_children()
    return kind, msg, round(time.perf_counter() - t0, 3)


def worker(nb_path: Path, checks_path: Path, out_path: Path,
           mutants_path: Path | None = None, questions: bool | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    out = out_path.open("a")

    def emit(rec: dict) -> None:
        out.write(json.dumps(rec) + "\n")
        out.flush()  # the parent may kill us at any moment: keep what is done

    module = load_checks(checks_path)
    timeouts = getattr(module, "TIMEOUT_S", {})
    ns: dict = {"__name__": "__lab__"}
    _run_cells(nb_path, ns, emit)
    if questions is None:
        questions = mutants_path is None
    if questions:
        after_cells = dict(ns)
        for name, check in module.QUESTIONS.items():
            kind, msg, sec = _judge(check, ns, timeouts.get(name, DEFAULT_QUESTION_TIMEOUT_S))
            emit({"type": "question", "name": name, "kind": kind, "message": msg, "seconds": sec})
        ns.clear()
        ns.update(after_cells)  # the mutants start from what the cells left, as when graded alone
    if mutants_path is not None:
        import textwrap

        for i, m in enumerate(load_mutants(mutants_path)):
            saved = dict(ns)
            try:
                exec(compile(textwrap.dedent(m.code), f"<mutant {m.mistake}>", "exec"), ns)
                kind, msg, sec = _judge(module.QUESTIONS[m.question], ns,
                                        timeouts.get(m.question, DEFAULT_QUESTION_TIMEOUT_S))
            except Exception as e:  # the mutant's own code does not run
                (kind, msg), sec = _describe(e), 0.0
                kind = "broken mutant"
            finally:
                ns.clear()
                ns.update(saved)
            emit({"type": "mutant", "index": i, "kind": kind, "message": msg, "seconds": sec})
    emit({"type": "done"})
    out.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Grade a lab notebook and print a score per question.")
    ap.add_argument("notebook", help="path of the lab notebook, e.g. labs/lab00_....ipynb")
    ap.add_argument("--checks", help="checks module (default: tools/labs/checks_labNN.py)")
    ap.add_argument("--json", help="also write the report as JSON to this path")
    ap.add_argument("--worker", nargs=2, metavar=("CHECKS", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--mutants", help=argparse.SUPPRESS)
    ap.add_argument("--with-questions", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(Path(args.notebook), Path(args.worker[0]), Path(args.worker[1]),
               Path(args.mutants) if args.mutants else None,
               True if args.with_questions else None)
        sys.stdout.flush()
        os._exit(0)  # skip interpreter teardown: threads a student started must not hang us
    report = grade(args.notebook, args.checks)
    print(report.format())
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(asdict(report), indent=1))
    if report.error and not report.questions:
        return 2
    return 0 if report.questions and report.score == len(report.questions) else 1


if __name__ == "__main__":
    sys.exit(main())
