"""OBS's one-pass views decide exactly as the simple per-VM scans they replace (#19).

The simple forms are kept here as they were (main at d9a6972): every VM's loads summed
over every vCPU (``ObsPolicy._loads``), and each view's vCPUs filtered from every vCPU
(``pinning_gain``, ``credit_weights_by_vm``). On random fleets (weights any floats, so
rounding differs with the order of additions; some host-measured, some guests' word;
oversubscribed or not), the product's forms must give the same move, the same floats in
the reasons, the same floating VMs and the same cpu.weights.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from unicache.model import VcpuId
from unicache.policy.obs.credit import credit_weights, credit_weights_by_vm
from unicache.policy.obs.gain import pinning_gain
from unicache.policy.obs.policy import ObsOptions, ObsPolicy, _counts_for
from unicache.policy.obs.room import count_in as _count
from unicache.policy.obs.views import LoadViews, UnitTally
from unicache.topology import CacheUnit

from tests.topologies import TOPO_OPTERON_16, TOPO_XEON_5300

weight = st.one_of(
    st.floats(0.0, 1.0, allow_nan=False),
    st.sampled_from([0.0, 0.1, 0.2, 0.3, 1e-4, 0.7]),  # ties, and sums that round
)
fleet = st.lists(
    st.tuples(
        st.integers(0, 5),  # VM
        st.integers(0, 3),  # unit (modulo the units)
        weight,
        st.booleans(),  # host-measured
        st.floats(0.0, 1.0),  # busy
        st.booleans(),  # kept (clustered)
    ),
    min_size=1,
    max_size=40,
)


def _build(rows, units: tuple[CacheUnit, ...]):
    unit_of: dict[VcpuId, int] = {}
    weights: dict[VcpuId, float] = {}
    busy: dict[VcpuId, float] = {}
    trusted: set[VcpuId] = set()
    kept: set[VcpuId] = set()
    for i, (vm, unit, w, measured, b, keep) in enumerate(rows):
        vcpu = VcpuId(f"vm{vm}", i)
        unit_of[vcpu] = units[unit % len(units)].id
        weights[vcpu] = w
        busy[vcpu] = b
        if measured:
            trusted.add(vcpu)
        if keep:
            kept.add(vcpu)
    return unit_of, weights, busy, frozenset(trusted), frozenset(kept)


# --- the simple forms, as they were ---------------------------------------------------------


def _simple_loads(policy, unit_of, weights, trusted, viewer):
    loads = {u.id: 0.0 for u in policy.units}
    for vcpu, unit in unit_of.items():
        if viewer is None or _counts_for(vcpu, viewer, trusted):
            loads[unit] += weights.get(vcpu, 0.0)
    return loads


def _simple_rebalance_view(policy, unit_of, weights, kept, trusted, viewer, busy):
    loads = _simple_loads(policy, unit_of, weights, trusted, viewer)
    heavy = max(policy.units, key=lambda u: (loads[u.id], -u.id)).id
    room = policy.room.with_room(unit_of, busy)
    if not room:
        return None
    light = min(room, key=lambda u: (loads[u.id], u.id)).id
    gap = loads[heavy] - loads[light]
    if heavy == light or gap <= policy.options.imbalance_margin * loads[heavy]:
        return None
    members = [v for v, u in unit_of.items() if u == heavy]
    average = loads[heavy] / len(members)
    overweight = [
        v
        for v in members
        if weights.get(v, 0.0) > average and v not in kept and (viewer is None or v.vm == viewer)
    ]
    useful = [v for v in overweight if loads[light] + weights.get(v, 0.0) < loads[heavy]]
    demand = policy.room.demand(unit_of, busy)
    if demand is not None and len(unit_of) > sum(len(u.cpus) for u in policy.units):
        share = min(1.0, policy.room.share(demand) + policy.options.imbalance_margin)
        cpus = len(policy._unit_by_id[light].cpus)
        useful = [v for v in useful if demand[light] + busy.get(v, 0.0) <= share * cpus + 1e-9]
    if not useful:
        return None
    vcpu = min(useful, key=lambda v: (abs(gap / 2 - weights.get(v, 0.0)), v))
    why = (
        f"OBS-X: rebalance moved overweight vCPU (weight {weights.get(vcpu, 0.0):.3g} > "
        f"unit average {average:.3g}) from heaviest unit {heavy} "
        f"(load {loads[heavy]:.3g}) to lightest unit {light} (load {loads[light]:.3g})"
    )
    return abs(gap / 2 - weights.get(vcpu, 0.0)), vcpu, heavy, light, why


def _simple_rebalance(policy, unit_of, weights, trusted, kept, busy):
    views: set[str | None] = {None}
    if not set(unit_of) <= trusted:
        views = {v.vm for v in unit_of}
    best = None
    for viewer in sorted(views, key=str):
        move = _simple_rebalance_view(policy, unit_of, weights, kept, trusted, viewer, busy)
        if move is not None and (best is None or move[:2] < best[:2]):
            best = move
    return None if best is None else best[1:]


def _simple_credit_by_vm(members, weights, busy, trusted):
    viewers = sorted({v.vm for v in members})
    if len(viewers) < 2 or set(members) <= trusted:
        return credit_weights(list(members), weights, busy)
    out = []
    for viewer in viewers:
        seen = [v for v in members if v.vm == viewer or v in trusted]
        judged = credit_weights(seen, weights, busy)
        out += [(v, value, why) for v, value, why in judged if v.vm == viewer]
    return sorted(out)


def _simple_heavy_seen(vcpus_of, weights, trusted, floor):
    heavy = sorted(v for v, w in weights.items() if w >= floor)
    return {vm: [v for v in heavy if v.vm == vm or v in trusted] for vm in vcpus_of}


# --- the product's forms against them -------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(rows=fleet, small=st.booleans())
def test_the_rebalance_moves_as_every_vm_summing_every_vcpu(rows, small) -> None:
    # a small machine is oversubscribed by a few vCPUs (the CPU-time test applies)
    units = (TOPO_XEON_5300 if small else TOPO_OPTERON_16).units()
    policy = ObsPolicy(units, ObsOptions())
    unit_of, weights, busy, trusted, kept = _build(rows, units)
    got = policy.room.rebalance(dict(unit_of), weights, trusted, kept, busy)
    expected = _simple_rebalance(policy, dict(unit_of), weights, trusted, kept, busy)
    # the same move, and the same floats in its reason
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(rows=fleet)
def test_credit_views_are_those_of_filtering_every_member(rows) -> None:
    unit_of, weights, busy, trusted, _ = _build(rows, TOPO_XEON_5300.units())
    members = sorted(unit_of)
    assert credit_weights_by_vm(members, weights, busy, trusted) == _simple_credit_by_vm(
        members, weights, busy, trusted
    )


@settings(max_examples=300, deadline=None)
@given(rows=fleet, floor=st.sampled_from([1e-4, 0.2, 0.5]))
def test_pinning_gain_sees_what_filtering_every_heavy_vcpu_sees(rows, floor) -> None:
    unit_of, weights, _, trusted, _ = _build(rows, TOPO_XEON_5300.units())
    vcpus_of: dict[str, list[VcpuId]] = {}
    for v in unit_of:
        vcpus_of.setdefault(v.vm, []).append(v)
    seen = _simple_heavy_seen(vcpus_of, weights, trusted, floor)
    everyone = frozenset(vcpus_of)
    gain = pinning_gain(vcpus_of, weights, trusted, everyone, frozenset(), {}, floor)
    # the simple form: a VM floats where it sees at most one heavy vCPU, named in the reason
    assert gain.floating == frozenset(vm for vm, s in seen.items() if len(s) <= 1)
    for vm in gain.floating:
        lone = f"one cache-heavy vCPU ({seen[vm][0]})" if seen[vm] else "no cache-heavy vCPU"
        assert lone in gain.reasons[vm]


@settings(max_examples=300, deadline=None)
@given(rows=fleet)
def test_every_view_is_the_simple_sum_bit_for_bit(rows) -> None:
    # the floats themselves, not only the decisions they led to: any order of additions
    # other than the simple form's rounds differently somewhere
    units = TOPO_OPTERON_16.units()
    policy = ObsPolicy(units, ObsOptions())
    unit_of, weights, _, trusted, _ = _build(rows, units)
    views = LoadViews([u.id for u in units], unit_of, weights, trusted)
    for viewer in [None, *sorted({v.vm for v in unit_of})]:
        assert views.loads(viewer) == _simple_loads(policy, unit_of, weights, trusted, viewer)


# --- OBS-X's first placement: the kept loads, counts and CPU time are those summed again ---


class _CheckedViews(LoadViews):
    """The product's views, each answer checked against the simple sum over ``unit_of``
    as it is at that moment (the placement adds to the dict it was built on)."""

    def __init__(self, unit_ids, unit_of, weights, trusted) -> None:
        super().__init__(unit_ids, unit_of, weights, trusted)
        self.unit_of, self.weights, self.trusted = unit_of, weights, trusted

    def loads(self, viewer):
        out = super().loads(viewer)
        assert out == _simple_loads(CHECKER[0], self.unit_of, self.weights, self.trusted, viewer)
        return out


class _CheckedTally(UnitTally):
    """The product's tally, checked after every vCPU it counts against ``unit_of``."""

    def __init__(self, units, unit_of=None, busy=None) -> None:
        self.unit_of, self.busy, self.ready = unit_of, busy, False
        super().__init__(units, unit_of, busy)  # (counts unit_of's vCPUs through add)
        self.ready = True
        self._check()

    def add(self, vcpu, unit, busy) -> None:
        super().add(vcpu, unit, busy)
        self._check()

    def _check(self) -> None:
        if self.unit_of is None or not self.ready:
            return
        for u in self.count:
            assert self.count[u] == _count(self.unit_of, u)
        # the simple form's sums, bit for bit (ObsPolicy._demand before its saturation test)
        ran = dict.fromkeys(self.count, 0.0)
        for vcpu, u in self.unit_of.items():
            ran[u] += (self.busy or {}).get(vcpu, 0.0)
        assert self.ran == ran


