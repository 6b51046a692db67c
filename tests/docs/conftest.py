"""The documentation site, built once for the tests that read it."""

from __future__ import annotations

import pytest

from peers.site import Build, build_site


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Build:
    return build_site(tmp_path_factory.mktemp("docs-site"))
