"""Tool rules proposed from what passed through (`Observations.evidence`), printed as a
`tools:` block of an MCPServer, each rule with its evidence as YAML comments.

Proposals only widen what the evidence showed, never narrow it:

- a write `invalidates` every read whose answer changed across its calls alone, with
  `match` on the arguments whose values lined up in every such change (and at least
  `MIN_MATCH` of them); a change across calls of several write tools is put down to
  those whose rules already remove it, and when none does, each of them removes that
  read whole; a write seen across the read's changes only along with others removes it
  whole too (its own change may have been masked), unless the read was seen unchanged
  across it `MIN_UNCHANGED` times; a read that also changed across
  removals this sidecar did not make (another replica's write, a purge) is removed whole
  by every write, since which write changed it is not known. Every change seen is
  removed by the rules proposed;
- a read gets `ttl` only when its answers changed with nothing removed between (the
  upstream's own change: a TTL bounds it), and `enabled: false` when a repeat came back
  different before any repeat confirmed it (no TTL would be safe);
- `scope: public` only for a read whose answers to one question were the same for at
  least two callers (`MIN_PUBLIC_AGREED` agreements) and never differed between callers
  with nothing removed between.

Counts only: no argument value, answer or caller reaches the output. Evidence from
several sidecars (the replicas of one app) is added up first (`merge`): each sees only
the writes made through it. Pure, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from ..config import ToolRule
from ..config.fields import MAX_RULE_NAMES
from ..config.tools import MAX_MATCHED_ARGUMENTS, is_catch_all
from .observations import OTHER, Tally, suggestion

MIN_MATCH: Final = 2
"""Changes that must all line up on an argument before a `match` on it is proposed."""
MIN_UNCHANGED: Final = 5
"""Times a read was seen unchanged across a write before a change across it along with
other writes, which theirs remove, is taken to be theirs alone."""
MIN_PUBLIC_AGREED: Final = 2
"""Agreements between callers before `scope: public` is proposed."""
_SUMMED: Final = ("calls", "repeats", "changed", "explained", "unattributed", "agreed", "varied")


@dataclass(slots=True)
class Proposal:
    """One tool rule (as the config takes it), and why, in words with counts."""

    rule: dict[str, Any]
    evidence: list[str] = field(default_factory=list)


def merge(evidences: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The evidence of several sidecars of one server as one: counts added up, the
    shortest stable span the least, the longest the greatest, callers the most, the
    changes put together."""
    reads: dict[str, dict[str, Any]] = {}
    writes: dict[str, dict[str, Any]] = {}
    changes: list[Any] = []
    for evidence in evidences:
        for tool, seen in evidence.get("reads", {}).items():
            into = reads.setdefault(tool, {k: 0 for k in _SUMMED} | _SPANS)
            for k in _SUMMED:
                into[k] += seen[k]
            into["callers"] = max(into["callers"], seen["callers"])
            into["longestStable"] = max(into["longestStable"], seen["longestStable"])
            spans = [s for s in (into["shortestStable"], seen["shortestStable"]) if s is not None]
            into["shortestStable"] = min(spans, default=None)
        for tool, wrote in evidence.get("writes", {}).items():
            into = writes.setdefault(tool, {"calls": 0, "reads": {}})
            into["calls"] += wrote["calls"]
            for read, pair in wrote["reads"].items():
                had = into["reads"].setdefault(read, {"changed": 0, "unchanged": 0})
                had["changed"] += pair["changed"]
                had["unchanged"] += pair["unchanged"]
        changes += evidence.get("changes", [])
    return {"reads": reads, "writes": writes, "changes": changes}


_SPANS: Final[dict[str, Any]] = {"callers": 0, "longestStable": 0.0, "shortestStable": None}

Match = tuple[str, ...] | None
"""How a write removes a read: on these arguments, or (None) every entry of it."""


