"""The records: what kopf's events and the operator's own listings leave in memory,
in whatever order they arrive, and what the reconciler hears of it."""

from __future__ import annotations

from typing import Any

from mcpcache.operator.state import ClusterState


def body(namespace: str, name: str, version: int = 1, **extra: Any) -> dict[str, Any]:
    metadata = {
        "namespace": namespace,
        "name": name,
        "uid": f"{namespace}/{name}",
        "resourceVersion": str(version),
        "generation": version,
    }
    return {"metadata": metadata, **extra}


def listing(state: ClusterState, items: list[dict[str, Any]], version: int) -> None:
    """One listing of our own at `version`, of all namespaces."""
    state.listing_started()
    for item in items:
        state.server_event("ADDED", item)
    present = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items}
    state.listing_done(None, present, version)


def test_a_listing_forgets_what_it_no_longer_holds_and_says_so() -> None:
    heard: list[tuple[str, str, bool]] = []
    state = ClusterState(lambda ns, r, deleted: heard.append((ns, r.name, deleted)), print)
    for ns, name in (("a", "one"), ("a", "two"), ("b", "one")):
        state.watched(None, body(ns, name, spec={"endpoint": {}}))
    heard.clear()

    # The watch broke; meanwhile a/two was deleted. The new listing holds the rest.
    listing(state, [body("a", "one"), body("b", "one", version=5)], version=9)

    assert [r.name for r in state.servers("a")] == ["one"]
    assert [r.generation for r in state.servers("b")] == [5]
    assert ("a", "two", True) in heard
    assert set(state.namespaces()) == {"a", "b"}


def test_a_listings_older_copy_never_replaces_a_newer_watch_event() -> None:
    state = ClusterState(lambda *_: None, lambda *_: None)
    state.watched("MODIFIED", body("a", "one", version=12))
    listing(state, [body("a", "one", version=10)], version=11)
    assert [r.generation for r in state.servers("a")] == [12]


def test_an_object_created_after_the_listing_survives_its_end() -> None:
    state = ClusterState(lambda *_: None, lambda *_: None)
    state.listing_started()
    state.watched("ADDED", body("a", "new", version=30))
    state.listing_done(None, set(), 20)
    assert [r.name for r in state.servers("a")] == ["new"]


def test_a_deletion_seen_during_a_listing_is_not_undone_by_the_listings_copy() -> None:
    heard: list[tuple[str, bool]] = []
    state = ClusterState(lambda ns, r, deleted: heard.append((r.name, deleted)), print)
    state.watched(None, body("a", "gone", version=3))
    state.listing_started()
    state.watched("DELETED", body("a", "gone", version=8))
    state.server_event("ADDED", body("a", "gone", version=3))  # listed before the deletion
    state.listing_done(None, {("a", "gone")}, 7)
    assert list(state.servers("a")) == []
    assert heard[-1] == ("gone", True)
    # Recreated later under the same name: a newer version, kept.
    state.watched("ADDED", body("a", "gone", version=40))
    assert [r.generation for r in state.servers("a")] == [40]


def test_kopf_listing_an_object_it_reported_before_is_a_relisting() -> None:
    state = ClusterState(lambda *_: None, lambda *_: None)
    assert not state.watched(None, body("a", "one"))
    assert not state.watched("MODIFIED", body("a", "one", version=2))
    assert state.watched(None, body("a", "one", version=2))
    assert not state.watched(None, body("a", "two"))


def test_a_namespaced_listing_leaves_other_namespaces_alone() -> None:
    state = ClusterState(lambda *_: None, lambda *_: None)
    state.server_event("ADDED", body("a", "one"))
    state.server_event("ADDED", body("b", "one"))
    state.listing_started()
    state.listing_done("a", set(), 5)
    assert list(state.servers("a")) == []
    assert [r.name for r in state.servers("b")] == ["one"]
    assert set(state.namespaces()) == {"b"}


def test_a_deleted_configmap_is_forgotten_and_reported_as_none() -> None:
    heard: list[tuple[str, Any]] = []
    state = ClusterState(lambda *_: None, lambda ns, record: heard.append((ns, record)))
    configmap = body("a", "mcpcache-servers", version=7, data={"config.yaml": "servers: []\n"})
    state.configmap_event("ADDED", configmap)
    assert state.configmap("a") is not None
    assert state.configmap("a").resource_version == "7"
    state.configmaps_listed(None, set())
    assert state.configmap("a") is None
    assert heard[-1] == ("a", None)
