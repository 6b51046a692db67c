"""Calls as `suggest` records them (`cache.observations`): a read's answer with digests
of its arguments, of the question it asks whoever asks it, and of who asked; a write
with digests of its arguments. Read from the message; never the values themselves."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..cache.observations import ArgumentDigests, answer_digest, scope_label
from ..rules.invalidation.removals import argument_digests
from ..rules.key.cache_key import secret_digest
from ..rules.key.callers import PROTOCOL_HEADER, credential_digest
from ..rules.protocol.messages import Message

if TYPE_CHECKING:
    from .fetching import CacheableRequest, Storage


def answered(
    storage: Storage, request: CacheableRequest, final: dict[str, Any], epoch: int
) -> None:
    """A read's upstream answer; `epoch`: the server's removal epoch when it went up."""
    server, lookup = request.server, request.lookup
    arguments = _digests(request.message)
    # A question has a digest only when every argument value has one. The protocol
    # version is part of it, as of an entry for every caller's key: answers in two
    # versions may differ in shape, whoever asks.
    known = arguments is not None and all(d for _, d in arguments)
    question = ""
    if known and lookup.scope.tool is not None:
        version = request.incoming.headers.get(PROTOCOL_HEADER, "")
        question = secret_digest(repr((lookup.scope.tool, arguments, version)))
    storage.observations.saw(
        server.name,
        scope_label(lookup.scope),
        lookup.key,
        answer_digest(final["result"]),
        storage.cache.timer(),
        epoch=epoch,
        question=question,
        caller=credential_digest(server, request.incoming.headers),
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
