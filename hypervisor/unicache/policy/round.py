"""One policy round: OBS pins vCPUs, SRM colors and NCC replicates, SCU publishes tables.

The order matters: SCU can only send a VM's reads to units where that VM has vCPUs, so
it runs on the pinning OBS has just decided; the colors (SRM-buffer) and replicas (NCC)
of chunks ride on SCU's placement tables, so they are decided before SCU builds them.
Pure, like the policies it combines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from unicache.model import Decision, Observation, VcpuId
from unicache.policy.guestboot import GuestState, forget_guests, stamp_tables
from unicache.policy.ncc.cache import NccParams
from unicache.policy.ncc.gain import replica_cost_for
from unicache.policy.ncc.replicas import ReplicaState, replicas_round
from unicache.policy.obs.options import obs_options_for
from unicache.policy.obs.policy import ObsOptions, ObsPolicy, ObsState
from unicache.policy.scu.options import ScuOptions, scu_options_for
from unicache.policy.scu.policy import ScuPolicy, ScuState
from unicache.policy.scu.table import VmExtras
from unicache.policy.srm.buffer import page_colors
from unicache.policy.srm.colors import ColorOptions, ColorState, colors_round
from unicache.topology import Topology, Unify


class Policy(Protocol):
    """What the daemon, replay and the simulator drive (idempotent ``start``)."""

    name: str

    def start(self, state: RoundState) -> None:
        """Validate a restored state; raise ``StateError`` naming the remedy."""

    def decide(self, obs: Observation, state: RoundState) -> tuple[Decision, RoundState]:
        """Decide one round; the same inputs give the same outputs."""


@dataclass(frozen=True, slots=True)
class RoundState:
    """The state of every policy of the round.

    :param obs: OBS's state.
    :param scu: SCU's state.
    :param colors: SRM-buffer's state (VMs with colored guest nodes).
    :param replicas: NCC's state (VMs with several guest nodes).
    :param id_spaces: per VM, the file-id space of the guest the states were learned from
        (:mod:`unicache.policy.guestboot`).
    """

    obs: ObsState = field(default_factory=ObsState)
    scu: ScuState = field(default_factory=ScuState)
    colors: ColorState = field(default_factory=ColorState)
    replicas: ReplicaState = field(default_factory=ReplicaState)
    id_spaces: Mapping[str, str] = field(default_factory=dict)


class UnicachePolicy:
    """OBS-X/L/C, SRM-buffer and NCC, then SCU, over the cache units of one unification level.

    :param topology: the machine.
    :param unify: the unification level.
    :param obs_options: OBS options (defaults from the paper).
    :param scu_options: SCU options (default: derived from the machine).
    :param ncc_params: NCC parameters (defaults from the paper).
    :param color_step_aside: SRM colors a VM's streams only where its co-runners' LLC
        counters predict a gain (``False``: always, the daemon's ``--always-place``).
    :param replica_step_aside: NCC makes replicas only on nodes where they are predicted to
        pay (``False``: wherever §3.2 says, the daemon's ``--always-place``).
    """

    name = "unicache"

    def __init__(
        self,
        topology: Topology,
        unify: Unify = Unify.LLC,
        obs_options: ObsOptions | None = None,
        scu_options: ScuOptions | None = None,
        ncc_params: NccParams | None = None,
        color_step_aside: bool = True,
        replica_step_aside: bool = True,
    ) -> None:
        self.topology = topology
        self.unify = unify
        self.units = topology.units(unify)
        self.obs = ObsPolicy(self.units, obs_options or obs_options_for(topology))
        smt = max(len(c) for c in topology.cores().values())
        self.scu = ScuPolicy(
            self.units, scu_options or scu_options_for(topology, unify), topology.levels, smt
        )
        self.color_options = ColorOptions(
            chunk_size=self.scu.options.chunk_size,
            page_size=topology.page_size,
            host_colors=page_colors(topology),
            line_size=topology.line_size,
            step_aside=color_step_aside,
        )
        self._group_of_unit = {u.id: u.llc_group for u in self.units}
        self.ncc_params = ncc_params or NccParams()
        # what a replica costs and saves here: NCC steps aside where replicas do not pay
        self.replica_cost = (
            replica_cost_for(topology, self.scu.options.chunk_size) if replica_step_aside else None
        )

    def start(self, state: RoundState) -> None:
        """Validate a restored state (idempotent)."""
        self.obs.start(state.obs)
        self.scu.start(state.scu)

    def decide(self, obs: Observation, state: RoundState) -> tuple[Decision, RoundState]:
        """One round: OBS, SRM-buffer and NCC, then SCU's tables carrying all of them.

        :returns: the combined decision (OBS, color, replica, then table actions) and the
            new state.
        """
        # a VM whose guest booted again starts afresh: its old guest's file ids name nothing
        guests, rebooted = forget_guests(
            GuestState(state.scu, state.colors, state.replicas, state.id_spaces),
            obs.reports,
            frozenset(vm.name for vm in obs.vms),
        )
        # SCU places only VMs whose guests report reads it predicts a gain for; the others
        # (left alone, or without an agent) need no vCPU pinned in every unit
        unplaced = frozenset(vm.name for vm in obs.vms) - self.scu.placed(guests.scu)
        obs_decision, obs_state = self.obs.decide(obs, state.obs, guests.scu.aside, unplaced)
        colors = colors_round(
            obs.vms,
            obs.reports,
            guests.colors,
            self.color_options,
            obs.samples,
            self._co_runners(obs_state.unit_of),
        )
        replicas = replicas_round(
            obs.vms,
            obs.reports,
            guests.replicas,
            self.ncc_params,
            chunk_size=self.scu.options.chunk_size,
            cost=self.replica_cost,
        )
        # per VM, SRM's colors and NCC's replicas as they hand them over (not merged a
        # chunk at a time: a fleet's replicas run to hundreds of thousands of chunks)
        extras = {
            vm: VmExtras(colors.color_nodes.get(vm), replicas.replica_nodes.get(vm))
            for vm in colors.color_nodes.keys() | replicas.replica_nodes.keys()
            if colors.color_nodes.get(vm) or replicas.replica_nodes.get(vm)
        }
        scu_decision, scu_state = self.scu.decide(obs, guests.scu, obs_state.unit_of, extras)
        tables = stamp_tables(scu_decision.actions, guests.id_spaces)
        decision = Decision(
            self.name,
            obs_decision.actions + colors.actions + replicas.actions + tables,
            scu_decision.chunk_decisions,
            rebooted
            + obs_decision.refusals
            + colors.refusals
            + replicas.refusals
            + scu_decision.refusals,
        )
        return decision, RoundState(
            obs_state, scu_state, colors.state, replicas.state, guests.id_spaces
        )

    def _co_runners(self, unit_of: Mapping[VcpuId, int]) -> dict[str, frozenset[VcpuId]]:
        """Per VM, the pinned vCPUs of every VM in the LLC groups its pinned vCPUs are in
        (whose lines a stream of the VM evicts)."""
        by_group: dict[int, set[VcpuId]] = {}
        groups_of: dict[str, set[int]] = {}
        for vcpu, unit in unit_of.items():
            group = self._group_of_unit.get(unit, -1)
            by_group.setdefault(group, set()).add(vcpu)
            groups_of.setdefault(vcpu.vm, set()).add(group)
        # one set per combination of groups, shared by the VMs in the same groups (a
        # host's VMs mostly span the same few): a union per VM of every co-runner would
        # cost VMs x vCPUs
        union: dict[frozenset[int], frozenset[VcpuId]] = {}
        out: dict[str, frozenset[VcpuId]] = {}
        for vm, groups in groups_of.items():
            key = frozenset(groups)
            if key not in union:
                union[key] = frozenset().union(*(by_group[g] for g in key))
            out[vm] = union[key]
        return out


_check: Policy = UnicachePolicy.__new__(UnicachePolicy)
