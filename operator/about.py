"""The mcpcache operator: MCPServer resources to sidecar configuration and injection."""
