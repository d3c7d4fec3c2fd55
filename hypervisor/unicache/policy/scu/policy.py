"""SCU for VMs: run MFC's ``mfc_access`` on guest reports and publish placement tables.

The guest reads; its agent reports per-chunk reads by vCPU; this policy replays those
reads through :meth:`MfcTable.mfc_access` (MFC paper Figure 2), global across all VMs,
and turns the result into one placement table per VM: chunk -> the VM's vCPUs in the
chunk's unit, caching or non-caching. The guest's shim then migrates the reading
thread synchronously, as MFC's kernel did (§4.2).

Parameters come from the machine (§4.5 ``min_read_size``, §4.7 chunk size, §4.6
``M_on-chip``) through :func:`scu_options_for`, whose :class:`~unicache.policy.scu.cost.CostModel`
also decides where SCU steps aside: a read migrates only where the saving beats the
migration with a margin, chunks are grouped into extents where one chunk saves too little,
and a VM predicted to gain nothing gets an empty table and a logged refusal.
Pure: no I/O, no clock, no threads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from unicache.errors import StateError
from unicache.model import (
    BUDGET_UNLIMITED,
    ChunkDecision,
    CounterSource,
    Decision,
    Observation,
    PlacementEntry,
    Refusal,
    VcpuId,
)
from unicache.policy.scu.aside import (
    DOUBT_ROUNDS as DOUBT_ROUNDS,
)
from unicache.policy.scu.aside import (
    TRUST_ROUNDS as TRUST_ROUNDS,
)
from unicache.policy.scu.aside import GainPrediction, PredictionState
from unicache.policy.scu.mfc import MfcTable
from unicache.policy.scu.mfc_state import RULE_NON_CACHING, ChunkKey, UnitView, m_use
from unicache.policy.scu.options import ScuOptions
from unicache.policy.scu.publish import TableBasis, TableInputs, TablesBuilt, publish_tables
from unicache.policy.scu.table import VmExtras
from unicache.policy.scu.watch import ReadRates, read_rates, watch_round
from unicache.topology import CacheLevel, CacheUnit, Scope

#: the refusal kind SCU logs when it leaves a VM alone
STEP_ASIDE = "SCU_NO_GAIN"
#: the refusal kind SCU logs when the watch keeps a VM unplaced
WATCH = "SCU_WATCH"
#: refusal kind: chunk accesses over a VM's per-round budget were not replayed, or chunks
#: the table forgot over ``max_chunks``
SCU_BOUNDED = "SCU_BOUNDED"
#: refusal kind: a VM's share of the units it shares with other VMs kept chunks off-chip
#: that Figure 2 over every VM's chunks would have cached (MFC §4.6, per VM)
SCU_SHARE = "SCU_SHARE"


@dataclass(frozen=True, slots=True)
class ScuState:
    """What SCU keeps between rounds.

    :param table: the MFC table (never mutated by a round: each round copies it).
    :param versions: VM -> version of the last table published to it.
    :param published: VM -> the entries of that table.
    :param round: rounds decided so far.
    :param aside: VMs SCU left alone last round (by a prediction, by the watch, or before
        and without reads since: a VM keeps its standing until its reads say otherwise).
    :param watched: what the watch (:mod:`unicache.policy.scu.watch`) knows of each VM's reads.
    :param doubts: placed VMs predicted to lose, by consecutive rounds of that doubt.
    :param trusts: VMs a prediction left alone, by the rounds in a row since predicted to
        gain (0: the last prediction was no gain).
    :param built_on: per VM, what its last table was built on besides its chunks (left
        alone, its ``(vCPU index, unit)`` pairs): a VM none of whose inputs changed keeps
        its table without a rebuild.
    :param built_extras: per VM, the colors and replicas its last table was built with
        (compared in one step, where the table's entries would take a pass).

    ``built_on`` and ``built_extras`` describe the tables published, so they are not
    saved across a restart, which publishes every table again (``policystate``).
    """

    table: MfcTable | None = None
    versions: Mapping[str, int] = field(default_factory=dict)
    published: Mapping[str, tuple[PlacementEntry, ...]] = field(default_factory=dict)
    round: int = 0
    aside: frozenset[str] = frozenset()
    watched: Mapping[str, ReadRates] = field(default_factory=dict)
    doubts: Mapping[str, int] = field(default_factory=dict)
    trusts: Mapping[str, int] = field(default_factory=dict)
    built_on: Mapping[str, TableBasis] = field(default_factory=dict)
    built_extras: Mapping[str, VmExtras] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Standing:
    """Which VMs SCU leaves alone this round, with the watch's and the prediction's state
    and the refusals that say why."""

    left_alone: frozenset[str]
    watched: dict[str, ReadRates]
    doubts: dict[str, int]
    trusts: dict[str, int]
    refusals: tuple[Refusal, ...]


class ScuPolicy:
    """Software cache unification across all VMs of a host (MFC §3-§4).

    Invariants: a unit's assigned chunk bytes never exceed its capacity; a chunk is on at
    most ``max_copies`` units; a placement entry only names vCPUs of its own VM that are
    pinned in the chunk's unit; a table is published only when it changed.

    :param units: the cache units.
    :param options: the options (see :func:`scu_options_for`).
    :param levels: the cache levels, for eq. 1 (empty: no counter-based estimate).
    :param smt: logical CPUs per core.
    """

    name = "scu"

    def __init__(
        self,
        units: tuple[CacheUnit, ...],
        options: ScuOptions,
        levels: tuple[CacheLevel, ...] = (),
        smt: int = 1,
    ) -> None:
        self.units = units
        self.options = options
        self.levels = levels
        self._unit_by_id = {u.id: u for u in units}
        self._prediction = GainPrediction(units, options, levels, smt)

    def start(self, state: ScuState) -> None:
        """Validate a restored state against the units (idempotent).

        :raises StateError: if the state's table over-commits a unit.
        """
        if state.table is None:
            return
        for unit in self.units:
            if state.table.assigned_bytes(unit.id) > unit.capacity_bytes:
                raise StateError.restored(f"unit {unit.id} over-committed in restored state")

    def decide(
        self,
        obs: Observation,
        state: ScuState,
        vcpu_units: Mapping[VcpuId, int],
        extras: Mapping[str, VmExtras] | None = None,
    ) -> tuple[Decision, ScuState]:
        """One round: which VMs SCU leaves alone (its prediction and watch), the others'
        reported reads replayed through ``mfc_access``, aging, and the tables published.

        :param obs: this round's observation.
        :param state: the previous state.
        :param vcpu_units: vCPU -> the unit it is pinned in (after this round's pinning).
        :param extras: per VM, the color node and replica nodes of chunks (SRM, NCC),
            merged into the VM's table (chunks SCU does not place get entries of their own).
        :returns: the decision and the new state.
        """
        extras = extras or {}
        opts = self.options
        views = self._unit_views(obs, vcpu_units)
        by_vm: dict[str, dict[int, int]] = {}
        tenants: dict[int, set[str]] = {}
        for vcpu, unit in vcpu_units.items():
            by_vm.setdefault(vcpu.vm, {})[vcpu.index] = unit
            tenants.setdefault(unit, set()).add(vcpu.vm)
        # MFC §4.6 per VM: each VM pinned in a unit counts on an even share of it (the host's
        # pinning decides the shares, never a guest's report)
        shares = {unit: frozenset(vms) for unit, vms in tenants.items()}
        if state.table is None:
            table = MfcTable(opts.params, views, shares)
        else:
            table = state.table.copy()
            table.set_units(views, shares)
        live_vms = {vm.name for vm in obs.vms}
        standing = self._standing(obs, by_vm, state, live_vms)
        refusals = list(standing.refusals)
        decisions, touched = self._replay(obs, table, by_vm, standing.left_alone, refusals)
        next_round = state.round + 1
        aging = next_round % opts.update_period == 0
        if aging:
            forgotten = table.update_use(opts.max_chunks)  # Figure 2 lines 45-47
            refusals += [
                Refusal(
                    SCU_BOUNDED,
                    f"SCU forgot {n} chunks of {vm}: over the {opts.max_chunks} it remembers, "
                    "the least used of the VM holding the most go first",
                )
                for vm, n in sorted(forgotten.items())
            ]

        # every live VM's table: kept, patched or built again (policy.scu.publish)
        tables = publish_tables(
            TablesBuilt(state.versions, state.published, state.built_on, state.built_extras),
            table,
            TableInputs(live_vms, standing.left_alone, by_vm, extras, touched, aging),
            decisions,
            opts,
            self._budget,
        )

        new_state = ScuState(
            table,
            tables.versions,
            tables.published,
            next_round,
            standing.left_alone & live_vms,
            standing.watched,
            standing.doubts,
            standing.trusts,
            tables.built_on,
            tables.built_extras,
        )
        actions = tables.actions
        decision = Decision(self.name, tuple(actions), tuple(decisions), tuple(refusals))
        return decision, new_state

    def _standing(
        self,
        obs: Observation,
        by_vm: Mapping[str, Mapping[int, int]],
        state: ScuState,
        live_vms: set[str],
    ) -> _Standing:
        """Which VMs SCU leaves alone this round, and why: those its cost model predicts no
        gain for (:mod:`~unicache.policy.scu.aside`), those the watch holds back (placed reads got
        slower), and those left alone before that read nothing since (MFC decides on
        reads, §4.2: no read, nothing to decide; their tables stay unbuilt)."""
        refusals: list[Refusal] = []
        aside, doubts, trusts = self._prediction.step_aside(
            obs, by_vm, PredictionState(state.round, state.aside, state.doubts, state.trusts)
        )
        for vm, estimate in sorted(aside.items()):
            refusals.append(Refusal(STEP_ASIDE, f"SCU leaves {vm} alone: {estimate.reason}"))
        # what the cost model predicts, the watch checks against what the VM's reads did
        rates = read_rates(obs) if self.options.watch else {}
        watched, held = watch_round(
            rates, self.placed(state), state.watched, live_vms, state.round + 1
        )
        for vm, verdict in sorted(held.items()):
            if vm in rates and vm not in aside:
                refusals.append(Refusal(WATCH, f"SCU leaves {vm} alone: {verdict.reason}"))
        read_now = {r.vm for r in obs.reports if r.chunks}
        kept_aside = (state.aside - read_now) & live_vms
        left_alone = frozenset(aside) | frozenset(held) | kept_aside
        return _Standing(left_alone, watched, doubts, trusts, tuple(refusals))

    def _replay(
        self,
        obs: Observation,
        table: MfcTable,
        by_vm: Mapping[str, Mapping[int, int]],
        left_alone: frozenset[str],
        refusals: list[Refusal],
    ) -> tuple[list[ChunkDecision], set[str]]:
        """MFC Figure 2 over guest reports: each reported read of a VM SCU places is
        replayed through ``mfc_access`` on the unit its vCPU is pinned in (bounded per VM
        and per access: a guest cannot buy unbounded policy work); what was skipped or
        capped is added to ``refusals``.

        :returns: the chunk decisions and the VMs they touched.
        """
        opts = self.options
        decisions: list[ChunkDecision] = []
        touched: set[str] = set()
        # each VM's running readers: its vCPUs' busy time this round
        readers: dict[str, float] = {}
        for sample in obs.samples:
            readers[sample.vcpu.vm] = readers.get(sample.vcpu.vm, 0.0) + max(sample.busy, 0.0)
        spent: dict[str, int] = {}
        skipped: dict[str, int] = {}
        capped: dict[str, int] = {}
        for report in sorted(obs.reports, key=lambda r: (r.vm, r.seq)):
            units_of_vm = by_vm.get(report.vm)
            if not units_of_vm or report.vm in left_alone:
                continue
            allowed = frozenset(units_of_vm.values())
            copies = self._copies_needed(readers.get(report.vm, 0.0), units_of_vm)
            for access in sorted(report.chunks, key=lambda a: a.chunk):
                if spent.get(report.vm, 0) >= opts.max_accesses_per_vm:
                    skipped[report.vm] = skipped.get(report.vm, 0) + len(access.vcpu_bytes)
                    continue
                spent[report.vm] = spent.get(report.vm, 0) + len(access.vcpu_bytes)
                key = ChunkKey(report.vm, access.chunk)
                # what one read run brings in, as the prediction counts it (_step_aside): a
                # 256 KiB file read eight times a round is 256 KiB of cache, not 2 MiB
                size = min(access.bytes_read // max(access.reads, 1), opts.chunk_size)
                for vcpu_index, nbytes in access.vcpu_bytes:
                    curunit = units_of_vm.get(vcpu_index)
                    if curunit is None or nbytes <= 0:
                        continue
                    share = access.reads * nbytes // max(access.bytes_read, 1)
                    for _ in range(max(1, min(share, opts.max_replays))):
                        result = table.mfc_access(key, size, curunit, allowed, copies)
                        capped[report.vm] = capped.get(report.vm, 0) + result.capped
                    decisions.append(
                        ChunkDecision(
                            report.vm,
                            access.chunk,
                            result.unit,
                            result.caching,
                            result.rule,
                            _reason(result.rule, key, curunit, result.unit, result.evicted),
                        )
                    )
                    touched.add(report.vm)
        for vm, n in sorted(skipped.items()):
            refusals.append(
                Refusal(
                    SCU_BOUNDED,
                    f"SCU skipped {n} chunk accesses of {vm} this round: over "
                    f"{opts.max_accesses_per_vm} a round",
                )
            )
        for vm, n in sorted(capped.items()):
            if n:
                refusals.append(Refusal(SCU_SHARE, _share_reason(vm, n, table, by_vm[vm])))
        return decisions, touched

    @staticmethod
    def placed(state: ScuState) -> frozenset[str]:
        """VMs whose last published table held SCU's own entries (not only colors and
        replicas): the interval just observed ran placed."""
        return frozenset(
            vm
            for vm, entries in state.published.items()
            if any(not e.caching or e.unit >= 0 for e in entries)
        )

    def _budget(self, size: int) -> int:
        # every migration pays (cost model): no limit; else §4.5's competitive budget
        cost = self.options.cost
        if cost is not None and cost.migration_pays(size):
            return BUDGET_UNLIMITED
        return self.options.params.migration_budget(size)

    def _unit_views(self, obs: Observation, vcpu_units: Mapping[VcpuId, int]) -> list[UnitView]:
        busy: dict[int, float] = {}
        misses: dict[int, list[int]] = {}
        for sample in obs.samples:
            where = vcpu_units.get(sample.vcpu)
            if where is None:
                continue
            busy[where] = busy.get(where, 0.0) + sample.busy
            if sample.level_misses is not None and sample.source is CounterSource.HARDWARE:
                acc = misses.setdefault(where, [0] * len(self.levels))
                for i, n in enumerate(sample.level_misses[: len(acc)]):
                    acc[i] += n
        views = []
        for unit in self.units:
            # eq. 1 summed over the levels inside the unit (0 without hardware counters)
            counter_use = sum(
                m_use(n, level.lines * copies, level.size_bytes * copies)
                for n, level, copies in zip(
                    misses.get(unit.id, ()), self.levels, self._copies(unit), strict=False
                )
            )
            runqueue = busy.get(unit.id, 0.0) / max(len(unit.cpus), 1)
            views.append(UnitView(unit.id, unit.capacity_bytes, counter_use, runqueue))
        return views

    def _copies_needed(self, readers: float, units_of_vm: Mapping[int, int]) -> int:
        """The copies of a chunk a VM's readers can use (MFC §4.4).

        Copies are there because "a core holding a popular file may be a CPU bottleneck if
        many threads migrate to it"; readers that one unit's cores run at once need none,
        and each copy takes a unit's cache from another chunk (§4.4: one thread "wants all
        caches to hold distinct files"). So: the units whose cores run all of the VM's
        running ``readers`` (its vCPUs' busy time this round), at least one.
        """
        units = set(units_of_vm.values())
        cores = min((self._prediction.cores(self._unit_by_id[u]) for u in units), default=1)
        return max(1, math.ceil(readers / cores - 1e-9))

    def _copies(self, unit: CacheUnit) -> list[int]:
        # instances of each level inside a unit: one per core for private levels
        cores = self._prediction.cores(unit)
        return [cores if lvl.scope is Scope.CORE else 1 for lvl in self.levels]


def _reason(
    rule: str, key: ChunkKey, curunit: int, unit: int, evicted: tuple[ChunkKey, ...]
) -> str:
    where = "stays in" if unit == curunit else f"moves from unit {curunit} to"
    load = "non-caching loads" if rule == RULE_NON_CACHING else "caching loads"
    out = f"{rule}: chunk {key.chunk} of {key.vm} read in unit {curunit}: {where} unit {unit}"
    out += f", {load}"
    if evicted:
        out += f"; evicted {', '.join(str(k.chunk) for k in evicted)}"
    return out


def _share_reason(vm: str, reads: int, table: MfcTable, units_of_vm: Mapping[int, int]) -> str:
    units = sorted(set(units_of_vm.values()))
    shares = ", ".join(f"unit {u} {table.share(u, vm):,} B" for u in units)
    return (
        f"SCU kept {vm} to its share of the cache units it shares with other VMs ({shares}): "
        f"{reads} chunk reads went non-caching that Figure 2 over every VM's chunks would "
        "have cached (MFC §4.6, per VM)"
    )
