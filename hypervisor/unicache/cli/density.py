"""``unicache density``: how many VMs of a tenant mix a host holds at their SLOs, with and
without unicache.

The experiment runs on the simulator (``tools/sim``, the ``unicache_sim`` package), which
a host install need not have: this module imports it only when the command runs, and says
in one line (exit 2) when it is missing. docs/density.md describes the method.
"""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from unicache.cli.common import JsonOpt, app
from unicache.errors import ConfigError

#: the simulator's front end of this command
FRONT_END = "unicache_sim.density.cli"
#: the front end of ``--live`` (real guests on this host, beside the simulator's prediction)
LIVE_FRONT_END = "unicache_sim.density.live_cli"


def _front_end(name: str = FRONT_END) -> Any:
    """The simulator's front end, imported now.

    :raises ConfigError: when the simulator is not installed.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is not None and err.name.split(".")[0] == "unicache_sim":
            raise ConfigError(
                "density runs on the simulator, which is not installed (make sim-build)"
            ) from None
        raise


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
        front = _front_end(LIVE_FRONT_END)
        _run(
            front.run_live_command,
            front.LiveOptions(
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
    front = _front_end()
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
    catalogue_error = importlib.import_module("unicache_sim.density.tenants").CatalogueError
    try:
        code = command(opts)
    except catalogue_error as err:
        # one line per problem, every one of them
        for line in err.problems:
            sys.stderr.write(f"unicache: error: {line}\n")
        raise typer.Exit(2) from None
    if code:
        raise typer.Exit(code)
