"""The chart's values: values.schema.json refuses bad ones with Helm's own message naming
the value, and every value of values.yaml is on the chart-values reference page."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from peers.paths import CHART
from peers.site import code_names, page, table_rows

SCHEMA = CHART / "values.schema.json"

# Each bad value, and what Helm's message must name: the value's path in the schema's
# terms, or the misspelt key.
BAD_VALUES = [
    ("sidecar.cache.maxBytes=lots", "/sidecar/cache/maxBytes"),
    ("sidecar.cache.maxBytes=0", "/sidecar/cache/maxBytes"),
    ("sidecar.cache.maxEntries=0", "/sidecar/cache/maxEntries"),
    ("sidecar.cache.maxEntry=10", "maxEntry"),
    ("sidecar.sharedCache.url=http://redis:6379/0", "/sidecar/sharedCache/url"),
    ("sidecar.sharedCache.timeout=fast", "/sidecar/sharedCache/timeout"),
    ("sidecar.sharedCache.cluster.nodes={http://a:6379}", "/sidecar/sharedCache/cluster/nodes/0"),
    ("sidecar.sharedCache.namespaces={Agents}", "/sidecar/sharedCache/namespaces/0"),
    ("sidecar.resources.limits.memory=lots", "/sidecar/resources/limits/memory"),
    ("sidecar.logLevel=LOUD", "/sidecar/logLevel"),
    ("sidecar.tracing.endpoint=otel-collector:4318", "/sidecar/tracing/endpoint"),
    ("sidecar.tracing.endpoint=http://user:pw@otel:4318", "/sidecar/tracing/endpoint"),
    ("sidecar.tracing.sampleRatio=2", "/sidecar/tracing/sampleRatio"),
    ("sidecar.tracing.enabled=maybe", "/sidecar/tracing/enabled"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("operator.replicas=0", "/operator/replicas"),
    ("operator.replicas=two", "/operator/replicas"),
    ("operator.leaderElection.leaseDuration=0", "/operator/leaderElection/leaseDuration"),
    (
        "operator.podDisruptionBudget.maxUnavailable=half",
        "/operator/podDisruptionBudget/maxUnavailable",
    ),
    ("operator.watchNamespaces={agents,Tools}", "/operator/watchNamespaces/1"),
    ("operator.resources.requests.cpu=lots", "/operator/resources/requests/cpu"),
    ("webhook.failurePolicy=Never", "/webhook/failurePolicy"),
    ("webhook.timeoutSeconds=60", "/webhook/timeoutSeconds"),
    ("webhook.certificate.renewBeforeDays=-1", "/webhook/certificate/renewBeforeDays"),
    ("webhook.certManager.duration=90d", "/webhook/certManager/duration"),
    ("webhook.certManager.issuerRef.kind=Issuers", "/webhook/certManager/issuerRef/kind"),
    ("metrics.podMonitor.interval=often", "/metrics/podMonitor/interval"),
    ("metrics.prometheusRule.enable=true", "enable"),
    ("rbac.aggregateToDefaultRoles=maybe", "/rbac/aggregateToDefaultRoles"),
    ("serviceAcount.create=false", "serviceAcount"),
]


def test_the_schema_is_a_draft_7_schema_that_closes_every_object_of_its_own() -> None:
    schema = json.loads(SCHEMA.read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"

    def closed(node: dict[str, Any], path: str) -> None:
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{path} refuses unknown keys"
            for name, child in node["properties"].items():
                closed(child, f"{path}.{name}")

    closed(schema, "values")


@pytest.mark.parametrize(("value", "named"), BAD_VALUES, ids=[v for v, _ in BAD_VALUES])
def test_helm_template_refuses_a_bad_value_naming_it(control_plane, value, named) -> None:
    result = control_plane.run_helm("template", "mcpcache", str(CHART), "--set", value, check=False)
    assert result.returncode != 0, result.stdout[:500]
    assert "values don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr, result.stderr


# Values the schema cannot judge (two values compared), which the templates refuse with
# a message of their own: the whole line, as Helm prints it after its prefix.
BAD_COMBINATIONS = [
    (
        "sidecar.sharedCache.url=redis://r:6379/0,sidecar.sharedCache.cluster.nodes={redis://a:6379}",
        "sidecar.sharedCache: set at most one of url, cluster.nodes or sentinel.nodes "
        "(found url and cluster)",
    ),
    (
        "sidecar.sharedCache.sentinel.nodes={redis://s:26379}",
        "sidecar.sharedCache.sentinel.master: the sentinels' name for the primary is needed "
        "with sentinel.nodes",
    ),
    (
        "operator.leaderElection.renewDeadline=15",
        "operator.leaderElection.renewDeadline: 15 is not allowed: it must be below "
        "leaseDuration (15) and above retryPeriod (2)",
    ),
    (
        "operator.leaderElection.renewDeadline=2",
        "operator.leaderElection.renewDeadline: 2 is not allowed: it must be below "
        "leaseDuration (15) and above retryPeriod (2)",
    ),
]


@pytest.mark.parametrize(("value", "line"), BAD_COMBINATIONS, ids=[v for v, _ in BAD_COMBINATIONS])
def test_helm_template_refuses_a_bad_combination_with_one_line_naming_it(
    control_plane, value, line
) -> None:
    result = control_plane.run_helm("template", "mcpcache", str(CHART), "--set", value, check=False)
    assert result.returncode != 0, result.stdout[:500]
    (error,) = [e for e in result.stderr.splitlines() if e.startswith("Error: ")]
    assert error.split("): ", 1)[1] == line


@pytest.mark.parametrize(("value", "named"), BAD_VALUES[:4], ids=[v for v, _ in BAD_VALUES[:4]])
def test_helm_lint_refuses_a_bad_value_naming_it(control_plane, value, named) -> None:
    result = control_plane.run_helm("lint", str(CHART), "--set", value, check=False)
    assert result.returncode != 0
    assert named in result.stdout + result.stderr


@pytest.mark.parametrize(
    "value",
    [
        "sidecar.cache.maxBytes=1048576",
        "sidecar.cache.maxBytes=512k",
        "sidecar.sharedCache.timeout=1h30m",
        "sidecar.sharedCache.cluster.nodes={rediss://a:6379,rediss://b:6379}",
        "sidecar.sharedCache.sentinel.nodes={redis://s:26379},sidecar.sharedCache.sentinel.master=m",
        "operator.podDisruptionBudget.maxUnavailable=50%",
        "operator.resources.limits.cpu=1.5",
        "operator.logLevel=debug",
        "webhook.certManager.issuerRef.kind=ClusterIssuer",
        "webhook.certManager.issuerRef.name=my-ca",
        "global.imageRegistry=registry.example",
        "sidecar.tracing.enabled=true,sidecar.tracing.endpoint=https://otel.example:4318/otlp",
        "sidecar.tracing.sampleRatio=0.05",
    ],
)
def test_good_values_of_each_kind_are_accepted(control_plane, value) -> None:
    result = control_plane.run_helm("template", "mcpcache", str(CHART), "--set", value, check=False)
    assert result.returncode == 0, result.stderr


def value_paths(values: Any, path: str = "") -> set[str]:
    """Every value of values.yaml by its dotted path; a map or list is one value."""
    if isinstance(values, dict) and values and path.split(".")[-1] not in FREE_FORM:
        return {
            p
            for key, child in values.items()
            for p in value_paths(child, f"{path}.{key}" if path else key)
        }
    return {path}


FREE_FORM = {"resources", "labels", "annotations", "nodeSelector", "affinity", "issuerRef"}


def test_every_value_of_values_yaml_is_on_the_chart_values_page_and_no_other() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    documented = {code_names(row[0])[0] for row in table_rows(page("reference/chart-values.md"))}
    assert documented == value_paths(values)


def test_the_chart_values_page_gives_each_values_default() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for row in table_rows(page("reference/chart-values.md")):
        path, default = code_names(row[0])[0], row[1]
        if not default.startswith("`"):
            continue  # described in words (resources)
        value: Any = values
        for key in path.split("."):
            value = value[key]
        assert yaml.safe_load(code_names(default)[0]) == value, path
