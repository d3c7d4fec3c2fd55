"""The Host port: what every host (replayed, simulated, live) offers the policy loop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from unicache.model import Action, Observation


@dataclass(frozen=True, slots=True)
class ActResult:
    """What a host did with a round's actions (failures are retried next round).

    :param applied: actions carried out (in a dry run: that would have been).
    :param failed: ``(action, why)`` for each action that could not be carried out.
    :param would_write: in a dry run, one entry per action of ``applied``, in order: the
        writes its setter would have made, one line each (empty: none, or not a dry run).
    """

    applied: tuple[Action, ...]
    failed: tuple[tuple[Action, str], ...] = ()
    would_write: tuple[tuple[str, ...], ...] = ()

    def applied_with_writes(self) -> list[tuple[Action, tuple[str, ...]]]:
        """Each applied action with what it would have written (``()`` when not known)."""
        writes = self.would_write
        return [(a, writes[i] if i < len(writes) else ()) for i, a in enumerate(self.applied)]


class Host(Protocol):
    """A host: observe one interval, then act on the decided actions."""

    name: str

    def observe(self) -> Observation | None:
        """Observe the next interval; ``None`` when there is nothing more to observe."""

    def act(self, actions: Sequence[Action]) -> ActResult:
        """Carry out actions; never raises for one failed action."""
