"""A value over seeds: its median and range (what every multi-seed figure reports)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Spread:
    """A value over seeds: its median, min and max, and how many seeds."""

    median: float
    low: float
    high: float
    seeds: int

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        """The spread of ``values`` (at least one)."""
        if not values:
            raise ValueError("a spread of no values")
        return Spread(statistics.median(values), min(values), max(values), len(values))

    def text(self, fmt: str = "{:.2f}", unit: str = "") -> str:
        """``median (low-high, N seeds)``; one seed or no spread shows the value alone."""
        mid = fmt.format(self.median) + unit
        if self.seeds <= 1 or self.low == self.high:
            return f"{mid} ({self.seeds} seed{'s' if self.seeds != 1 else ''})"
        return f"{mid} ({fmt.format(self.low)}-{fmt.format(self.high)}{unit}, {self.seeds} seeds)"
