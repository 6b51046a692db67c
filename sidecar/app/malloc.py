"""Keeping the resident size close to what the cache holds.

Stored results are large, long-lived blocks; the bodies that pass through on their way
in are large, short-lived ones. With glibc's default, blocks of this size come from the
main heap, and the holes that freed bodies leave between stored results cannot be
returned to the system: measured, a full 64 MiB cache then costs about 2.4 times its
size in RSS. Serving every block of 64 KiB or more from its own mapping returns it to
the system the moment it is freed (about 1.1 times, see benchmarks/).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

logger = logging.getLogger("mcpcache.sidecar")

_M_MMAP_THRESHOLD = -3
LARGE_BLOCK = 64 << 10


def map_large_blocks(threshold: int = LARGE_BLOCK) -> bool:
    """Ask glibc to map blocks of `threshold` bytes or more; False where not glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    if not done:
        logger.debug("mallopt(M_MMAP_THRESHOLD) refused; using the allocator's default")
    return done
