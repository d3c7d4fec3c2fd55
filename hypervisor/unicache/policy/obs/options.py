"""OBS's options and the state it keeps between rounds (:class:`~.policy.ObsPolicy`).

The observations paper's policies ("Policy: Reducing cache interference", "Policy:
Migrating across caches", "Policy: Addressing fairness") name their quantities; the
options give them values, each with its meaning and origin in its ``:param:`` line. Pure
data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from unicache.model import VcpuId
from unicache.policy.machine import DEFAULT_REMOTE_GAP, remote_gap_for
from unicache.policy.obs.credit import C_CREDIT
from unicache.policy.obs.queue import WAIT_MARGIN, MissCost, miss_cost_for
from unicache.topology import Topology


@dataclass(frozen=True, slots=True)
class ObsOptions:
    """Options of the OBS policies.

    :param rebalance_period: rounds between two OBS-X rebalances ("Periodically").
    :param imbalance_margin: a rebalance happens only when the heaviest unit's load
        exceeds the lightest's by this fraction of the heaviest (hysteresis).
    :param c_credit: OBS-C's share of CPU time reserved for credit.
    :param line_size: bytes per line, to turn guest bytes into line fills.
    :param heavy_weight_floor: OBS-C credits nothing while the heaviest co-runner's weight
        is below this (misses per cycle): differences between light vCPUs are noise.
    :param heavy_margin: OBS-L/C call a vCPU heavy only above ``average * (1 + margin)``
        and light only below ``average / (1 + margin)``.
    :param weight_hysteresis: OBS-C changes a cpu.weight only by at least this much.
    :param step_aside: a VM whose pins would keep no two cache-heavy vCPUs apart keeps its
        own CPUs (:mod:`~.gain`), one whose pins would cost more wait than its cache
        could save floats over its node (:mod:`~.queue`); ``False``: OBS pins every
        vCPU (the daemon's ``--always-place``).
    :param miss_cost: what a miss costs, to estimate what a pin could save (:mod:`~.queue`).
    :param wait_margin: a VM floating for its wait is pinned again only when its cache time
        exceeds the wait by this fraction.
    :param remote_gap: the dual-layered file cache paper's latency gap, (remote DRAM
        latency - local) / local: what a miss would pay more off a vCPU's home nodes
        (:mod:`~.home`).
    :param remote_gap_source: where ``remote_gap`` comes from.
    """

    rebalance_period: int = 5
    imbalance_margin: float = 0.10
    c_credit: float = C_CREDIT
    line_size: int = 64
    heavy_weight_floor: float = 1e-4
    heavy_margin: float = 0.25
    weight_hysteresis: int = 3
    step_aside: bool = True
    miss_cost: MissCost = field(default_factory=MissCost)
    wait_margin: float = WAIT_MARGIN
    remote_gap: float = DEFAULT_REMOTE_GAP
    remote_gap_source: str = "the dual-layered file cache paper's Opteron 246"


@dataclass(frozen=True, slots=True)
class ObsState:
    """What OBS remembers between rounds (read-only to the policy).

    :param unit_of: vCPU -> the unit OBS-X placed it in.
    :param weights: vCPU -> its last known cache weight.
    :param cpu_weights: vCPU -> the cpu.weight OBS-C last set.
    :param last_rebalance: the round of the last rebalance.
    :param clustered: VMs whose busy vCPUs OBS-X keeps in one unit (:mod:`~.cluster`).
    :param quiet: per VM, rounds in a row its pins would have kept nothing apart
        (:mod:`~.gain`).
    :param pinned: vCPUs OBS holds pinned (a VM that starts floating gets them back).
    :param crowded: VMs floating over their node for the wait a pin would add
        (:mod:`~.queue`).
    :param crowded_rounds: per pinned VM, rounds in a row its wait exceeded its cache time.
    :param homes: vCPU -> its home nodes, where its VM's memory is (:mod:`~.home`).
    """

    unit_of: Mapping[VcpuId, int] = field(default_factory=dict)
    weights: Mapping[VcpuId, float] = field(default_factory=dict)
    cpu_weights: Mapping[VcpuId, int] = field(default_factory=dict)
    last_rebalance: int = 0
    clustered: frozenset[str] = frozenset()
    quiet: Mapping[str, int] = field(default_factory=dict)
    pinned: frozenset[VcpuId] = frozenset()
    crowded: frozenset[str] = frozenset()
    crowded_rounds: Mapping[str, int] = field(default_factory=dict)
    homes: Mapping[VcpuId, frozenset[int]] = field(default_factory=dict)


def obs_options_for(topology: Topology, **overrides: Any) -> ObsOptions:
    """OBS's options for a machine: its line size and what a miss costs on it
    (:func:`~unicache.policy.obs.queue.miss_cost_for`), with ``overrides``."""
    gap, source = remote_gap_for(topology)
    settings: dict[str, Any] = {
        "line_size": topology.line_size,
        "miss_cost": miss_cost_for(topology),
        "remote_gap": gap,
        "remote_gap_source": source,
    }
    return ObsOptions(**{**settings, **overrides})
