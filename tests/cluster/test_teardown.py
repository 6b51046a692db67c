"""A node whose start fails half-way leaves nothing behind either."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from peers.node import KERNEL_SETTINGS, Node


def _kernel() -> dict[str, str]:
    return {s: Path("/proc/sys", s).read_text().strip() for s in KERNEL_SETTINGS}


def test_a_node_whose_kubelet_fails_to_start_is_taken_down_entirely(
    node: Node, tmp_path: Path
) -> None:
    """`node` (the session's, running) only provides the binaries: this is a second one."""
    broken = tmp_path / "bin"
    broken.mkdir()
    for binary in node.node_bin.iterdir():
        (broken / binary.name).symlink_to(binary)
    (broken / "kubelet").unlink()
    (broken / "kubelet").write_text("#!/bin/sh\necho 'kubelet: refusing to start' >&2\nexit 3\n")
    os.chmod(broken / "kubelet", 0o755)
    kernel = _kernel()

    second = Node(node.bin_dir, broken, node.images_dir)
    with pytest.raises(RuntimeError, match="kubelet exited"):
        second.start(timeout=60)
    assert second.leftovers() == []
    assert not second.dir.exists()
    assert _kernel() == kernel
    # The session's node, in its own namespace, was not touched.
    assert "Ready" in node.run_kubectl("get", "node", "node").stdout
