"""Tool rules proposed from what passed through (`Observations.evidence`), printed as a
`tools:` block of an MCPServer, each rule with its evidence as YAML comments.

Proposals only widen what the evidence showed, never narrow it:

- a write `invalidates` every read whose answer changed across one of its calls, with
  `match` on the arguments whose values lined up in every such change (and at least
  `MIN_MATCH` of them); a read that also changed across removals this sidecar did not
  make (another replica's write, a purge) is invalidated whole by every write, since
  which write changed it is not known;
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

from ..config import ToolRule
from ..config.fields import MAX_RULE_NAMES
from ..config.tools import MAX_MATCHED_ARGUMENTS, is_catch_all
from .observations import OTHER, Tally, suggestion

MIN_MATCH: Final = 2
"""Changes that must all line up on an argument before a `match` on it is proposed."""
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
    shortest stable span the least, the longest the greatest, callers the most."""
    reads: dict[str, dict[str, Any]] = {}
    writes: dict[str, dict[str, Any]] = {}
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
                had = into["reads"].setdefault(read, {"changed": 0, "unchanged": 0, "lined": {}})
                had["changed"] += pair["changed"]
                had["unchanged"] += pair["unchanged"]
                for name, count in pair["lined"].items():
                    had["lined"][name] = had["lined"].get(name, 0) + count
    return {"reads": reads, "writes": writes}


_SPANS: Final[dict[str, Any]] = {"callers": 0, "longestStable": 0.0, "shortestStable": None}


def propose(evidence: dict[str, Any]) -> list[Proposal]:
    """The rules the evidence suggests: writes first, then reads, each by name."""
    reads, writes = evidence["reads"], evidence["writes"]
    unattributed = sorted(t for t, seen in reads.items() if seen["unattributed"])
    proposals = [_write(tool, wrote, reads, unattributed) for tool, wrote in sorted(writes.items())]
    proposals += [_read(tool, seen) for tool, seen in sorted(reads.items()) if tool not in writes]
    for proposal in proposals:
        if len(proposal.rule) > 1:
            ToolRule.model_validate(proposal.rule)  # never print what the config refuses
    return proposals


def _write(
    tool: str, wrote: dict[str, Any], reads: dict[str, Any], unattributed: list[str]
) -> Proposal:
    proposal = Proposal({"name": tool}, [f"{tool}: {wrote['calls']} calls answered as a write"])
    if not _nameable(tool):
        proposal.evidence.append("  a name the config would read as a glob: no rule proposed")
        return proposal
    changed = {r: p for r, p in wrote["reads"].items() if p["changed"]}
    invalidates: list[str | dict[str, Any]] = []
    for read in sorted(set(changed) | set(unattributed)):
        pair = wrote["reads"].get(read, {"changed": 0, "unchanged": 0, "lined": {}})
        across = reads.get(read, {}).get("unattributed", 0)
        said = f"  {read}: changed across it {pair['changed']}, unchanged {pair['unchanged']}"
        if across:
            said += f"; changed across removals made elsewhere {across}: all of its entries"
        match = []
        if not across and pair["changed"] >= MIN_MATCH:
            match = sorted(n for n, k in pair["lined"].items() if k == pair["changed"])
            match = match[:MAX_MATCHED_ARGUMENTS]  # fewer names remove more: never less
        if match:
            said += f"; {', '.join(match)} lined up in all {pair['changed']}"
        proposal.evidence.append(said)
        invalidates.append({"tool": read, "match": match} if match else read)
    for read, pair in sorted(wrote["reads"].items()):
        if read not in changed and read not in unattributed:
            proposal.evidence.append(f"  {read}: never changed across it ({pair['unchanged']})")
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
    evidence as comments; tools with nothing to propose appear as comments only."""
    lines = [
        f"# server {server}: rules proposed from what passed through (nothing is applied);"
        " paste under the MCPServer's spec.cache",
        "tools:",
    ]
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
