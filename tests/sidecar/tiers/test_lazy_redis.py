"""A sidecar without a shared tier never loads redis-py: its memory at rest is the
memory of the product it runs, not of a client it does not use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

PROBE = """
import json, sys
from pathlib import Path
from mcpcache.sidecar.app.assembly import Sidecar
from mcpcache.sidecar.app.reload import ConfigSource
from mcpcache.sidecar.cli import main  # the entry point's imports too
sidecar = Sidecar(ConfigSource(Path(sys.argv[1]), environ={}))
print(json.dumps({"redis": "redis" in sys.modules, "tier": sidecar.shared is not None}))
"""


def loaded(tmp_path: Path, document: dict[str, object]) -> dict[str, bool]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, bool] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("shared", "expected"),
    [
        (None, {"redis": False, "tier": False}),
        ({"cluster": {"nodes": ["redis://127.0.0.1:1"]}}, {"redis": True, "tier": True}),
    ],
)
def test_redis_is_imported_only_by_a_sidecar_with_a_shared_tier(
    tmp_path: Path, shared: dict[str, object] | None, expected: dict[str, bool]
) -> None:
    document: dict[str, object] = {"servers": [{"name": "s", "url": "http://127.0.0.1:1/mcp"}]}
    if shared is not None:
        document["sharedCache"] = shared
    assert loaded(tmp_path, document) == expected
