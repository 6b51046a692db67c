"""Test binaries built from pinned Go modules (the control plane, Prometheus)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def go_built(env: str, build: Path, what: str) -> Path:
    """The directory of binaries that the script `build` makes, or `env`'s value when set
    (tests/run.sh sets it after building once). Without Go the test skips, under CI fails."""
    if bin_dir := os.environ.get(env):
        return Path(bin_dir)
    if shutil.which("go") is None:
        reason = f"no Go toolchain: {what} cannot be built (see {build.parent.name}/)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    out = subprocess.run(["bash", str(build)], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])
