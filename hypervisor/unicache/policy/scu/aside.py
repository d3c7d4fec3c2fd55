"""SCU steps aside where its cost model predicts no gain (MFC §4.5-§4.6 over guest reports).

Each round, for every VM that read, the cost model (:mod:`~unicache.policy.scu.cost`)
predicts what unifying the units the VM spans would save its reads against what the
migrations would cost (§4.5), each unit counting what it caches for the readers that run
in it (MFC's per-core M_on-chip, §4.6). A VM predicted to gain nothing is left alone,
with the estimate as the reason; a placed VM is withdrawn only after ``DOUBT_ROUNDS``
rounds of doubt in a row, and one left alone is placed again only after ``TRUST_ROUNDS``
rounds of predicted gain in a row (a sampled estimate near the threshold must not flip a
VM's table every round).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from unicache.model import ChunkId, Observation
from unicache.policy.scu.cost import GainEstimate, needed_gain
from unicache.policy.scu.options import ScuOptions
from unicache.topology import CacheLevel, CacheUnit, Scope

#: a placed VM predicted to lose is withdrawn only after this many rounds of it in a row
#: (a prediction that flips with each round's sample must not flip the VM's table: the
#: watch needs one settled placed interval to judge what the placement did)
DOUBT_ROUNDS = 3
#: a VM SCU left alone is placed again only after this many rounds in a row predicted a
#: gain for it (the same reason the other way: a sampled estimate near the threshold
#: must not place a VM for one round, and placing then withdrawing costs both ways)
TRUST_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class PredictionState:
    """What the prediction kept from the round before (``ScuState``'s part of it).

    :param round_no: the rounds decided so far.
    :param aside: the VMs left alone last round.
    :param doubts: placed VMs predicted to lose, by consecutive rounds of that doubt.
    :param trusts: VMs a prediction left alone, by the rounds in a row since predicted to
        gain.
    """

    round_no: int
    aside: frozenset[str]
    doubts: Mapping[str, int]
    trusts: Mapping[str, int]


class GainPrediction:
    """The per-VM gain prediction over a host's units.

    :param units: the cache units.
    :param options: SCU's options (``cost``: ``None`` never steps aside).
    :param levels: the host's cache levels (its private ones count per core).
    :param smt: hardware threads per core.
    """

    def __init__(
        self,
        units: tuple[CacheUnit, ...],
        options: ScuOptions,
        levels: tuple[CacheLevel, ...] = (),
        smt: int = 1,
    ) -> None:
        self.units = units
        self.options = options
        self.smt = smt
        self._unit_by_id = {u.id: u for u in units}
        # the units a VM is spread to first (sort keys: capacity desc, unit id), and the
        # private levels of one core: both once, not once per VM and round
        self._largest_first = sorted(units, key=lambda u: (-u.capacity_bytes, u.id))
        self._private_bytes = sum(lv.size_bytes for lv in levels if lv.scope is Scope.CORE)

    def step_aside(
        self, obs: Observation, by_vm: Mapping[str, Mapping[int, int]], state: PredictionState
    ) -> tuple[dict[str, GainEstimate], dict[str, int], dict[str, int]]:
        """VMs whose reads this round are predicted to gain nothing from unification.

        :returns: those VMs with their estimates, the placed VMs kept in doubt (with
            their rounds of doubt so far), and the VMs left alone that are predicted to
            gain but not yet for ``TRUST_ROUNDS`` rounds (with those rounds so far).
        """
        cost = self.options.cost
        if cost is None:
            return {}, {}, {}
        reads, seconds = self._reads(obs)
        running = _running(obs, by_vm)
        out: dict[str, GainEstimate] = {}
        doubts: dict[str, int] = {}
        # a VM without reads this round keeps what trust it had (a VM that left, none)
        live = {vm.name for vm in obs.vms}
        trusts = {vm: n for vm, n in state.trusts.items() if vm not in reads and vm in live}
        # what the prediction takes from the units a VM spans, with its readers in each:
        # the same for every VM pinned alike (a fleet's VMs span few combinations)
        facts: dict[tuple[tuple[int, int], ...], tuple[int, int, int]] = {}
        for vm, per_chunk in reads.items():
            spanned = sorted(set(by_vm.get(vm, {}).values()))
            if not spanned or not per_chunk:
                continue
            mine = running.get(vm, {})
            busy = sum(mine.get(u, 0.0) for u in spanned)
            in_unit = self._readers_in(spanned, mine, busy, len(by_vm[vm]))
            spanned = [u for u, _ in in_unit]
            fact = facts.get(in_unit)
            if fact is None:
                fact = facts[in_unit] = self._facts(in_unit)
            unit_bytes, spanned_bytes, cores_per_unit = fact
            estimate = cost.predict_gain(
                list(per_chunk.values()),
                unit_bytes,
                spanned_bytes,
                len(spanned),
                readers=max(1, round(busy)),
                cores_per_unit=cores_per_unit,
                busy_cycles=busy * seconds[vm] * (cost.clock_hz or 0.0),
            )
            _verdict(vm, estimate, state, out, doubts, trusts)
        return out, doubts, trusts

    def _reads(
        self, obs: Observation
    ) -> tuple[dict[str, dict[ChunkId, tuple[int, int]]], dict[str, float]]:
        """Per VM, each chunk's largest read run and reads, and the interval they cover."""
        chunk_size = self.options.chunk_size
        reads: dict[str, dict[ChunkId, tuple[int, int]]] = {}
        seconds: dict[str, float] = {}
        for report in obs.reports:
            seconds[report.vm] = max(seconds.get(report.vm, 0.0), report.interval_s)
            per_chunk = reads.setdefault(report.vm, {})
            for access in report.chunks:
                n = access.reads
                if n <= 0:
                    continue
                size = min(access.bytes_read // n, chunk_size)
                old = per_chunk.get(access.chunk)
                if old is None:
                    per_chunk[access.chunk] = (max(size, 0), n)
                else:
                    per_chunk[access.chunk] = (max(size, old[0]), old[1] + n)
        return reads, seconds

    def _readers_in(
        self, spanned: list[int], mine: Mapping[int, float], busy: float, vcpus: int
    ) -> tuple[tuple[int, int], ...]:
        """The units a VM is judged over, with its running readers in each: a VM OBS keeps
        in fewer units than it has vCPUs for (a cluster of vCPUs that share data,
        policy.obs.cluster) is judged over the units OBS-X would spread it to, its readers
        spread evenly: never over the one unit its cluster sits in."""
        spread = min(vcpus, len(self.units))
        if len(spanned) < spread:
            others = [u for u in self._largest_first if u.id not in spanned]
            spanned = spanned + [u.id for u in others[: spread - len(spanned)]]
            even = round(busy / len(spanned))
            return tuple((u, even) for u in spanned)
        return tuple((u, round(mine.get(u, 0.0))) for u in spanned)

    def _facts(self, in_unit: tuple[tuple[int, int], ...]) -> tuple[int, int, int]:
        """What the prediction takes from the units: the least one caches for its readers,
        all of them together, and the fewest cores of one."""
        units = self._unit_by_id
        return (
            min(self._reach(units[u], n) for u, n in in_unit),
            sum(units[u].capacity_bytes for u, _ in in_unit),
            min(self.cores(units[u]) for u, _ in in_unit),
        )

    def _reach(self, unit: CacheUnit, readers: int) -> int:
        """What a unit caches for its readers without migrations: its shared levels and the
        private levels of the cores they run on, not the other cores' (MFC's per-core
        M_on-chip, §4.6); at least one reader's worth."""
        idle_cores = self.cores(unit) - min(max(readers, 1), self.cores(unit))
        return unit.capacity_bytes - self._private_bytes * idle_cores

    def cores(self, unit: CacheUnit) -> int:
        """A unit's cores (its CPUs over the hardware threads of one)."""
        return max(len(unit.cpus) // self.smt, 1)


def _running(
    obs: Observation, by_vm: Mapping[str, Mapping[int, int]]
) -> dict[str, dict[int, float]]:
    """Running readers per VM and unit: busy vCPU time, which stays put when threads
    migrate (the vCPUs a thread passes through in a round do not each count as a reader)."""
    running: dict[str, dict[int, float]] = {}
    for sample in obs.samples:
        unit = by_vm.get(sample.vcpu.vm, {}).get(sample.vcpu.index)
        if unit is not None:
            in_vm = running.setdefault(sample.vcpu.vm, {})
            in_vm[unit] = in_vm.get(unit, 0.0) + max(sample.busy, 0.0)
    return running


def _verdict(
    vm: str,
    estimate: GainEstimate,
    state: PredictionState,
    out: dict[str, GainEstimate],
    doubts: dict[str, int],
    trusts: dict[str, int],
) -> None:
    """One VM's standing from its estimate: a VM placed last round stays placed while it is
    predicted not to lose, and for DOUBT_ROUNDS rounds of doubt more (the watch then judges
    what it measured); one a prediction left alone is placed after TRUST_ROUNDS rounds of
    predicted gain in a row. A VM left alone goes into ``out`` with why."""
    placed = state.round_no > 0 and vm not in state.aside
    if estimate.keeps(placed):
        if vm not in state.trusts:  # not left alone by a prediction: none to earn
            return
        trusts[vm] = state.trusts[vm] + 1
        if trusts[vm] >= TRUST_ROUNDS:
            del trusts[vm]
            return
        out[vm] = GainEstimate(
            estimate.fraction,
            f"{estimate.reason}; gain predicted {trusts[vm]} of the "
            f"{TRUST_ROUNDS} rounds in a row it needs after being left alone",
        )
        return
    if placed and state.doubts.get(vm, 0) + 1 < DOUBT_ROUNDS:
        doubts[vm] = state.doubts.get(vm, 0) + 1
        return
    need = f"needs {needed_gain(placed):+.2%}" + (" to stay placed" if placed else "")
    out[vm] = GainEstimate(estimate.fraction, f"{estimate.reason} ({need})")
    trusts[vm] = 0
