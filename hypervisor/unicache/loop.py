"""The policy loop: observe -> decide -> act -> record, for any host.

``unicache replay`` drives policies through :func:`run_rounds`. The daemon runs the same
steps in an asynchronous loop of its own (``daemon.py``: the round in a worker thread,
channels and signals served meanwhile), and the simulator's live loop in
``unicache_sim.simhost``; both call the same ``UnicachePolicy.decide`` on the same
``Observation``. One loop for all three is issue #14's, not done yet.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from unicache.host.base import ActResult, Host
from unicache.model import Decision
from unicache.policy.round import Policy, RoundState


@dataclass(frozen=True, slots=True)
class RoundResult:
    """One round of the loop.

    :param tick: the observation's tick.
    :param decision: what the policy decided.
    :param result: what the host did with it.
    :param state: the policy state after the round.
    """

    tick: int
    decision: Decision
    result: ActResult
    state: RoundState


def run_rounds(
    host: Host, policy: Policy, state: RoundState, max_rounds: int | None = None
) -> Iterator[RoundResult]:
    """Run rounds until the host has nothing more to observe (or ``max_rounds``).

    :param host: where observations come from and actions go.
    :param policy: the policy.
    :param state: the starting state (validated with ``policy.start``).
    :returns: an iterator over the rounds, lazily, so callers can log as they go.
    """
    policy.start(state)
    rounds = 0
    while max_rounds is None or rounds < max_rounds:
        obs = host.observe()
        if obs is None:
            return
        decision, state = policy.decide(obs, state)
        result = host.act(decision.actions)
        rounds += 1
        yield RoundResult(obs.tick, decision, result, state)
