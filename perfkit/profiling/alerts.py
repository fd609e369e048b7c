"""Prometheus alert rules from the diagnosis thresholds: the diagnosis, while the job runs.

:func:`~perfkit.profiling.diagnose_shares` judges a finished summary; :func:`alert_rules`
writes the same judgement as
a Prometheus rule file over the metrics :class:`~perfkit.profiling.PrometheusSink` exports.
Each share threshold of :class:`~perfkit.profiling.Thresholds` (data, communication,
optimizer, untimed "other") becomes an alert on ``perfkit_phase_share``; the step time
against a baseline becomes a regression alert; the jitter ratio becomes a straggler alert
comparing each rank's time outside communication with the fastest rank's (under synchronous
data parallelism every rank's *step* takes as long as the slowest one's, so the slow rank
shows only in the work it does before it waits). Every alert carries its rule's title, fix
and notebook in its annotations, read from the one rules table
(:data:`~perfkit.profiling.RULES`), so the alerts and the diagnosis never disagree.
:func:`prometheus_config` writes a scrape configuration for the sinks' endpoints.

The YAML is written directly (strings JSON-quoted, which YAML reads as double-quoted
scalars), so no YAML package is needed; ``promtool check rules`` accepts the file.

Usage::

    Path("perfkit.rules.yml").write_text(alert_rules(baseline_step_s=0.120))
    Path("prometheus.yml").write_text(prometheus_config(["127.0.0.1:9400"],
                                                        ["perfkit.rules.yml"]))
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from perfkit._checks import check_items, check_real, check_type
from perfkit.profiling.rules import RULES
from perfkit.profiling.thresholds import Thresholds

__all__ = ["ALERTS", "alert_rules", "prometheus_config"]

# rule kind -> alert name (and the regression alert, which has no rule of its own)
ALERTS = {"data": "PerfkitDataBound", "communication": "PerfkitCommunicationBound",
          "optimizer": "PerfkitOptimizerBound", "other": "PerfkitUntimedWork",
          "regression": "PerfkitStepTimeRegression", "jitter": "PerfkitStragglingRank"}
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}
BUSY = "perfkit:busy_p50_seconds"  # recording rule: a rank's step time outside communication


def _duration(seconds: float) -> str:
    """Seconds as a Prometheus duration (``60s``, ``1500ms``)."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _key(key: str) -> str:
    """A mapping key, quoted unless plain (YAML 1.1 reads a bare ``on`` or ``yes`` as true)."""
    plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) and key.lower() not in _YAML_WORDS
    return key if plain else json.dumps(key)


def _yaml(value: Any, indent: int = 0) -> list[str]:
    """Lines of block-style YAML for nested dicts and lists of str, int and float."""
    pad, out = " " * indent, []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, dict | list) and v:
                out += [f"{pad}{_key(k)}:", *_yaml(v, indent + 2)]
            else:
                out.append(f"{pad}{_key(k)}: {json.dumps(v)}")
    else:
        for item in value:
            lines = _yaml(item, indent + 2) if isinstance(item, dict | list) else [
                f"{pad}  {json.dumps(item)}"]
            out += [f"{pad}- {lines[0].lstrip()}", *lines[1:]]
    return out


def _annotations(description: str, kind: str) -> dict[str, str]:
    rule = RULES[kind]
    return {"summary": rule.title, "description": description, "fix": "; ".join(rule.fix),
            "notebook": rule.notebook}


