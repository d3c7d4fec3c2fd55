"""The one list syntax unicache uses for CPUs, colors and ways ("0,2-6,15-16").

Grammar (parsing checks syntax only; ranges are checked against discovered limits by
:func:`check_within`, as Xen's ``parse_color_config``/``check_colors`` split it)::

    list  ::= "" | item ("," item)*
    item  ::= num | num "-" num          (first num <= second num)
    num   ::= [0-9]+

Example: ``"0,2-6,15-16"`` is ``{0, 2, 3, 4, 5, 6, 15, 16}``.
"""

from __future__ import annotations

from collections.abc import Iterable

from unicache.errors import ConfigError

#: refuse absurd ranges before expanding them (a typo must not allocate gigabytes)
MAX_LIST_VALUE = 1 << 20


def parse_list(text: str) -> frozenset[int]:
    """Parse a list such as ``"0,2-6"`` into a set of integers.

    :param text: the list; whitespace around items is ignored.
    :returns: the set of values.
    :raises ConfigError: on a syntax error or a reversed range.
    """
    values: set[int] = set()
    stripped = text.strip()
    if not stripped:
        return frozenset()
    for raw in stripped.split(","):
        item = raw.strip()
        first, sep, last = item.partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            raise ConfigError(f"bad list item {item!r} in {text!r} (expected N or N-M)")
        low = int(first)
        high = int(last) if sep else low
        if low > high:
            raise ConfigError(f"reversed range {item!r} in {text!r}")
        if high > MAX_LIST_VALUE:
            raise ConfigError(f"value {high} in {text!r} exceeds {MAX_LIST_VALUE}")
        values.update(range(low, high + 1))
    return frozenset(values)


def format_list(values: Iterable[int]) -> str:
    """Format a set of integers in the compact list syntax (inverse of :func:`parse_list`).

    :param values: the values.
    :returns: e.g. ``"0,2-6"``; the empty string for no values.
    """
    ordered = sorted(set(values))
    parts: list[str] = []
    start = prev = None
    for value in ordered:
        if start is None:
            start = prev = value
        elif prev is not None and value == prev + 1:
            prev = value
        else:
            parts.append(_span(start, prev))
            start = prev = value
    if start is not None:
        parts.append(_span(start, prev))
    return ",".join(parts)


def _span(start: int, end: int | None) -> str:
    return str(start) if end is None or end == start else f"{start}-{end}"


def check_within(values: frozenset[int], limit: int, what: str) -> None:
    """Check that every value is below ``limit``.

    :param values: parsed values.
    :param limit: exclusive upper bound found at run time.
    :param what: what the values are, for the message (e.g. ``"cpu"``).
    :raises ConfigError: naming the first value out of range.
    """
    for value in sorted(values):
        if value >= limit:
            raise ConfigError(f"{what} {value} out of range (this host has {limit})")
