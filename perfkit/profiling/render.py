"""The diagnosis report as terminal text, Markdown and one self-contained HTML page.

:func:`render_text` is what ``perfkit diagnose`` prints; :func:`render_markdown` and
:func:`render_html` write ``report.md`` and ``report.html``. They only format: the plots
come in as PNG bytes or file names (drawn by :mod:`perfkit.viz.diagnose`, above this
layer), so the report needs no plotting library and falls back to an SVG bar without one.

Usage::

    rep = build_report([rank_record(rec)])
    print(render_text(rep))
    Path("report.html").write_text(render_html(rep, images=report_pngs(rep)))
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfkit._checks import check_items, check_type
from perfkit.units import si

__all__ = ["render_html", "render_markdown", "render_text"]

_PNG = b"\x89PNG\r\n\x1a\n"  # the signature every PNG file starts with


def render_text(rep: dict[str, Any]) -> str:
    """The report as terminal text: numbers first, then the findings, worst first."""
    return _render(rep, md=False)


def render_markdown(rep: dict[str, Any], images: Sequence[str] = ()) -> str:
    """The report as Markdown (report.md), linking the plot files ``images`` (paths
    relative to the report, e.g. ``report.shares.png``) at the end."""
    links = [check_type("images item", p, str) for p in check_items("images", images,
                                                                     nonempty=False)]
    text = _render(rep, md=True)
    if links:
        text += "\n\n## Plots\n\n" + "\n\n".join(f"![{Path(p).stem}]({p})" for p in links)
    return text


_COLORS = {"data": "#e6550d", "sync": "#d62728", "communication": "#9467bd",
           "optimizer": "#8c564b", "backward": "#1f77b4", "forward": "#6baed6",
           "other": "#bdbdbd"}


def render_html(rep: dict[str, Any], images: Mapping[str, bytes] | None = None) -> str:
    """The report as one self-contained HTML page (report.html), nothing fetched.

    Args:
        rep: a report from :func:`~perfkit.profiling.build_report`.
        images: name -> PNG bytes of the plots (:func:`perfkit.viz.report_pngs`), embedded
            as base64 data URLs above the text; ``None`` or empty (no plotting library)
            draws an SVG bar of where the step goes instead.

    Raises:
        TypeError, ValueError: for a ``rep`` that is not a report, or ``images`` that are
            not PNG bytes by name.
    """
    check_report(rep)
    pngs = dict(check_type("images", images, Mapping, optional=True) or {})
    for name, png in pngs.items():
        check_type("images key", name, str)
        if not isinstance(png, bytes) or not png.startswith(_PNG):
            raise ValueError(f"images[{name!r}] must be the bytes of a PNG file")
    head = ("<!doctype html><meta charset=utf-8><title>perfkit diagnose</title>"
            "<body style='font-family:sans-serif;max-width:60em'><h1>Where the step goes</h1>")
    text = f"<pre>{html.escape(render_markdown(rep))}</pre></body>"
    if pngs:
        figs = "".join(f'<figure><img alt="{html.escape(k)}" style="max-width:100%" '
                       f'src="data:image/png;base64,{base64.b64encode(v).decode()}"></figure>'
                       for k, v in pngs.items())
        return head + figs + text
    bar, x = [], 0.0
    for k, v in (rep["shares"] or {}).items():
        w = 600 * v
        bar.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="28" fill="{_COLORS[k]}">'
                   f"<title>{k} {v:.1%}</title></rect>")
        if v >= 0.06:
            bar.append(f'<text x="{x + 3:.1f}" y="18" font-size="11" fill="white">{k} '
                       f"{v:.0%}</text>")
        x += w
    svg = (f'<svg width="600" height="28" role="img" aria-label="shares of the step">'
           f'{"".join(bar)}</svg>') if bar else ""
    return head + svg + text


def _ms(s: float | None) -> str:
    return "?" if s is None else f"{s * 1e3:.2f} ms"


def _bytes(n: float) -> str:
    """Bytes with a binary prefix and 3 significant digits (``5.05 MiB``, ``37.5 KiB``)."""
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _share(x: float) -> str:
    """A share with 2 significant digits below 1 % (``0.018%``), one decimal above."""
    return f"{x:.1%}" if x >= 0.01 else f"{x * 100:.2g}%"


def _memory_lines(mem: dict[str, Any], li: str) -> list[str]:
    """The peak, what was in use before the script, and the model states when counted."""
    start = mem.get("start_bytes")
    lines = [f"{li}memory: {mem['kind']} {_bytes(mem['bytes'])}"
             + (f" ({_bytes(start)} in use before the script ran)" if start is not None else "")]
    if mem.get("params_bytes") is None:
        lines.append(f"{li}  model states: not counted (no torch.optim optimizer stepped in the "
                     "recorded window)")
        return lines
    states = mem["params_bytes"] + mem["grads_bytes"] + mem["optimizer_bytes"]
    lines.append(f"{li}  model states, counted from the tensors {', '.join(mem['optimizers'])} "
                 f"holds: parameters {_bytes(mem['params_bytes'])}, gradients "
                 f"{_bytes(mem['grads_bytes'])}, optimizer state {_bytes(mem['optimizer_bytes'])}"
                 f"; {_bytes(states)} in all, {_share(states / mem['bytes'])} of the peak")
    return lines


_REPORT_KEYS = ("command", "status", "steps_seen", "window_steps", "world_size", "step_p50_s",
                "step_p95_s", "throughput", "findings")


def check_report(rep: Any, keys: tuple[str, ...] = _REPORT_KEYS) -> dict[str, Any]:
    """``rep`` if it is a report as :func:`build_report` returns it (or its JSON read back),
    holding ``keys``."""
    check_type("rep", rep, dict)
    missing = [k for k in keys if k not in rep]
    if missing:
        raise ValueError(f"rep must be a report from build_report(); it lacks {missing}")
    return rep


def _render(rep: dict[str, Any], md: bool) -> str:
    check_report(rep)
    h = "## " if md else ""
    li = "- " if md else "  "
    cmd = rep["command"] if rep["command"].startswith("perfkit diagnose") else (  # the session's own line
        f"perfkit diagnose: {rep['command']}".rstrip())
    lines = [f"{'# ' if md else ''}{cmd}",
             f"{li}status: {rep['status']}, {rep['steps_seen']} steps seen, "
             f"{rep['window_steps']} recorded, {rep['world_size']} rank(s)",
             f"{li}step time: p50 {_ms(rep['step_p50_s'])}, p95 {_ms(rep['step_p95_s'])}"]
    if rep["throughput"]:
        t = rep["throughput"]
        lines.append(f"{li}throughput: {t['samples_per_s']:.1f} samples/s "
                     f"(batch {t['batch_size']} from the DataLoader)")
    else:
        lines.append(f"{li}throughput: unknown (no DataLoader batch to count)")
    mfu, ceiling = rep["mfu"], rep.get("mfu_ceiling")
    of = (f" on {ceiling['threads']} thread{'s' * (ceiling['threads'] != 1)} "
          f"({si(ceiling['flops_per_s'], 'FLOP/s')}), the threads the script ran on" if ceiling else "")
    # the profiler counts only the ops it has formulas for (matmuls, convolutions) in the profiled
    # window, which the profiler itself slows: a lower bound of the step's HFU
    lines.append(f"{li}counted FLOP rate: " + (
        f"{mfu * 100:.3g} % of this machine's measured fp32 ceiling{of} (the FLOPs of the matmul and "
        "convolution ops the profiler counts, over the profiled window, which the profiler slows: "
        "a lower bound of the step's HFU)" if isinstance(mfu, float) else mfu))
    lines += _memory_lines(rep["memory"], li)
    if rep["shares"]:
        lines += ["", f"{h}Where the step goes"]
        for k, v in rep["shares"].items():
            extra = ""
            if k == "communication" and v > 0:
                host, slowed = rep.get("comm_host_share", 0.0), rep.get("comm_contention_share", 0.0)
                extra = (f"  (exposed {v - host - slowed:.1%}, launches and bucket copies "
                         f"{host:.1%}, operators slowed by collectives {slowed:.1%}; "
                         f"{rep['comm_overlapped_share'] - slowed:.1%} more overlapped)")
            lines.append(f"{li}{k:<14}{v:7.1%}{extra}")
        if rep.get("data_offload_share"):
            lines.append(f"{li}{'data, off-main':<14}{rep['data_offload_share']:7.1%}  (loading on "
                         "another thread, as a prefetcher's, while the step ran)")
        lines.append(f"{li}{'syncs/step':<14}{rep['syncs_per_step']:7.1f}")
        if rep.get("device_idle_share") is not None:
            lines.append(f"{li}{'device idle':<14}{rep['device_idle_share']:7.1%}")
    if len(rep["ranks"]) > 1:
        lines += ["", f"{h}Ranks"]
        for r in rep["ranks"]:
            lines.append(f"{li}rank {r['rank']}: step p50 {_ms(r['step_p50_s'])}, "
                         f"mean work outside collectives {_ms(r['work_s'])} ({r['status']})")
    lines += ["", f"{h}Findings"]
    if not rep["findings"]:
        lines.append(f"{li}none: no cause crosses its threshold")
    for i, f in enumerate(rep["findings"], 1):
        gain = f"; removing it speeds the step up {f['max_speedup']:.2f}x if the rest is unchanged" \
            if f["max_speedup"] and f["severity"] != "info" else ""
        lines.append(f"{i}. [{f['severity']}] {f['kind']}: {f['evidence']}{gain}")
        lines += [f"   {'-' if md else '*'} fix: {x}" for x in f["fix"]]
        lines.append(f"   {'-' if md else '*'} learn: {f['notebook']}")
    for n in rep["notes"]:
        lines.append(f"note: {n}")
    if rep["trace"]:
        lines.append(f"trace (open in https://ui.perfetto.dev): {rep['trace']}")
    return "\n".join(lines)
