"""What the upstreams' answers showed over time, for suggesting rules and for checking hits.

For each server, a bounded record of the keys whose answers came from the upstream
(misses, background refreshes, sampled revalidations): the digest of the answer, when
that answer was first seen and when it was last seen unchanged, and the writes this
sidecar forwarded (a tool the sidecar treats as a write, once it answered as one). Digests
only: a key is already a digest of the request, an answer's is a digest of the result
without its hints, a write's arguments and a read's are digests per argument name, a
caller is a digest of its credentials; no argument value, result or caller is kept, and
none is ever reported (counts only).

From it, per tool: how many answers came, how many repeated a key seen before, whether
repeats came back the same, and the shortest span over which they did; and per pair of
a write and a read, how often the read's answer changed across the write and how often
it did not; and for each change, the writes between and the argument names on which
each had the read's value (names only). A change with no removal of entries between the
two answers is the upstream's own (a TTL bounds it); one across writes of this sidecar
is recorded with them (`cache.proposals` decides which write it is put down to); one
across a removal this sidecar did not make (another replica's write, a
purge) is put down to no write (`unattributed`): `cache.proposals` then has every write
remove that read whole. Per question (a tool and its arguments, whoever asks): whether
answers to different callers agreed while no removal came between them.

Nothing here changes any setting: a person reads the suggestion and decides.

Bounds (per server): 4096 keys and 4096 questions (least recently answered forgotten
first) with at most 8 callers each, the last 256 writes, the last 1024 changes put down
to writes (each across at most 32 of them), 512 tools, 1024 write/read pairs, 16
argument names per call.

Pure, no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson
from cachetools import LRUCache

from .entry import Scope

MAX_KEYS_PER_SERVER: Final = 4096
"""Keys remembered per server; the least recently answered are forgotten first."""
MAX_TOOLS_PER_SERVER: Final = 512
"""Tools counted per server (names come from callers); later names are not counted."""
MAX_TOOL_NAME: Final = 128
"""Longer names (MCP's own limit), and names with characters a terminal would act on,
are counted together as `OTHER`: they come from callers, and are printed."""
OTHER: Final = "(other)"
HINT_FIELDS: Final = frozenset({"ttlMs", "cacheScope", "_meta"})
"""Result members that say how to cache or carry metadata, not what the answer is."""
SUGGESTED_STEPS: Final = (
    1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 43200, 86400,
)  # fmt: skip
"""Suggested TTLs, in seconds: a quarter of the span, rounded down to one of these."""
MAX_QUESTIONS_PER_SERVER: Final = 4096
MAX_CALLERS_PER_QUESTION: Final = 8
MAX_WRITES_PER_SERVER: Final = 256
"""Writes remembered, to put a read's change down to; a change across more is unattributed."""
MAX_PAIRS_PER_SERVER: Final = 1024
MAX_CHANGES_PER_SERVER: Final = 1024
MAX_CALLS_PER_CHANGE: Final = 32
"""Writes between two answers that a change is put down to; across more it is unattributed."""
MAX_ARGUMENTS: Final = 16
"""Argument names of one call compared; a call with more is compared on none."""
ARGUMENT_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""Argument names suggest may print in a `match` (others are never compared)."""

ArgumentDigests = tuple[tuple[str, str], ...]
"""(argument name, digest of its value): never the values ("" for a value not digested)."""

Revalidated = Literal["same", "changed", "failed"]


def answer_digest(result: Mapping[str, Any]) -> bytes:
    """A digest of what a result says, without its hints (`ttlMs`, `cacheScope`,
    `_meta`): two answers with the same digest say the same thing. Made on every stored
    miss: SHA-256 (cut to 16 bytes), which CPUs with SHA extensions run about twice as
    fast as BLAKE2b here (an 8 KiB answer: 7.5 µs against 15)."""
    said = {k: v for k, v in result.items() if k not in HINT_FIELDS}
    return hashlib.sha256(orjson.dumps(said, option=orjson.OPT_SORT_KEYS)).digest()[:16]


def scope_label(scope: Scope | None) -> str:
    """What an entry answers, as suggest and stats name it: the tool, or the method."""
    if scope is None:
        return OTHER
    if scope.tool is not None:
        return scope.tool
    return "resources/read" if scope.uri is not None else scope.listing or OTHER


@dataclass(slots=True)
class _Seen:
    digest: bytes
    first: float
    """When this answer was first seen for the key."""
    last: float
    """When it was last seen unchanged."""
    epoch: int = 0
    """The server's removal epoch (`Invalidator.epoch`) when it was last seen."""
    writes: int = 0
    """How many writes of the server had been seen then."""


@dataclass(frozen=True, slots=True)
class _Write:
    number: int
    tool: str
    arguments: ArgumentDigests


@dataclass(slots=True)
class Pair:
    """What one write tool's calls did to one read tool's answers."""

    changed: int = 0
    """Answers that changed across a call of the write (alone or with others)."""
    unchanged: int = 0
    """Answers that stayed the same across one."""


Change = tuple[str, tuple[tuple[str, tuple[str, ...]], ...]]
"""A read tool's answer that changed across writes of this sidecar: the read tool, and
for each write call between, its tool and the argument names on which its value was the
read's (names only)."""


@dataclass(slots=True)
class _Question:
    digest: bytes
    epoch: int
    callers: set[str]


@dataclass(slots=True)
class Tally:
    calls: int = 0
    repeats: int = 0
    changed: int = 0
    shortest_stable: float | None = None
    """Over the answers that changed: the shortest span they had been seen unchanged."""
    longest_stable: float = 0.0
    """The longest span an answer was seen unchanged (the evidence when none changed)."""
    revalidations: dict[str, int] = field(default_factory=dict)
    explained: int = 0
    """Changes with a removal of entries between the two answers (not counted in the TTL)."""
    unattributed: int = 0
    """Of those, changes across a removal this sidecar did not make, or across more
    writes than it remembers: put down to no write in particular."""
    agreed: int = 0
    """Answers to a question that were the same as another caller's."""
    callers: int = 0
    """The most callers that got the same answer to one question."""
    varied: int = 0
    """Answers to a question that differed from another caller's, with no removal between."""


@dataclass(slots=True)
class _Server:
    keys: LRUCache[str, _Seen]
    questions: LRUCache[str, _Question]
    writes: deque[_Write]
    tools: dict[str, Tally] = field(default_factory=dict)
    written: dict[str, int] = field(default_factory=dict)
    """Calls of each write tool."""
    pairs: dict[tuple[str, str], Pair] = field(default_factory=dict)
    """(write tool, read tool): what the write's calls did to the read's answers."""
    changes: deque[Change] = field(default_factory=lambda: deque(maxlen=MAX_CHANGES_PER_SERVER))
    """The latest changes put down to writes of this sidecar."""
    count: int = 0
    """Writes seen so far."""


class Observations:
    def __init__(
        self, max_keys: int = MAX_KEYS_PER_SERVER, max_tools: int = MAX_TOOLS_PER_SERVER
    ) -> None:
        self.max_keys = max_keys
        self.max_tools = max_tools
        self._servers: dict[str, _Server] = {}

    def _record(self, server: str) -> _Server:
        record = self._servers.get(server)
        if record is None:
            record = self._servers[server] = _Server(
                LRUCache(self.max_keys),
                LRUCache(MAX_QUESTIONS_PER_SERVER),
                deque(maxlen=MAX_WRITES_PER_SERVER),
            )
        return record

    def _tally(self, server: str, tool: str) -> Tally | None:
        record = self._record(server)
        tally = record.tools.get(tool)
        if tally is None and len(record.tools) < self.max_tools:
            tally = record.tools[tool] = Tally()
        return tally

    def wrote(self, server: str, tool: str, arguments: ArgumentDigests) -> None:
        """A call of `tool` (with these argument digests) answered as a write, and the
        server's removal epoch moved on once for it."""
        tool = _named(tool)
        if self._tally(server, tool) is None:
            return
        record = self._record(server)
        record.count += 1
        record.written[tool] = record.written.get(tool, 0) + 1
        record.writes.append(_Write(record.count, tool, _comparable(arguments)))

    def saw(
        self,
        server: str,
        tool: str,
        key: str,
        digest: bytes,
        now: float,
        *,
        epoch: int = 0,
        question: str = "",
        caller: str = "",
        arguments: ArgumentDigests = (),
    ) -> None:
        """An upstream answer for `key` (a call of `tool`), with its digest, at `now`;
        `epoch`: the server's removal epoch then; `question`: a digest of the tool and
        its arguments, whoever asks ("" for none); `caller`: a digest of who asked;
        `arguments`: the digests of its argument values."""
        tool = _named(tool)
        tally = self._tally(server, tool)
        if tally is None:
            return
        record = self._servers[server]
        tally.calls += 1
        if question:
            self._compare(record, tally, question, caller, digest, epoch)
        keys = record.keys
        seen = keys.get(key)
        if seen is None:
            keys[key] = _Seen(digest, now, now, epoch, record.count)
            return
        tally.repeats += 1
        across = self._across(record, seen, epoch)
        if seen.digest == digest:
            seen.last, seen.epoch, seen.writes = now, epoch, record.count
            tally.longest_stable = max(tally.longest_stable, now - seen.first)
            for write in {w.tool for w in across or ()}:
                self._pair(record, write, tool).unchanged += 1
            return
        tally.changed += 1
        keys[key] = _Seen(digest, now, now, epoch, record.count)
        if epoch == seen.epoch and not across:  # the upstream's own change: a TTL's
            stable = seen.last - seen.first
            if tally.shortest_stable is None or stable < tally.shortest_stable:
                tally.shortest_stable = stable
            return
        tally.explained += 1
        if across is None or len(across) > MAX_CALLS_PER_CHANGE:
            tally.unattributed += 1
            return
        mine = [(n, v) for n, v in _comparable(arguments) if v]
        calls = []
        for call in across:
            theirs = dict(call.arguments)
            calls.append((call.tool, tuple(n for n, v in mine if theirs.get(n) == v)))
        record.changes.append((tool, tuple(calls)))
        for name in {w.tool for w in across}:
            self._pair(record, name, tool).changed += 1

    @staticmethod
    def _across(record: _Server, seen: _Seen, epoch: int) -> list[_Write] | None:
        """The writes of this sidecar between `seen` and now; None when the entries
        were also removed otherwise (the epoch moved more often than for them), or
        when some of the writes between were forgotten."""
        count = record.count - seen.writes
        if epoch - seen.epoch != count:
            return None
        if not count:
            return []
        across = [w for w in record.writes if w.number > seen.writes]
        return across if len(across) == count else None

    def _pair(self, record: _Server, write: str, read: str) -> Pair:
        pair = record.pairs.get((write, read))
        if pair is None:
            pair = Pair()
            if len(record.pairs) < MAX_PAIRS_PER_SERVER:
                record.pairs[(write, read)] = pair
        return pair

    @staticmethod
    def _compare(
        record: _Server, tally: Tally, question: str, caller: str, digest: bytes, epoch: int
    ) -> None:
        """Whether callers got the same answer to the same question with no removal of
        entries between their answers (a candidate for `scope: public`)."""
        asked = record.questions.get(question)
        if asked is None or asked.epoch != epoch:
            record.questions[question] = _Question(digest, epoch, {caller})
            return
        if asked.digest != digest:
            if caller not in asked.callers or len(asked.callers) > 1:
                tally.varied += 1
            record.questions[question] = _Question(digest, epoch, {caller})
            return
        if caller in asked.callers or len(asked.callers) >= MAX_CALLERS_PER_QUESTION:
            return
        asked.callers.add(caller)
        tally.agreed += 1
        tally.callers = max(tally.callers, len(asked.callers))

    def revalidated(self, server: str, tool: str, result: Revalidated) -> None:
        tally = self._tally(server, _named(tool))
        if tally is not None:
            tally.revalidations[result] = tally.revalidations.get(result, 0) + 1

    def revalidations(self, server: str) -> dict[str, dict[str, int]]:
        """Sampled revalidations of a server's hits by tool and result."""
        record = self._servers.get(server)
        if record is None:
            return {}
        return {
            tool: {result: tally.revalidations.get(result, 0) for result in _RESULTS}
            for tool, tally in sorted(record.tools.items())
            if tally.revalidations
        }

    def servers(self) -> list[str]:
        return sorted(self._servers)

    def suggest(self, server: str) -> dict[str, dict[str, Any]]:
        """Per tool: calls, repeats, how they came back, and a suggested TTL (or none)."""
        record = self._servers.get(server)
        if record is None:
            return {}
        return {tool: suggestion(tally) for tool, tally in sorted(record.tools.items())}

    def evidence(self, server: str) -> dict[str, Any]:
        """Counts only, by tool name (what `cache.proposals` reads and merges): per read
        tool its tally, per write tool its calls and what they did to each read."""
        record = self._servers.get(server)
        if record is None:
            return {"reads": {}, "writes": {}, "changes": []}
        writes: dict[str, Any] = {
            tool: {"calls": calls, "reads": {}} for tool, calls in sorted(record.written.items())
        }
        for (write, read), pair in sorted(record.pairs.items()):
            writes[write]["reads"][read] = {"changed": pair.changed, "unchanged": pair.unchanged}
        reads = {
            tool: {
                "calls": tally.calls,
                "repeats": tally.repeats,
                "changed": tally.changed,
                "shortestStable": tally.shortest_stable,
                "longestStable": tally.longest_stable,
                "explained": tally.explained,
                "unattributed": tally.unattributed,
                "agreed": tally.agreed,
                "callers": tally.callers,
                "varied": tally.varied,
            }
            for tool, tally in sorted(record.tools.items())
            if tool not in record.written
        }
        changes = [[read, [[w, list(n)] for w, n in calls]] for read, calls in record.changes]
        return {"reads": reads, "writes": writes, "changes": changes}


def _named(tool: str) -> str:
    """Longer names and names a terminal would act on are counted as `OTHER`."""
    return OTHER if len(tool) > MAX_TOOL_NAME or not tool.isprintable() else tool


def _comparable(arguments: ArgumentDigests) -> ArgumentDigests:
    """The arguments a write and a read are compared on: names suggest may print, and
    none at all for a call with more than it compares."""
    if len(arguments) > MAX_ARGUMENTS:
        return ()
    return tuple((n, d) for n, d in arguments if ARGUMENT_NAME.fullmatch(n))


_RESULTS: Final = ("same", "changed", "failed")


def suggestion(tally: Tally) -> dict[str, Any]:
    """What a tool's answers showed, and the TTL they suggest: a quarter of the shortest
    span over which repeats stayed identical, rounded down to a round duration. None
    when nothing repeated, or when an answer changed before any repeat confirmed it."""
    report: dict[str, Any] = {
        "calls": tally.calls,
        "repeats": tally.repeats,
        "changed": tally.changed,
        "stableSeconds": None,
        "suggestedTTL": None,
    }
    if not tally.repeats:
        report["verdict"] = "no repeats"
        return report
    if tally.shortest_stable is None:
        span, report["verdict"] = tally.longest_stable, "never changed"
    elif tally.shortest_stable <= 0:
        report["verdict"] = "answers differ"
        return report
    else:
        span, report["verdict"] = tally.shortest_stable, "changed"
    report["stableSeconds"] = round(span, 3)
    steps = [step for step in SUGGESTED_STEPS if step <= span / 4]
    if steps:
        report["suggestedTTL"] = duration(steps[-1])
    return report


def duration(seconds: int) -> str:
    """A duration as the config writes one (`30s`, `5m`, `2h`)."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
