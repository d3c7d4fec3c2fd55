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
FRONT_END = "unicache_sim.density_cli"
#: the front end of ``--live`` (real guests on this host, beside the simulator's prediction)
LIVE_FRONT_END = "unicache_sim.density_live_cli"


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


@app.command()
def density(
    model: Annotated[
        str, typer.Option("--model", "-m", help="A shipped machine model (see `unicache models`).")
    ] = "epyc-2s",
    mix: Annotated[
        Path | None,
        typer.Option("--mix", help="A mix file: [[mix]] tables, a name and flavors = {web = 3}."),
    ] = None,
    random_mixes: Annotated[
        int, typer.Option("--random-mixes", help="Draw N random mixes of 2-4 flavors instead.")
    ] = 0,
    policies: Annotated[
        str, typer.Option("--policies", help="Comma-separated: linux, unicache.")
    ] = "linux,unicache",
    seeds: Annotated[int, typer.Option("--seeds", help="Seeds per point (pooled).")] = 1,
    json_out: JsonOpt = False,
    out: Annotated[
        Path, typer.Option("--out", help="Results, plots and the cache of finished points.")
    ] = Path("build/density"),
    scheduler: Annotated[
        str | None,
        typer.Option("--scheduler", help="A Dask scheduler, tcp://HOST:PORT (default: a "
                     "local cluster on this machine's CPUs)."),
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", help="Local worker processes (0: one per CPU).")
    ] = 0,
    catalogue: Annotated[
        Path | None,
        typer.Option("--catalogue", help="A tenant catalogue (default: the shipped one)."),
    ] = None,
    overcommit: Annotated[
        float, typer.Option("--overcommit", help="vCPUs per CPU both hosts admit (1..16).")
    ] = 4.0,
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Stop the search within this share of N "
                            "(0: to one VM).")
    ] = 0.05,
    mix_seed: Annotated[int, typer.Option("--mix-seed", help="Seed of --random-mixes.")] = 1,
    window_ms: Annotated[
        float, typer.Option("--window-ms", help="Simulated ms of one sampled interval.")
    ] = 1.0,
    live: Annotated[
        bool, typer.Option("--live", help="Boot real guests on this host from the project's "
                           "image, one tenant each, and measure their requests without and "
                           "with the daemon, beside the simulator's prediction for --model.")
    ] = False,
    guests: Annotated[int, typer.Option("--guests", help="--live: guests to boot (1..3).")] = 2,
    vcpus: Annotated[int, typer.Option("--vcpus", help="--live: vCPUs per guest (1..2).")] = 1,
    seconds: Annotated[
        float, typer.Option("--seconds", help="--live: seconds measured per policy.")
    ] = 10.0,
    always_place: Annotated[
        bool, typer.Option("--always-place", help="--live: run the daemon as make demo does "
                           "(--unify l2 --always-place: place and pin without weighing the "
                           "cost) instead of as an operator runs it.")
    ] = False,
) -> None:
    """VMs per host at the SLO, with and without unicache, on a simulated host (--live: real
    guests on this host)."""
    argv = shlex.join(["unicache", *sys.argv[1:]])
    if live:
        if random_mixes:
            raise ConfigError("--live runs one mix: give --mix FILE or none (web and kv)")
        front = _front_end(LIVE_FRONT_END)
        _run(front.run_live_command, front.LiveOptions(
            model=model, mix=mix, guests=guests, vcpus=vcpus, seconds=seconds,
            policies=policies, json_out=json_out, out=out, catalogue=catalogue,
            overcommit=overcommit, argv=argv, always_place=always_place))
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
    catalogue_error = importlib.import_module("unicache_sim.tenants").CatalogueError
    try:
        code = command(opts)
    except catalogue_error as err:
        # one line per problem, every one of them
        for line in err.problems:
            sys.stderr.write(f"unicache: error: {line}\n")
        raise typer.Exit(2) from None
    if code:
        raise typer.Exit(code)
