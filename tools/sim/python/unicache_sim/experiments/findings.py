"""A reproduced quantity over seeds beside the paper's value: what ``unicache-sim obs`` and
``unicache-sim srm --case`` report, and what docs/reproduction.md tabulates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from unicache_sim.spread import Spread


@dataclass(frozen=True, slots=True)
class Finding:
    """One quantity over seeds, beside the paper's.

    :param scenario: the scenario.
    :param figure: the paper's figure or section.
    :param quantity: what is measured.
    :param paper: the paper's value, as it states it.
    :param values: one value per seed.
    """

    scenario: str
    figure: str
    quantity: str
    paper: str
    values: tuple[float, ...]

    @property
    def spread(self) -> Spread:
        """The median over seeds and the range."""
        return Spread.of(self.values)


def merge_seed_findings(parts: Sequence[Sequence[Finding]]) -> tuple[Finding, ...]:
    """The findings of runs of single seeds (the same quantities, in the same order) as
    findings over all their seeds, in the order given."""
    return tuple(
        replace(first, values=tuple(v for part in parts for v in part[i].values))
        for i, first in enumerate(parts[0])
    )
