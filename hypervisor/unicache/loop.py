"""The policy loop: observe -> decide -> act, one loop for every host.

:func:`run_rounds` is the loop. The daemon drives it (``daemon.py``) with a host whose
``observe`` lists the VMs and serves their channels, and with a ``decide`` that runs the
round in a worker thread against the stop event and a deadline (``roundworker``); it logs
each round as the loop yields it. ``unicache replay`` and the simulator's live path
(``unicache_sim.experiments.mfc.baselines.UnicacheLive``, whose host observes when a
sampled interval ends) drive the same loop through :func:`run_rounds_sync`, for hosts that
observe synchronously. The loop owns the order of a round, so no host can act before it observed
or decide on a stale state.
"""

from __future__ import annotations

import typing
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from unicache.host.ports import ActResult, Host, RoundHost
from unicache.model import Action, Decision, Observation
from unicache.policy.round import Policy, RoundState


@dataclass(frozen=True, slots=True)
class RoundResult:
    """One round of the loop.

    :param observation: what the round decided on.
    :param decision: what the policy decided.
    :param result: what the host did with it.
    :param state: the policy state after the round.
    """

    observation: Observation
    decision: Decision
    result: ActResult
    state: RoundState

    @property
    def tick(self) -> int:
        """The observation's tick."""
        return self.observation.tick



T = TypeVar("T")

#: how a round is decided; ``None``: stopped while deciding (the loop ends)
Decide = Callable[[Observation, RoundState], Awaitable[tuple[Decision, RoundState] | None]]


async def run_rounds(
    host: RoundHost,
    policy: Policy,
    state: RoundState,
    max_rounds: int | None = None,
    decide: Decide | None = None,
) -> AsyncGenerator[RoundResult, None]:
    """Run rounds until the host has nothing more to observe (or ``max_rounds``).

    :param host: where observations come from and actions go.
    :param policy: the policy.
    :param state: the starting state (validated with ``policy.start``).
    :param max_rounds: stop after this many rounds (``None``: when the host ends).
    :param decide: decides a round (default: ``policy.decide`` in place).
    :returns: the rounds, lazily, so callers log each as it comes.
    """
    policy.start(state)
    rounds = 0
    while max_rounds is None or rounds < max_rounds:
        obs = await host.observe()
        if obs is None:
            return
        decided = await decide(obs, state) if decide else policy.decide(obs, state)
        if decided is None:
            return
        decision, state = decided
        result = host.act(decision.actions)
        rounds += 1
        yield RoundResult(obs, decision, result, state)


class _Synchronous:
    """A host that observes synchronously, seen as a :class:`RoundHost`."""

    def __init__(self, host: Host) -> None:
        self.host = host

    async def observe(self) -> Observation | None:
        return self.host.observe()

    def act(self, actions: Sequence[Action]) -> ActResult:
        return self.host.act(actions)


def run_rounds_sync(
    host: Host, policy: Policy, state: RoundState, max_rounds: int | None = None
) -> Iterator[RoundResult]:
    """:func:`run_rounds` for a host that observes synchronously (replay, the simulator).

    Each ``next()`` runs one round of the same loop to its yield. Nothing in such a round
    waits (the host observes at once, the policy decides in place), so the loop's steps are
    driven directly, without an event loop: the simulator may run inside one.
    """
    rounds = run_rounds(_Synchronous(host), policy, state, max_rounds)
    try:
        while True:
            try:
                yield _at_once(anext(rounds))
            except StopAsyncIteration:
                return
    finally:
        _at_once(rounds.aclose())


def _at_once(step: Awaitable[T]) -> T:
    """The result of an awaitable that never waits.

    :raises RuntimeError: if it waits (a host that is not synchronous).
    """
    waiting = step.__await__()
    try:
        waiting.send(None)
    except StopIteration as done:
        return typing.cast(T, done.value)
    waiting.close()
    raise RuntimeError("a synchronous host's round waited for something")
