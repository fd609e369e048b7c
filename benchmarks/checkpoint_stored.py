"""The stored form of a checkpoint benchmark's JSON, which notebook 14 reads from
``benchmarks/stored/``: the result with the command that produced it, when, on how many
cores and at what load (the notebook prints them beside the numbers it quotes).

Usage (inside a benchmark's ``main``)::

    t0, load0 = time.time(), os.getloadavg()[0]
    ...
    if args.store:
        write_stored(args.store, result, t0, load0)

Run: ``.venv/bin/python benchmarks/checkpoint_stored.py benchmarks/stored/*.json`` prints what
each stored run was (command, date, cores, load).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch


def write_stored(path: str | os.PathLike, result: dict, started: float, load_at_start: float) -> None:
    """Write ``result`` to ``path`` with the command line, the UTC start and end, the cores,
    the 1-minute load average at the start and the end, and torch's version."""
    fmt = "%Y-%m-%d %H:%M UTC"
    out = {"command": " ".join([".venv/bin/python", *sys.argv]),
           "date": f"{time.strftime(fmt, time.gmtime(started))} to {time.strftime(fmt, time.gmtime())}",
           "cores": os.cpu_count(),
           "load": (f"1-min load average {load_at_start:.3g} at the start, "
                    f"{os.getloadavg()[0]:.3g} at the end"),
           "torch": torch.__version__, "result": result}
    Path(path).write_text(json.dumps(out, indent=1) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description="print what each stored benchmark run was")
    p.add_argument("paths", nargs="+")
    for path in p.parse_args().paths:
        d = json.loads(Path(path).read_text())
        print(f"{path}: {d['command']} ({d['date']}, {d['cores']} cores; {d['load']}; torch {d['torch']})")


if __name__ == "__main__":
    main()
