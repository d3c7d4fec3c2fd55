"""The Host port: what every host (replayed, simulated, live) offers the policy loop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from unicache.model import Action, Observation


@dataclass(frozen=True, slots=True)
class ActResult:
    """What a host did with a round's actions (failures are retried next round).

    :param applied: actions carried out.
    :param failed: ``(action, why)`` for each action that could not be carried out.
    """

    applied: tuple[Action, ...]
    failed: tuple[tuple[Action, str], ...] = ()


class Host(Protocol):
    """A host: observe one interval, then act on the decided actions."""

    name: str

    def observe(self) -> Observation | None:
        """Observe the next interval; ``None`` when there is nothing more to observe."""

    def act(self, actions: Sequence[Action]) -> ActResult:
        """Carry out actions; never raises for one failed action."""
