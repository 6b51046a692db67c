"""The operator's settings from its environment: a bad value is refused at start-up with
one line per problem, named by the variable the chart sets."""

from __future__ import annotations

import pytest

from mcpcache.operator.settings import OperatorSettings


@pytest.mark.parametrize(
    ("environ", "lines"),
    [
        (
            {"MCPCACHE_LEASE_DURATION": "10", "MCPCACHE_LEASE_RENEW_DEADLINE": "10"},
            [
                "MCPCACHE_LEASE_RENEW_DEADLINE: 10 is not allowed: it must be below "
                "MCPCACHE_LEASE_DURATION (10) and above MCPCACHE_LEASE_RETRY_PERIOD (2)"
            ],
        ),
        (
            {"MCPCACHE_LEASE_RENEW_DEADLINE": "1", "MCPCACHE_LEASE_RETRY_PERIOD": "2"},
            [
                "MCPCACHE_LEASE_RENEW_DEADLINE: 1 is not allowed: it must be below "
                "MCPCACHE_LEASE_DURATION (15) and above MCPCACHE_LEASE_RETRY_PERIOD (2)"
            ],
        ),
        (
            {"MCPCACHE_LEASE_DURATION": "soon"},
            ["MCPCACHE_LEASE_DURATION: 'soon' is not allowed: must be a number"],
        ),
        (
            {"MCPCACHE_METRICS_PORT": "x", "MCPCACHE_SIDECAR_CACHE_MAX_ENTRIES": "many"},
            [
                "MCPCACHE_SIDECAR_CACHE_MAX_ENTRIES: 'many' is not allowed: must be a whole number",
                "MCPCACHE_METRICS_PORT: 'x' is not allowed: must be a whole number",
            ],
        ),
    ],
)
def test_a_bad_setting_is_one_line_naming_its_variable(
    environ: dict[str, str], lines: list[str]
) -> None:
    with pytest.raises(ValueError, match=r"^MCPCACHE_") as refused:
        OperatorSettings.from_environment(environ)
    assert str(refused.value).splitlines() == lines


def test_the_charts_lease_timings_are_accepted() -> None:
    environ = {
        "MCPCACHE_LEASE_DURATION": "15",
        "MCPCACHE_LEASE_RENEW_DEADLINE": "10",
        "MCPCACHE_LEASE_RETRY_PERIOD": "2",
    }
    settings = OperatorSettings.from_environment(environ)
    assert (settings.lease_duration, settings.lease_renew_deadline) == (15, 10)
