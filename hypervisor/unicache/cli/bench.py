"""``unicache bench``: benchmarks of unicache's components (mounted by the main CLI).

The benchmarks themselves are not product code: they build the guest shim and import the
guest agent from the source checkout, so they live in the checkout too (``tools/bench/``),
and each command loads its benchmark from there (:func:`load_bench`).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from unicache.errors import BenchError, UnicacheError

#: where the benchmarks are: ``tools/bench/`` of the checkout this package runs from
BENCH_DIR = Path(__file__).resolve().parents[3] / "tools" / "bench"

app = typer.Typer(help="Benchmarks of unicache's own components.", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)
_err = Console(stderr=True)


@app.callback()
def _group() -> None:
    """Benchmarks of unicache's own components."""


def load_bench(name: str) -> ModuleType:
    """Import the benchmark ``tools/bench/<name>.py`` of the source checkout (once).

    :raises BenchError: when unicache does not run from a checkout that has it.
    """
    path = BENCH_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"unicache_bench_{name}", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise BenchError(f"{path} not found: the benchmarks run from a source checkout")
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while defining
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[spec.name]
            raise
    return module


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
    try:
        res = load_bench("shim_bench").run_shim_bench(
            rounds=rounds, seconds=seconds, read_size=read_size
        )
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
