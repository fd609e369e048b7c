"""How long each notebook takes in QUICK mode, against the course's 90 s budget.

CONTRIBUTING.md promises that every notebook runs in QUICK mode in under 90 s on 2 CPU
cores. That is an absolute wall-clock target, so it lives here and not in
tests/notebooks/test_notebooks.py, which only checks that every notebook runs (with a hang
guard several times the budget): on a shared machine a notebook's time scales with the
load other jobs put on the cores. Run this on an idle machine and read ``seconds`` together
with ``load_average_1min`` (taken before and after) and ``cpu_count``.

Prints one JSON object::

    {"budget_s": 90.0, "notebooks": {"00_measure_your_machine": {"seconds": ...,
     "status": "ok", "within_budget": true}, ...}, "all_within_budget": true, ...}

Target: all_within_budget (every notebook "ok" and under ``budget_s``).

    .venv/bin/python benchmarks/notebooks_quick.py [--notebooks notebooks/06_compute.ipynb ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUICK_BUDGET_S = 90.0  # per notebook, QUICK sizes, 2 CPU cores (CONTRIBUTING.md)


def main() -> None:
    from tools.run_course import run_notebook

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--notebooks", nargs="*", help="paths (default: notebooks/ and solutions/)")
    ap.add_argument("--budget-s", type=float, default=QUICK_BUDGET_S)
    args = ap.parse_args()
    paths = ([Path(p) for p in args.notebooks] if args.notebooks else
             sorted([*(ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"),
                     *(ROOT / "solutions").glob("lab[0-9][0-9]_*.ipynb")]))
    load_before = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            # the limit only labels the run "too slow"; papermill's cell timeout is twice it
            run = run_notebook(path, Path(tmp), quick=True, time_limit_s=args.budget_s,
                               html=False)
            results[f"{path.parent.name}/{path.stem}"] = {
                "seconds": round(run.seconds, 1), "status": run.status,
                "within_budget": run.status == "ok" and run.seconds <= args.budget_s,
                **({"error": run.error[-500:]} if run.error else {})}
    print(json.dumps({
        "budget_s": args.budget_s,
        "notebooks": results,
        "all_within_budget": all(r["within_budget"] for r in results.values()),
        "slowest": max(results, key=lambda k: results[k]["seconds"]) if results else None,
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "cpu_count": os.cpu_count(),
        "target": f"every notebook ok in under {args.budget_s:g} s (QUICK, idle 2-core machine)",
    }, indent=1))


if __name__ == "__main__":
    main()
