"""The MCPServer CRD, as the real API server enforces it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from mcpcache.operator.crd import RESOURCE_GROUP, RESOURCE_KIND, RESOURCE_PLURAL, RESOURCE_VERSION
from mcpcache.operator.resource import resolve_server
from mcpcache.sidecar.config import ServerCache
from peers.paths import CRD, ROOT
from peers.resources import GROUP, PLURAL, VERSION, mcpserver, new_namespace
from peers.serving import wait_until


def test_the_crd_names_are_the_ones_the_code_uses() -> None:
    spec = yaml.safe_load(CRD.read_text())["spec"]
    assert spec["group"] == RESOURCE_GROUP
    assert [v["name"] for v in spec["versions"]] == [RESOURCE_VERSION]
    assert (spec["names"]["kind"], spec["names"]["plural"]) == (RESOURCE_KIND, RESOURCE_PLURAL)


@pytest.fixture
def namespace(control_plane, crd) -> str:
    return new_namespace(control_plane, "crd")


def test_defaults_are_filled_in(control_plane, namespace) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    created = objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("plain")
    )
    assert created["spec"]["cache"] == {"enabled": False, "ttl": "30s", "maxSize": "64Ki"}


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (mcpserver("a", url="ftp://files.example/mcp"), "must be an absolute http or https URL"),
        (mcpserver("b", url="not a url"), "must be an absolute http or https URL"),
        (mcpserver("c", ttl="5 minutes"), "ttl must be a duration such as 30s, 5m or 1h30m"),
        (mcpserver("d", metadataTTL="soon"), "metadataTTL must be a duration such as 30s"),
        (mcpserver("d2", staleIfError="a while"), "staleIfError must be a duration such as"),
        (mcpserver("d3", staleWhileRevalidate="0s"), "staleWhileRevalidate must be more than"),
        (mcpserver("e", maxSize="lots"), "maxSize must be a size such as 64Ki, 256Ki or 1Mi"),
        (mcpserver("h", ttl="999999999999h"), "ttl must be more than 0s and at most 24h"),
        (mcpserver("i", maxSize="0"), "maxSize must be at least 1 byte"),
        (mcpserver("f", enabled="yes"), "spec.cache.enabled"),
        ({**mcpserver("g"), "spec": {}}, "spec.endpoint: Required value"),
    ],
)
def test_invalid_objects_are_refused_with_a_reason(
    control_plane, namespace, body, complaint
) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    with pytest.raises(ApiException) as refused:
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert refused.value.status == 422
    assert complaint in refused.value.body


def with_timeout(name: str, timeout: object) -> dict:
    body = mcpserver(name)
    body["spec"]["endpoint"]["streamableHTTP"]["timeout"] = timeout
    return body


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (with_timeout("t1", "soon"), "timeout must be a duration such as 30s, 5m or 1h30m"),
        (with_timeout("t2", "30"), "timeout must be a duration such as 30s, 5m or 1h30m"),
        (with_timeout("t3", "0s"), "timeout must be more than 0s and at most 1h"),
        (with_timeout("t4", "2h"), "timeout must be more than 0s and at most 1h"),
        (with_timeout("t5", 30), "spec.endpoint.streamableHTTP.timeout: Invalid value"),
        (mcpserver("t6", ignoreSetCookie="yes"), "spec.cache.ignoreSetCookie: Invalid value"),
    ],
)
def test_a_bad_timeout_or_set_cookie_opt_out_is_refused_with_a_reason(
    control_plane, namespace, body, complaint
) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    with pytest.raises(ApiException) as refused:
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert refused.value.status == 422
    assert complaint in refused.value.body


def test_the_timeout_defaults_to_the_sidecars_and_reaches_the_config_model(
    control_plane, namespace
) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    plain = objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("untimed")
    )
    assert plain["spec"]["endpoint"]["streamableHTTP"]["timeout"] == "30s"
    body = with_timeout("timed", "2m30s")
    body["spec"]["cache"] = {"enabled": True, "ignoreSetCookie": True}
    created = objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    server = resolve_server("timed", created["spec"]).server
    assert server is not None
    assert (server.timeout, server.cache.ignore_set_cookie) == (150, True)


def test_metadata_ttl_and_large_max_size_are_accepted(control_plane, namespace) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    body = mcpserver("big", enabled=True, maxSize="8Mi", metadataTTL="5m")
    created = objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert created["spec"]["cache"]["maxSize"] == "8Mi"


def test_stale_windows_are_accepted(control_plane, namespace) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    body = mcpserver("stale", enabled=True, staleIfError="10m", staleWhileRevalidate="30s")
    created = objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert created["spec"]["cache"]["staleIfError"] == "10m"
    assert created["spec"]["cache"]["staleWhileRevalidate"] == "30s"


def test_the_examples_apply_as_a_whole(control_plane, crd, tmp_path: Path) -> None:
    """The folder creates the namespace it uses: applied in one go, nothing is missing."""
    folder = ROOT / "examples" / "kubernetes"
    files = sorted(folder.glob("*.yaml"))
    documents = [doc for path in files for doc in yaml.safe_load_all(path.read_text())]
    used = {doc["metadata"].get("namespace") for doc in documents if doc} - {None}
    created = {doc["metadata"]["name"] for doc in documents if doc and doc["kind"] == "Namespace"}
    assert used <= created
    result = control_plane.run_kubectl("apply", "-f", str(folder), check=False)
    assert result.returncode == 0, result.stderr


def explain(control_plane, path: str) -> str:
    """`kubectl explain path`, once kubectl's discovery knows the resource: a CRD just
    established may not be served by discovery yet."""
    answers: list[str] = []

    def known() -> bool:
        result = control_plane.run_kubectl("explain", path, check=False)
        answers.append(result.stdout)
        return result.returncode == 0

    wait_until(known, 30, f"kubectl explain {path}")
    return answers[-1]


def test_kubectl_explain_describes_the_int_or_string_max_size(control_plane, crd) -> None:
    # A CRD's int-or-string field may not declare a type (structural schemas forbid it),
    # so kubectl shows <Object>; the description says what it takes.
    out = explain(control_plane, "mcps.spec.cache.maxSize")
    assert "Integer or string: the largest response stored, in bytes (65536)" in out


def spec_fields() -> list[tuple[str, str]]:
    """(path as kubectl explain takes it, description) of every field under spec and
    status."""
    schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]
    found: list[tuple[str, str]] = []

    def walk(node: dict, path: str) -> None:
        for name, child in (node.get("properties") or {}).items():
            found.append((f"{path}.{name}", child["description"]))
            walk(child.get("items", child), f"{path}.{name}")

    walk(schema["openAPIV3Schema"]["properties"]["spec"], "mcps.spec")
    walk(schema["openAPIV3Schema"]["properties"]["status"], "mcps.status")
    return found


def test_kubectl_explain_describes_every_field_of_the_spec_and_status(control_plane, crd) -> None:
    for path, description in spec_fields():
        out = explain(control_plane, path)
        assert " ".join(description.split()) in " ".join(out.split()), path


def test_kubectl_shows_the_printer_columns_and_short_name(control_plane, namespace) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("shown", enabled=True)
    )
    out = control_plane.run_kubectl("get", "mcps", "-n", namespace).stdout
    header = out.splitlines()[0].split()
    assert header[:4] == ["NAME", "URL", "CACHE", "TTL"]
    assert "READY" in header
    assert "AGE" in header
    assert "http://docs.tools.svc:8000/mcp" in out


@pytest.mark.parametrize(
    ("rule", "complaint"),
    [
        ({"name": ""}, "spec.cache.tools[0].name"),
        ({"ttl": "5m"}, "spec.cache.tools[0].name: Required value"),
        ({"name": "a", "ttl": "soon"}, "spec.cache.tools[0].ttl"),
        ({"name": "a", "enabled": "yes"}, "spec.cache.tools[0].enabled"),
        ({"name": "a", "ignoreArguments": ["id", "id"]}, "spec.cache.tools[0].ignoreArguments"),
        ({"name": "a\n"}, "spec.cache.tools[0].name"),
        ({"name": "a", "scope": "everyone"}, "spec.cache.tools[0].scope"),
        (
            {"name": "a", "enabled": False, "scope": "public"},
            "skipIf and scope: public are for cached tools; this rule turns caching off",
        ),
        ({"name": "a", "skipIf": {f"v{i}": "x" for i in range(17)}}, "spec.cache.tools[0].skipIf"),
    ],
)
def test_invalid_tool_rules_are_refused_by_the_crd_and_the_config_model_alike(
    control_plane, namespace, rule, complaint
) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    body = mcpserver("rules", enabled=True, tools=[rule])
    with pytest.raises(ApiException) as refused:
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert refused.value.status == 422
    assert complaint in refused.value.body
    with pytest.raises(ValidationError):
        ServerCache.model_validate({"tools": [rule]})


def test_valid_tool_rules_are_accepted_by_both_as_written(control_plane, namespace) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    cache = {
        "enabled": True,
        "onlyReadOnlyTools": True,
        "tools": [
            {"name": "search_*", "ttl": "5m", "ignoreArguments": ["requestId", "nonce"]},
            {"name": "create_*", "enabled": False, "invalidates": ["search_*", "get_?"]},
            {"name": "get_doc", "enabled": True, "scope": "public"},
            {"name": "get_release", "skipIf": {"version": "latest", "channel": ["beta", 2]}},
            {"name": "add_*", "invalidates": ["x", {"tool": "list_issues", "match": ["owner"]}]},
        ],
        "fillSchemaDefaults": True,
        "trustPublicHints": True,
        "sessionScoped": True,
    }
    created = objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("rules", **cache)
    )
    assert created["spec"]["cache"]["tools"] == cache["tools"]
    model = ServerCache.model_validate(created["spec"]["cache"])
    assert model.tools[1].invalidates == ("search_*", "get_?")
    assert model.tools[3].skip_texts == {"version": {"latest"}, "channel": {"beta", "2"}}
    assert model.tools[4].invalidates[1].match == ("owner",)  # type: ignore[union-attr]
    assert model.fill_schema_defaults
    assert model.trust_public_hints
    assert model.session_scoped


@pytest.mark.parametrize(
    ("rule", "complaint"),
    [
        ({"name": "a", "invalidates": [""]}, "a tool glob has 1 to 128 characters"),
        (
            {"name": "a", "enabled": True, "invalidates": ["b"]},
            "a tool that invalidates others changes state and cannot be cached: drop enabled: true",
        ),
        (
            {"name": "a", "invalidates": [{"tool": "b"}]},
            "an invalidates entry is a tool glob, or an object {tool, match} (both fields given)",
        ),
        (
            {"name": "a", "invalidates": [{"tool": "b", "match": ["x"], "also": 1}]},
            "an invalidates entry is a tool glob, or an object {tool, match}",
        ),
        (
            {"name": "a", "invalidates": [7]},
            "an invalidates entry is a tool glob, or an object {tool, match}",
        ),
        (
            {"name": "a", "invalidates": [{"tool": "b", "match": []}]},
            "match lists 1 to 8 argument names",
        ),
        (
            {"name": "a", "invalidates": [{"tool": "", "match": ["id"]}]},
            "tool is a glob of 1 to 128 characters",
        ),
        (
            {"name": "a", "skipIf": {"v": {"deep": 1}}},
            "a skipIf value is a string, number or boolean, or a list of them (1 to 32)",
        ),
        (
            {"name": "a", "skipIf": {"v": [["x"]]}},
            "a skipIf value is a string, number or boolean, or a list of them (1 to 32)",
        ),
        ({"name": "a", "skipIf": {"v": ""}}, "a skipIf value has 1 to 256 characters"),
        ({"name": "a", "skipIf": {"": "x"}}, "a skipIf argument name has 1 to 128 characters"),
        (
            {"name": "a", "invalidates": ["b", "b"]},
            "invalidates must not name the same entry twice",
        ),
        (
            {"name": "a", "invalidates": [{"tool": "b", "match": ["id", "id"]}]},
            "match must not name the same argument twice",
        ),
        (
            {"name": "a", "invalidates": ["b\u0001"]},
            "a tool glob has 1 to 128 characters, none of them a control character",
        ),
        (
            {"name": "a", "invalidates": ["b"], "skipIf": {"v": "latest"}},
            "skipIf and scope: public are for cached tools; this rule turns caching off",
        ),
    ],
)
def test_bad_invalidates_and_skip_if_entries_are_refused_at_admission_in_words(
    control_plane, namespace, rule, complaint
) -> None:
    """`invalidates` entries (a glob or an object) and `skipIf` values (one or a list)
    are unions a structural schema cannot type; CEL rules generated with the config
    model check them, so a bad entry is refused when it is applied, with the model's
    own words, and the model refuses it too."""
    objects = client.CustomObjectsApi(control_plane.api_client())
    body = mcpserver("loose", enabled=True, tools=[rule])
    with pytest.raises(ApiException) as refused:
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert refused.value.status == 422
    message = json.loads(refused.value.body)["message"]
    assert complaint in message
    assert re.search(r"spec\.cache\.tools\[\][^ ]* of rule a: ", message), message
    assert not re.search(r"constrained-str|ArgumentMatch|\.(bool|int|float|str)\b", message)
    with pytest.raises(ValidationError):
        ServerCache.model_validate({"tools": [rule]})


def test_age_note_and_revalidate_sample_reach_the_config_model_as_written(
    control_plane, namespace
) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    cache = {"enabled": True, "ageNote": True, "revalidateSample": 0.05}
    created = objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("essay", **cache)
    )
    model = ServerCache.model_validate(created["spec"]["cache"])
    assert (model.age_note, model.revalidate_sample) == (True, 0.05)


@pytest.mark.parametrize(
    ("cache", "complaint"),
    [
        ({"ignoreHeaders": ["Authorization"]}, "ignoreHeaders cannot name"),
        ({"ignoreHeaders": ["mcp-session-id"]}, "ignoreHeaders cannot name"),
        ({"ignoreHeaders": ["x request id"]}, "spec.cache.ignoreHeaders[0]"),
        ({"identityHeaders": ["x-a", "x-a"]}, "spec.cache.identityHeaders"),
        (
            {"identityHeaders": ["x-tenant"], "ignoreHeaders": ["X-Tenant"]},
            "spec.cache: ignoreHeaders cannot name a header identityHeaders names",
        ),
    ],
)
def test_header_lists_are_refused_by_the_crd_and_the_config_model_alike(
    control_plane, namespace, cache, complaint
) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    body = mcpserver("headers", enabled=True, **cache)
    with pytest.raises(ApiException) as refused:
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert refused.value.status == 422
    assert complaint in refused.value.body
    if "identityHeaders" not in cache:  # the model takes a repeated name once
        with pytest.raises(ValidationError):
            ServerCache.model_validate(cache)


def test_header_lists_are_accepted_by_both_as_written(control_plane, namespace) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    cache = {
        "enabled": True,
        "identityHeaders": ["Authorization", "X-Tenant"],
        "ignoreHeaders": ["X-Request-Id"],
    }
    created = objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("headers", **cache)
    )
    assert created["spec"]["cache"]["ignoreHeaders"] == ["X-Request-Id"]
    model = ServerCache.model_validate(created["spec"]["cache"])
    assert model.ignore_headers == ("x-request-id",)


def test_an_object_stored_before_the_policy_can_still_be_labelled_but_not_respecified_badly(
    control_plane, namespace
) -> None:
    """The admission policy checks creates and spec changes only: an MCPServer stored
    before it existed (here: while its binding is away) keeps taking metadata changes,
    the operator's InvalidSpec message for it says the same in words; a new bad spec is
    refused."""
    admission = client.AdmissionregistrationV1Api(control_plane.api_client())
    objects = client.CustomObjectsApi(control_plane.api_client())
    name = f"{RESOURCE_PLURAL}.{RESOURCE_GROUP}"
    binding = admission.read_validating_admission_policy_binding(name)
    bad = mcpserver("older", enabled=True, tools=[{"name": "a", "invalidates": [7]}])
    admission.delete_validating_admission_policy_binding(name)
    try:

        def admitted() -> bool:
            try:
                objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, bad)
            except ApiException:
                return False
            return True

        wait_until(admitted, 30, "the bad MCPServer admitted without the policy's binding")
    finally:
        binding.metadata = client.V1ObjectMeta(name=name, labels=binding.metadata.labels)
        admission.create_validating_admission_policy_binding(binding)
    again = mcpserver("probe", enabled=True, tools=[{"name": "a", "invalidates": [7]}])

    def refused_again() -> bool:
        try:
            objects.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, again, dry_run="All"
            )
        except ApiException as refused:
            return refused.status == 422
        return False

    wait_until(refused_again, 30, "the policy in effect again")
    labelled = objects.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "older", {"metadata": {"labels": {"team": "a"}}}
    )
    assert labelled["metadata"]["labels"] == {"team": "a"}
    reported = resolve_server("older", labelled["spec"]).error
    assert reported == (
        "spec.cache.tools[0].invalidates[0]: 7 is not allowed: an invalidates entry is a tool "
        "glob, or an object {tool, match}"
    )
    with pytest.raises(ApiException) as refused:
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "older", {"spec": {"cache": {"ttl": "1m"}}}
        )
    assert "an invalidates entry is a tool glob, or an object {tool, match}" in refused.value.body
