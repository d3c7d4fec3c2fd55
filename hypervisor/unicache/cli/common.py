"""What every ``unicache`` command shares: the app, its consoles and common options.

Each command module (:mod:`unicache.cli.topology`, ``.replay``, ``.run``, ``.place``, ``.status``,
``.vm``, ``.libvirt``, ``.bench``) adds its commands to :data:`app`; ``unicache.cli``
imports them in the order ``--help`` lists them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import click
import typer
from rich.console import Console

from unicache.topology import Unify

app = typer.Typer(
    name="unicache",
    help=(
        "unicache: make a host's fragmented last-level caches and NUMA memory serve "
        "virtual machines like one large shared cache."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# tables stay readable when piped (rich would otherwise squeeze them into 80 columns)
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True)

ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="A shipped machine model (see `unicache models`)."),
]
FileOpt = Annotated[Path | None, typer.Option("--file", "-f", help="A TOML machine model file.")]
UNIFY_CHOICE = click.Choice([str(u) for u in Unify])
UnifyOpt = Annotated[
    str,
    typer.Option(
        "--unify",
        click_type=UNIFY_CHOICE,
        help="Cache unit: 'llc' = one LLC group, 'l2' = one core with its private caches.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def kib(n: int | None) -> str:
    """Bytes as MiB when whole, else KiB (``-`` when unknown)."""
    if n is None:
        return "-"
    return f"{n // (1024 * 1024)} MiB" if n % (1024 * 1024) == 0 else f"{n // 1024} KiB"

