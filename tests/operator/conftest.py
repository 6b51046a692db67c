"""Peers of the operator's tests against the API server only (the control plane, the CRD
and the installed operator, which other folders use too, are in tests/conftest.py)."""

from __future__ import annotations

import pytest

from peers.controlplane import Authority


@pytest.fixture(scope="session")
def webhook_ca() -> Authority:
    return Authority.create("mcpcache-webhook-ca")
