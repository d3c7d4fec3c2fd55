"""``unicache-sim srm --case``: the SRM paper's §4 experiments (Figure 16's T_l sweep, §4.5's
random reads and re-scan, Figure 13's co-runners), run by :mod:`.colors_replicas`."""

from __future__ import annotations

from pathlib import Path

from unicache.errors import UnicacheError
from unicache.topology.toml import load_model

from unicache_sim.cli.common import parse_seeds, user_error
from unicache_sim.cli.findings import emit_findings
from unicache_sim.cli.output import progress_steps


def srm_case(case: str, model: str | None, seeds: str, as_json: bool, plot: Path | None) -> None:
    """Run one §4 case and print its findings (table or JSON); exit 2 on a user error.

    :param case: a name of :data:`unicache_sim.experiments.srm.cases.CASES`.
    :param model: the machine (``None``: the paper's for the case).
    :param seeds: the seed list (``parse_seeds``).
    :param as_json: print JSON instead of a table.
    :param plot: where to write the case's PNG.
    """
    from unicache_sim.experiments.srm.cases import CASES, DEFAULT_MODEL, run_case, steps_per_seed

    try:
        if case not in CASES:
            raise UnicacheError(f"--case: unknown {case!r}; known: fig2, {', '.join(CASES)}")
        seed_list = parse_seeds(seeds)
        name = model or DEFAULT_MODEL[case]
        topo = load_model(name)
        with progress_steps(steps_per_seed(case) * len(seed_list)) as step:
            result = run_case(case, topo, seed_list, step)
        if plot is not None:
            from unicache_sim.repro.figures import plot_srm_case

            plot_srm_case(result, plot, f"{name}: SRM {case}, seeds {seeds}")
    except UnicacheError as err:
        user_error(err)
        return
    head = {"case": case, "model": name, "seeds": list(seed_list)}
    emit_findings(list(result.findings), head, f"SRM {case} on {name}, seeds {seeds}", as_json,
                  plot)
