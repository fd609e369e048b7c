"""Where a long job's step windows go: TensorBoard, JSON lines and Prometheus.

A sink is any object with ``write(window)`` and ``close()``. :class:`StepMonitor` hands it a
:class:`~perfkit.profiling.StepWindow` once every ``every`` steps (the summary is computed
once per window; the phases only append timestamps), so a sink costs nothing per phase and
a few hundred microseconds per window. The three here follow the tools long jobs are watched
with: TensorBoard's scalars (Lightning's, DeepSpeed's and torchtitan's default logger), one
JSON object per line for anything else, and a Prometheus endpoint for cluster monitoring and
alerting (:mod:`perfkit.profiling.alerts` writes the rules that read it).

Every sink reports the same values under the names in :func:`window_scalars` (TensorBoard
and JSON lines) and :data:`METRICS` (Prometheus). Under ``torchrun`` the process's rank
(``RANK``) labels each record: a ``rank`` field in JSON lines, a ``rank`` label in
Prometheus, a ``rank{N}`` sub-directory for TensorBoard when the world has several ranks.
JSON lines also name the run (``run_id``, ``started_at``), since runs append to one file.

Usage::

    sinks = [TensorBoardSink("runs/exp1"), JsonLinesSink("runs/exp1.jsonl"),
             PrometheusSink(port=9400)]
    mon = StepMonitor(sinks=sinks, every=50)
    ...  # the loop; then mon.close() writes the last window and closes every sink
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.profiling.monitor import StepWindow

__all__ = ["METRICS", "JsonLinesSink", "PrometheusSink", "TensorBoardSink", "process_rank",
           "read_json_lines", "read_scalars", "window_scalars"]

# Prometheus metric name -> (type, help). Gauges hold the latest window's values.
METRICS = {
    "perfkit_step_p50_seconds": ("gauge", "median step time of the latest window, s"),
    "perfkit_step_mean_seconds": ("gauge", "mean step time of the latest window, s"),
    "perfkit_phase_p50_seconds": ("gauge", "median time of a phase per step, latest window, s"),
    "perfkit_phase_share": ("gauge", "phase mean over step mean, latest window (0.1 = 10 %)"),
    "perfkit_samples_per_second": ("gauge", "samples per second over the latest window"),
    "perfkit_tokens_per_second": ("gauge", "tokens per second over the latest window"),
    "perfkit_memory_peak_bytes": ("gauge", "peak memory (CUDA allocator or process RSS), bytes"),
    "perfkit_step_seconds": ("histogram", "every monitored step's time, s"),
}
# Step-time histogram buckets, s: about 2x apart from 1 ms (a small GPU step) to a minute.
BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
             20.0, 60.0)


def process_rank() -> int:
    """This process's rank under ``torchrun`` (the ``RANK`` variable); 0 without one.

    Raises:
        ValueError: if ``RANK`` is set to something other than an int >= 0.
    """
    value = os.environ.get("RANK", "0")
    if not value.isdigit():
        raise ValueError(f"RANK must be an int >= 0 (torchrun sets it), got {value!r}")
    return int(value)


def window_scalars(window: StepWindow) -> dict[str, float]:
    """The scalars of one window under their stable tag names.

    ``step/p50_s``, ``step/mean_s``, ``step/p95_s``, ``step/p99_s``; for every phase
    (``other`` included) ``phase/NAME/p50_s`` and ``phase/NAME/share``;
    ``throughput/samples_per_s`` and ``throughput/tokens_per_s`` when the loop counted them;
    ``memory/peak_bytes`` and ``memory/current_bytes`` when a memory monitor was attached.
    """
    s = check_type("window", window, StepWindow).summary
    out = {"step/p50_s": s.step.p50_s, "step/mean_s": s.step.mean_s,
           "step/p95_s": s.step.p95_s, "step/p99_s": s.step.p99_s}
    for name, p in s.phases.items():
        out[f"phase/{name}/p50_s"] = p.p50_s
        out[f"phase/{name}/share"] = p.share
    if s.samples_per_s is not None:
        out["throughput/samples_per_s"] = s.samples_per_s
    if s.tokens_per_s is not None:
        out["throughput/tokens_per_s"] = s.tokens_per_s
    if window.memory is not None:
        out["memory/peak_bytes"] = float(window.memory.peak_bytes)
        out["memory/current_bytes"] = float(window.memory.current_bytes)
    return out


class _Sink:
    """Shared by the sinks: ``with`` closes them; a closed sink refuses writes."""

    closed = False

    def __enter__(self) -> _Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self, window: StepWindow) -> StepWindow:
        if self.closed:
            raise RuntimeError(f"{type(self).__name__}.write() after close()")
        return check_type("window", window, StepWindow)

    def close(self) -> None:
        self.closed = True


class TensorBoardSink(_Sink):
    """Writes each window's :func:`window_scalars` as TensorBoard scalars.

    Args:
        log_dir: the run's directory (``tensorboard --logdir`` on its parent compares runs);
            with several ranks each writes to ``log_dir/rank{N}``.
        flush_secs: how often the writer's background thread flushes to disk, s.

    ``torch.utils.tensorboard.SummaryWriter`` queues events and writes them from its own
    thread, so :meth:`write` only enqueues: one event holding every scalar of the window
    (``add_scalar`` per tag cost ~10x more, about 2 ms a window for 20 tags, measured). The
    values are stored as float32, as ``add_scalar`` stores them. Needs ``tensorboard``.
    """

    def __init__(self, log_dir: str | os.PathLike, flush_secs: float = 10.0) -> None:
        check_type("log_dir", log_dir, (str, os.PathLike))
        check_real("flush_secs", flush_secs, 0, lo_open=True)
        from tensorboard.compat.proto.summary_pb2 import Summary
        from torch.utils.tensorboard import SummaryWriter

        self.rank = process_rank()
        path = Path(log_dir)
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            path = path / f"rank{self.rank}"
        self.log_dir = str(path)
        self._writer = SummaryWriter(log_dir=self.log_dir, flush_secs=flush_secs)
        self._summary = Summary

    def write(self, window: StepWindow) -> None:
        """Add the window's scalars at global step ``window.step``."""
        window = self._check_open(window)
        values = [self._summary.Value(tag=tag, simple_value=value)
                  for tag, value in window_scalars(window).items()]
        self._writer._get_file_writer().add_summary(self._summary(value=values), window.step)

    def close(self) -> None:
        """Flush the event file and stop the writer's thread."""
        if not self.closed:
            self._writer.close()
        super().close()


