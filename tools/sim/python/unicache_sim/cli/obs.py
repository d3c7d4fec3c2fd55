"""``unicache-sim obs``: the observations paper's experiments (OBS-X, OBS-L, OBS-C against
a Linux-like scheduler), mounted by :mod:`unicache_sim.cli.main`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, cast

import typer
from unicache.errors import UnicacheError
from unicache.topology.toml import load_model

from unicache_sim.cli.common import parse_seeds, user_error
from unicache_sim.cli.findings import emit_findings
from unicache_sim.cli.output import progress_steps


def obs(
    scenario: Annotated[
        str,
        typer.Option(
            help="pairs (cb/sl on one LLC, the ~30 % case), migration (Figure 3), credit "
            "(Figure 5, c_credit 0/2/5 %), spec (Figures 2 and 4); a comma list, or all"
        ),
    ] = "pairs",
    model: Annotated[
        str, typer.Option(help="machine model; the paper's Linux machine is xeon-5300-quad")
    ] = "xeon-5300-quad",
    seeds: Annotated[str, typer.Option(help="seeds: N (1..N), A-B or a list")] = "5",
    backend: Annotated[
        str,
        typer.Option(
            help="how the host applies OBS-C's cpu.weight: libvirt (the domain's cpu_shares) "
            "or cgroup (unicache's own QEMU: per-vCPU threaded cgroups)"
        ),
    ] = "libvirt",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    plot: Annotated[Path | None, typer.Option(help="write a PNG, one panel per scenario")] = None,
) -> None:
    """The observations paper on the simulated host: one-vCPU VMs running cachebuster,
    spinloop or SPEC stand-ins forever, shared by CFS timeslices; ``linux`` leaves them
    where fork balancing put them, ``obs`` runs the daemon's loop (OBS-X, OBS-L, OBS-C of
    unicache.policy, applied as pins and CPU weights). Medians over seeds, with the range."""
    from unicache_sim.experiments.obs.scenarios import SCENARIOS, run_scenario, runs_per_seed
    from unicache_sim.guest.cfs import WEIGHT_BACKENDS, WeightBackend

    try:
        names = list(SCENARIOS) if scenario == "all" else scenario.split(",")
        unknown = [n for n in names if n not in SCENARIOS]
        if unknown or not names:
            raise UnicacheError(f"--scenario: unknown {unknown}; known: {', '.join(SCENARIOS)}")
        if backend not in WEIGHT_BACKENDS:
            raise UnicacheError(f"--backend must be one of {', '.join(WEIGHT_BACKENDS)}")
        weights = cast(WeightBackend, backend)
        seed_list = parse_seeds(seeds)
        topo = load_model(model)
        results = []
        total = sum(runs_per_seed(n) for n in names) * len(seed_list)
        with progress_steps(total) as step:
            for name in names:
                results.append(run_scenario(name, topo, seed_list, weights, step))
        if plot is not None:
            from unicache_sim.repro.obs_plot import plot_obs

            plot_obs(results, plot, f"{model}: OBS policies against Linux, seeds {seeds}")
    except UnicacheError as err:
        user_error(err)
        return
    findings = [f for r in results for f in r.findings]
    head = {"model": model, "backend": backend, "seeds": list(seed_list)}
    emit_findings(findings, head, f"OBS on {model} ({backend} weights), seeds {seeds}", as_json,
                  plot)
