"""Access to the Kubernetes API: kopf's watch of the MCPServers (`mcpservers`), and
the parts kept our own, each with its reason in its docstring: the ConfigMaps read by
name (`configmaps`), the client that writes (`api`), events (`events`), the Lease
(`lease`)."""
