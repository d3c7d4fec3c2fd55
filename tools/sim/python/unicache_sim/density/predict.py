"""The simulator's prediction for a live run: the same mix and N on a machine model, per policy.


``unicache density --live`` measures real guests on this host, whose topology is no
shipped model; next to the measurement it prints what the simulator predicts for the
same tenants on a model (``--model``), labelled as such. The prediction is the density
experiment's path at one N: the references alone (stages 1 and 2 of
:mod:`unicache_sim.density.experiment`), then one point per policy with the mix's first N VMs,
their SLOs checked. The flavors run at their catalogue size (the live guests are sized
down for TCG). A handful of points: they run in this process (:class:`SerialRunner`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from unicache_sim.density.experiment import (
    DensityRequest,
    check_request,
    measure_references,
    rates_of,
)
from unicache_sim.density.mixes import mix_vms
from unicache_sim.density.point import DensityTiming, TenantResult
from unicache_sim.density.points import DensityPoint, SerialRunner, run_task
from unicache_sim.density.search import Reference, SloCheck, check_point
from unicache_sim.density.tenants import Catalogue, Mix


@dataclass(frozen=True, slots=True)
class PredictedPolicy:
    """One policy at the live run's N.

    :param policy: linux or unicache.
    :param admitted: whether the model admits the N VMs.
    :param tenants: per flavor, what the simulated point measured.
    :param checks: per flavor with an SLO, its check.
    """

    policy: str
    admitted: bool
    tenants: tuple[TenantResult, ...]
    checks: tuple[SloCheck, ...]

    def check(self, flavor: str) -> SloCheck | None:
        """The SLO check of one flavor, if it has one."""
        return next((c for c in self.checks if c.flavor == flavor), None)


@dataclass(frozen=True, slots=True)
class Prediction:
    """What the simulator predicts.

    :param model: the machine model (not this host).
    :param n: VMs.
    :param references: per flavor, alone on the model under Linux.
    :param policies: per policy.
    """

    model: str
    n: int
    references: tuple[Reference, ...]
    policies: tuple[PredictedPolicy, ...]

    @property
    def label(self) -> str:
        """How the report names it."""
        return f"simulator prediction for model {self.model} (not this host)"


def predict(model: str, catalogue: Catalogue, mix: Mix, n: int,
            policies: Sequence[str] = ("linux", "unicache"), overcommit: float = 4.0,
            timing: DensityTiming | None = None) -> Prediction:
    """The mix's first ``n`` VMs on ``model``, one seed, under each policy.

    :raises ConfigError: on an unknown model or policy.
    """
    req = DensityRequest(model, catalogue, (mix,), tuple(policies), 1, overcommit,
                         timing or DensityTiming(), 0.0)
    check_request(req)
    runner = SerialRunner()
    refs = measure_references(req, runner, [])
    rates = rates_of(refs)
    flavors = tuple(catalogue.get(f) for f in mix_vms(mix, n))
    out = []
    for policy in policies:
        outcome = run_task(DensityPoint("search", model, mix.name, n, policy, 1, flavors,
                                        rates, overcommit, req.timing)).outcome
        checks: tuple[SloCheck, ...] = ()
        if outcome.admitted:
            checks = check_point(
                catalogue, refs,
                {t.flavor: [t.latencies_us] for t in outcome.tenants},
                {t.flavor: [t.mb_per_s] for t in outcome.tenants},
            )
        slim = tuple(_slim(t) for t in outcome.tenants)
        out.append(PredictedPolicy(policy, outcome.admitted, slim, checks))
    return Prediction(model, n, tuple(refs.values()), tuple(out))


def _slim(t: TenantResult) -> TenantResult:
    # every request's latency is not part of the report
    return TenantResult(t.flavor, t.vms, t.requests, t.mean_us, t.p50_us, t.p95_us, t.p99_us,
                        t.worst_vm_p95_us, t.mb_per_s)
