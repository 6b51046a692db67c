"""The operator's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconciles = Counter(
            "mcpcache_operator_reconciles",
            "Namespace reconciliations, by result.",
            ["result"],
            registry=self.registry,
        )
        self.reconcile_duration = Histogram(
            "mcpcache_operator_reconcile_duration_seconds",
            "Time to reconcile one namespace.",
            registry=self.registry,
        )
        self.servers = Gauge(
            "mcpcache_operator_mcpservers",
            "MCPServers written to sidecar configuration, by namespace.",
            ["namespace"],
            registry=self.registry,
        )
        self.clamped = Gauge(
            "mcpcache_operator_clamped_mcpservers",
            "MCPServers whose maxSize was clamped to the ceiling, by namespace.",
            ["namespace"],
            registry=self.registry,
        )
        self.admissions = Counter(
            "mcpcache_operator_admissions",
            "Pod admissions seen by the injection webhook, by result.",
            ["result"],
            registry=self.registry,
        )
        for result in ("ok", "error"):
            self.reconciles.labels(result)
        for result in ("injected", "dry_run", "already_injected", "not_requested", "refused"):
            self.admissions.labels(result)
