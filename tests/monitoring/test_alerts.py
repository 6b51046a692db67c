"""The alert rules: valid for Prometheus, unit-tested with promtool, one source for the
plain rules file and the chart's PrometheusRule."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from peers.controlplane import ControlPlane
from peers.paths import CHART, ROOT
from peers.prometheus import promtool
from peers.site import site_config

RULES = CHART / "files" / "mcpcache-alerts.yaml"
RULE_TESTS = Path(__file__).with_name("alerts_test.yaml")


def alerts() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_rules_file_passes_promtool_check_rules(prometheus_bin: Path) -> None:
    result = promtool(prometheus_bin, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_alert_unit_tests_pass(prometheus_bin: Path) -> None:
    result = promtool(prometheus_bin, "test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def firing_labels() -> dict[str, dict[str, str]]:
    """Each alert's labels in its firing unit-test cases."""
    labels: dict[str, dict[str, str]] = {}
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            for alert in check.get("exp_alerts") or []:
                labels.setdefault(check["alertname"], {}).update(alert["exp_labels"])
    return labels


def test_every_alert_has_a_case_where_it_fires_and_one_where_it_stays_quiet() -> None:
    quiet = {
        check["alertname"]
        for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for check in case.get("alert_rule_test", [])
        if not check.get("exp_alerts")
    }
    names = {rule["alert"] for rule in alerts()}
    assert names - set(firing_labels()) == set(), "alerts without a firing case"
    assert names - quiet == set(), "alerts without a quiet case"


@pytest.mark.parametrize("rule", alerts(), ids=lambda rule: rule["alert"])
def test_every_alert_says_what_where_and_has_a_runbook(rule: dict) -> None:
    assert rule["annotations"]["summary"]
    description = rule["annotations"]["description"]
    labels = firing_labels()[rule["alert"]]
    for label in ("server", "namespace"):
        if label in labels:
            assert f"$labels.{label}" in description
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert rule["annotations"]["runbook_url"] == runbook_url(rule["alert"])


def runbook_url(alert: str) -> str:
    """Where the site publishes the alert's runbook page (docs/operations/runbooks/)."""
    site = site_config()["site_url"]
    return f"{site}operations/runbooks/{alert}/"


@pytest.mark.parametrize("rule", alerts(), ids=lambda rule: rule["alert"])
def test_every_alert_has_a_runbook_page_that_quotes_its_rule(rule: dict) -> None:
    runbook = (ROOT / "docs" / "operations" / "runbooks" / f"{rule['alert']}.md").read_text()
    assert runbook.startswith(f"# {rule['alert']}\n")
    assert f"```promql\n{rule['expr'].rstrip()}\n```" in runbook
    assert f"Severity **{rule['labels']['severity']}**" in runbook
    assert "## What to do" in runbook


def test_the_runbooks_are_one_page_per_alert() -> None:
    pages = {path.stem for path in (ROOT / "docs" / "operations" / "runbooks").glob("*.md")}
    assert pages - {"index"} == {rule["alert"] for rule in alerts()}


def test_chart_renders_the_rules_file_as_a_prometheusrule(control_plane: ControlPlane) -> None:
    rendered = control_plane.run_helm(
        "template",
        "mcpcache",
        str(CHART),
        "--namespace",
        "monitoring",
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.prometheusRule.labels.release=kube-prometheus-stack",
        "--show-only",
        "templates/prometheusrule.yaml",
    ).stdout
    rule = yaml.safe_load(rendered)
    assert rule["kind"] == "PrometheusRule"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
