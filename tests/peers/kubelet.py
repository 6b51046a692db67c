"""Projecting files into a folder the way the kubelet updates a mounted ConfigMap.

The kubelet writes each version into a fresh timestamped folder, points the `..data`
symlink at it by renaming a new symlink over the old one (one atomic step), and makes
each file name a symlink through `..data`. A reader that follows the file name sees the
old content or the new, never half of either; the file's own inode never changes, only
what the symlinks resolve to.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path


def project(directory: Path, files: dict[str, str]) -> None:
    """Swap `directory`'s projected files to `files`, as the kubelet does."""
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / "..data"
    previous = os.readlink(data) if data.is_symlink() else None
    version = f"..{uuid.uuid4().hex}"
    (directory / version).mkdir()
    for name, text in files.items():
        (directory / version / name).write_text(text)
    staged = directory / "..data_tmp"
    staged.symlink_to(version)
    staged.replace(data)
    for name in files:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(Path("..data") / name)
    if previous is not None:
        shutil.rmtree(directory / previous)
