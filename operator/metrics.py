"""The operator's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .build import VERSION


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
            "Time one pass over a namespace takes: the work, from its state in memory to "
            "the API's answers to its writes.",
            registry=self.registry,
        )
        self.reconcile_queue = Histogram(
            "mcpcache_operator_reconcile_queue_seconds",
            "Time from a namespace's first change to the start of the pass that handles it.",
            registry=self.registry,
        )
        self.pending = Gauge(
            "mcpcache_operator_reconcile_pending",
            "Namespaces waiting for a pass or in one (0: everything seen is reconciled).",
            registry=self.registry,
        )
        self.api_requests = Counter(
            "mcpcache_operator_api_requests",
            "Requests the operator sent to the Kubernetes API itself (beside kopf's list "
            "and watch of MCPServers), by HTTP method and resource.",
            ["method", "resource"],
            registry=self.registry,
        )
        self.relists = Counter(
            "mcpcache_operator_relists",
            "Listings of MCPServers the operator made after kopf listed them again (as it "
            "does after a 410 Gone): what such a listing lacks was deleted unseen.",
            registry=self.registry,
        )
        self.leader = Gauge(
            "mcpcache_operator_leader",
            "1 while this replica holds the Lease and reconciles; 0 on a standby.",
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
        self.missed_pods = Gauge(
            "mcpcache_injection_missed_pods",
            "Pods labelled mcpcache.io/inject=true that run without the sidecar (created "
            "while the webhook did not answer), as this replica's last scan found them.",
            registry=self.registry,
        )
        self.build_info = Gauge(
            "mcpcache_build_info",
            "Always 1; the version label says which mcpcache this operator runs (and "
            "injects: pods carry it as the mcpcache.io/version annotation).",
            ["version"],
            registry=self.registry,
        )
        self.build_info.labels(VERSION).set(1)
        for method, resource in (
            ("POST", "configmaps"),
            ("PUT", "configmaps"),
            ("PATCH", "mcpservers"),
            ("GET", "mcpservers"),
            ("GET", "leases"),
            ("GET", "pods"),
            ("PUT", "leases"),
        ):
            self.api_requests.labels(method, resource)
        for result in ("ok", "error"):
            self.reconciles.labels(result)
        for result in ("injected", "dry_run", "already_injected", "not_requested", "refused"):
            self.admissions.labels(result)
