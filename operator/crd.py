"""The MCPServer resource's coordinates: the operator alone talks to the API about it
(the sidecar reads files), so they live here; `crds/` must agree (a test checks)."""

from __future__ import annotations

from typing import Final

GROUP: Final = "mcpcache.io"
VERSION: Final = "v1alpha1"
KIND: Final = "MCPServer"
PLURAL: Final = "mcpservers"
API_VERSION: Final = f"{GROUP}/{VERSION}"
COLLECTION: Final = f"/apis/{GROUP}/{VERSION}"
