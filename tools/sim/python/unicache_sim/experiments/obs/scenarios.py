"""The observations paper's four experiments as scenarios of :mod:`.sched`, each over
several seeds, summed up as findings beside the paper's figure.

* ``pairs`` ("Linux prototype results"): two cachebusters and two spinloops on the two
  cores of one LLC group; OBS against Linux and against the worst case
  ``[cb, sl][cb, sl]`` (the paper: 30 % faster than Linux, 73 % faster than the worst
  case, which degrades cachebuster 26-30 % from running uncontended).
* ``migration`` (Figure 3): four cachebusters and four spinloops on four cores in two LLC
  groups, a cachebuster and a spinloop swapping programs every few rounds; how often the
  cachebusters sit two per group, and how they move (the paper: "most of the time ...
  only two heavy cachebuster tasks in each LLC group"; cachebuster 12-62 % faster).
* ``credit`` (Figures 5-6): the SPEC mix on two cores, OBS with ``c_credit`` 0, 2 % and
  5 %; each task's speedup over Linux, the least, the geometric mean and the most (the
  paper at 2 %: worst task 99.7 % of Linux, mean +5.6 % with OBS-X).
* ``spec`` (Figures 2 and 4): the SPEC mix, two instances each on two cores, four each on
  four cores; speedup per program and overall (the paper: mcf +18-22 %, swim +11 %, the
  light ones -1 to -5 %, overall +6 % on two cores; +4.6 % on four).

A seed draws the start order, the names, the page frames and the random blocks; every mode
of one seed starts from the same draw, so per-seed ratios compare like with like.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from unicache.topology import Topology

from unicache_sim.experiments.findings import Finding, merge_seed_findings
from unicache_sim.experiments.obs.sched import Mode, ObsRun, ObsSpec, run_obs
from unicache_sim.experiments.obs.tasks import SPEC_MIX
from unicache_sim.guest.cfs import WeightBackend

SCENARIOS = ("pairs", "migration", "credit", "spec")
#: c_credit values of the credit scenario (Figure 5 spans 0 to 5 %)
CREDITS = (0.0, 0.02, 0.05)

Progress = Callable[[str], None]
#: (label, mode, c_credit) of each run of a seed
Modes = Sequence[tuple[str, Mode, float]]


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """A scenario's findings and its runs (per seed, per label) for plots.

    :param name: the scenario.
    :param findings: what it found.
    :param runs: label -> one run per seed.
    """

    name: str
    findings: tuple[Finding, ...]
    runs: dict[str, tuple[ObsRun, ...]]


def geomean(values: Sequence[float]) -> float:
    """The geometric mean (Zhang et al.'s system speedup, as the paper uses it)."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


def task_speedups(run: ObsRun, base: ObsRun) -> dict[str, float]:
    """Per VM, work per second of ``run`` over ``base`` (same seed, same VMs)."""
    return {t.vm: t.work_per_s / b.work_per_s for t, b in zip(run.tasks, base.tasks, strict=True)}


def kind_speedup(run: ObsRun, base: ObsRun, kind: str) -> float:
    """The mean speedup of the VMs that run ``kind`` in both runs."""
    ups = task_speedups(run, base)
    return statistics.fmean(ups[t.vm] for t in run.tasks if t.kind == kind)


def kind_rate(run: ObsRun, kind: str) -> float:
    """Total work per second of the VMs running ``kind``."""
    return sum(t.work_per_s for t in run.by_kind(kind))


def _runs(
    topo: Topology,
    spec: ObsSpec,
    modes: Sequence[tuple[str, Mode, float]],
    seeds: Sequence[int],
    progress: Progress | None,
) -> dict[str, tuple[ObsRun, ...]]:
    out: dict[str, list[ObsRun]] = {}
    for seed in seeds:
        for label, mode, credit in modes:
            run = run_obs(topo, replace(spec, seed=seed, c_credit=credit), mode)
            out.setdefault(label, []).append(run)
            if progress is not None:
                progress(f"{label} seed {seed}")
    return {k: tuple(v) for k, v in out.items()}


def pairs(
    topo: Topology, seeds: Sequence[int], backend: WeightBackend, progress: Progress | None = None
) -> ScenarioResult:
    """Cachebuster and spinloop pairs on the two cores of LLC group 0."""
    group = sorted(topo.cpus_in_llc(0))[:2]
    spec = ObsSpec(("cachebuster",) * 2 + ("spinloop",) * 2, tuple(group), backend=backend)
    modes: Modes = (("linux", "linux", 0.02), ("worst", "worst", 0.02), ("obs", "obs", 0.02))
    runs = _runs(topo, spec, modes, seeds, progress)
    alone = _runs(topo, replace(spec, tasks=("cachebuster",)), (("alone", "linux", 0.0),),
                  seeds, progress)
    runs.update(alone)
    cb = "cachebuster"
    lin, worst, obs = runs["linux"], runs["worst"], runs["obs"]

    def per_cpu_second(run: ObsRun) -> float:
        # how fast a cachebuster runs while it runs (the tasks take turns on a CPU)
        done = run.by_kind(cb)
        return sum(t.work_per_s for t in done) / sum(t.cpu_share for t in done)

    fig = "OBS-L, Linux prototype (cb/sl pairs)"
    over_linux = zip(obs, lin, strict=True)
    over_worst = zip(obs, worst, strict=True)
    findings = (
        Finding("pairs", fig, "cachebuster speedup, OBS over Linux", "1.30 (average)",
                tuple(kind_rate(o, cb) / kind_rate(b, cb) for o, b in over_linux)),
        Finding("pairs", fig, "cachebuster speedup, OBS over worst [cb,sl][cb,sl]", "1.73",
                tuple(kind_rate(o, cb) / kind_rate(w, cb) for o, w in over_worst)),
        Finding("pairs", fig, "cachebuster slowdown in the worst case, vs uncontended",
                "26-30 %",
                tuple(100.0 * (1 - per_cpu_second(w) / per_cpu_second(a))
                      for w, a in zip(worst, runs["alone"], strict=True))),
    )
    return ScenarioResult("pairs", findings, runs)


def migration(
    topo: Topology, seeds: Sequence[int], backend: WeightBackend, progress: Progress | None = None
) -> ScenarioResult:
    """Four cachebusters and four spinloops over two LLC groups, programs swapping."""
    spec = ObsSpec(("cachebuster",) * 4 + ("spinloop",) * 4, None, rounds=24, swap_every=4,
                   backend=backend)
    modes: Modes = (("linux", "linux", 0.02), ("obs", "obs", 0.02))
    runs = _runs(topo, spec, modes, seeds, progress)

    def balanced(run: ObsRun) -> float:
        measured = run.heavy_per_group[spec.warm_rounds:]
        fair = -(-sum(measured[0]) // len(measured[0]))
        return 100.0 * sum(1 for g in measured if max(g) <= fair) / len(measured)

    fig = "OBS-X, Figure 3 (cb migration)"
    cb = "cachebuster"
    findings = (
        Finding("migration", fig, "rounds with cachebusters 2 per LLC group, Linux (%)",
                "not shown", tuple(balanced(r) for r in runs["linux"])),
        Finding("migration", fig, "rounds with cachebusters 2 per LLC group, OBS (%)",
                "most of the time", tuple(balanced(r) for r in runs["obs"])),
        Finding("migration", fig, "vCPU moves between LLC groups per round, OBS",
                "occasional corrections",
                tuple(r.group_moves / spec.rounds for r in runs["obs"])),
        Finding("migration", fig, "cachebuster speedup, OBS over Linux",
                "1.12-1.62 (OBS-L + OBS-X)",
                tuple(kind_rate(o, cb) / kind_rate(b, cb)
                      for o, b in zip(runs["obs"], runs["linux"], strict=True))),
    )
    return ScenarioResult("migration", findings, runs)


def credit(
    topo: Topology, seeds: Sequence[int], backend: WeightBackend, progress: Progress | None = None
) -> ScenarioResult:
    """The SPEC mix on two cores, OBS with c_credit 0, 2 % and 5 %."""
    group = sorted(topo.cpus_in_llc(0))[:2]
    spec = ObsSpec(SPEC_MIX * 2, tuple(group), backend=backend)
    modes: list[tuple[str, Mode, float]] = [("linux", "linux", 0.0)]
    modes += [(f"obs c={c:g}", "obs", c) for c in CREDITS]
    runs = _runs(topo, spec, modes, seeds, progress)
    findings = []
    fig = "OBS-C, Figure 5 (c_credit)"
    for c in CREDITS:
        label = f"obs c={c:g}"
        ups = [task_speedups(o, b) for o, b in zip(runs[label], runs["linux"], strict=True)]
        paper_min = "0.997 at 2 % (Figure 6)" if c == 0.02 else "-"
        paper_mean = "1.056 at 2 % (Figure 6, 4 cores)" if c == 0.02 else "-"
        findings += [
            Finding("credit", fig, f"least task speedup over Linux, c_credit {c:.0%}", paper_min,
                    tuple(min(u.values()) for u in ups)),
            Finding("credit", fig, f"system speedup (geomean), c_credit {c:.0%}", paper_mean,
                    tuple(geomean(list(u.values())) for u in ups)),
            Finding("credit", fig, f"cpu.weight changes OBS-C made, c_credit {c:.0%}",
                    "credit shifts CPU time", tuple(float(r.actions.get("SetCpuWeight", 0))
                                                   for r in runs[label])),
        ]
    return ScenarioResult("credit", tuple(findings), runs)


def spec_mix(
    topo: Topology, seeds: Sequence[int], backend: WeightBackend, progress: Progress | None = None
) -> ScenarioResult:
    """The SPEC mix: two instances each on two cores (Figure 2), four on four (Figure 4)."""
    group = sorted(topo.cpus_in_llc(0))[:2]
    two = ObsSpec(SPEC_MIX * 2, tuple(group), backend=backend)
    four = ObsSpec(SPEC_MIX * 4, None, backend=backend)
    modes: Modes = (("linux", "linux", 0.0), ("obs", "obs", 0.0))
    runs: dict[str, tuple[ObsRun, ...]] = {}
    findings: list[Finding] = []
    paper = {
        2: {"mcf": "1.18-1.22", "swim": "1.11", "eon": "0.95-0.99", "sixtrack": "0.95-0.99",
            "overall": "1.06"},
        4: {"mcf": "improves (bar)", "swim": "improves (bar)", "eon": "> 0.97",
            "sixtrack": "> 0.97", "overall": "1.046 (OBS-X)"},
    }
    for cores, spec in ((2, two), (4, four)):
        got = _runs(topo, spec, modes, seeds, progress)
        runs.update({f"{k} {cores} cores": v for k, v in got.items()})
        fig = "OBS-L, Figure 2 (SPEC, 2 cores)" if cores == 2 else "OBS-X, Figure 4 (SPEC, 4 cores)"
        pairs_ = list(zip(got["obs"], got["linux"], strict=True))
        for kind in SPEC_MIX:
            findings.append(Finding("spec", fig, f"{kind} speedup, OBS over Linux",
                                    paper[cores][kind],
                                    tuple(kind_speedup(o, b, kind) for o, b in pairs_)))
        findings.append(Finding("spec", fig, "system speedup (geomean of tasks)",
                                paper[cores]["overall"],
                                tuple(geomean(list(task_speedups(o, b).values()))
                                      for o, b in pairs_)))
    return ScenarioResult("spec", tuple(findings), runs)


def merge_seeds(parts: Sequence[ScenarioResult]) -> ScenarioResult:
    """One scenario's results of single seeds (``unicache-sim figures`` runs each seed as a
    task) as one result over all of them, in the order given.

    :raises ValueError: on no part, or parts of different scenarios.
    """
    if not parts or len({p.name for p in parts}) != 1:
        raise ValueError("merge_seeds needs parts of one scenario")
    findings = merge_seed_findings([p.findings for p in parts])
    runs = {label: tuple(r for p in parts for r in p.runs[label]) for label in parts[0].runs}
    return ScenarioResult(parts[0].name, findings, runs)


def run_scenario(
    name: str,
    topo: Topology,
    seeds: Sequence[int],
    backend: WeightBackend,
    progress: Progress | None = None,
) -> ScenarioResult:
    """Run one scenario by name (:data:`SCENARIOS`)."""
    runners = {"pairs": pairs, "migration": migration, "credit": credit, "spec": spec_mix}
    return runners[name](topo, seeds, backend, progress)


def runs_per_seed(name: str) -> int:
    """How many runs one seed of a scenario makes (for progress bars)."""
    return {"pairs": 4, "migration": 2, "credit": 1 + len(CREDITS), "spec": 4}[name]
