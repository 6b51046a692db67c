"""`mcpcache check`: list the pods that asked for the sidecar and run without it.

Like Linkerd's data-plane check or `istioctl analyze` (IST0103): the webhook fails open, so
a pod created while no operator replica answered runs uncached and says nothing. This
asks the API server with the caller's own kubeconfig (or, in a pod, its service
account), lists the pods labelled `mcpcache.io/inject=true` that have no sidecar, and
exits 1 when there are any, so that a script or CI step can stop on it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from .kube.api import KubeAPI, load_configuration
from .kube.pods import list_missed
from .metrics import OperatorMetrics
from .missed import LABEL_SELECTOR, MissedPod


async def _missed(namespaces: tuple[str, ...], seconds: float) -> list[MissedPod]:
    api = KubeAPI(load_configuration(), OperatorMetrics(), connections=2, timeout=seconds)
    try:
        missed: list[MissedPod] = await list_missed(api, namespaces)
    finally:
        await api.close()
    return missed


def report(missed: Sequence[MissedPod]) -> str:
    if not missed:
        return f"ok: every running pod labelled {LABEL_SELECTOR} has the mcpcache sidecar\n"
    rows = [("NAMESPACE", "POD", "OWNER")] + [(p.namespace, p.name, p.owner or "-") for p in missed]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c}".rstrip() for a, b, c in rows]
    return (
        f"{len(missed)} pod(s) labelled {LABEL_SELECTOR} run without the mcpcache sidecar "
        "(created while the injection webhook did not answer):\n"
        + "\n".join(lines)
        + "\nOnce the operator is ready (kubectl get pods -n <release namespace>), restart "
        "each owner (kubectl rollout restart deployment NAME -n NAMESPACE) or delete the "
        "pod; `kubectl describe pod` shows the InjectionMissed event with the command.\n"
    )


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="mcpcache check", description=__doc__)
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="look in this namespace only (repeatable); default: every namespace",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds for each request to the API server",
    )
    args = parser.parse_args(list(argv))
    try:
        missed = asyncio.run(_missed(tuple(args.namespace), args.timeout))
    except Exception as exc:
        print(f"mcpcache check: cannot list pods: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(report(missed))
    return 1 if missed else 0


__all__ = ["main", "report"]
