"""The watches' records: what a listing or an event leaves in memory, and what the
reconciler hears of it."""

from __future__ import annotations

from typing import Any

from mcpcache.operator.watching import ClusterState


def body(namespace: str, name: str, generation: int = 1, **extra: Any) -> dict[str, Any]:
    metadata = {"namespace": namespace, "name": name, "uid": f"{namespace}/{name}"}
    return {"metadata": {**metadata, "generation": generation}, **extra}


def test_a_listing_forgets_what_it_no_longer_holds_and_says_so() -> None:
    heard: list[tuple[str, str, bool]] = []
    state = ClusterState(lambda ns, r, deleted: heard.append((ns, r.name, deleted)), print)
    for ns, name in (("a", "one"), ("a", "two"), ("b", "one")):
        state.server_event("ADDED", body(ns, name, spec={"endpoint": {}}))
    heard.clear()

    # The watch broke; meanwhile a/two was deleted. The new listing holds the rest.
    for ns, name in (("a", "one"), ("b", "one")):
        state.server_event("ADDED", body(ns, name, generation=2))
    state.listed("mcpservers", None, {("a", "one"), ("b", "one")})

    assert [r.name for r in state.servers("a")] == ["one"]
    assert [r.generation for r in state.servers("b")] == [2]
    assert ("a", "two", True) in heard
    assert set(state.namespaces()) == {"a", "b"}


def test_a_namespaced_listing_leaves_other_namespaces_alone() -> None:
    state = ClusterState(lambda *_: None, lambda *_: None)
    state.server_event("ADDED", body("a", "one"))
    state.server_event("ADDED", body("b", "one"))
    state.listed("mcpservers", "a", set())
    assert list(state.servers("a")) == []
    assert [r.name for r in state.servers("b")] == ["one"]
    assert set(state.namespaces()) == {"b"}


def test_a_deleted_configmap_is_forgotten_and_reported_as_none() -> None:
    heard: list[tuple[str, Any]] = []
    state = ClusterState(lambda *_: None, lambda ns, record: heard.append((ns, record)))
    configmap = body("a", "mcpcache-servers", data={"config.yaml": "servers: []\n"})
    configmap["metadata"]["resourceVersion"] = "7"
    state.configmap_event("ADDED", configmap)
    assert state.configmap("a") is not None
    assert state.configmap("a").resource_version == "7"
    state.listed("configmaps", None, set())
    assert state.configmap("a") is None
    assert heard[-1] == ("a", None)
