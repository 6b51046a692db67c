"""Which mcpcache this is: the version the operator exports and writes on the pods it
injects, so that a fleet upgrade can be followed pod by pod."""

from __future__ import annotations

import importlib.metadata
from typing import Final

VERSION: Final = importlib.metadata.version("mcpcache")
"""The installed distribution's version (the image's: one image serves both roles)."""
