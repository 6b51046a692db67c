"""Calls as `suggest` records them (`cache.observations`): a read's answer with digests
of its arguments, of the question it asks whoever asks it, and of who asked; a write
with digests of its arguments. Read from the message; never the values themselves."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..cache.observations import ArgumentDigests, Observations, answer_digest, scope_label
from ..config import Server
from ..rules.invalidation.removals import argument_digests
from ..rules.key.cache_key import secret_digest
from ..rules.key.callers import PROTOCOL_HEADER, credential_digest
from ..rules.policy.plan import Lookup
from ..rules.protocol.messages import Message


def answered(
    observations: Observations,
    now: float,
    server: Server,
    lookup: Lookup,
    message: Message,
    headers: Mapping[str, str],
    final: Mapping[str, Any],
    epoch: int,
) -> None:
    """A read's upstream answer at `now`, to `message` sent with `headers`; `epoch`: the
    server's removal epoch when it went up."""
    arguments = _digests(message)
    # A question has a digest only when every argument value has one. The protocol
    # version is part of it, as of an entry for every caller's key: answers in two
    # versions may differ in shape, whoever asks.
    known = arguments is not None and all(d for _, d in arguments)
    question = ""
    if known and lookup.scope.tool is not None:
        version = headers.get(PROTOCOL_HEADER, "")
        question = secret_digest(repr((lookup.scope.tool, arguments, version)))
    observations.saw(
        server.name,
        scope_label(lookup.scope),
        lookup.key,
        answer_digest(final["result"]),
        now,
        epoch=epoch,
        question=question,
        caller=credential_digest(server, headers),
        arguments=arguments or (),
    )


def call_digests(message: Message | None) -> tuple[str, ArgumentDigests] | None:
    """A `tools/call`'s tool and argument digests (None for anything else)."""
    if message is None or message.method != "tools/call":
        return None
    name, arguments = message.params.get("name"), _digests(message)
    return (name, arguments) if isinstance(name, str) and arguments is not None else None


def _digests(message: Message) -> ArgumentDigests | None:
    arguments = message.params.get("arguments", {})
    if not isinstance(arguments, Mapping):
        return None
    return argument_digests(tuple(sorted(arguments)), arguments)
