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
from unicache.policy.obs.local import local_sets, saturated
from unicache.policy.obs.options import ObsOptions as ObsOptions
from unicache.policy.obs.options import ObsState as ObsState
from unicache.policy.obs.rebalance import rebalance_view
from unicache.policy.obs.views import LoadViews, UnitTally
from unicache.policy.obs.weight import MAX_GUEST_BYTES_PER_NS as MAX_GUEST_BYTES_PER_NS
from unicache.policy.obs.weight import CacheWeight as CacheWeight
from unicache.policy.obs.weight import cache_weight, host_measured
from unicache.topology import CacheUnit


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
        """One round: weigh, place new vCPUs, cluster, maybe rebalance, pin, credit.

        :param obs: this round's observation.
        :param state: what the previous round left.
        :param left_alone: VMs SCU leaves alone (their vCPUs may be clustered).
        :param unplaced: VMs SCU does not place: left alone, or without reads it could
            place (no guest agent); their vCPUs may float (default: ``left_alone``).
        :returns: the decision and the new state.
        """
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
        reasons: dict[VcpuId, str] = {}
        vcpus_of = {vm.name: [v.id for v in vm.vcpus] for vm in obs.vms}
        # a clustered VM that SCU unifies again needs a vCPU in every unit: OBS-X places
        # its vCPUs afresh, as new ones (below)
        spread_again = {vm for vm in state.clustered if vm in vcpus_of and vm not in left_alone}
        for vm in spread_again:
            for vcpu in vcpus_of[vm]:
                unit_of.pop(vcpu, None)

        # OBS-X 1: a new vCPU goes to the unit with the smallest cache load; one that weighs
        # nothing adds no load, so it goes where the fewest vCPUs are (else every idle vCPU
        # would follow the first into the same unit, and that unit's CPUs would have to
        # carry them all once they wake up). A vCPU stays in the unit it runs in while that
        # unit keeps within its fair share: moving it would cost a refill for no balance.
        running_in = {v.id: v.cpu for vm in obs.vms for v in vm.vcpus if v.cpu is not None}
        homes = home_nodes(obs, self.units, state.homes, state.unit_of)
        kept_refusals: list[Refusal] = []
        fair_count = -(-len(live) // max(len(self.units), 1))
        fair_loads: dict[str, float] = {}  # per VM: the load it sees, shared over the units
        # the loads, counts and CPU time per unit, kept as each new vCPU is placed (summed
        # again for each, they cost vCPUs x vCPUs: seconds for a fleet's first round)
        views: LoadViews | None = None
        tally = UnitTally(self.units)
        for vcpu in live:
            if vcpu not in unit_of:
                if views is None:
                    views = LoadViews([u.id for u in self.units], unit_of, weights, trusted)
                    tally = UnitTally(self.units, unit_of, busy)
                loads = views.loads(vcpu.vm)
                if vcpu.vm not in fair_loads:
                    seen = (weights.get(v, 0.0) for v in live if _counts_for(v, vcpu.vm, trusted))
                    fair_loads[vcpu.vm] = sum(seen) / max(len(self.units), 1)
                fair_load = fair_loads[vcpu.vm]
                idle = weights.get(vcpu, 0.0) <= 0.0
                here = self._unit_of_cpu.get(running_in.get(vcpu, -1))
                if (
                    here is not None
                    and vcpu.vm not in spread_again
                    and self._may_stay(
                        here,
                        unit_of,
                        loads,
                        weights.get(vcpu, 0.0),
                        fair_load,
                        fair_count,
                        busy,
                        busy.get(vcpu, 0.0),
                        tally,
                    )
                ):
                    unit_of[vcpu] = here.id
                    views.add(vcpu, here.id)
                    tally.add(vcpu, here.id, busy)
                    reasons[vcpu] = (
                        f"OBS-X: new vCPU stays in unit {here.id}, where it runs (cache load "
                        f"{loads[here.id]:.3g}, fair share {fair_load:.3g})"
                    )
                    continue

                # sort keys: cache load, vCPUs already there, unit id (idle: count first)
                def order(
                    u: CacheUnit,
                    idle: bool = idle,
                    loads: Mapping[int, float] = loads,
                    count: Mapping[int, int] = tally.count,
                ) -> tuple[float, float, int]:
                    if idle:
                        return (count[u.id], loads[u.id], u.id)
                    return (loads[u.id], count[u.id], u.id)

                pool = self._with_room(unit_of, busy, busy.get(vcpu, 0.0), tally) or self.units
                home = homes.get(vcpu)
                # on its home nodes (policy.obshome); the least loaded of them if none has room
                target = min(
                    [u for u in pool if at_home(u, home)]
                    or [u for u in self.units if at_home(u, home)],
                    key=order,
                )
                # without a home the target is the lightest unit: nothing to log
                lightest = target if home is None else min(pool, key=order)
                if home is not None and not at_home(lightest, home):
                    cost = AwayCost(
                        opts.miss_cost.stall_share(weights.get(vcpu, 0.0), vcpu in trusted),
                        opts.remote_gap,
                        opts.remote_gap_source,
                    )
                    kept_refusals.append(kept_home(vcpu, home, lightest, target, cost))
                unit_of[vcpu] = target.id
                views.add(vcpu, target.id)
                tally.add(vcpu, target.id, busy)
                if vcpu.vm in spread_again:
                    kind = f"SCU unifies {vcpu.vm} again, its vCPUs spread: placed in unit"
                elif idle:
                    kind = "new vCPU, idle, placed in the unit with the fewest vCPUs"
                else:
                    kind = "new vCPU placed in the lightest unit"
                reasons[vcpu] = f"OBS-X: {kind} {target.id} (cache load {loads[target.id]:.3g})"

        # OBS-X 1b: the busy vCPUs of a VM that shares its data and that SCU leaves alone
        # stay in one unit (thread clustering, policy.cluster)
        # (only VMs SCU leaves alone can cluster: the others' reads are not scanned)
        shared = shared_fractions(r for r in obs.reports if r.vm in left_alone)
        clustered: set[str] = set()
        vcpus_in = Counter(unit_of.values())  # kept as the moves go: no scan per VM
        for vm, vcpus in sorted(vcpus_of.items()):
            was = vm in state.clustered and vm not in spread_again
            fraction = shared.get(vm)
            if fraction is None:
                if was:
                    clustered.add(vm)  # no reads this round: it keeps its standing
                continue
            floor = SHARED_FRACTION_STAY if was else SHARED_FRACTION_ENTER
            if vm not in left_alone or fraction < floor:
                continue
            clustered.add(vm)
            for move in cluster_moves(vcpus, unit_of, busy, self.units, fraction, vcpus_in):
                vcpus_in[unit_of[move.vcpu]] -= 1
                vcpus_in[move.dst] += 1
                unit_of[move.vcpu] = move.dst
                reasons[move.vcpu] = move.reason

        # OBS-X 2: periodic rebalance of one overweight vCPU, heaviest -> lightest unit
        last_rebalance = state.last_rebalance
        if obs.tick - state.last_rebalance >= opts.rebalance_period and len(self.units) > 1:
            last_rebalance = obs.tick
            kept = frozenset(v for vm in clustered for v in vcpus_of[vm])
            moved = self._rebalance(unit_of, weights, trusted, kept, busy, homes)
            if moved is not None:
                vcpu, src, dst, why = moved
                unit_of[vcpu] = dst
                reasons[vcpu] = why

        # the step-asides (policy.obsaside): a VM whose pins would keep no two cache-heavy
        # vCPUs apart, or cost it more wait than its cache could save, floats
        current = {v.id: v.cpus for vm in obs.vms for v in vm.vcpus}
        aside = StepAside(frozenset(), (), (), {}, frozenset(), {})
        if opts.step_aside:
            aside = step_aside(
                self.units,
                AsideInputs(
                    vcpus_of,
                    unit_of,
                    current,
                    weights,
                    busy,
                    trusted,
                    left_alone if unplaced is None else unplaced,
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
        floating = aside.floating
        actions: list[Action] = list(aside.actions)
        in_unit: dict[int, list[VcpuId]] = {u.id: [] for u in self.units}
        for v in sorted(unit_of):  # each unit's members, sorted, from one pass
            in_unit.setdefault(unit_of[v], []).append(v)
        # OBS-L: CPU sets inside each unit
        for unit in self.units:
            members = [v for v in in_unit[unit.id] if v not in floating]
            for vcpu, cpus, why in local_sets(
                unit, members, weights, trusted, opts.heavy_weight_floor, opts.heavy_margin, busy
            ):
                if current.get(vcpu) != cpus:
                    reason = reasons.get(vcpu) or why
                    actions.append(PinVcpu(vcpu, cpus, unit.id, reason))

        # OBS-C: credit CPU time from heavy to light co-runners, each VM's vCPUs judged by
        # host-measured weights and their own guest's (a forged count credits no other VM)
        cpu_weights = dict(state.cpu_weights)
        for unit in self.units:
            for vcpu, value, why in credit_weights_by_vm(
                in_unit[unit.id],
                weights,
                busy,
                trusted,
                opts.c_credit,
                opts.heavy_weight_floor,
                opts.heavy_margin,
            ):
                # hysteresis: a change smaller than weight_hysteresis is noise, keep the old
                if abs(cpu_weights.get(vcpu, BASE_CPU_WEIGHT) - value) >= opts.weight_hysteresis:
                    actions.append(SetCpuWeight(vcpu, value, why))
                    cpu_weights[vcpu] = value
        cpu_weights = {v: w for v, w in cpu_weights.items() if v in alive}

        new_state = ObsState(
            unit_of,
            weights,
            cpu_weights,
            last_rebalance,
            frozenset(clustered),
            aside.quiet,
            frozenset(unit_of) - floating,
            aside.crowded,
            aside.crowded_rounds,
            homes,
        )
        refusals = (*aside.refusals, *kept_refusals)
        return Decision(self.name, tuple(actions), (), refusals), new_state

    # --- steps -----------------------------------------------------------------------------

    def _may_stay(
        self,
        unit: CacheUnit,
        unit_of: Mapping[VcpuId, int],
        loads: Mapping[int, float],
        weight: float,
        fair_load: float,
        fair_count: int,
        busy: Mapping[VcpuId, float] | None = None,
        need: float = 0.0,
        tally: UnitTally | None = None,
    ) -> bool:
        """Whether a new vCPU may stay in the unit it runs in: the unit has a CPU to spare
        (or the host is oversubscribed), stays within its fair share of vCPUs, and is the
        lightest unit it could go to or stays within its fair share of cache load (with
        ``imbalance_margin``)."""
        room = self._with_room(unit_of, busy, need, tally)
        count = tally.count[unit.id] if tally is not None else _count(unit_of, unit.id)
        if unit not in room or count >= fair_count:
            return False
        if loads[unit.id] <= min(loads[u.id] for u in room):
            return True
        return loads[unit.id] + weight <= fair_load * (1.0 + self.options.imbalance_margin)

    def _with_room(
        self,
        unit_of: Mapping[VcpuId, int],
        busy: Mapping[VcpuId, float] | None = None,
        need: float = 0.0,
        tally: UnitTally | None = None,
    ) -> tuple[CacheUnit, ...]:
        """The units a vCPU may move into: while the host has a CPU for every vCPU, only
        units with a CPU to spare (two vCPUs sharing a CPU while another idles would cost
        more than any cache gain). On an oversubscribed host whose vCPUs leave CPU time
        idle (``busy``: each vCPU's share of the last interval), the units whose CPU time
        stays within the host's share with ``need`` more (the host's busy CPUs per CPU,
        plus ``imbalance_margin``): vCPUs confined to a unit cannot use another unit's
        idle CPUs, so cache load must not stack their demand in one unit while others
        idle (the least loaded unit when none has room). A saturated host (the paper's
        always-running tasks): every unit, OBS-L pairs heavy and light vCPUs on the
        shared CPUs. Empty when every CPU has its vCPU."""
        if len(unit_of) > sum(len(u.cpus) for u in self.units):
            demand = self._demand(unit_of, busy, tally)
            if demand is None or need <= 0.0:  # an idle vCPU adds no CPU time anywhere
                return self.units
            share = min(1.0, self._share(demand) + self.options.imbalance_margin)
            roomy = tuple(
                u for u in self.units if demand[u.id] + need <= share * len(u.cpus) + 1e-9
            )
            # sort keys: busy CPUs per CPU, unit id
            return roomy or (min(self.units, key=lambda u: (demand[u.id] / len(u.cpus), u.id)),)
        if tally is not None:
            return tuple(u for u in self.units if tally.count[u.id] < len(u.cpus))
        return tuple(u for u in self.units if _count(unit_of, u.id) < len(u.cpus))

    def _demand(
        self,
        unit_of: Mapping[VcpuId, int],
        busy: Mapping[VcpuId, float] | None,
        tally: UnitTally | None = None,
    ) -> dict[int, float] | None:
        """CPUs' worth of time the vCPUs of each unit ran in the last interval; ``None``
        when not known or when they kept every CPU of the host busy (saturated)."""
        if busy is None:
            return None
        if tally is not None:
            demand = dict(tally.ran)
        else:
            demand = {u.id: 0.0 for u in self.units}
            for vcpu, unit in unit_of.items():
                demand[unit] += busy.get(vcpu, 0.0)
        if saturated(sum(demand.values()), sum(len(u.cpus) for u in self.units)):
            return None
        return demand

    def _share(self, demand: Mapping[int, float]) -> float:
        """The host's busy CPUs per CPU."""
        return sum(demand.values()) / sum(len(u.cpus) for u in self.units)

    def _rebalance(
        self,
        unit_of: dict[VcpuId, int],
        weights: Mapping[VcpuId, float],
        trusted: frozenset[VcpuId],
        kept: frozenset[VcpuId] = frozenset(),
        busy: Mapping[VcpuId, float] | None = None,
        homes: Mapping[VcpuId, frozenset[int]] | None = None,
    ) -> tuple[VcpuId, int, int, str] | None:
        """The best move of one overweight vCPU, each VM's vCPUs judged by the loads as
        that VM sees them (:mod:`.obsviews`); one view for all where every weight is the
        host's own measurement. A vCPU moves only within its home nodes (``homes``,
        :mod:`.obshome`)."""
        views = LoadViews([u.id for u in self.units], unit_of, weights, trusted)
        viewers: list[str | None] = [None]
        if not set(unit_of) <= trusted:
            viewers = [*sorted(views.viewers())]
        # what does not depend on the viewer: the units with room, and their CPU time
        room = self._with_room(unit_of, busy)
        demand = self._demand(unit_of, busy)
        if len(unit_of) <= sum(len(u.cpus) for u in self.units):
            demand = None  # a CPU for every vCPU: no CPU-time test (_with_room)
        # the host's busy share per CPU with the margin: once, not once per view
        share = 0.0
        if demand is not None:
            share = min(1.0, self._share(demand) + self.options.imbalance_margin)
        best: tuple[float, VcpuId, int, int, str] | None = None
        for viewer in viewers:
            move = rebalance_view(
                self.options.imbalance_margin,
                views,
                viewer,
                weights,
                kept,
                room,
                demand,
                busy,
                share,
                homes or {},
            )
            if move is not None and (best is None or move[:2] < best[:2]):
                best = move
        return None if best is None else best[1:]


def _counts_for(vcpu: VcpuId, viewer: str, trusted: frozenset[VcpuId]) -> bool:
    """Whether ``viewer``'s placement may weigh ``vcpu``: its own, or host-measured."""
    return vcpu.vm == viewer or vcpu in trusted


def _count(unit_of: Mapping[VcpuId, int], unit: int) -> int:
    return sum(1 for u in unit_of.values() if u == unit)
