"""Observation-based vCPU placement: OBS-X, OBS-L and OBS-C over cache units.

Follows the observations paper (os-observations-multicore.md), with vCPUs in the place
of tasks and cache units in the place of LLC groups:

* cache weight = LLC misses per cycle of the last interval ("Policy: Reducing cache
  interference": "cache misses per cycle are the best indication"; "basing the weight on
  the metrics from the immediately past quantum");
* OBS-X ("Policy: Migrating across caches"): a new vCPU goes to the unit with the
  smallest cache load; overweight vCPUs (weight above their unit's average) are not
  moved, except by the periodic rebalance that moves one overweight vCPU from the
  heaviest unit to the lightest;
* OBS-X steps aside (:mod:`unicache.policy.obs.gain`): a VM SCU leaves alone, whose pins
  would keep no two cache-heavy vCPUs apart, keeps its own CPUs; and one whose pins would
  make it wait for its unit's CPUs longer than its cache could save floats over its NUMA
  node (:mod:`unicache.policy.obs.queue`);
* OBS-X keeps a vCPU on its home nodes, those its VM's memory is bound to
  (:mod:`unicache.policy.obs.home`): a move to another node would make every miss remote;
* OBS-X's thread clustering (:mod:`unicache.policy.obs.cluster`, after the paper's
  reference 1): the busy vCPUs of a VM that shares its data and that SCU leaves alone
  stay in one unit; rebalances leave them there;
* OBS-L ("Policy: Reducing cache interference"): inside a unit with more vCPUs than
  CPUs, heavy vCPUs share a CPU so that what co-runs on the other CPUs is light
  (:mod:`unicache.policy.obs.local`);
* OBS-C ("Policy: Addressing fairness"): CPU time credited from the heaviest to lighter
  co-runners, ``t_credit = w_light / (w_largest - w_smallest) * t_overlap * c_credit``,
  expressed as cgroup ``cpu.weight`` actions (:mod:`unicache.policy.obs.credit`);
* a weight from guest-reported bytes is that guest's word: it moves, pairs and credits
  only its own VM's vCPUs (host-measured weights count for every VM).

Pure: no I/O, no clock, no threads; the same inputs give the same actions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from unicache.errors import StateError
from unicache.model import (
    Action,
    Decision,
    Observation,
    PinVcpu,
    Refusal,
    SetCpuWeight,
    VcpuId,
)
from unicache.policy.obs.aside import AsideInputs, StepAside, step_aside
from unicache.policy.obs.cluster import (
    SHARED_FRACTION_ENTER,
    SHARED_FRACTION_STAY,
    cluster_moves,
    shared_fractions,
)
from unicache.policy.obs.credit import BASE_CPU_WEIGHT, credit_weights_by_vm
from unicache.policy.obs.credit import C_CREDIT as C_CREDIT
from unicache.policy.obs.home import AwayCost, at_home, home_nodes, kept_home
from unicache.policy.obs.local import local_sets
from unicache.policy.obs.options import ObsOptions as ObsOptions
from unicache.policy.obs.options import ObsState as ObsState
from unicache.policy.obs.room import UnitRoom
from unicache.policy.obs.views import LoadViews, UnitTally
from unicache.policy.obs.weight import MAX_GUEST_BYTES_PER_NS as MAX_GUEST_BYTES_PER_NS
from unicache.policy.obs.weight import CacheWeight as CacheWeight
from unicache.policy.obs.weight import cache_weight, host_measured
from unicache.topology import CacheUnit


@dataclass(slots=True)
class _Round:
    """One round's working state, which its steps share: the live vCPUs and their
    weights, and the units OBS-X puts them in, with why (the steps update both)."""

    live: list[VcpuId]
    alive: frozenset[VcpuId]
    weights: dict[VcpuId, float]
    busy: dict[VcpuId, float]
    trusted: frozenset[VcpuId]
    unit_of: dict[VcpuId, int]
    reasons: dict[VcpuId, str]
    vcpus_of: dict[str, list[VcpuId]]
    spread_again: frozenset[str]
    homes: dict[VcpuId, frozenset[int]]


@dataclass(slots=True)
class _NewVcpus:
    """OBS-X 1's tallies while it places the new vCPUs one by one."""

    running_in: dict[VcpuId, int]
    fair_count: int
    tally: UnitTally
    views: LoadViews | None = None
    fair_loads: dict[str, float] = field(default_factory=dict)
    kept_refusals: list[Refusal] = field(default_factory=list)


