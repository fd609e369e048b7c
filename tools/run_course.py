"""Run the course: execute every lecture notebook, print a summary.

    python -m tools.run_course             # default sizes (`make course`)
    python -m tools.run_course --quick     # small sizes (`make course QUICK=1`, CI)

Each notebook runs with papermill into ``build/notebooks/`` (``QUICK`` injected as a
parameter); `make site` then builds the course book from them (``tools.book``), and
``--html`` also renders a standalone nbconvert page beside each. One failing notebook is
reported with the cell that failed and does not stop the others. A notebook over its time
budget is reported with its three slowest cells and the machine's load average, and does not
fail the run: the exit status is non-zero only when a notebook failed. The summary table lists
every notebook's status, seconds and the headline figures it measured (the cells that
call ``perfkit.viz.show_headlines``); the scorecard after it counts the predictions that
held (``perfkit.viz.show_verdict``) and lists the others; last, the consistency scan's count of
findings (:mod:`tools.scan_notebooks`), those not listed in ``tools/scan_known.json`` shown.
Each kernel's stderr (ipykernel's warnings, the profiler's C++ lines) goes to
``NAME.stderr.log`` beside the executed notebook.
``PERFKIT_IMITATE=no-bf16`` runs every notebook as on a CPU without native bf16
(:data:`perfkit.hw.IMITATIONS`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.logs import stderr_to
from tools.scan_notebooks import summary as scan_summary

ROOT = Path(__file__).resolve().parent.parent
HEADLINE_MIME = "application/vnd.perfkit.headline+json"  # = perfkit.viz.HEADLINE_MIME
VERDICT_MIME = "application/vnd.perfkit.verdict+json"  # = perfkit.viz.VERDICT_MIME


@dataclass
class NotebookRun:
    name: str
    status: str  # ok, failed, too slow
    seconds: float
    headlines: dict[str, str] = field(default_factory=dict)
    error: str = ""
    verdicts: list[dict] = field(default_factory=list)  # perfkit.verdict.Verdict.record()s
    slowest: list[tuple[int, str, float]] = field(default_factory=list)  # (cell, first line, s)
    load: tuple[float, float, float] | None = None  # 1, 5, 15-minute load average at the end

    def tally(self) -> dict[str, int]:
        """How many predictions held, missed, were inconclusive or disturbed."""
        out = {"held": 0, "missed": 0, "inconclusive": 0, "disturbed": 0}
        for v in self.verdicts:
            out[v["outcome"]] = out.get(v["outcome"], 0) + 1
        return out


def headlines_of(nb) -> dict[str, str]:
    """Headline figures stored by ``show_headlines`` in an executed notebook."""
    found: dict[str, str] = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if HEADLINE_MIME in data:
                found.update(data[HEADLINE_MIME])
    return found


def verdicts_of(nb) -> list[dict]:
    """Verdict records stored by ``perfkit.viz.show_verdict`` in an executed notebook."""
    return [out["data"][VERDICT_MIME] for cell in nb.cells for out in cell.get("outputs", [])
            if VERDICT_MIME in out.get("data", {})]


def slowest_cells(nb, k: int = 3) -> list[tuple[int, str, float]]:
    """The ``k`` slowest code cells of a notebook executed by papermill, slowest first.

    Each is ``(cell number, first source line, seconds)``, the number counting code cells
    from 1 (the execution order of a top-to-bottom run), the seconds from papermill's
    ``metadata.papermill.duration``. Cells without a duration (never ran) are left out.
    """
    cells = []
    for number, cell in enumerate((c for c in nb.cells if c.get("cell_type") == "code"), 1):
        seconds = (cell.get("metadata", {}).get("papermill") or {}).get("duration")
        if isinstance(seconds, int | float):
            first = next((line.strip() for line in cell.get("source", "").splitlines()
                          if line.strip() and not line.startswith("# NBVAL")), "")
            cells.append((number, first[:80], float(seconds)))
    return sorted(cells, key=lambda c: -c[2])[:k]


def load_average() -> tuple[float, float, float] | None:
    """The machine's 1, 5 and 15-minute load averages, ``None`` where the OS has none."""
    try:
        return os.getloadavg()
    except (AttributeError, OSError):
        return None


