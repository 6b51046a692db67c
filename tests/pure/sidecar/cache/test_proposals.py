"""Tool rules proposed from what passed through: writes' `invalidates` (with `match`),
TTLs and `scope: public`, each with its evidence, printed as a pasteable `tools:` block.
Pure, with a world of the test's own: an epoch moved by each write, as the invalidator's."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpcache.sidecar.cache.observations import ArgumentDigests, Observations, answer_digest
from mcpcache.sidecar.cache.proposals import merge, propose, render
from mcpcache.sidecar.config import ToolRule, parse_config


def args(**values: str) -> ArgumentDigests:
    """Digests per argument name, as `observing` makes them (here: stand-ins)."""
    return tuple((name, f"d-{name}-{value}") for name, value in sorted(values.items()))


class World:
    """One server's traffic through one sidecar: reads (answers from a dict of the test's
    state), writes (each moves the removal epoch on once, as a write's removal does)."""

    def __init__(self) -> None:
        self.seen = Observations()
        self.epoch = 0
        self.now = 0.0

    def read(self, tool: str, answer: str, caller: str = "ana", **values: str) -> None:
        self.now += 1
        arguments = args(**values)
        key = f"{caller}/{tool}/{arguments}"
        self.seen.saw(
            "s",
            tool,
            key,
            answer_digest({"content": [answer]}),
            self.now,
            epoch=self.epoch,
            question=f"{tool}/{arguments}",
            caller=caller,
            arguments=arguments,
        )

    def write(self, tool: str, **values: str) -> None:
        self.now += 1
        self.epoch += 1
        self.seen.wrote("s", tool, args(**values))

    def elsewhere(self) -> None:
        """A removal this sidecar did not make (another replica's write)."""
        self.epoch += 1

    def rules(self) -> dict[str, dict[str, Any]]:
        return {p.rule["name"]: p.rule for p in propose(self.seen.evidence("s"))}


def test_a_write_that_changes_a_read_of_the_same_name_invalidates_it_matching_the_name() -> None:
    world = World()
    for version in range(3):
        world.read("get_doc", f"a v{version}", name="a")
        world.read("get_doc", "b v0", name="b")
        world.write("update_doc", name="a", text=f"t{version}")
    world.read("get_doc", "a v3", name="a")
    world.read("get_doc", "b v0", name="b")
    proposals = propose(world.seen.evidence("s"))
    update = next(p for p in proposals if p.rule["name"] == "update_doc")
    assert update.rule == {
        "name": "update_doc",
        "invalidates": [{"tool": "get_doc", "match": ["name"]}],
    }
    assert update.evidence == [
        "update_doc: 3 calls answered as a write",
        "  get_doc: changed across it alone 3, with other writes 0, unchanged 3; name lined up"
        " in every change across it alone",
    ]


def test_arguments_that_do_not_always_line_up_are_not_matched() -> None:
    world = World()
    world.read("list_folder", "x1", folder="x")
    world.write("create_doc", folder="x", name="n1")
    world.read("list_folder", "x2", folder="x")  # lines up on folder
    world.write("create_doc", folder="y", name="n2")
    world.read("list_folder", "x3", folder="x")  # changed, but the write was for y
    assert world.rules()["create_doc"]["invalidates"] == ["list_folder"]


def test_one_change_is_not_enough_to_match_on() -> None:
    world = World()
    world.read("get_doc", "a1", name="a")
    world.write("update_doc", name="a")
    world.read("get_doc", "a2", name="a")
    assert world.rules()["update_doc"]["invalidates"] == ["get_doc"]


def test_a_change_across_writes_is_matched_for_the_write_seen_alone_whole_for_others() -> None:
    world = World()
    for version in range(2):  # update_doc alone changes the document of its name
        world.read("get_doc", f"a{version}", name="a")
        world.write("update_doc", name="a")
    world.read("get_doc", "a2", name="a")
    world.write("create_doc", name="n", folder="f")  # both between two answers
    world.write("update_doc", name="a")
    world.read("get_doc", "a3", name="a")
    world.read("get_doc", "b0", name="b")
    world.write("create_doc", name="m", folder="f")
    world.read("get_doc", "b0", name="b")  # unchanged across create_doc alone
    proposals = {p.rule["name"]: p for p in propose(world.seen.evidence("s"))}
    update, create = proposals["update_doc"], proposals["create_doc"]
    assert update.rule["invalidates"] == [{"tool": "get_doc", "match": ["name"]}]
    assert create.rule["invalidates"] == ["get_doc"], "it may have been masked"
    assert create.evidence[1] == (
        "  get_doc: changed across it alone 0, with other writes 1, unchanged 1"
    )


def test_a_change_across_several_writes_none_explains_has_each_remove_the_read() -> None:
    world = World()
    world.read("list_folder", "x1", folder="x")
    world.write("create_doc", name="n", folder="y")
    world.write("update_doc", name="x-1")
    world.read("list_folder", "x2", folder="x")
    rules = world.rules()
    assert rules["create_doc"]["invalidates"] == ["list_folder"]
    assert rules["update_doc"]["invalidates"] == ["list_folder"]


def test_a_change_across_another_replicas_removal_has_every_write_drop_that_read_whole() -> None:
    world = World()
    for version in range(3):
        world.read("get_doc", f"a{version}", name="a")
        world.write("update_doc", name="a")
    world.read("get_doc", "a3", name="a")
    world.read("search", "s1", query="q")
    world.elsewhere()
    world.read("search", "s2", query="q")  # no write of this sidecar between
    rules = world.rules()
    assert rules["update_doc"]["invalidates"] == [{"tool": "get_doc", "match": ["name"]}, "search"]
    world.elsewhere()
    world.read("get_doc", "a4", name="a")
    assert world.rules()["update_doc"]["invalidates"] == ["get_doc", "search"]


def test_answers_the_same_for_two_callers_propose_scope_public() -> None:
    world = World()
    for query in ("q1", "q2"):
        world.read("search", f"found {query}", "ana", query=query)
        world.read("search", f"found {query}", "ben", query=query)
    rules = world.rules()
    assert rules["search"] == {"name": "search", "scope": "public"}
    proposal = next(p for p in propose(world.seen.evidence("s")) if p.rule["name"] == "search")
    assert "same answer for another caller 2 times (at most 2 callers" in proposal.evidence[1]


def test_one_caller_alone_never_proposes_scope_public() -> None:
    world = World()
    for _ in range(5):
        world.read("search", "found", "ana", query="q")
    assert "scope" not in world.rules()["search"]


def test_answers_that_differed_between_callers_never_propose_scope_public() -> None:
    world = World()
    for query in ("q1", "q2", "q3"):
        world.read("get_doc", f"{query} for ana", "ana", name=query)
        world.read("get_doc", f"{query} for ana", "cat", name=query)  # agrees
    world.read("get_doc", "q4 for ben", "ben", name="q4")
    world.read("get_doc", "q4 for dev", "dev", name="q4")
    assert "scope" not in world.rules()["get_doc"]


def test_answers_different_across_a_write_are_not_read_as_differing_callers() -> None:
    world = World()
    world.read("search", "v1", "ana", query="q")
    world.read("search", "v1", "ben", query="q")
    world.write("update_doc", name="a")
    world.read("search", "v2", "cat", query="q")
    world.read("search", "v2", "dev", query="q")
    assert world.rules()["search"]["scope"] == "public"


def test_a_change_with_nothing_removed_proposes_a_ttl_and_none_across_writes() -> None:
    world = World()
    world.read("weather", "sunny", city="x")
    world.now += 7200
    world.read("weather", "sunny", city="x")
    world.read("weather", "rain", city="x")  # the upstream's own change
    assert world.rules()["weather"]["ttl"] == "30m"
    world.read("get_doc", "a1", name="a")
    world.read("get_doc", "a1", name="a")
    world.write("update_doc", name="a")
    world.read("get_doc", "a2", name="a")
    assert "ttl" not in world.rules()["get_doc"]


def test_a_repeat_different_before_any_confirmed_it_proposes_not_caching() -> None:
    world = World()
    world.read("now", "12:00")
    world.read("now", "12:01")
    assert world.rules()["now"] == {"name": "now", "enabled": False}


def test_the_block_parses_as_tool_rules_and_carries_no_value_or_caller() -> None:
    world = World()
    for version in range(3):
        world.read("get_doc", f"secret-{version}", "alice-token", name="payroll")
        world.read("search", "hits", "alice-token", query="salary")
        world.read("search", "hits", "bob-token", query="salary")
        world.write("update_doc", name="payroll", text="raise")
    text = render("s", propose(world.seen.evidence("s")))
    for private in ("payroll", "salary", "secret", "raise", "alice", "bob", "d-name"):
        assert private not in text
    rules = [ToolRule.model_validate(r) for r in yaml.safe_load(text)["tools"]]
    assert [r.name for r in rules] == ["update_doc", "search"]
    assert rules[1].scope == "public"
    assert text.startswith("# server s: rules proposed from what passed through (nothing is")


def test_evidence_of_replicas_adds_up() -> None:
    one, two = World(), World()
    for world in (one, two):
        world.read("get_doc", "a1", name="a")
        world.write("update_doc", name="a")
        world.read("get_doc", "a2", name="a")
    merged = merge([one.seen.evidence("s"), two.seen.evidence("s")])
    assert merged["writes"]["update_doc"]["reads"]["get_doc"] == {"changed": 2, "unchanged": 0}
    assert merged["changes"] == [["get_doc", [["update_doc", ["name"]]]]] * 2
    rules = {p.rule["name"]: p.rule for p in propose(merged)}
    assert rules["update_doc"]["invalidates"] == [{"tool": "get_doc", "match": ["name"]}]


# Properties over random days: reads of a few keys, writes of one tool, answers moving
# only when a write changes them (as `changes` says, by the write's value of `name`).

Step = tuple[str, int, int]  # ("read", name, -) or ("write", name, other)

steps = st.lists(
    st.one_of(
        st.tuples(st.just("read"), st.integers(0, 3), st.just(0)),
        st.tuples(st.just("write"), st.integers(0, 3), st.integers(0, 3)),
    ),
    max_size=40,
)


def play(day: list[Step], changes: bool, aligned: bool) -> World:
    """`changes`: a write changes the read; `aligned`: only the read of the write's own
    name (else the read of the write's `other`)."""
    world, versions = World(), [0, 0, 0, 0]
    for kind, name, other in day:
        if kind == "read":
            world.read("get_doc", f"{name} v{versions[name]}", name=str(name))
        else:
            world.write("update_doc", name=str(name), other=str(other))
            if changes:
                versions[name if aligned else other] += 1
    return world


@settings(max_examples=200, deadline=None)
@given(steps)
def test_a_read_that_never_changed_after_a_write_never_yields_an_invalidates(
    day: list[Step],
) -> None:
    assert "invalidates" not in play(day, changes=False, aligned=True).rules().get("update_doc", {})


@settings(max_examples=200, deadline=None)
@given(steps, st.booleans())
def test_match_names_only_arguments_whose_values_always_lined_up(
    day: list[Step], aligned: bool
) -> None:
    world = play(day, changes=True, aligned=aligned)
    changes = [calls for _, calls in world.seen.evidence("s")["changes"]]
    for removal in world.rules().get("update_doc", {}).get("invalidates", []):
        if isinstance(removal, dict):
            assert len(changes) >= 2
            for calls in changes:  # some call between lined up on every matched name
                assert any(set(removal["match"]) <= set(lined) for _, lined in calls)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("read"), st.integers(0, 2), st.just(0)),
            st.tuples(st.sampled_from(["update_doc", "create_doc"]), st.integers(0, 2), st.just(0)),
            st.tuples(st.just("elsewhere"), st.just(0), st.just(0)),
        ),
        max_size=40,
    )
)
def test_every_change_seen_is_removed_by_the_rules_proposed(day: list[Step]) -> None:
    """Safety on the evidence: replayed under the proposed rules, no read seen changing
    would have kept its old entry. update_doc changes the document of its name,
    create_doc every document, a removal elsewhere the first one."""
    world, versions = World(), [0, 0, 0]
    changes: list[tuple[int, list[tuple[str, int]]]] = []
    last: dict[int, int] = {}
    between: dict[int, list[tuple[str, int]]] = {0: [], 1: [], 2: []}
    for kind, name, _ in day:
        if kind == "read":
            if name in last and last[name] != versions[name]:
                changes.append((name, between[name]))
            last[name], between[name] = versions[name], []
            world.read("get_doc", f"{name} v{versions[name]}", name=str(name))
        elif kind == "elsewhere":
            world.elsewhere()
            versions[0] += 1
            for calls in between.values():
                calls.append(("elsewhere", 0))
        else:
            world.write(kind, name=str(name))
            for doc in range(3):
                if kind == "create_doc" or doc == name:
                    versions[doc] += 1
            for calls in between.values():
                calls.append((kind, name))
    rules = world.rules()
    for read, calls in changes:
        if all(tool == "elsewhere" for tool, _ in calls):
            continue  # no write of this sidecar between: nothing here may name one
        removed = False
        for tool, name in calls:
            for removal in rules.get(tool, {}).get("invalidates", []):
                whole = removal == "get_doc"
                removed |= whole or (isinstance(removal, dict) and name == read)
        assert removed, (read, calls, rules)