class ObsPolicy:
    """OBS-X, OBS-L and OBS-C as one policy over cache units.

    Invariants: every managed vCPU is in exactly one unit; a vCPU already placed moves
    only in a rebalance, at most one per ``rebalance_period`` rounds, and only when the
    move lowers the heaviest unit's load below its current value (no oscillation under
    a steady workload).

    :param units: the cache units vCPUs are placed in.
    :param options: the options.
    """

    name = "obs"

    def __init__(self, units: tuple[CacheUnit, ...], options: ObsOptions | None = None) -> None:
        self.units = units
        self.options = options or ObsOptions()
        self._unit_by_id = {u.id: u for u in units}
        self._unit_of_cpu = {cpu: u for u in units for cpu in u.cpus}
        self.room = UnitRoom(units, self.options.imbalance_margin)

    def start(self, state: ObsState) -> None:
        """Check that a restored state fits the units (idempotent).

        :raises StateError: naming a vCPU placed in a unit that does not exist.
        """
        for vcpu, unit in state.unit_of.items():
            if unit not in self._unit_by_id:
                raise StateError.restored(f"{vcpu} is in unit {unit}, which this topology lacks")

    def decide(
        self,
        obs: Observation,
        state: ObsState,
        left_alone: frozenset[str] = frozenset(),
        unplaced: frozenset[str] | None = None,
    ) -> tuple[Decision, ObsState]:
        """One round, in the paper's steps: weigh; OBS-X places new vCPUs (1), clusters
        (1b) and rebalances (2); the step-asides; OBS-L sets CPUs inside each unit; OBS-C
        credits CPU time.

        :param obs: this round's observation.
        :param state: what the previous round left.
        :param left_alone: VMs SCU leaves alone (their vCPUs may be clustered).
        :param unplaced: VMs SCU does not place: left alone, or without reads it could
            place (no guest agent); their vCPUs may float (default: ``left_alone``).
        :returns: the decision and the new state.
        """
        work = self._weigh(obs, state, left_alone)
        kept_refusals = self._obs_x_new(obs, state, work)
        clustered = self._obs_x_cluster(obs, state, work, left_alone)
        last_rebalance = self._obs_x_rebalance(obs, state, work, clustered)
        current = {v.id: v.cpus for vm in obs.vms for v in vm.vcpus}
        aside = self._step_aside(
            state, work, current, left_alone if unplaced is None else unplaced, clustered
        )
        floating = aside.floating
        in_unit: dict[int, list[VcpuId]] = {u.id: [] for u in self.units}
        for v in sorted(work.unit_of):  # each unit's members, sorted, from one pass
            in_unit.setdefault(work.unit_of[v], []).append(v)
        actions: list[Action] = [*aside.actions, *self._obs_l(work, in_unit, floating, current)]
        cpu_weights = dict(state.cpu_weights)
        actions += self._obs_c(work, in_unit, cpu_weights)
        cpu_weights = {v: w for v, w in cpu_weights.items() if v in work.alive}
        new_state = ObsState(
            work.unit_of,
            work.weights,
            cpu_weights,
            last_rebalance,
            frozenset(clustered),
            aside.quiet,
            frozenset(work.unit_of) - floating,
            aside.crowded,
            aside.crowded_rounds,
            work.homes,
        )
        refusals = (*aside.refusals, *kept_refusals)
        return Decision(self.name, tuple(actions), (), refusals), new_state

    # --- the round's steps -------------------------------------------------------------------

    def _weigh(self, obs: Observation, state: ObsState, left_alone: frozenset[str]) -> _Round:
        """Each live vCPU's cache weight ("Policy: Reducing cache interference") and busy
        share of the last interval, and the units vCPUs were in."""
        opts = self.options
        live = sorted(v.id for vm in obs.vms for v in vm.vcpus)
        alive = frozenset(live)  # membership in one step: a fleet has thousands of vCPUs
        weights = {v: w for v, w in state.weights.items() if v in alive}
        busy: dict[VcpuId, float] = {}
        for sample in obs.samples:
            if sample.vcpu in alive:
                weights[sample.vcpu] = cache_weight(sample, opts.line_size).value
                busy[sample.vcpu] = sample.busy
        # the host measured these weights; the others are their guests' word, which moves
        # only their own VM's vCPUs (a forged count never steers another VM's pinning)
        trusted = frozenset(s.vcpu for s in obs.samples if s.vcpu in alive and host_measured(s))
        unit_of = {v: u for v, u in state.unit_of.items() if v in alive}
        vcpus_of = {vm.name: [v.id for v in vm.vcpus] for vm in obs.vms}
        # a clustered VM that SCU unifies again needs a vCPU in every unit: OBS-X places
        # its vCPUs afresh, as new ones (below)
        spread_again = {vm for vm in state.clustered if vm in vcpus_of and vm not in left_alone}
        for vm in spread_again:
            for vcpu in vcpus_of[vm]:
                unit_of.pop(vcpu, None)
        homes = home_nodes(obs, self.units, state.homes, state.unit_of)
        return _Round(
            live,
            alive,
            weights,
            busy,
            trusted,
            unit_of,
            {},
            vcpus_of,
            frozenset(spread_again),
            homes,
        )

    def _obs_x_new(self, obs: Observation, state: ObsState, work: _Round) -> list[Refusal]:
        """OBS-X 1: a new vCPU goes to the unit with the smallest cache load; one that weighs
        nothing adds no load, so it goes where the fewest vCPUs are (else every idle vCPU
        would follow the first into the same unit, and that unit's CPUs would have to
        carry them all once they wake up). A vCPU stays in the unit it runs in while that
        unit keeps within its fair share: moving it would cost a refill for no balance.

        :returns: the refusals of moves off a vCPU's home nodes.
        """
        new = _NewVcpus(
            running_in={v.id: v.cpu for vm in obs.vms for v in vm.vcpus if v.cpu is not None},
            fair_count=-(-len(work.live) // max(len(self.units), 1)),
            tally=UnitTally(self.units),
        )
        for vcpu in work.live:
            if vcpu not in work.unit_of:
                self._place_new(vcpu, work, new)
        return new.kept_refusals

    def _place_new(self, vcpu: VcpuId, work: _Round, new: _NewVcpus) -> None:
        """OBS-X 1 for one new vCPU: where it runs, if that unit keeps its fair share, else
        the lightest unit with room on its home nodes."""
        opts, unit_of, weights, busy = self.options, work.unit_of, work.weights, work.busy
        # the loads, counts and CPU time per unit, kept as each new vCPU is placed (summed
        # again for each, they cost vCPUs x vCPUs: seconds for a fleet's first round)
        if new.views is None:
            new.views = LoadViews([u.id for u in self.units], unit_of, weights, work.trusted)
            new.tally = UnitTally(self.units, unit_of, busy)
        views, tally = new.views, new.tally
        loads = views.loads(vcpu.vm)
        if vcpu.vm not in new.fair_loads:
            seen = (weights.get(v, 0.0) for v in work.live if _counts_for(v, vcpu.vm, work.trusted))
            new.fair_loads[vcpu.vm] = sum(seen) / max(len(self.units), 1)
        fair_load = new.fair_loads[vcpu.vm]
        idle = weights.get(vcpu, 0.0) <= 0.0
        here = self._unit_of_cpu.get(new.running_in.get(vcpu, -1))
        if (
            here is not None
            and vcpu.vm not in work.spread_again
            and self.room.may_stay(
                here,
                unit_of,
                loads,
                weights.get(vcpu, 0.0),
                fair_load,
                new.fair_count,
                busy,
                busy.get(vcpu, 0.0),
                tally,
            )
        ):
            unit_of[vcpu] = here.id
            views.add(vcpu, here.id)
            tally.add(vcpu, here.id, busy)
            work.reasons[vcpu] = (
                f"OBS-X: new vCPU stays in unit {here.id}, where it runs (cache load "
                f"{loads[here.id]:.3g}, fair share {fair_load:.3g})"
            )
            return

        # sort keys: cache load, vCPUs already there, unit id (idle: count first)
        def order(u: CacheUnit) -> tuple[float, float, int]:
            if idle:
                return (tally.count[u.id], loads[u.id], u.id)
            return (loads[u.id], tally.count[u.id], u.id)

        pool = self.room.with_room(unit_of, busy, busy.get(vcpu, 0.0), tally) or self.units
        home = work.homes.get(vcpu)
        # on its home nodes (policy.obs.home); the least loaded of them if none has room
        target = min(
            [u for u in pool if at_home(u, home)] or [u for u in self.units if at_home(u, home)],
            key=order,
        )
        # without a home the target is the lightest unit: nothing to log
        lightest = target if home is None else min(pool, key=order)
        if home is not None and not at_home(lightest, home):
            cost = AwayCost(
                opts.miss_cost.stall_share(weights.get(vcpu, 0.0), vcpu in work.trusted),
                opts.remote_gap,
                opts.remote_gap_source,
            )
            new.kept_refusals.append(kept_home(vcpu, home, lightest, target, cost))
        unit_of[vcpu] = target.id
        views.add(vcpu, target.id)
        tally.add(vcpu, target.id, busy)
        if vcpu.vm in work.spread_again:
            kind = f"SCU unifies {vcpu.vm} again, its vCPUs spread: placed in unit"
        elif idle:
            kind = "new vCPU, idle, placed in the unit with the fewest vCPUs"
        else:
            kind = "new vCPU placed in the lightest unit"
        work.reasons[vcpu] = f"OBS-X: {kind} {target.id} (cache load {loads[target.id]:.3g})"

    def _obs_x_cluster(
        self, obs: Observation, state: ObsState, work: _Round, left_alone: frozenset[str]
    ) -> set[str]:
        """OBS-X 1b: the busy vCPUs of a VM that shares its data and that SCU leaves alone
        stay in one unit (thread clustering, policy.obs.cluster); only VMs SCU leaves alone
        can cluster: the others' reads are not scanned.

        :returns: the VMs clustered.
        """
        unit_of = work.unit_of
        shared = shared_fractions(r for r in obs.reports if r.vm in left_alone)
        clustered: set[str] = set()
        vcpus_in = Counter(unit_of.values())  # kept as the moves go: no scan per VM
        for vm, vcpus in sorted(work.vcpus_of.items()):
            was = vm in state.clustered and vm not in work.spread_again
            fraction = shared.get(vm)
            if fraction is None:
                if was:
                    clustered.add(vm)  # no reads this round: it keeps its standing
                continue
            floor = SHARED_FRACTION_STAY if was else SHARED_FRACTION_ENTER
            if vm not in left_alone or fraction < floor:
                continue
            clustered.add(vm)
            for move in cluster_moves(vcpus, unit_of, work.busy, self.units, fraction, vcpus_in):
                vcpus_in[unit_of[move.vcpu]] -= 1
                vcpus_in[move.dst] += 1
                unit_of[move.vcpu] = move.dst
                work.reasons[move.vcpu] = move.reason
        return clustered

    def _obs_x_rebalance(
        self, obs: Observation, state: ObsState, work: _Round, clustered: set[str]
    ) -> int:
        """OBS-X 2: every ``rebalance_period`` rounds, one overweight vCPU moves from the
        heaviest unit to the lightest (clustered VMs' vCPUs stay).

        :returns: the tick of the last rebalance.
        """
        if obs.tick - state.last_rebalance < self.options.rebalance_period or len(self.units) <= 1:
            return state.last_rebalance
        kept = frozenset(v for vm in clustered for v in work.vcpus_of[vm])
        moved = self.room.rebalance(
            work.unit_of, work.weights, work.trusted, kept, work.busy, work.homes
        )
        if moved is not None:
            vcpu, _src, dst, why = moved
            work.unit_of[vcpu] = dst
            work.reasons[vcpu] = why
        return obs.tick

    def _step_aside(
        self,
        state: ObsState,
        work: _Round,
        current: Mapping[VcpuId, frozenset[int]],
        unplaced: frozenset[str],
        clustered: set[str],
    ) -> StepAside:
        """The step-asides (policy.obs.aside): a VM whose pins would keep no two
        cache-heavy vCPUs apart, or cost it more wait than its cache could save, floats."""
        opts = self.options
        if not opts.step_aside:
            return StepAside(frozenset(), (), (), {}, frozenset(), {})
        return step_aside(
            self.units,
            AsideInputs(
                work.vcpus_of,
                work.unit_of,
                current,
                work.weights,
                work.busy,
                work.trusted,
                unplaced,
                frozenset(clustered),
            ),
            state.quiet,
            state.crowded,
            state.crowded_rounds,
            state.pinned,
            opts.heavy_weight_floor,
            opts.miss_cost,
            opts.wait_margin,
        )

    def _obs_l(
        self,
        work: _Round,
        in_unit: Mapping[int, list[VcpuId]],
        floating: frozenset[VcpuId],
        current: Mapping[VcpuId, frozenset[int]],
    ) -> list[Action]:
        """OBS-L ("Policy: Reducing cache interference"): CPU sets inside each unit, for the
        vCPUs that do not float."""
        opts = self.options
        actions: list[Action] = []
        for unit in self.units:
            members = [v for v in in_unit[unit.id] if v not in floating]
            for vcpu, cpus, why in local_sets(
                unit,
                members,
                work.weights,
                work.trusted,
                opts.heavy_weight_floor,
                opts.heavy_margin,
                work.busy,
            ):
                if current.get(vcpu) != cpus:
                    reason = work.reasons.get(vcpu) or why
                    actions.append(PinVcpu(vcpu, cpus, unit.id, reason))
        return actions

    def _obs_c(
        self, work: _Round, in_unit: Mapping[int, list[VcpuId]], cpu_weights: dict[VcpuId, int]
    ) -> list[Action]:
        """OBS-C ("Policy: Addressing fairness"): credit CPU time from heavy to light
        co-runners, each VM's vCPUs judged by host-measured weights and their own guest's
        (a forged count credits no other VM); ``cpu_weights`` is brought up to date."""
        opts = self.options
        actions: list[Action] = []
        for unit in self.units:
            for vcpu, value, why in credit_weights_by_vm(
                in_unit[unit.id],
                work.weights,
                work.busy,
                work.trusted,
                opts.c_credit,
                opts.heavy_weight_floor,
                opts.heavy_margin,
            ):
                # hysteresis: a change smaller than weight_hysteresis is noise, keep the old
                if abs(cpu_weights.get(vcpu, BASE_CPU_WEIGHT) - value) >= opts.weight_hysteresis:
                    actions.append(SetCpuWeight(vcpu, value, why))
                    cpu_weights[vcpu] = value
        return actions


def _counts_for(vcpu: VcpuId, viewer: str, trusted: frozenset[VcpuId]) -> bool:
    """Whether ``viewer``'s placement may weigh ``vcpu``: its own, or host-measured."""
    return vcpu.vm == viewer or vcpu in trusted