CHECKER: list[ObsPolicy] = []

first_fleet = st.lists(
    st.tuples(
        st.integers(0, 30),  # VM
        weight,
        st.booleans(),  # host-measured
        st.sampled_from([0.0, 0.3, 0.5, 1.0]),  # busy
        st.one_of(st.none(), st.integers(0, 3)),  # unit placed in last round (None: new)
        st.one_of(st.none(), st.integers(0, 15)),  # CPU it runs on
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(first_fleet)
def test_first_placement_keeps_the_loads_counts_and_cpu_time_it_would_sum_again(rows) -> None:
    import unicache.policy.obs.policy as obs_module
    from unicache.model import CounterSample, CounterSource, Observation, Vcpu, Vm
    from unicache.policy.obs.options import ObsState

    units = TOPO_OPTERON_16.units()
    policy = ObsPolicy(units, ObsOptions())
    CHECKER[:] = [policy]
    vcpus: dict[str, list[Vcpu]] = {}
    samples, placed = [], {}
    for i, (vm, w, measured, busy, unit, cpu) in enumerate(rows):
        vid = VcpuId(f"vm{vm}", i)
        vcpus.setdefault(vid.vm, []).append(Vcpu(vid, None, frozenset(range(16)), cpu))
        if measured:
            misses = int(w * 1e9)
            samples.append(
                CounterSample(vid, CounterSource.TRACE, cycles=10**9, llc_misses=misses, busy=busy)
            )
        else:
            samples.append(
                CounterSample(
                    vid,
                    CounterSource.SOFTWARE,
                    busy=busy,
                    guest_bytes=int(w * 64e9),
                    task_clock_ns=10**9,
                )
            )
        if unit is not None:
            placed[vid] = units[unit].id
    obs = Observation(1, tuple(Vm(n, tuple(v)) for n, v in vcpus.items()), tuple(samples))
    before = (obs_module.LoadViews, obs_module.UnitTally)
    obs_module.LoadViews, obs_module.UnitTally = _CheckedViews, _CheckedTally
    try:
        policy.decide(obs, ObsState(unit_of=placed))
    finally:
        obs_module.LoadViews, obs_module.UnitTally = before
