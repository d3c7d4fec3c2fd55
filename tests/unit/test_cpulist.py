"""The one list syntax for CPUs, colors and ways."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from unicache.cpulist import check_within, format_list, parse_list
from unicache.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("", set()),
        ("3", {3}),
        ("0,2-6,15-16", {0, 2, 3, 4, 5, 6, 15, 16}),
        (" 1 , 4-5 ", {1, 4, 5}),
    ],
    ids=["empty", "single", "xen-example", "spaces"],
)
def test_parse(text: str, values: set[int]) -> None:
    assert parse_list(text) == values


@pytest.mark.parametrize("text", ["a", "1-", "5-2", "1,,2", "-3", "99999999"])
def test_parse_rejects_bad_syntax_with_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_list(text)


@given(st.sets(st.integers(0, 500)))
def test_format_and_parse_are_inverse(values: set[int]) -> None:
    assert parse_list(format_list(values)) == values


def test_range_check_is_separate_from_parsing() -> None:
    values = parse_list("0-8")
    with pytest.raises(ConfigError, match="cpu 8 out of range"):
        check_within(values, 8, "cpu")
