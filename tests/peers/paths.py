"""Where the repository's deployable files are."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "mcpservers.mcpcache.io.yaml"
CHART = ROOT / "charts" / "mcpcache"