def read_scalars(log_dir: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a TensorBoard run, read back with tensorboard's own reader.

    Returns:
        Tag -> ``[(step, value), ...]`` in step order (values as stored: float32).

    Raises:
        TypeError: if ``log_dir`` is not a path.
        FileNotFoundError: if ``log_dir`` holds no event file.
    """
    check_type("log_dir", log_dir, (str, os.PathLike))
    if not any(Path(log_dir).glob("events.out.tfevents.*")):
        raise FileNotFoundError(f"log_dir {str(log_dir)!r} holds no TensorBoard event file")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


class JsonLinesSink(_Sink):
    """Appends one JSON object per window to a file (``jq``, pandas ``read_json(lines=True)``).

    Each line is ``{"run_id", "started_at", "step", "rank", "summary", "step_times_s",
    "memory"}``: ``step`` is the training step the window ended at (as TensorBoard's global
    step), ``summary`` the window's :meth:`~perfkit.profiling.StepSummary.to_dict` (its own
    ``step`` key holds the step-time statistics, so it is nested, never merged), ``memory``
    a dict of bytes or ``null``. The file is appended to, so runs that share it are told
    apart by ``run_id`` and ``started_at`` (when the sink was made, UTC, ISO 8601);
    :func:`read_json_lines` groups them back.

    Args:
        path: the file; ``{rank}`` in it is replaced by the process's rank, so the ranks
            of one job can write files of their own.
        run_id: names this run on every line; ``None`` draws a fresh one (12 hex digits).
            Give every rank of a job the same one to join their lines.

    Raises:
        TypeError: for a ``path`` that is not a path or a ``run_id`` that is not a str.
        ValueError: for an empty ``run_id``.
    """

    def __init__(self, path: str | os.PathLike, run_id: str | None = None) -> None:
        check_type("path", path, (str, os.PathLike))
        if check_type("run_id", run_id, str, optional=True) == "":
            raise ValueError("run_id must be a non-empty str (or None for a fresh one)")
        self.run_id = run_id if run_id is not None else uuid.uuid4().hex[:12]
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        self.rank = process_rank()
        self.path = Path(str(path).replace("{rank}", str(self.rank)))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, window: StepWindow) -> None:
        """Append the window as one line; flushed at once, so ``tail -f`` sees it."""
        window = self._check_open(window)
        record = {"run_id": self.run_id, "started_at": self.started_at, "step": window.step,
                  "rank": self.rank, "summary": window.summary.to_dict(),
                  "step_times_s": list(window.step_times_s),
                  "memory": None if window.memory is None else asdict(window.memory)}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()  # once per window: a few µs, and a crash loses nothing written

    def close(self) -> None:
        """Close the file."""
        self._file.close()
        super().close()


def read_json_lines(path: str | os.PathLike) -> dict[str, list[dict[str, Any]]]:
    """The records a :class:`JsonLinesSink` appended to ``path``, grouped by run.

    Returns:
        ``run_id`` -> that run's records in file order; runs in the order they first
        appear.

    Raises:
        TypeError: if ``path`` is not a path.
        FileNotFoundError: if there is no such file.
        ValueError: naming the line, for a line that is not a JSON object with a
            ``run_id`` (a file another program wrote, or one from before runs had ids).
    """
    check_type("path", path, (str, os.PathLike))
    runs: dict[str, list[dict[str, Any]]] = {}
    with Path(path).open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}:{n} is not JSON: {e}") from None
            if not isinstance(record, dict) or "run_id" not in record:
                raise ValueError(f"{path}:{n} is not a JsonLinesSink record (no run_id)")
            runs.setdefault(record["run_id"], []).append(record)
    return runs


class PrometheusSink(_Sink):
    """Serves the latest window's gauges and a step-time histogram over HTTP for Prometheus.

    Metrics (see :data:`METRICS`) carry a ``rank`` label (``phase`` too for the per-phase
    ones) and live in a private ``CollectorRegistry``, so two sinks in one process (tests,
    notebooks) never collide and nothing else of the process is exported.

    Args:
        port: TCP port; 0 picks a free one (read it back from :attr:`port`). Under
            ``torchrun`` give each local rank its own, e.g. ``9400 + LOCAL_RANK``.
        addr: address to listen on; loopback by default, so nothing is exposed beyond the
            machine unless asked.
        rank: the ``rank`` label; ``None`` reads ``RANK`` (0 without ``torchrun``).
        buckets: upper bounds of the step-time histogram, s, increasing.

    :meth:`close` stops the HTTP server and frees the port.
    """

    def __init__(self, port: int = 0, addr: str = "127.0.0.1", rank: int | None = None,
                 buckets: Sequence[float] = BUCKETS_S) -> None:
        from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server

        check_int("port", port, 0, 65535)
        check_type("addr", addr, str)
        self.rank = process_rank() if rank is None else check_int("rank", rank, 0)
        bounds = [check_real("buckets", b, 0, lo_open=True) for b in check_items("buckets", buckets)]
        if any(b >= c for b, c in zip(bounds, bounds[1:])):
            raise ValueError(f"buckets must be increasing, got {bounds}")
        self.registry = CollectorRegistry()

        def metric(name: str, labels: tuple[str, ...] = ("rank",)) -> Any:
            kind, doc = METRICS[name]
            if kind == "histogram":
                return Histogram(name, doc, labels, registry=self.registry, buckets=bounds)
            return Gauge(name, doc, labels, registry=self.registry)

        self._m = {n: metric(n, ("rank", "phase") if "_phase_" in n else ("rank",))
                   for n in METRICS}
        self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        self.addr, self.port = addr, self._server.server_address[1]

    @property
    def url(self) -> str:
        """Where Prometheus scrapes: ``http://ADDR:PORT/metrics``."""
        return f"http://{self.addr}:{self.port}/metrics"

    def write(self, window: StepWindow) -> None:
        """Set the gauges to the window's values and observe each of its step times."""
        window = self._check_open(window)
        s, r, m = window.summary, str(self.rank), self._m
        m["perfkit_step_p50_seconds"].labels(r).set(s.step.p50_s)
        m["perfkit_step_mean_seconds"].labels(r).set(s.step.mean_s)
        for name, p in s.phases.items():
            m["perfkit_phase_p50_seconds"].labels(r, name).set(p.p50_s)
            m["perfkit_phase_share"].labels(r, name).set(p.share)
        if s.samples_per_s is not None:
            m["perfkit_samples_per_second"].labels(r).set(s.samples_per_s)
        if s.tokens_per_s is not None:
            m["perfkit_tokens_per_second"].labels(r).set(s.tokens_per_s)
        if window.memory is not None:
            m["perfkit_memory_peak_bytes"].labels(r).set(window.memory.peak_bytes)
        hist = m["perfkit_step_seconds"].labels(r)
        for t in window.step_times_s:
            hist.observe(t)

    def close(self) -> None:
        """Stop the HTTP server, join its thread and free the port."""
        if not self.closed:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
        super().close()
