"""``python -m perfkit``: the library's command line (also installed as ``perfkit``).

Subcommands:

* ``limits``: this machine's measured ceilings (matmul FLOP/s per dtype, copy bandwidth,
  host-to-device bandwidth on a GPU), the numbers notebook 00 measures and every later
  result is a share of. Shows the cached ones (``~/.cache/perfkit``) or measures them.
* ``diagnose``: runs a training script unchanged and explains where its step time goes
  (:mod:`perfkit.profiling.session`).
* ``plan``: chooses the layout of a run on a cluster (:mod:`perfkit.plan.command`).

Usage::

    python -m perfkit limits             # cached ceilings, measured first if there are none
    python -m perfkit limits --measure --quick --json
    python -m perfkit diagnose --skip 3 --steps 10 train.py --lr 1e-3
    torchrun --nproc_per_node 2 -m perfkit diagnose train.py
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict

from perfkit import __version__, hw
from perfkit.plan.command import add_parser as add_plan_parser
from perfkit.units import si


def _limits_text(limits: hw.MachineLimits, path: str) -> str:
    lines = [f"{limits.name} ({limits.device}), measured {limits.measured_at or 'at an unknown time'}"]
    for dtype, flops in sorted(limits.matmul_flops.items()):
        lines.append(f"  matmul {dtype:<9} {si(flops, 'FLOP/s'):>14}   "
                     f"ridge point {limits.ridge_point(dtype):7.1f} FLOP/byte")
    size = (f"buffers of {si(limits.dram_nbytes, 'B')}" if limits.dram_nbytes
            else "the sweep's largest buffers")
    if limits.dram_nbytes and limits.llc_bytes:
        size += f", {limits.dram_nbytes / limits.llc_bytes:.1f}x the last-level cache"
    lines.append(f"  copy, DRAM       {si(limits.copy_bytes_per_s, 'B/s'):>14}   "
                 f"(bytes read + written per second, {size})")
    if limits.cache_bytes_per_s:
        where = (f"buffers of {si(limits.cache_nbytes, 'B')}" if limits.cache_nbytes
                 else f"buffers <= half the {si(limits.llc_bytes or 0, 'B')} last-level cache")
        lines.append(f"  copy, in cache   {si(limits.cache_bytes_per_s, 'B/s'):>14}   ({where})")
    if limits.h2d_bytes_per_s:
        lines.append(f"  host to device   {si(limits.h2d_bytes_per_s, 'B/s'):>14}   (pinned memory)")
    lines.append(f"cached in {path}")
    return "\n".join(lines)


def _cmd_limits(args: argparse.Namespace) -> int:
    path = args.path or str(hw.default_limits_path())
    if args.measure:
        print("measuring this machine's ceilings"
              f"{' (quick sweeps)' if args.quick else ''}...", file=sys.stderr)
    limits = hw.cached_limits(path, quick=args.quick, refresh=args.measure)
    if args.json:
        record = asdict(limits)
        if not args.points:
            for points in ("matmul_points", "shape_points", "copy_points"):
                record.pop(points)
        print(json.dumps(record, indent=1))
    else:
        print(_limits_text(limits, path))
    return 0


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from perfkit.profiling.session import DiagnoseConfig, run_diagnosis

    if args.module is None and not args.script:
        print("perfkit diagnose: name a script (train.py) or a module (-m pkg.train)",
              file=sys.stderr)
        return 2
    target, rest = (args.module, args.script) if args.module else (args.script[0], args.script[1:])
    try:
        cfg = DiagnoseConfig(skip=args.skip, steps=args.steps, then=args.then,
                             out_dir=args.out, timeout_s=args.timeout,
                             step_marker=args.step_marker)
    except (TypeError, ValueError) as e:
        print(f"perfkit diagnose: {e}", file=sys.stderr)
        return 2
    return run_diagnosis(target, rest, cfg, module=args.module is not None, exit_process=True,
                         plots=_report_plots())


def _report_plots() -> Callable[[dict], Mapping[str, bytes]] | None:
    """perfkit.viz's report plots, or ``None`` where matplotlib is not installed (the report
    is then written without them)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return None
    from perfkit.viz.diagnose import report_pngs

    return report_pngs


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m perfkit`` (one subparser per command)."""
    ap = argparse.ArgumentParser(
        prog="perfkit", description="Measured performance tools for (distributed) PyTorch training.")
    ap.add_argument("--version", action="version", version=f"perfkit {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    lim = sub.add_parser("limits", help="show (or measure) this machine's ceilings",
                         description="This machine's matmul FLOP/s per dtype, copy bandwidth and "
                         "host-to-device bandwidth: cached ones, measured first when none are cached.")
    lim.add_argument("--measure", action="store_true",
                     help="measure now (a ceiling keeps the higher of the old and new values)")
    lim.add_argument("--quick", action="store_true", help="smaller sweeps (seconds, less exact)")
    lim.add_argument("--json", action="store_true", help="print the record as JSON")
    lim.add_argument("--points", action="store_true", help="with --json: include every sweep point")
    lim.add_argument("--path", help="the cache file (default: $PERFKIT_CACHE or ~/.cache/perfkit)")
    lim.set_defaults(func=_cmd_limits)
    dg = sub.add_parser(
        "diagnose", help="explain where a training script's step time goes (no code change)",
        usage="perfkit diagnose [options] (script.py | -m module) [script args...]",
        description="Run a training script unchanged, record --steps optimizer steps after "
        "--skip warm-up steps with torch.profiler, and report the step time, the share of "
        "data wait, forward, backward, optimizer, communication, synchronisation and other, "
        "and the ranked findings. Under torchrun every rank records; rank 0 reports.")
    dg.add_argument("--skip", type=int, default=3, help="warm-up steps left out (default 3)")
    dg.add_argument("--steps", type=int, default=10, help="steps recorded (default 10)")
    dg.add_argument("--then", choices=("stop", "continue"), default="stop",
                    help="after the recorded steps: end the script (default) or let it run on")
    dg.add_argument("--out", default="build/diagnose",
                    help="folder for report.json, report.md and the trace (default build/diagnose)")
    dg.add_argument("--timeout", type=float, default=300.0,
                    help="seconds until the recorded window must be complete (default 300)")
    dg.add_argument("--step-marker", metavar="MODULE:FUNCTION",
                    help="the function whose return ends a step, for scripts without a "
                    "torch.optim optimizer step")
    dg.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m")
    dg.add_argument("script", nargs=argparse.REMAINDER, help="script.py and its arguments")
    dg.set_defaults(func=_cmd_diagnose)
    add_plan_parser(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``perfkit`` with ``argv`` (default: the process's arguments); return the exit code."""
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.command is None:
        ap.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
