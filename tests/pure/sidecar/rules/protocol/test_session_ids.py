"""Ids in flight inside legacy sessions: which spellings are one id, when an id counts as
reused, and how long an id whose request was given up on stays taken. Pure."""

from __future__ import annotations

from typing import Any

import pytest

from mcpcache.sidecar.rules.protocol.session_ids import (
    ABANDONED_KEPT,
    ABANDONED_SECONDS,
    SessionRequestIds,
    id_name,
)
from peers.clock import Clock


@pytest.mark.parametrize(
    "spellings",
    [
        (1, 1.0, "1", " 1 ", "1.0", "1e0"),
        (0, -0.0, "0", "-0"),
        (9007199254740993, 9007199254740992, 9007199254740992.0),
        (7, "7"),
        (1.5, "1.5", "15e-1"),
    ],
)
def test_spellings_a_server_may_take_for_one_id_share_a_name(spellings: tuple[Any, ...]) -> None:
    assert len({id_name(spelling) for spelling in spellings}) == 1


@pytest.mark.parametrize(
    ("one", "other"),
    [(1, 2), ("a", "b"), (1, "a"), (1.5, 1), ("1x", 1), (10**400, 10**400 + 1)],
)
def test_different_ids_keep_different_names(one: Any, other: Any) -> None:
    assert id_name(one) != id_name(other)


def test_non_numbers_and_numbers_past_a_double_are_named_as_written() -> None:
    assert id_name("abc") == "abc"
    assert id_name(10**400) == str(10**400)
    assert id_name("inf") == "inf"
    assert id_name(None) == "None"


def test_two_requests_with_one_id_in_a_session_are_both_reused() -> None:
    ids = SessionRequestIds()
    first = ids.begin("s", 1)
    assert not first.reused
    second = ids.begin("s", 1.0)
    assert first.reused
    assert second.reused
    assert len(ids) == 2


def test_the_same_id_in_another_session_is_not_reused() -> None:
    ids = SessionRequestIds()
    ids.begin("s", 1)
    assert not ids.begin("t", 1).reused


def test_an_answered_id_is_free_again() -> None:
    ids = SessionRequestIds()
    ticket = ids.begin("s", 1)
    ids.end(ticket, answered=True)
    assert len(ids) == 0
    assert not ids.begin("s", 1).reused


def test_an_id_given_up_on_stays_taken_until_its_time_has_passed() -> None:
    clock = Clock()
    ids = SessionRequestIds(clock)
    ids.end(ids.begin("s", 1), answered=False)
    assert len(ids) == 0
    clock.now = ABANDONED_SECONDS - 1
    later = ids.begin("s", 1)
    assert later.reused, "the server may still answer the first request"
    ids.end(later, answered=True)
    clock.now = ABANDONED_SECONDS + 1
    assert not ids.begin("s", 1).reused


def test_an_id_given_up_on_is_free_once_its_session_ends() -> None:
    ids = SessionRequestIds()
    ids.end(ids.begin("s", 1), answered=False)
    ids.end(ids.begin("t", 1), answered=False)
    ids.forget_session("s")
    assert not ids.begin("s", 1).reused
    assert ids.begin("t", 1).reused, "other sessions keep theirs"


def test_ids_given_up_on_are_kept_up_to_a_bound() -> None:
    ids = SessionRequestIds()
    for n in range(ABANDONED_KEPT + 10):
        ids.end(ids.begin("s", n), answered=False)
    assert ids.begin("s", ABANDONED_KEPT + 9).reused
    assert not ids.begin("s", 0).reused, "the oldest were let go"


def test_ending_a_ticket_twice_or_unknown_changes_nothing() -> None:
    ids = SessionRequestIds()
    ticket = ids.begin("s", 1)
    other = ids.begin("s", 2)
    ids.end(ticket, answered=True)
    ids.end(ticket, answered=True)
    assert len(ids) == 1
    ids.end(other, answered=True)
    assert len(ids) == 0


def test_an_id_stays_taken_while_any_request_with_it_is_open() -> None:
    ids = SessionRequestIds()
    first, second = ids.begin("s", 1), ids.begin("s", 1)
    ids.end(first, answered=True)
    assert len(ids) == 1
    assert ids.begin("s", 1).reused, "the second request still holds the id"
    ids.end(second, answered=True)