def removals(
    changes: list[Any], writes: Iterable[str], unattributed: bool, unchanged: dict[str, int]
) -> tuple[dict[str, Match], dict[str, tuple[int, int]]]:
    """How each write removes one read, so that every change seen is removed: first
    from the changes across calls of one write tool alone (a `match` on the arguments
    one call lined up on in every one of them, at least `MIN_MATCH`; the whole read
    otherwise), then every change across several writes that none of those rules
    removes has each of its writes remove the read whole, as does every write seen
    between the read's changes only along with others (it may have been masked), unless
    the read was seen unchanged across it at least `MIN_UNCHANGED` times (`unchanged`,
    per write); a read that changed across removals of other sidecars is removed whole
    by every write. Also, per write: the changes across it alone and along with others."""
    alone: dict[str, list[list[Any]]] = {}
    counts: dict[str, tuple[int, int]] = {}
    for calls in changes:
        tools = {tool for tool, _ in calls}
        for tool in tools:
            one, more = counts.get(tool, (0, 0))
            counts[tool] = (one + 1, more) if len(tools) == 1 else (one, more + 1)
        if len(tools) == 1:
            alone.setdefault(calls[0][0], []).append(calls)
    rules: dict[str, Match] = {tool: _match(seen) for tool, seen in alone.items()}
    for calls in changes:
        if not any(_removes(rules, tool, lined) for tool, lined in calls):
            rules.update({tool: None for tool, _ in calls})
    # A write never seen changing the read alone may still change it, masked by the
    # others (a create_doc between update_docs): it removes it whole, unless the read
    # was seen often enough unchanged across it.
    masked = [t for t in counts if t not in rules and unchanged.get(t, 0) < MIN_UNCHANGED]
    rules.update({tool: None for tool in masked})
    if unattributed:
        rules.update({tool: None for tool in writes})
    return rules, counts


def _match(changes: list[list[Any]]) -> Match:
    if len(changes) < MIN_MATCH:
        return None
    names = set.intersection(*({n for _, lined in calls for n in lined} for calls in changes))
    match = tuple(sorted(names))[:MAX_MATCHED_ARGUMENTS]  # fewer names remove more
    if match and all(any(set(match) <= set(lined) for _, lined in c) for c in changes):
        return match
    return None


def _removes(rules: dict[str, Match], tool: str, lined: list[str]) -> bool:
    if tool not in rules:
        return False
    match = rules[tool]
    return match is None or set(match) <= set(lined)


def propose(evidence: dict[str, Any]) -> list[Proposal]:
    """The rules the evidence suggests: writes first, then reads, each by name."""
    reads, writes = evidence["reads"], evidence["writes"]
    by_read: dict[str, list[Any]] = {}
    for read, calls in evidence.get("changes", []):
        by_read.setdefault(read, []).append(calls)
    removed: dict[str, dict[str, Match]] = {}
    counted: dict[str, dict[str, tuple[int, int]]] = {}
    for read in sorted(set(by_read) | {t for t, seen in reads.items() if seen["explained"]}):
        seen = reads.get(read, {"explained": 0, "unattributed": 0})
        kept = {tool: w["reads"].get(read, {}).get("unchanged", 0) for tool, w in writes.items()}
        changes, across = by_read.get(read, []), bool(seen["unattributed"])
        rules, counts = removals(changes, writes, across, kept)
        if len(by_read.get(read, [])) < seen["explained"] - seen["unattributed"]:
            # Some changes were forgotten (bounds): each write seen changing it, whole.
            changed = [t for t, w in writes.items() if w["reads"].get(read, {}).get("changed")]
            rules.update({tool: None for tool in changed})
        for tool, match in rules.items():
            removed.setdefault(tool, {})[read] = match
            counted.setdefault(tool, {})[read] = counts.get(tool, (0, 0))
    proposals = [
        _write(tool, wrote, removed.get(tool, {}), counted.get(tool, {}), reads)
        for tool, wrote in sorted(writes.items())
    ]
    proposals += [_read(tool, seen) for tool, seen in sorted(reads.items()) if tool not in writes]
    for proposal in proposals:  # never print what the config would refuse
        try:
            ToolRule.model_validate(proposal.rule)
        except ValidationError:
            proposal.rule = {"name": proposal.rule["name"]}
            proposal.evidence.append("  a rule the config would refuse: none proposed")
    return proposals


