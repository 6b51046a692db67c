"""The resource the operator serves: the MCPServer CRD's coordinates (`crds/` holds its
schema; a test checks they agree). Only the operator talks to Kubernetes, so only it
names them."""

from __future__ import annotations

from typing import Final

RESOURCE_GROUP: Final = "mcpcache.io"
RESOURCE_VERSION: Final = "v1alpha1"
RESOURCE_KIND: Final = "MCPServer"
RESOURCE_PLURAL: Final = "mcpservers"
API_VERSION: Final = f"{RESOURCE_GROUP}/{RESOURCE_VERSION}"
COLLECTION: Final = f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}"
"""The path of the MCPServers' API, which a namespace and the plural follow."""