def test_a_write_seen_only_with_others_but_often_without_a_change_does_not_remove_the_read() -> (
    None
):
    world = World()
    for version in range(2):
        world.read("get_doc", f"a{version}", name="a")
        world.write("update_doc", name="a")
    world.read("get_doc", "a2", name="a")
    world.write("create_doc", name="n", folder="f")
    world.write("update_doc", name="a")
    world.read("get_doc", "a3", name="a")  # across both: update_doc's
    assert world.rules()["create_doc"]["invalidates"] == ["get_doc"]
    for number in range(5):  # then seen unchanged across create_doc five times
        world.read("get_doc", "b0", name="b")
        world.write("create_doc", name=f"m{number}", folder="f")
    world.read("get_doc", "b0", name="b")
    rules = world.rules()
    assert "invalidates" not in rules["create_doc"]
    assert rules["update_doc"]["invalidates"] == [{"tool": "get_doc", "match": ["name"]}]


def test_a_block_with_no_rule_to_propose_is_an_empty_list_the_config_takes() -> None:
    world = World()
    world.read("search", "hits", "alice-token", query="salary")
    text = render("s", propose(world.seen.evidence("s")))
    server = {"name": "s", "url": "http://s/mcp", "cache": yaml.safe_load(text)}
    assert parse_config(yaml.safe_dump({"servers": [server]})).servers[0].cache.tools == ()
