"""One policy round: OBS places and pins vCPUs, then SCU places chunks on those units.

The order matters: SCU can only send a VM's reads to units where that VM has vCPUs, so
it runs on the pinning OBS has just decided. Pure, like the policies it combines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from unicache.model import Decision, Observation
from unicache.policy.obs import ObsOptions, ObsPolicy, ObsState
from unicache.policy.scu import ScuOptions, ScuPolicy, ScuState, scu_options_for
from unicache.topology import Topology, Unify


class Policy(Protocol):
    """What the daemon, replay and the simulator drive (idempotent ``start``)."""

    name: str

    def start(self, state: RoundState) -> None:
        """Validate a restored state; raise ``ValueError`` naming the remedy."""

    def decide(self, obs: Observation, state: RoundState) -> tuple[Decision, RoundState]:
        """Decide one round; the same inputs give the same outputs."""


@dataclass(frozen=True, slots=True)
class RoundState:
    """The state of every policy of the round.

    :param obs: OBS's state.
    :param scu: SCU's state.
    """

    obs: ObsState = field(default_factory=ObsState)
    scu: ScuState = field(default_factory=ScuState)


class UnicachePolicy:
    """OBS-X/L/C followed by SCU, over the cache units of one unification level.

    :param topology: the machine.
    :param unify: the unification level.
    :param obs_options: OBS options (defaults from the paper).
    :param scu_options: SCU options (default: derived from the machine).
    """

    name = "unicache"

    def __init__(
        self,
        topology: Topology,
        unify: Unify = Unify.LLC,
        obs_options: ObsOptions | None = None,
        scu_options: ScuOptions | None = None,
    ) -> None:
        self.topology = topology
        self.unify = unify
        self.units = topology.units(unify)
        self.obs = ObsPolicy(self.units, obs_options or ObsOptions(line_size=topology.line_size))
        smt = max(len(c) for c in topology.cores().values())
        self.scu = ScuPolicy(
            self.units, scu_options or scu_options_for(topology, unify), topology.levels, smt
        )

    def start(self, state: RoundState) -> None:
        """Validate a restored state (idempotent)."""
        self.obs.start(state.obs)
        self.scu.start(state.scu)

    def decide(self, obs: Observation, state: RoundState) -> tuple[Decision, RoundState]:
        """One round: OBS first, then SCU on OBS's placement.

        :returns: the combined decision (OBS actions first) and the new state.
        """
        obs_decision, obs_state = self.obs.decide(obs, state.obs)
        scu_decision, scu_state = self.scu.decide(obs, state.scu, obs_state.unit_of)
        decision = Decision(
            self.name,
            obs_decision.actions + scu_decision.actions,
            scu_decision.chunk_decisions,
            obs_decision.refusals + scu_decision.refusals,
        )
        return decision, RoundState(obs_state, scu_state)


_check: Policy = UnicachePolicy.__new__(UnicachePolicy)
