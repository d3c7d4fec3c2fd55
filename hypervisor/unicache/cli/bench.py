"""``unicache bench``: benchmarks of unicache's components (mounted by the main CLI)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from unicache.errors import UnicacheError

app = typer.Typer(help="Benchmarks of unicache's own components.", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)
_err = Console(stderr=True)


@app.callback()
def _group() -> None:
    """Benchmarks of unicache's own components."""


@app.command("shim")
def shim(
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of a table.")
    ] = False,
    rounds: Annotated[int, typer.Option(help="Rounds (each measures both paths).")] = 7,
    seconds: Annotated[float, typer.Option(help="Seconds per run.")] = 1.0,
    read_size: Annotated[int, typer.Option(help="Bytes per read() call.")] = 256 * 1024,
) -> None:
    """read() throughput of a cached file with and without libunicache.so, and lookup cost."""
    from unicache.bench.shim import run_shim_bench

    try:
        res = run_shim_bench(rounds=rounds, seconds=seconds, read_size=read_size)
    except UnicacheError as err:
        _err.print(f"unicache bench shim: {err}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from err
    if json_out:
        sys.stdout.write(json.dumps(res.as_json()) + "\n")
        return
    table = Table(title=f"{res.read_size // 1024} KiB read(), {res.rounds} x {res.seconds:g} s")
    for col in ("with shim MB/s", "without MB/s", "ratio", "lookup ns"):
        table.add_column(col, justify="right")
    table.add_row(f"{res.with_mbps:.0f}", f"{res.without_mbps:.0f}", f"{res.ratio:.3f}",
                  f"{res.lookup_ns:.1f}")
    Console().print(table)