def _write(
    tool: str,
    wrote: dict[str, Any],
    removed: dict[str, Match],
    counted: dict[str, tuple[int, int]],
    reads: dict[str, Any],
) -> Proposal:
    proposal = Proposal({"name": tool}, [f"{tool}: {wrote['calls']} calls answered as a write"])
    if not _nameable(tool):
        proposal.evidence.append("  a name the config would read as a glob: no rule proposed")
        return proposal
    invalidates: list[str | dict[str, Any]] = []
    for read, match in sorted(removed.items()):
        alone, more = counted.get(read, (0, 0))
        unchanged = wrote["reads"].get(read, {}).get("unchanged", 0)
        said = f"  {read}: changed across it alone {alone}, with other writes {more}"
        said += f", unchanged {unchanged}"
        if across := reads.get(read, {}).get("unattributed", 0):
            said += f"; changed across removals made elsewhere {across}"
        if match:
            said += f"; {', '.join(match)} lined up in every change across it alone"
        proposal.evidence.append(said)
        invalidates.append({"tool": read, "match": list(match)} if match else read)
    for read, pair in sorted(wrote["reads"].items()):
        if read not in removed:
            changed, unchanged = pair["changed"], pair["unchanged"]
            said = f"  {read}: unchanged across it {unchanged}"
            if changed:
                said += f", changed {changed} with other writes (theirs, by the rules above)"
            proposal.evidence.append(said)
    if any(not _nameable(r if isinstance(r, str) else r["tool"]) for r in invalidates):
        invalidates = ["*"]  # a read the config cannot name: every entry
    elif len(invalidates) > MAX_RULE_NAMES:
        invalidates = ["*"]
    if invalidates:
        proposal.rule["invalidates"] = invalidates
    else:
        proposal.evidence.append("  no read seen changing across it: nothing proposed")
    return proposal


def _read(tool: str, seen: dict[str, Any]) -> Proposal:
    tally = Tally(seen["calls"], seen["repeats"], seen["changed"] - seen["explained"])
    tally.shortest_stable, tally.longest_stable = seen["shortestStable"], seen["longestStable"]
    report = suggestion(tally)
    evidence = [
        f"{tool}: {seen['calls']} answers, {seen['repeats']} repeats, {seen['changed']} changed"
        f" ({seen['explained']} across removals); on its own: {report['verdict']}",
        f"  same answer for another caller {seen['agreed']} times (at most {seen['callers']}"
        f" callers for one question), different {seen['varied']} times",
    ]
    proposal = Proposal({"name": tool}, evidence)
    if not _nameable(tool):
        return proposal
    if report["verdict"] == "answers differ":
        proposal.rule["enabled"] = False
        evidence.append("  a repeat came back different with nothing removed: not cached")
        return proposal
    if report["verdict"] == "changed" and report["suggestedTTL"]:
        proposal.rule["ttl"] = report["suggestedTTL"]
        evidence.append(f"  changed on its own after {report['stableSeconds']} s the same")
    public = not seen["varied"] and seen["callers"] >= 2
    if public and seen["agreed"] >= MIN_PUBLIC_AGREED:
        proposal.rule["scope"] = "public"
    return proposal


def _nameable(tool: str) -> bool:
    """A name a rule can carry as itself: not a glob, not the bucket of odd names."""
    return tool != OTHER and not is_catch_all(tool) and not any(c in tool for c in "*?[")


def render(server: str, proposals: list[Proposal]) -> str:
    """The `tools:` block (YAML, under the MCPServer's `spec.cache`), each rule after its
    evidence as comments; tools with nothing to propose appear as comments only, and a
    block with no rule at all is an empty list (a key with only comments under it would
    read as null, which the config refuses)."""
    lines = [
        f"# server {server}: rules proposed from what passed through (nothing is applied);"
        " paste under the MCPServer's spec.cache, in place of its tools",
        "tools:",
    ]
    if all(len(proposal.rule) == 1 for proposal in proposals):
        lines[-1] = "tools: []"
    for proposal in proposals:
        lines += [f"  # {said}" for said in proposal.evidence]
        rule = proposal.rule
        if len(rule) == 1:
            continue
        lines.append(f"  - name: {_quoted(rule['name'])}")
        if "enabled" in rule:
            lines.append("    enabled: false")
        if "ttl" in rule:
            lines.append(f"    ttl: {rule['ttl']}")
        if "scope" in rule:
            lines.append(f"    scope: {rule['scope']}")
        if "invalidates" in rule:
            lines.append("    invalidates:")
            for removal in rule["invalidates"]:
                if isinstance(removal, str):
                    lines.append(f"      - {_quoted(removal)}")
                else:
                    names = ", ".join(_quoted(n) for n in removal["match"])
                    lines.append(f"      - {{tool: {_quoted(removal['tool'])}, match: [{names}]}}")
    return "\n".join(lines) + "\n"


def _quoted(name: str) -> str:
    """A name as a YAML double-quoted scalar (JSON's quoting is YAML's): `on`, `1` or
    `a: b` stay strings."""
    return json.dumps(name)
