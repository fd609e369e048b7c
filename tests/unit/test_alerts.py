"""perfkit.profiling.alerts: the rule file says what the diagnosis says, in PromQL.

The YAML is parsed back with PyYAML (what Prometheus's own loader would read); promtool and
a real server check the rules in tests/prometheus/.
"""

import pytest

from perfkit.profiling import (
    ALERTS,
    RULES,
    Thresholds,
    alert_rules,
    diagnose_shares,
    prometheus_config,
)
from perfkit.profiling.alerts import _yaml

yaml = pytest.importorskip("yaml")


def rules_of(text):
    (group,) = yaml.safe_load(text)["groups"]
    assert group["name"] == "perfkit"
    return group, {r.get("alert", r.get("record")): r for r in group["rules"]}


def test_every_alert_is_written_by_default():
    _, rules = rules_of(alert_rules())
    assert set(ALERTS.values()) | {"perfkit:busy_p50_seconds"} == set(rules)


@pytest.mark.parametrize("kind", ["data", "communication", "optimizer", "other"])
def test_share_alerts_use_the_thresholds_and_the_analyzers_fix(kind):
    th = Thresholds(**{kind: 0.37})
    _, rules = rules_of(alert_rules(th, for_s=90))
    rule = rules[ALERTS[kind]]
    assert rule["expr"] == f'perfkit_phase_share{{phase="{kind}"}} > 0.37'
    assert rule["for"] == "90s" and rule["labels"]["perfkit_kind"] == kind
    (finding,) = [f for f in diagnose_shares({kind: 0.9}, th) if f.kind == kind]
    assert rule["annotations"]["fix"] == "; ".join(finding.fix)
    assert rule["annotations"]["notebook"] == finding.notebook
    assert "(threshold 37%)" in rule["annotations"]["description"]
    assert rule["annotations"]["summary"] == RULES[kind].title == finding.evidence.split(": ")[0]


def test_a_share_left_unjudged_writes_no_alert():
    _, rules = rules_of(alert_rules(Thresholds.for_command()))
    assert ALERTS["other"] not in rules and ALERTS["data"] in rules
    assert rules[ALERTS["data"]]["expr"].endswith("> 0.2")  # the command's calibrated value


def test_regression_against_a_baseline_or_the_jobs_own_past():
    _, rules = rules_of(alert_rules(baseline_step_s=0.25, regression=0.2))
    assert rules[ALERTS["regression"]]["expr"] == "perfkit_step_p50_seconds > 0.3"
    _, rules = rules_of(alert_rules(regression=0.5, lookback_s=1800))
    assert rules[ALERTS["regression"]]["expr"] == (
        "perfkit_step_p50_seconds > 1.5 * quantile_over_time(0.5, "
        "perfkit_step_p50_seconds[1800s] offset 1800s)")


def test_straggler_alert_compares_work_outside_communication_with_the_fastest_rank():
    _, rules = rules_of(alert_rules(Thresholds(jitter=1.8)))
    busy = "perfkit:busy_p50_seconds"
    assert "phase=\"communication\"" in rules[busy]["expr"]
    assert rules[ALERTS["jitter"]]["expr"] == (
        f"{busy} > on (job) group_left () (1.8 * min by (job) ({busy}))")
    assert "slow tail" in rules[ALERTS["jitter"]]["annotations"]["summary"]


def test_kinds_selects_alerts_and_the_recording_rule_goes_with_the_straggler_alert():
    _, rules = rules_of(alert_rules(kinds=["data"]))
    assert list(rules) == [ALERTS["data"]]
    _, rules = rules_of(alert_rules(kinds=("jitter", "regression")))
    assert list(rules) == ["perfkit:busy_p50_seconds", ALERTS["regression"], ALERTS["jitter"]]


def test_durations_and_group_interval():
    group, rules = rules_of(alert_rules(for_s=1.5, interval_s=2))
    assert group["interval"] == "2s"
    assert rules[ALERTS["data"]]["for"] == "1500ms"
    group, _ = rules_of(alert_rules())
    assert "interval" not in group


def test_prometheus_config_scrapes_the_targets():
    cfg = yaml.safe_load(prometheus_config(["127.0.0.1:9400", "127.0.0.1:9401"], ["r.yml"],
                                           interval_s=5, job="train"))
    assert cfg["global"] == {"scrape_interval": "5s", "evaluation_interval": "5s"}
    assert cfg["rule_files"] == ["r.yml"]
    assert cfg["scrape_configs"] == [{"job_name": "train", "static_configs": [
        {"targets": ["127.0.0.1:9400", "127.0.0.1:9401"]}]}]


def test_yaml_writer_round_trips_awkward_strings():
    value = {"a": ['x: "y"', "{{ $value }}", "# not a comment", "é\n2", 3, 0.5],
             "b": {"c": [{"d": "- e", "f": []}, {"g": {}}]}, "yes": "no", "a b": 1,
             "on": [["nested", 1]]}
    assert yaml.safe_load("\n".join(_yaml(value))) == value
