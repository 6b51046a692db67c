"""The operator uses kopf's public API only: what `kopf/__init__.py` exports, never a
module under `kopf._cogs`, `kopf._core` or `kopf._kits`, which change between releases."""

from __future__ import annotations

import ast

import kopf

from peers.paths import ROOT


def kopf_names_used() -> dict[str, set[str]]:
    """Per module of operator/, the kopf modules it imports and the `kopf.X` it reads."""
    used: dict[str, set[str]] = {}
    for path in sorted((ROOT / "operator").rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kopf"):
                names.add(node.module or "")
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names if a.name.startswith("kopf"))
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "kopf"
            ):
                names.add(f"kopf.{node.attr}")
        used[str(path.relative_to(ROOT))] = names
    return used


def test_the_operator_imports_no_private_kopf_module_and_reads_only_exported_names() -> None:
    private = {
        module: sorted(n for n in names if n.startswith("kopf._"))
        for module, names in kopf_names_used().items()
    }
    assert {m: n for m, n in private.items() if n} == {}
    unexported = {
        module: sorted(n for n in names if n.startswith("kopf.") and n[5:] not in dir(kopf))
        for module, names in kopf_names_used().items()
    }
    assert {m: n for m, n in unexported.items() if n} == {}