def alert_rules(thresholds: Thresholds | None = None, baseline_step_s: float | None = None,
                regression: float = 0.2, for_s: float = 300.0,
                interval_s: float | None = None, lookback_s: float = 3600.0,
                kinds: Sequence[str] | None = None) -> str:
    """A Prometheus rule file (YAML text) raising the diagnosis' findings as alerts.

    Args:
        thresholds: the shares and jitter ratio to alert on (default ``Thresholds()``,
            the values :func:`~perfkit.profiling.diagnose_shares` uses); a share threshold
            of ``None`` (``other`` in :meth:`Thresholds.for_command`) writes no alert.
        baseline_step_s: the step time the job should keep (e.g. a good run's
            ``summary().step.p50_s``), s; ``None`` compares each rank with its own median
            over the ``lookback_s`` before the last ``lookback_s``.
        regression: how much slower than the baseline fires (0.2 = 20 %).
        for_s: how long a condition must hold before the alert fires (``for:``), s; 0 fires
            on the first evaluation that sees it.
        interval_s: the rule group's evaluation interval, s (``None``: the server's).
        lookback_s: the window of the self-baseline, s.
        kinds: which alerts (keys of :data:`ALERTS`); ``None``: all six.

    Returns:
        The rule file's text: one group ``perfkit`` with the alerts (and, for the straggler
        alert, the recording rule it reads).

    Raises:
        TypeError, ValueError: naming the argument that is out of range.
    """
    th = check_type("thresholds", thresholds, Thresholds, optional=True) or Thresholds()
    if baseline_step_s is not None:
        check_real("baseline_step_s", baseline_step_s, 0, lo_open=True)
    check_real("regression", regression, 0, lo_open=True)
    check_real("for_s", for_s, 0)
    if interval_s is not None:
        check_real("interval_s", interval_s, 0.001)
    lookback = _duration(check_real("lookback_s", lookback_s, 1))
    wanted = set(ALERTS) if kinds is None else set(check_items("kinds", kinds))
    if wanted - set(ALERTS):
        raise ValueError(f"kinds must be among {sorted(ALERTS)}, got {sorted(wanted - set(ALERTS))}")
    rules: list[dict[str, Any]] = [{"record": BUSY, "expr": (
        "perfkit_step_p50_seconds - (sum without (phase) "
        "(perfkit_phase_p50_seconds{phase=\"communication\"}) or perfkit_step_p50_seconds * 0)")}
        ] if "jitter" in wanted else []

    def alert(kind: str, expr: str, annotations: dict[str, str]) -> None:
        if kind in wanted:
            rules.append({"alert": ALERTS[kind], "expr": expr, "for": _duration(for_s),
                          "labels": {"severity": "warning", "perfkit_kind": kind},
                          "annotations": annotations})

    for kind in ("data", "communication", "optimizer", "other"):
        limit = getattr(th, kind)
        if limit is None:
            continue
        alert(kind, f'perfkit_phase_share{{phase="{kind}"}} > {limit!r}', _annotations(
              f"rank {{{{ $labels.rank }}}}: {kind} takes {{{{ $value | humanizePercentage }}}}"
              f" of the step (threshold {limit:.0%})", kind))
    if baseline_step_s is not None:
        bound, against = baseline_step_s * (1 + regression), f"{baseline_step_s:g} s baseline"
        expr = f"perfkit_step_p50_seconds > {bound!r}"
    else:
        against = f"rank's median over the {lookback} before the last {lookback}"
        expr = (f"perfkit_step_p50_seconds > {1 + regression!r} * quantile_over_time(0.5, "
                f"perfkit_step_p50_seconds[{lookback}] offset {lookback})")
    alert("regression", expr, {
        "summary": "the step is slower than its baseline",
        "description": f"rank {{{{ $labels.rank }}}}: median step {{{{ $value | "
                       f"humanizeDuration }}}}, over {regression:.0%} slower than the {against}",
        "fix": "compare perfkit_phase_share with the baseline run's to find the phase that "
               "grew and follow that phase's alert; " + RULES["other"].fix[0],
        "notebook": "notebooks/01_profiling.ipynb"})
    alert("jitter", f"{BUSY} > on (job) group_left () ({th.jitter!r} * min by (job) ({BUSY}))",
          _annotations(f"rank {{{{ $labels.rank }}}} works {{{{ $value | humanizeDuration }}}}"
                       f" per step outside communication, over {th.jitter}x the fastest rank",
                       "jitter"))
    group: dict[str, Any] = {"name": "perfkit"}
    if interval_s is not None:
        group["interval"] = _duration(interval_s)
    group["rules"] = rules
    return "\n".join(_yaml({"groups": [group]})) + "\n"


def prometheus_config(targets: Sequence[str], rule_files: Sequence[str] = (),
                      interval_s: float = 15.0, job: str = "perfkit") -> str:
    """A minimal ``prometheus.yml`` scraping ``targets`` and evaluating ``rule_files``.

    Args:
        targets: ``host:port`` of each :class:`~perfkit.profiling.PrometheusSink` (one per
            rank).
        rule_files: paths of rule files, e.g. one holding :func:`alert_rules`.
        interval_s: scrape and evaluation interval, s.
        job: the ``job`` label of the scraped series (the straggler rule compares ranks
            within one job).

    Raises:
        TypeError, ValueError: naming the argument.
    """
    hosts = [check_type("targets", t, str) for t in check_items("targets", targets)]
    files = [check_type("rule_files", f, str)
             for f in check_items("rule_files", rule_files, nonempty=False)]
    every = _duration(check_real("interval_s", interval_s, 0.001))
    config: dict[str, Any] = {
        "global": {"scrape_interval": every, "evaluation_interval": every},
        "rule_files": files,
        "scrape_configs": [{"job_name": check_type("job", job, str),
                            "static_configs": [{"targets": hosts}]}]}
    return "\n".join(_yaml(config)) + "\n"