def over_budget(run: NotebookRun, limit_s: float) -> str:
    """Why a notebook took ``run.seconds`` against ``limit_s``: its slowest cells and the load."""
    cells = "; ".join(f"cell {n} `{line}` {s:.0f} s" for n, line, s in run.slowest) or "no cell timings"
    load = (f"load average {run.load[0]:.1f} / {run.load[1]:.1f} / {run.load[2]:.1f} (1/5/15 min) "
            f"on {os.cpu_count()} cores" if run.load else "load average unknown")
    return f"took {run.seconds:.0f} s, over the {limit_s:.0f} s budget; slowest: {cells}; {load}"


def _failure(exc: Exception) -> str:
    """One readable line: papermill's exception names the cell's exception and message."""
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = getattr(exc, "evalue", str(exc))
    return f"{ename}: {evalue}".splitlines()[0][:300]


def run_notebook(src: Path, out_dir: Path, quick: bool, time_limit_s: float,
                 html: bool = False) -> NotebookRun:
    """Execute one notebook with papermill (and, with ``html``, render it to HTML); never raises."""
    import nbformat
    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / src.name
    t0 = time.perf_counter()
    error = ""
    log = out.with_suffix(".stderr.log")
    log.unlink(missing_ok=True)
    from perfkit.viz.core import HEADLESS_ENV

    before = os.environ.get(HEADLESS_ENV)
    os.environ[HEADLESS_ENV] = "1"  # the kernel inherits it: widgets show their default statically
    try:
        with stderr_to(log):
            pm.execute_notebook(str(src), str(out), parameters={"QUICK": quick},
                                kernel_name="python3", language="python", cwd=str(ROOT),
                                progress_bar=False, request_save_on_cell_execute=False,
                                execution_timeout=int(time_limit_s * 2))
    except Exception as e:  # papermill raises PapermillExecutionError with the cell's error
        error = _failure(e)
    finally:
        if before is None:
            os.environ.pop(HEADLESS_ENV, None)
        else:
            os.environ[HEADLESS_ENV] = before
    seconds = time.perf_counter() - t0
    done = nbformat.read(out, as_version=4) if out.exists() else None
    heads = headlines_of(done) if done else {}
    verdicts = verdicts_of(done) if done else []
    slowest = slowest_cells(done) if done else []
    if html and out.exists():
        from nbconvert import HTMLExporter

        body, _ = HTMLExporter().from_filename(str(out))
        out.with_suffix(".html").write_text(body)
    status = "failed" if error else ("too slow" if seconds > time_limit_s else "ok")
    run = NotebookRun(src.stem, status, seconds, heads, error, verdicts, slowest, load_average())
    if status == "too slow":
        run.error = over_budget(run, time_limit_s)
    return run


def exit_status(runs: list[NotebookRun]) -> int:
    """0 when every notebook ran (over budget or not), 1 when one failed: a slow machine is
    reported (:func:`over_budget`), not mistaken for a broken course."""
    return 1 if any(r.status == "failed" for r in runs) else 0


def summary_table(runs: list[NotebookRun]) -> str:
    rows = [("notebook", "status", "seconds", "headline figures (measured here)")]
    for r in runs:
        heads = "; ".join(f"{k}: {v}" for k, v in r.headlines.items()) or "-"
        rows.append((r.name, r.status, f"{r.seconds:.0f}", heads))
        if r.error:
            rows.append(("", "", "", f"!! {r.error}"))
    w = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{a:<{w[0]}}  {b:<{w[1]}}  {c:>{w[2]}}  {d}" for a, b, c, d in rows]
    lines.insert(1, "-" * min(120, max(len(x) for x in lines)))
    return "\n".join(lines)


def held_by_kind(runs: list[NotebookRun]) -> dict[str, int]:
    """The held verdicts counted by :meth:`perfkit.verdict.Prediction.kind` (a window, a floor, a
    ceiling, an exact check, a stored run), in :data:`perfkit.verdict.KINDS`' order, kinds with
    none left out; records without a whole prediction (older notebooks) are not counted."""
    from perfkit.verdict import KINDS, Prediction

    counts = dict.fromkeys(KINDS, 0)
    for r in runs:
        for v in r.verdicts:
            d = v.get("prediction")
            if v["outcome"] != "held" or not isinstance(d, dict):
                continue
            try:
                p = Prediction(**{**d, "soft": tuple(d.get("soft", ())),
                                  "physical": tuple(d.get("physical", (None, None)))})
            except (TypeError, ValueError):  # a record from another version, or a partial one
                continue
            counts[p.kind()] += 1
    return {k: n for k, n in counts.items() if n}


