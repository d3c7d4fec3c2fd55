"""``unicache density``: how many VMs of a tenant mix a host holds at their SLOs, with and
without unicache.

The experiment runs on the simulator (``tools/sim``, the ``unicache_sim`` package), which
a host install need not have: this module imports it only when the command runs, and says
in one line (exit 2) when it is missing. docs/density.md describes the method.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from unicache.cli.common import JsonOpt, app
from unicache.errors import ConfigError


def _no_simulator(err: ModuleNotFoundError) -> ConfigError:
    """The one line for a front end whose import found no simulator (``err`` itself, raised
    again, when what is missing is something else)."""
    if err.name is None or err.name.split(".")[0] != "unicache_sim":
        raise err
    return ConfigError("density runs on the simulator, which is not installed (make sim-build)")


#: the options of ``density``, one alias each (the command's signature stays short)
_DensityModel = Annotated[
    str, typer.Option("--model", "-m", help="A shipped machine model (see `unicache models`).")
]
_DensityMix = Annotated[
    Path | None,
    typer.Option("--mix", help="A mix file: [[mix]] tables, a name and flavors = {web = 3}."),
]
_DensityRandomMixes = Annotated[
    int, typer.Option("--random-mixes", help="Draw N random mixes of 2-4 flavors instead.")
]
_DensityPolicies = Annotated[
    str, typer.Option("--policies", help="Comma-separated: linux, unicache.")
]
_DensitySeeds = Annotated[int, typer.Option("--seeds", help="Seeds per point (pooled).")]
_DensityOut = Annotated[
    Path, typer.Option("--out", help="Results, plots and the cache of finished points.")
]
_DensityScheduler = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        help="A Dask scheduler, tcp://HOST:PORT (default: a "
        "local cluster on this machine's CPUs).",
    ),
]
_DensityWorkers = Annotated[
    int, typer.Option("--workers", help="Local worker processes (0: one per CPU).")
]
_DensityCatalogue = Annotated[
    Path | None,
    typer.Option("--catalogue", help="A tenant catalogue (default: the shipped one)."),
]
_DensityOvercommit = Annotated[
    float, typer.Option("--overcommit", help="vCPUs per CPU both hosts admit (1..16).")
]
_DensityTolerance = Annotated[
    float,
    typer.Option("--tolerance", help="Stop the search within this share of N " "(0: to one VM)."),
]
_DensityMixSeed = Annotated[int, typer.Option("--mix-seed", help="Seed of --random-mixes.")]
_DensityWindowMs = Annotated[
    float, typer.Option("--window-ms", help="Simulated ms of one sampled interval.")
]
_DensityLive = Annotated[
    bool,
    typer.Option(
        "--live",
        help="Boot real guests on this host from the project's "
        "image, one tenant each, and measure their requests without and "
        "with the daemon, beside the simulator's prediction for --model.",
    ),
]
_DensityGuests = Annotated[int, typer.Option("--guests", help="--live: guests to boot (1..3).")]
_DensityVcpus = Annotated[int, typer.Option("--vcpus", help="--live: vCPUs per guest (1..2).")]
_DensitySeconds = Annotated[
    float, typer.Option("--seconds", help="--live: seconds measured per policy.")
]
_DensityAlwaysPlace = Annotated[
    bool,
    typer.Option(
        "--always-place",
        help="--live: run the daemon as make demo does "
        "(--unify l2 --always-place: place and pin without weighing the "
        "cost) instead of as an operator runs it.",
    ),
]


@app.command()
def density(
    model: _DensityModel = "epyc-2s",
    mix: _DensityMix = None,
    random_mixes: _DensityRandomMixes = 0,
    policies: _DensityPolicies = "linux,unicache",
    seeds: _DensitySeeds = 1,
    json_out: JsonOpt = False,
    out: _DensityOut = Path("build/density"),
    scheduler: _DensityScheduler = None,
    workers: _DensityWorkers = 0,
    catalogue: _DensityCatalogue = None,
    overcommit: _DensityOvercommit = 4.0,
    tolerance: _DensityTolerance = 0.05,
    mix_seed: _DensityMixSeed = 1,
    window_ms: _DensityWindowMs = 1.0,
    live: _DensityLive = False,
    guests: _DensityGuests = 2,
    vcpus: _DensityVcpus = 1,
    seconds: _DensitySeconds = 10.0,
    always_place: _DensityAlwaysPlace = False,
) -> None:
    """VMs per host at the SLO, with and without unicache, on a simulated host (--live: real
    guests on this host)."""
    argv = shlex.join(["unicache", *sys.argv[1:]])
    if live:
        if random_mixes:
            raise ConfigError("--live runs one mix: give --mix FILE or none (web and kv)")
        try:
            from unicache_sim.density import live_cli
        except ModuleNotFoundError as err:
            raise _no_simulator(err) from None
        _run(
            live_cli.run_live_command,
            live_cli.LiveOptions(
                model=model,
                mix=mix,
                guests=guests,
                vcpus=vcpus,
                seconds=seconds,
                policies=policies,
                json_out=json_out,
                out=out,
                catalogue=catalogue,
                overcommit=overcommit,
                argv=argv,
                always_place=always_place,
            ),
        )
        return
    try:
        from unicache_sim.density import cli as front
    except ModuleNotFoundError as err:
        raise _no_simulator(err) from None
    opts = front.DensityOptions(
        model=model,
        mix=mix,
        random_mixes=random_mixes,
        policies=policies,
        seeds=seeds,
        json_out=json_out,
        out=out,
        scheduler=scheduler,
        workers=workers,
        catalogue=catalogue,
        overcommit=overcommit,
        tolerance=tolerance,
        mix_seed=mix_seed,
        window_ms=window_ms,
        argv=argv,
    )
    _run(front.run_command, opts)


def _run(command: Any, opts: Any) -> None:
    """Run a front end's command: a catalogue's problems one line each, exit 2; its exit
    code otherwise."""
    from unicache_sim.density.tenants import CatalogueError  # the front end imported it

    try:
        code = command(opts)
    except CatalogueError as err:
        # one line per problem, every one of them
        for line in err.problems:
            sys.stderr.write(f"unicache: error: {line}\n")
        raise typer.Exit(2) from None
    if code:
        raise typer.Exit(code)
