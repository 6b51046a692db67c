"""The site builds with --strict: a warning, a dead internal link or a missing anchor
fails the build, and so the suite."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from peers.paths import CHART
from peers.site import DOCS, Build, build_site, copy_sources, site_config

ROOT_CONFIG = DOCS.parent / "mkdocs.yml"


def nav_pages(nav: list) -> set[str]:
    pages: set[str] = set()
    for item in nav:
        values = item.values() if isinstance(item, dict) else [item]
        for value in values:
            if isinstance(value, list):
                pages |= nav_pages(value)
            else:
                pages.add(value)
    return pages


def test_the_site_builds_strictly_with_no_dead_link_or_anchor(built_site: Build) -> None:
    assert built_site.returncode == 0, built_site.output
    assert "No issues found" in built_site.output
    assert (built_site.site / "index.html").is_file()


def test_a_dead_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    copy_sources(tmp_path)
    broken = tmp_path / "docs" / "guide" / "standalone.md"
    broken.write_text(
        broken.read_text()
        + "\nSee [nowhere](../reference/no-such-page.md) and"
        + " [no anchor](../reference/cache-key.md#no-such-heading).\n"
    )
    build = build_site(tmp_path)
    assert build.returncode != 0
    assert "page does not exist" in build.output
    assert "anchor does not exist" in build.output
    assert "guide/standalone.md" in build.output


def test_every_page_is_in_the_navigation_and_every_entry_is_a_page() -> None:
    config = site_config()
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert nav_pages(config["nav"]) == pages


def test_the_site_has_the_four_parts_a_reader_looks_for() -> None:
    config = site_config()
    parts = [next(iter(item)) for item in config["nav"]]
    assert parts == ["Home", "Guide", "Reference", "Operations", "Development"]


def test_no_page_links_outside_the_site_by_a_relative_path() -> None:
    """Files of the repository are named as code: the site is published on its own."""
    for path in DOCS.rglob("*.md"):
        for target in re.findall(r"\]\(([^)#]+)", path.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            assert (path.parent / target).resolve().is_relative_to(DOCS), (path, target)


def test_the_readmes_links_resolve_to_files_of_the_repository() -> None:
    readme = DOCS.parent / "README.md"
    targets = re.findall(r"\]\(([^)#]+)", readme.read_text())
    assert any(target.startswith("docs/") for target in targets)
    for target in targets:
        if not target.startswith(("http://", "https://")):
            assert (readme.parent / target).exists(), target


def test_every_alerts_runbook_url_is_a_page_of_the_built_site(built_site: Build) -> None:
    site_url = site_config()["site_url"]
    rules = yaml.safe_load((CHART / "files" / "mcpcache-alerts.yaml").read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]
    assert alerts
    for rule in alerts:
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(site_url), url
        assert (built_site.site / url.removeprefix(site_url) / "index.html").is_file(), url


def test_the_architecture_diagram_is_drawn_with_every_moving_part(built_site: Build) -> None:
    """The mermaid fence reaches the page as a diagram for mermaid.js to draw, not as
    code, and it names each part the operations pages speak of."""
    html = (built_site.site / "development" / "architecture" / "index.html").read_text()
    (diagram,) = re.findall(r'<pre class="mermaid"><code>(.*?)</code></pre>', html, re.DOTALL)
    for part in (
        "operator",
        "injection webhook",
        "mcpcache sidecar",
        "upstream MCP server",
        "Redis",
        "Prometheus",
        "OpenTelemetry Collector",
    ):
        assert part in diagram, part
