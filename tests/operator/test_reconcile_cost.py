"""What reconciling costs in API calls: a change is one pass, the operator's own writes
coming back ask for none, and a restart with everything in place writes nothing."""

from __future__ import annotations

from kubernetes import client

from peers.operator import OperatorProcess
from peers.resources import GROUP, PLURAL, VERSION, mcpserver, new_namespace
from peers.serving import wait_until

WRITES = (("POST", "configmaps"), ("PUT", "configmaps"), ("PATCH", "mcpservers"))


def count(process: OperatorProcess, name: str, **labels: str) -> float:
    return process.sample(name, **labels) or 0.0


def writes(process: OperatorProcess) -> float:
    return sum(
        count(process, "mcpcache_operator_api_requests_total", method=m, resource=r)
        for m, r in WRITES
    )


def quiet(process: OperatorProcess) -> bool:
    return process.leading() and count(process, "mcpcache_operator_reconcile_pending") == 0


def ready(objects: client.CustomObjectsApi, namespace: str, name: str) -> bool:
    found = objects.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, _request_timeout=30
    )
    conditions = (found.get("status") or {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_a_new_mcpserver_costs_one_pass_and_its_own_writes_ask_for_none(
    control_plane, operator
) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    wait_until(lambda: quiet(operator), 60, "the operator to be idle")
    passes = count(operator, "mcpcache_operator_reconciles_total", result="ok")
    written = writes(operator)

    first, second = new_namespace(control_plane, "cost"), new_namespace(control_plane, "cost")
    objects.create_namespaced_custom_object(GROUP, VERSION, first, PLURAL, mcpserver("docs"))
    wait_until(lambda: ready(objects, first, "docs"), 30, "the first status")
    # The status write's own event came back on the MCPServer watch before this create.
    objects.create_namespaced_custom_object(GROUP, VERSION, second, PLURAL, mcpserver("docs"))
    wait_until(lambda: ready(objects, second, "docs"), 30, "the second status")
    wait_until(lambda: quiet(operator), 30, "the operator to be idle again")

    assert count(operator, "mcpcache_operator_reconciles_total", result="ok") - passes == 2
    # Per namespace: the ConfigMap created, one status written; nothing read.
    assert writes(operator) - written == 4


def test_a_restarted_operator_writes_nothing_when_all_is_in_place(control_plane, operator) -> None:
    objects = client.CustomObjectsApi(control_plane.api_client())
    core = client.CoreV1Api(control_plane.api_client())
    namespace = new_namespace(control_plane, "again")
    for name in ("a", "b", "c"):
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, mcpserver(name))
    wait_until(lambda: all(ready(objects, namespace, n) for n in "abc"), 30, "the statuses")
    wait_until(lambda: quiet(operator), 30, "the operator to be idle")
    managed = {
        c.metadata.namespace
        for c in core.list_config_map_for_all_namespaces(
            field_selector="metadata.name=mcpcache-servers", _request_timeout=30
        ).items
        if (c.metadata.labels or {}).get("app.kubernetes.io/managed-by") == "mcpcache-operator"
    }

    operator.terminate()
    operator.start()

    def passed_everywhere() -> bool:
        return quiet(operator) and all(
            operator.sample("mcpcache_operator_mcpservers", namespace=n) is not None
            for n in managed
        )

    wait_until(passed_everywhere, 60, "a pass over every namespace")
    assert operator.sample("mcpcache_operator_mcpservers", namespace=namespace) == 3
    assert writes(operator) == 0
