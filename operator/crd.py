"""The resource the operator serves: the MCPServer CRD's coordinates (`crds/` holds its
schema). Only the operator talks to Kubernetes, so only it names them."""

from typing import Final

RESOURCE_GROUP: Final = "mcpcache.io"
RESOURCE_VERSION: Final = "v1alpha1"
RESOURCE_KIND: Final = "MCPServer"
RESOURCE_PLURAL: Final = "mcpservers"
