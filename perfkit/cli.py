"""``python -m perfkit``: the library's command line (also installed as ``perfkit``).

Subcommands:

* ``limits``: this machine's measured ceilings (matmul FLOP/s per dtype, copy bandwidth,
  host-to-device bandwidth on a GPU), the numbers notebook 00 measures and every later
  result is a share of. Shows the cached ones (``~/.cache/perfkit``) or measures them.

Usage::

    python -m perfkit limits             # cached ceilings, measured first if there are none
    python -m perfkit limits --measure --quick --json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict

from perfkit import __version__, hw


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _limits_text(limits: hw.MachineLimits, path: str) -> str:
    lines = [f"{limits.name} ({limits.device}), measured {limits.measured_at or 'at an unknown time'}"]
    for dtype, flops in sorted(limits.matmul_flops.items()):
        lines.append(f"  matmul {dtype:<9} {_si(flops, 'FLOP/s'):>14}   "
                     f"ridge point {limits.ridge_point(dtype):7.1f} FLOP/byte")
    lines.append(f"  copy, DRAM       {_si(limits.copy_bytes_per_s, 'B/s'):>14}   "
                 "(bytes read + written per second, buffers >= 4x the last-level cache)")
    if limits.cache_bytes_per_s:
        lines.append(f"  copy, in cache   {_si(limits.cache_bytes_per_s, 'B/s'):>14}   "
                     f"(buffers <= half the {_si(limits.llc_bytes or 0, 'B')} last-level cache)")
    if limits.h2d_bytes_per_s:
        lines.append(f"  host to device   {_si(limits.h2d_bytes_per_s, 'B/s'):>14}   (pinned memory)")
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
            record.pop("matmul_points")
            record.pop("copy_points")
        print(json.dumps(record, indent=1))
    else:
        print(_limits_text(limits, path))
    return 0


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
