from __future__ import annotations

import pytest

from mcpcache.sidecar.config.units import (
    format_duration,
    format_quantity,
    parse_duration,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("1.5s", 1.5), ("0", 0)],
)
def test_durations_parse_like_go(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "30", "s", "5 m", "1d", "-5s", "5m3", "m5"])
def test_malformed_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [("64Ki", 65536), ("1Mi", 1 << 20), ("500k", 500_000), ("1048576", 1 << 20), ("1.5Ki", 1536)],
)
def test_quantities_parse_like_kubernetes(text: str, size: int) -> None:
    assert parse_quantity(text) == size


@pytest.mark.parametrize("text", ["", "Ki", "64KB", "-1Mi", "1 Mi", "1e3"])
def test_malformed_quantities_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


def test_formatting_round_trips() -> None:
    for seconds in (30, 90, 3600, 5400, 0.25):
        assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)
    for size in (65536, 1 << 20, 1000):
        assert parse_quantity(format_quantity(size)) == size
