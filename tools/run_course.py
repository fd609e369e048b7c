"""Run the course: execute every lecture notebook, render HTML, print a summary.

    python -m tools.run_course             # default sizes (`make course`)
    python -m tools.run_course --quick     # small sizes (`make course QUICK=1`, CI)

Each notebook runs with papermill into ``build/notebooks/`` (``QUICK`` injected as a
parameter), then nbconvert renders an HTML page beside it. One failing notebook is
reported with the cell that failed and does not stop the others. The summary table lists
every notebook's status, seconds and the headline figures it measured (the cells that
call ``perfkit.viz.show_headlines``); the scorecard after it counts the predictions that
held (``perfkit.viz.show_verdict``) and lists the others. Each kernel's stderr (ipykernel's
warnings, the profiler's C++ lines) goes to ``NAME.stderr.log`` beside the executed notebook.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

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

    def tally(self) -> dict[str, int]:
        """How many predictions held, missed, or were inconclusive."""
        out = {"held": 0, "missed": 0, "inconclusive": 0}
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


def _failure(exc: Exception) -> str:
    """One readable line: papermill's exception names the cell's exception and message."""
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = getattr(exc, "evalue", str(exc))
    return f"{ename}: {evalue}".splitlines()[0][:300]


@contextlib.contextmanager
def stderr_to(path: Path):
    """Send this process's file descriptor 2, and so every kernel it starts, to ``path``.

    A Jupyter kernel inherits its parent's stderr: without this, every notebook adds
    ipykernel's "Kernel is running over TCP without encryption" warning and the profiler's
    C++ start-up lines to the course's output. They are kept in ``path`` instead.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def run_notebook(src: Path, out_dir: Path, quick: bool, time_limit_s: float,
                 html: bool = True) -> NotebookRun:
    """Execute one notebook with papermill (and render it to HTML); never raises."""
    import nbformat
    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / src.name
    t0 = time.perf_counter()
    error = ""
    log = out.with_suffix(".stderr.log")
    log.unlink(missing_ok=True)
    try:
        with stderr_to(log):
            pm.execute_notebook(str(src), str(out), parameters={"QUICK": quick},
                                kernel_name="python3", language="python", cwd=str(ROOT),
                                progress_bar=False, request_save_on_cell_execute=False,
                                execution_timeout=int(time_limit_s * 2))
    except Exception as e:  # papermill raises PapermillExecutionError with the cell's error
        error = _failure(e)
    seconds = time.perf_counter() - t0
    done = nbformat.read(out, as_version=4) if out.exists() else None
    heads = headlines_of(done) if done else {}
    verdicts = verdicts_of(done) if done else []
    if html and out.exists():
        from nbconvert import HTMLExporter

        body, _ = HTMLExporter().from_filename(str(out))
        out.with_suffix(".html").write_text(body)
    status = "failed" if error else ("too slow" if seconds > time_limit_s else "ok")
    if status == "too slow":
        error = f"took {seconds:.0f} s, over the {time_limit_s:.0f} s budget"
    return NotebookRun(src.stem, status, seconds, heads, error, verdicts)


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


def scorecard(runs: list[NotebookRun]) -> str:
    """Predictions held per notebook, then every one that missed or was inconclusive."""
    lines = ["predictions (held / recorded; missed, inconclusive)"]
    for r in runs:
        t = r.tally()
        n = sum(t.values())
        lines.append(f"  {r.name:<28} {t['held']:>2} / {n:<2}" + (
            f"  {t['missed']} missed, {t['inconclusive']} inconclusive" if n else "  (none recorded)"))
    total = [sum(r.tally()[k] for r in runs) for k in ("held", "missed", "inconclusive")]
    lines.append(f"  {'all notebooks':<28} {total[0]:>2} / {sum(total):<2}  {total[1]} missed, "
                 f"{total[2]} inconclusive")
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
    ap.add_argument("--no-html", action="store_true", help="skip the HTML rendering")
    args = ap.parse_args(argv)
    from tqdm import tqdm

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
        run = run_notebook(src, out_dir, args.quick, limit, html=not args.no_html)
        tqdm.write(f"{run.name}: {run.status} in {run.seconds:.0f} s"
                   + (f"  ({run.error})" if run.error else ""), file=sys.stdout)
        runs.append(run)
    bar.close()
    total = sum(r.seconds for r in runs)
    print()
    print(summary_table(runs))
    print()
    print(scorecard(runs))
    print(f"\n{len(runs)} notebooks in {total:.0f} s ({'QUICK' if args.quick else 'default'} "
          f"sizes); executed notebooks and HTML in {out_dir}")
    (out_dir / "summary.json").write_text(json.dumps([asdict(r) for r in runs], indent=1))
    return 0 if all(r.status == "ok" for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
