"""The reference pages, held to the things they describe: the MCPServer page to the CRD,
the not-stored reasons to the sidecar's, the metrics page to what `/metrics` exports, the
command-line page to `--help`, the configuration page to the config model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from mcpcache.sidecar.config import SidecarConfig, load_config
from mcpcache.sidecar.rules.cache_status import NotStoredReason
from peers.clients import http_get
from peers.operator import OperatorProcess
from peers.paths import CRD
from peers.serving import free_port
from peers.sidecar import RunningSidecar
from peers.site import code_names, page, sections, table_rows

# --- MCPServer ---------------------------------------------------------------------


def crd_fields() -> dict[str, dict[str, Any]]:
    """Every field of the CRD's schema by its path (`spec.cache.tools[].name`)."""
    schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    fields: dict[str, dict[str, Any]] = {}

    def walk(node: dict[str, Any], path: str) -> None:
        for name, child in (node.get("properties") or {}).items():
            here = f"{path}.{name}" if path else name
            fields[here] = child
            walk(child, here)
            if "items" in child:
                walk(child["items"], here + "[]")

    walk(schema, "")
    return fields


def documented_fields() -> dict[str, list[str]]:
    rows = table_rows(sections(page("reference/mcpserver.md"))["spec"])
    rows += table_rows(sections(page("reference/mcpserver.md"))["status"])
    return {code_names(row[0])[0]: row for row in rows}


def test_the_mcpserver_page_lists_exactly_the_fields_of_the_crd() -> None:
    assert set(documented_fields()) == set(crd_fields())


def test_the_mcpserver_page_gives_each_fields_crd_description_and_default() -> None:
    documented = documented_fields()
    for path, field in crd_fields().items():
        _, _, default, description = documented[path]
        if "description" in field:
            assert description.replace("\\|", "|") == field["description"], path
        else:
            assert description, f"{path} is described"
        if "default" in field:
            shown = yaml.safe_load(code_names(default)[0])
            assert shown == field["default"], path
        else:
            assert default == "", path


def test_every_crd_field_has_a_description_for_kubectl_explain() -> None:
    """`kubectl explain` shows each field's description: a field without one, or an
    int-or-string field whose description does not say what it takes, leaves the
    reader guessing."""
    for path, field in crd_fields().items():
        assert field.get("description"), path
        if field.get("x-kubernetes-int-or-string"):
            assert field["description"].startswith("Integer or string: "), path


# --- what is cached ----------------------------------------------------------------


def test_the_not_stored_reasons_are_exactly_the_ones_the_sidecar_gives() -> None:
    rows = table_rows(sections(page("reference/what-is-cached.md"))["Not stored"])
    documented = [code_names(row[0])[0] for row in rows]
    assert sorted(documented) == sorted(typing.get_args(NotStoredReason))


# --- metrics -----------------------------------------------------------------------


def exported(text: str) -> dict[str, set[str]]:
    """The metric names an exposition holds (counters with `_total`; the `_created`
    series prometheus-client adds left out), with the label names their samples carry."""
    families = list(text_string_to_metric_families(text))
    counters = {family.name for family in families if family.type == "counter"}
    timed = counters | {family.name for family in families if family.type == "histogram"}
    names: dict[str, set[str]] = {}
    for family in families:
        if not family.name.startswith("mcpcache_"):
            continue
        if family.name.endswith("_created") and family.name[: -len("_created")] in timed:
            continue
        name = family.name + ("_total" if family.type == "counter" else "")
        names[name] = {label for s in family.samples for label in s.labels if label != "le"}
    return names


def documented_metrics(section: str) -> dict[str, set[str]]:
    """The metric names of a section of the metrics page, with their label names
    (the `code` before any parenthesis of the labels cell)."""
    metrics: dict[str, set[str]] = {}
    for row in table_rows(sections(page("reference/metrics.md"))[section]):
        kind, labels = row[1], re.sub(r"\([^)]*\)", "", row[2])
        for name in code_names(row[0]):
            metrics[name] = set() if kind == "state set" else set(code_names(labels))
    return metrics


