"""The day `replay.py` replays: a seeded trace of agents' tool calls.

The shape is the caching essay's: an agent asks the same question on turn 3, again on
turn 14 and again the next morning in a fresh session; a teammate asks it too; and now
and then someone writes a document and reads it, its folder or a search over it right
after. Users differ in how their client holds sessions, as deployed clients do:

- `long`: one legacy (session-era) session per conversation, every call in it;
- `per-call`: a new legacy session for every call, as LangChain's MCP adapters open
  one by default (`get_tools()` in one session, each tool call in its own);
- `modern`: the stateless 2026-07-28 protocol, one client per conversation.

Each conversation starts with a `tools/list`, as agents do. A `long` or `modern`
conversation runs through one replica (one agent pod); a `per-call` user's calls go to
any replica (stateless workers behind a Service). Conversations of different users
overlap in time: their calls are interleaved. The same seed gives the same trace.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Literal

from replay_store import DOCS_PER_FOLDER, FOLDERS, READS, WORDS, words

Style = Literal["long", "per-call", "modern"]


@dataclass(frozen=True)
class User:
    name: str
    style: Style
    home: str
    """The folder this user's tickets are about."""


USERS = (
    User("ana", "long", "runbooks"),
    User("ben", "per-call", "runbooks"),
    User("chloe", "per-call", "incidents"),
    User("dev", "long", "api"),
    User("eve", "modern", "incidents"),
)


@dataclass(frozen=True)
class Op:
    """One tool call of the trace."""

    index: int
    user: User
    conversation: str
    replica: int
    tool: str
    arguments: dict[str, Any]
    first: bool = False
    """The conversation's first call: its client lists the tools before."""
    last: bool = False
    """The conversation's last call: its client closes after."""

    @property
    def writes(self) -> bool:
        return self.tool in ("update_doc", "create_doc")

    @property
    def question(self) -> tuple[str, str]:
        """What a read asks, whoever asks it."""
        return self.tool, str(sorted(self.arguments.items()))


@dataclass
class _Conversation:
    user: User
    name: str
    replica: int
    ticket: list[tuple[str, dict[str, Any]]]
    turns: int
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


WRITE_SHARE = 0.10
RETRY_SHARE = 0.25
"""Of writes, the share the agent sends again at once (a retry after a timeout)."""


def _question(rng: random.Random, home: str) -> tuple[str, dict[str, Any]]:
    """A read about the user's folder, now and then about another; a search for one of
    the words documents are made of."""
    folder = home if rng.random() < 0.8 else rng.choice(FOLDERS)
    kind = rng.random()
    if kind < 0.5:
        return "get_doc", {"name": f"{folder}-{_zipf(rng, DOCS_PER_FOLDER)}"}
    if kind < 0.8:
        return "search", {"query": rng.choice(WORDS)}
    return "list_folder", {"folder": folder}


def _zipf(rng: random.Random, n: int) -> int:
    """A rank in 0..n-1, the first ones far more often (popular documents)."""
    weights = [1 / (rank + 1) for rank in range(n)]
    return rng.choices(range(n), weights)[0]


def _conversation_calls(
    rng: random.Random, talk: _Conversation, history: dict[str, list[tuple[str, dict[str, Any]]]]
) -> None:
    """Fill `talk.calls`: reads of the ticket's questions (repeated, as agents do), of
    what the user or others asked before, and writes followed by reads of what they
    change."""
    follow: list[tuple[str, dict[str, Any]]] = []
    while len(talk.calls) < talk.turns:
        if follow:
            talk.calls.append(follow.pop(0))
            continue
        roll = rng.random()
        if roll < WRITE_SHARE:
            write, reads = _write(rng, talk)
            talk.calls.append(write)
            if rng.random() < RETRY_SHARE:
                talk.calls.append(write)
            follow = reads
            continue
        mine = history[talk.user.name]
        others = [q for user, qs in history.items() if user != talk.user.name for q in qs]
        asked = [c for c in talk.calls if c[0] in READS]
        if roll < 0.45 and asked:
            call = rng.choice(asked)
        elif roll < 0.65 and mine:
            call = rng.choice(mine)
        elif roll < 0.75 and others:
            call = rng.choice(others)
        else:
            call = rng.choice(talk.ticket)
        talk.calls.append(call)
    del talk.calls[talk.turns :]


def _write(
    rng: random.Random, talk: _Conversation
) -> tuple[tuple[str, dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """A write in the user's folder and the reads that show it, in a random order."""
    text = words(rng)
    if rng.random() < 0.25:
        name = f"{talk.user.home}-{talk.name}-{len(talk.calls)}"
        write = ("create_doc", {"folder": talk.user.home, "name": name, "text": text})
    else:
        name = f"{talk.user.home}-{_zipf(rng, DOCS_PER_FOLDER)}"
        write = ("update_doc", {"name": name, "text": text})
    reads = [
        ("get_doc", {"name": name}),
        ("list_folder", {"folder": talk.user.home}),
        ("search", {"query": rng.choice(text.split())}),
    ]
    rng.shuffle(reads)
    return write, reads[: rng.randint(1, 3)]


def trace(
    seed: int, days: int = 2, conversations: int = 2, turns: int = 24, replicas: int = 3
) -> list[Op]:
    """`days` days; each user holds `conversations` conversations a day, one after the
    other, of about `turns` calls each; the users' days overlap."""
    rng = random.Random(seed)
    history: dict[str, list[tuple[str, dict[str, Any]]]] = {u.name: [] for u in USERS}
    tickets = {u.name: [_question(rng, u.home) for _ in range(8)] for u in USERS}
    ops: list[Op] = []
    for day in range(days):
        queues: dict[str, list[Op]] = {}
        for user in USERS:
            queue: list[Op] = []
            for number in range(conversations):
                name = f"{user.name}-d{day}c{number}"
                ticket = [*rng.sample(tickets[user.name], 5), _question(rng, user.home)]
                turns_here = max(2, turns + rng.randint(-turns // 4, turns // 4))
                talk = _Conversation(user, name, rng.randrange(replicas), ticket, turns_here)
                _conversation_calls(rng, talk, history)
                history[user.name].extend(c for c in talk.calls if c[0] in READS)
                for i, (tool, arguments) in enumerate(talk.calls):
                    replica = rng.randrange(replicas) if user.style == "per-call" else talk.replica
                    first, last = i == 0, i == len(talk.calls) - 1
                    queue.append(Op(0, user, name, replica, tool, arguments, first, last))
            queues[user.name] = queue
        while any(queues.values()):
            names = [n for n, q in queues.items() if q]
            name = rng.choices(names, [len(queues[n]) for n in names])[0]
            op = queues[name].pop(0)
            ops.append(Op(len(ops), *_fields(op)))
    return ops


def _fields(op: Op) -> tuple[Any, ...]:
    return (op.user, op.conversation, op.replica, op.tool, op.arguments, op.first, op.last)
