"""The operator's events: a repeat counts up on one Event, as Kubernetes' own recorder
does, instead of adding an Event per pass."""

from __future__ import annotations

from kubernetes import client

from peers.resources import GROUP, PLURAL, VERSION, configured_servers, mcpserver, new_namespace
from peers.serving import wait_until


def test_the_same_hand_edit_reverted_twice_is_one_event_counted_twice(
    control_plane, operator
) -> None:
    core = client.CoreV1Api(control_plane.api_client())
    objects = client.CustomObjectsApi(control_plane.api_client())
    namespace = new_namespace(control_plane, "evt")
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("docs"), _request_timeout=30
    )
    wait_until(lambda: configured_servers(core, namespace), 30, "the configmap")

    def reverted() -> list[client.CoreV1Event]:
        events = core.list_namespaced_event(namespace, _request_timeout=30).items
        return [e for e in events if e.reason == "HandEditReverted"]

    for count in (1, 2):
        core.patch_namespaced_config_map(
            "mcpcache-servers", namespace, {"data": {"extra": "mine"}}, _request_timeout=30
        )
        wait_until(
            lambda: [e.count for e in reverted()] == [count],  # noqa: B023
            30,
            f"the warning, counted {count}",
        )
    (event,) = reverted()
    assert "data key extra" in event.message
    assert event.type == "Warning"
    assert event.last_timestamp >= event.first_timestamp
