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
from unicache.policy.obs import ObsOptions, ObsPolicy, _counts_for
from unicache.policy.obscredit import credit_weights, credit_weights_by_vm
from unicache.policy.obsgain import pinning_gain
from unicache.policy.obsviews import LoadViews
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
    room = policy._with_room(unit_of, busy)
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
    demand = policy._demand(unit_of, busy)
    if demand is not None and len(unit_of) > sum(len(u.cpus) for u in policy.units):
        share = min(1.0, policy._share(demand) + policy.options.imbalance_margin)
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
    got = policy._rebalance(dict(unit_of), weights, trusted, kept, busy)
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
