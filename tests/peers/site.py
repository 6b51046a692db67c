"""The documentation site (docs/, mkdocs.yml): building it as its readers get it, and
reading its pages' sections and tables for the tests that hold them to what they describe."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .paths import ROOT

DOCS = ROOT / "docs"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Build:
    returncode: int
    output: str
    site: Path


def copy_sources(project: Path) -> None:
    project.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    shutil.copytree(DOCS, project / "docs")


def build_site(project: Path) -> Build:
    """`zensical build --strict` of a copy of the site's sources in `project`: the
    generator only builds a docs folder inside the folder of its configuration, and
    writes a cache there too, so the checkout is never written."""
    if not (project / "mkdocs.yml").exists():
        copy_sources(project)
    zensical = Path(sys.executable).with_name("zensical")
    result = subprocess.run(
        [str(zensical), "build", "--strict", "--clean"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"NO_COLOR": "1"},
    )
    return Build(result.returncode, ANSI.sub("", result.stdout + result.stderr), project / "site")


class _ConfigLoader(yaml.SafeLoader):
    """A safe loader that reads `!!python/name:...` (how mkdocs.yml names the function
    that renders mermaid fences) as the name it is, never importing it."""


_ConfigLoader.add_multi_constructor(
    "tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix
)


def site_config() -> dict[str, Any]:
    """mkdocs.yml, read safely."""
    config: dict[str, Any] = yaml.load((ROOT / "mkdocs.yml").read_text(), _ConfigLoader)
    return config


def page(relative: str) -> str:
    return (DOCS / relative).read_text()


def sections(text: str, level: int = 2) -> dict[str, str]:
    """The page's sections by heading text, at `level` (## by default)."""
    marker = "#" * level + " "
    found: dict[str, str] = {}
    current = None
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith(marker):
            current = line[len(marker) :].strip()
            found[current] = ""
        elif current is not None:
            found[current] += line + "\n"
    return found


def table_rows(text: str) -> list[list[str]]:
    """The cells of every markdown table row in `text`, headers and rule rows left out."""
    lines = text.splitlines()
    rows = []
    for number, line in enumerate(lines):
        if not line.startswith("|") or _is_rule(line):
            continue
        if number + 1 < len(lines) and _is_rule(lines[number + 1]):
            continue  # a header
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def _is_rule(line: str) -> bool:
    return line.startswith("|") and set(line.strip()) <= set("|-: ")


def code_names(cell: str) -> list[str]:
    """The `code` spans of a table cell."""
    return re.findall(r"`([^`]+)`", cell)