def scorecard(runs: list[NotebookRun]) -> str:
    """Predictions held per notebook, how many misses chance alone would give, then every
    verdict that did not hold."""
    from perfkit.stats import chance_misses

    kinds = ("held", "missed", "inconclusive", "disturbed")
    lines = ["predictions (held / recorded; missed, inconclusive, disturbed)"]
    for r in runs:
        t = r.tally()
        n = sum(t.values())
        lines.append(f"  {r.name:<28} {t['held']:>2} / {n:<2}" + (
            f"  {t['missed']} missed, {t['inconclusive']} inconclusive, {t['disturbed']} disturbed"
            if n else "  (none recorded)"))
    total = {k: sum(r.tally()[k] for r in runs) for k in kinds}
    lines.append(f"  {'all notebooks':<28} {total['held']:>2} / {sum(total.values()):<2}  "
                 f"{total['missed']} missed, {total['inconclusive']} inconclusive, "
                 f"{total['disturbed']} disturbed")
    held_kinds = held_by_kind(runs)
    if held_kinds:
        lines.append("  held, by what the prediction could test (perfkit.verdict.Prediction.kind): "
                     + ", ".join(f"{n} {k}{'s' * (n != 1)}" for k, n in held_kinds.items())
                     + " (a floor or a ceiling held far from its edge tests little)")
    by_level: dict[float, int] = {}
    for r in runs:
        for v in r.verdicts:
            if v.get("level") is not None:  # rounded: a level built as a product (0.9 ** (1/k)) ** k
                lvl = round(v["level"], 9)  # is 0.8999999999999999, the same level as 0.9
                by_level[lvl] = by_level.get(lvl, 0) + 1
    if by_level:
        chance = sum(chance_misses(n, lvl) for lvl, n in by_level.items())
        levels = ", ".join(f"{n} at {lvl:.0%}" for lvl, n in sorted(by_level.items()))
        lines.append(f"  judged on confidence intervals: {levels}; if every prediction were true, "
                     f"chance alone would report up to {chance:.1f} of them missed")
    off = [(r.name, v) for r in runs for v in r.verdicts if v["outcome"] != "held"]
    if off:
        lines.append("not held:")
        lines += [f"  {name}: [{v['outcome']}] {v['text'].replace('**', '')}" for name, v in off]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Execute every course notebook and summarise.")
    ap.add_argument("--quick", action="store_true", help="small sizes (CI)")
    ap.add_argument("--notebooks", nargs="*", help="only these notebooks (paths)")
    ap.add_argument("--out", default=str(ROOT / "build" / "notebooks"))
    ap.add_argument("--limit-s", type=float, help="seconds allowed per notebook "
                    "(default 90 with --quick, else 180)")
    ap.add_argument("--html", action="store_true", help="also render each executed notebook "
                    "as a standalone nbconvert HTML page (`make site` builds the course book)")
    ap.add_argument("--no-html", action="store_true", help=argparse.SUPPRESS)  # the old default
    args = ap.parse_args(argv)
    from tqdm import tqdm

    if os.environ.get("PERFKIT_IMITATE"):
        from perfkit import hw  # noqa: F401  (puts the imitation's kernel caps in the environment)

    limit = args.limit_s or (90.0 if args.quick else 180.0)
    sources = [Path(p) for p in args.notebooks] if args.notebooks else sorted(
        (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    missing = [str(p) for p in sources if not p.exists()]
    if missing:
        print(f"error: no notebook at {', '.join(missing)}", file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    bar = tqdm(sources, desc="course", unit="notebook", file=sys.stdout)
    for src in bar:
        bar.set_postfix_str(src.stem)
        run = run_notebook(src, out_dir, args.quick, limit, html=args.html and not args.no_html)
        tqdm.write(f"{run.name}: {run.status} in {run.seconds:.0f} s"
                   + (f"  ({run.error})" if run.error else ""), file=sys.stdout)
        runs.append(run)
    bar.close()
    total = sum(r.seconds for r in runs)
    print()
    print(summary_table(runs))
    print()
    print(scorecard(runs))
    print()
    print(scan_summary([p for p in (out_dir / s.name for s in sources) if p.exists()]))
    print(f"\n{len(runs)} notebooks in {total:.0f} s ({'QUICK' if args.quick else 'default'} "
          f"sizes); executed notebooks in {out_dir}; `make site` builds the book from them")
    (out_dir / "summary.json").write_text(json.dumps([asdict(r) for r in runs], indent=1))
    slow = [r.name for r in runs if r.status == "too slow"]
    if slow:
        print(f"over the {limit:.0f} s budget (reported above, not an error): {', '.join(slow)}")
    return exit_status(runs)


if __name__ == "__main__":
    sys.exit(main())