@pytest.fixture(scope="module")
def sidecar_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The exposition of a sidecar with a shared tier (its Redis answers nothing: the
    tier's series exist all the same)."""
    document = {
        "sharedCache": {"url": f"redis://127.0.0.1:{free_port()}/0"},
        "servers": [{"name": "docs", "url": f"http://127.0.0.1:{free_port()}/mcp"}],
    }
    sidecar = RunningSidecar(tmp_path_factory.mktemp("metrics") / "sidecar.yaml", document)
    sidecar.start()
    try:
        yield http_get(f"{sidecar.metrics_url}/metrics", timeout=10).text
    finally:
        sidecar.stop()


def test_the_metrics_page_lists_exactly_what_the_sidecar_exports(sidecar_metrics: str) -> None:
    documented = documented_metrics("The sidecar")
    exports = exported(sidecar_metrics)
    assert set(documented) == {n for n in exports if not n.startswith("mcpcache_operator_")}
    for name, labels in exports.items():
        if labels and documented[name]:
            assert labels == documented[name], name


def test_the_metrics_page_lists_exactly_what_the_operator_exports(
    operator: OperatorProcess,
) -> None:
    documented = documented_metrics("The operator")
    exports = exported(operator.metrics())
    assert set(documented) == set(exports)
    for name, labels in exports.items():
        if labels:
            assert labels == documented[name], name


# --- the command line ---------------------------------------------------------------


def help_text(*command: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "mcpcache.sidecar.cli", *command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=os.environ | {"COLUMNS": "200"},
    ).stdout


def test_the_command_line_page_has_a_section_for_each_command() -> None:
    (choices,) = re.findall(r"\{([a-z,-]+)\}", help_text())[:1]
    documented = {h.removeprefix("mcpcache ") for h in sections(page("reference/cli.md"))}
    assert documented == set(choices.split(","))


@pytest.mark.parametrize(
    "command", ["sidecar", "check-config", "stats", "purge", "operator", "check"]
)
def test_the_command_line_page_lists_every_option_help_shows(command: str) -> None:
    text = help_text(command)
    options = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", text)) - {"--help"}
    listed = re.search(r"positional arguments:\n((?:  \S.*\n)+)", text)
    positionals = {line.split()[0].upper() for line in listed[1].splitlines()} if listed else set()
    section = sections(page("reference/cli.md"))[f"mcpcache {command}"]
    documented = {code_names(row[0])[0].split()[0] for row in table_rows(section)}
    documented = {name for name in documented if not name.startswith("MCPCACHE_")}
    assert documented == options | positionals


# --- the configuration file ---------------------------------------------------------


def model_paths(model: type[BaseModel], path: str = "") -> set[str]:
    paths = set()
    for name, field in model.model_fields.items():
        here = f"{path}.{field.alias or name}" if path else (field.alias or name)
        paths.add(here)
        for kind in (field.annotation, *typing.get_args(field.annotation)):
            for inner in (kind, *typing.get_args(kind)):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    paths |= model_paths(inner, here)
    return paths


def document_paths(value: Any, path: str = "") -> set[str]:
    paths = set()
    if isinstance(value, dict):
        for key, child in value.items():
            here = f"{path}.{key}" if path else key
            paths |= {here} | document_paths(child, here)
    elif isinstance(value, list):
        for item in value:
            paths |= document_paths(item, path)
    return paths


def configuration_examples() -> list[str]:
    """The page's example file, then its variants (the shared tier on a Redis Cluster,
    under Sentinel: one file cannot show all three places for Redis at once)."""
    return re.findall(r"```yaml\n(.*?)```", page("reference/configuration.md"), re.DOTALL)


def test_the_configuration_examples_are_valid_files(tmp_path: Path) -> None:
    for n, example in enumerate(configuration_examples()):
        path = tmp_path / f"sidecar-{n}.yaml"
        path.write_text(example)
        load_config(path, environ={})


def test_the_configuration_examples_show_every_field_of_the_config_model() -> None:
    shown = set().union(*(document_paths(yaml.safe_load(e)) for e in configuration_examples()))
    assert model_paths(SidecarConfig) - shown == set()
