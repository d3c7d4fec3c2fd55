"""The policy decides the same for density's web tenant whether its shims sample opens (the
agent's opt-in, ``unicache-agent --open-sample 262144:3``) or count every one (its default).

Match, per seed: round by round, the host takes the same placement actions (vCPU pins and
releases) and every VM's guest holds the same table (its entries' chunks, home vCPUs and
caching). OBS-C's CPU weights are left out: they follow the vCPUs' busy time, which the
shim's own cost changes (a sampled guest runs less), not the counts. At this size SCU
leaves every web VM alone under both (its hot data fits one LLC unit), so what the test
guards is that sampled, scaled counts do not make it place one, nor pin anything.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from unicache.host.ports import ActResult
from unicache.model import Action, Observation, PinVcpu, ReleaseVcpu
from unicache_sim.density.point import DensityTiming, PointSpec, run_point
from unicache_sim.density.tenants import load_catalogue
from unicache_sim.guest.multihost import MultiHost
from unicache_sim.guest.opensample import EVERY_OPEN, SMALL_FILES_SAMPLE, OpenSample

from tests.topologies import TOPO_OPTERON_16

#: four web VMs (two vCPUs each, in an LLC group each), six 1 ms intervals: a second a seed
WEB_VMS = 4
TIMING = DensityTiming(window_s=0.001, warm_rounds=4, measure_rounds=2)
RATES = (("web", 10_000.0),)

#: one round's placement: the pins and releases, and each VM's table as its guest holds it
Round = tuple[tuple[object, ...], tuple[tuple[str, frozenset[object]], ...]]


class _Decisions:
    """What the host was told to do, round by round, and how many chunks the reports named."""

    def __init__(self) -> None:
        self.rounds: list[Round] = []
        self.chunks_reported = 0

    def spy(self, monkeypatch: pytest.MonkeyPatch) -> None:
        act, observe = MultiHost.act, MultiHost.observe

        def acting(host: MultiHost, actions: Sequence[Action]) -> ActResult:
            result = act(host, actions)
            self.rounds.append((_pins(actions), _tables(host)))
            return result

        def observing(host: MultiHost, window: float | None = None, scale: float = 1.0
                      ) -> Observation:
            obs = observe(host, window, scale)
            self.chunks_reported += sum(len(r.chunks) for r in obs.reports)
            return obs

        monkeypatch.setattr(MultiHost, "act", acting)
        monkeypatch.setattr(MultiHost, "observe", observing)


def _pins(actions: Sequence[Action]) -> tuple[object, ...]:
    return tuple(
        (type(a).__name__, a.vcpu, getattr(a, "cpus", None))
        for a in actions
        if isinstance(a, PinVcpu | ReleaseVcpu)
    )


def _tables(host: MultiHost) -> tuple[tuple[str, frozenset[object]], ...]:
    return tuple(
        (h.vm, frozenset((c, e.vcpus, e.caching) for c, e in h.entries.items()))
        for h in host.hosts
    )


def _run(seed: int, sample: OpenSample, monkeypatch: pytest.MonkeyPatch) -> tuple[
    _Decisions, int
]:
    web = load_catalogue().get("web")
    decisions = _Decisions()
    with monkeypatch.context() as patch:
        decisions.spy(patch)
        spec = PointSpec((web,) * WEB_VMS, "unicache", seed, RATES, 2.0, TIMING, sample)
        out = run_point(TOPO_OPTERON_16, spec)
    tenant = out.tenant("web")
    assert out.admitted and tenant is not None
    return decisions, tenant.requests


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_sampled_opens_place_the_web_tenant_as_counting_every_open(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    every, every_requests = _run(seed, EVERY_OPEN, monkeypatch)
    sampled, sampled_requests = _run(seed, SMALL_FILES_SAMPLE, monkeypatch)
    # the same requests (seeded apart from the opens' draws), fewer files counted
    assert sampled_requests == every_requests > 0
    assert 0 < sampled.chunks_reported < every.chunks_reported
    assert len(sampled.rounds) == len(every.rounds) == TIMING.warm_rounds + TIMING.measure_rounds
    assert sampled.rounds == every.rounds
