"""``unicache attach``, ``install-hook`` and ``remove-hook``: unicache meets libvirt's domains.

Mounted as top-level commands of ``unicache`` by :func:`register` (typer cannot merge a
sub-app's commands into its parent); :data:`app` holds the same commands on its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.console import Console

from unicache.topology import Unify

app = typer.Typer(name="libvirt", help="libvirt integration.", no_args_is_help=True)
_out = Console(highlight=False)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
ConnectOpt = Annotated[
    str, typer.Option("--connect", "-C", help="libvirt URI.")
]
HooksDirOpt = Annotated[
    Path, typer.Option("--hooks-dir", help="libvirt's hook directory.")
]


def attach(
    domain: Annotated[str, typer.Argument(help="The libvirt domain.")],
    connect: ConnectOpt = "qemu:///system",
    json_out: JsonOpt = False,
) -> None:
    """Add the unicache agent channel to a domain, persistently and (if running) live.

    Idempotent. The channel is libvirt's bind mode, as its own guest-agent channel: QEMU
    listens on a socket libvirt makes in its channel directory at each start, and the
    daemon dials it (and dials again after a restart of either). A domain that already
    has the channel keeps it as it is.
    """
    from unicache.host.libvirt.channel import attach_channel

    result = attach_channel(connect, domain)
    if json_out:
        print(json.dumps({
            "domain": result.domain,
            "socket": None if result.socket is None else str(result.socket),
            "mode": result.mode, "persistent": result.persistent, "live": result.live,
        }, indent=2))
        return
    where = "socket chosen by libvirt at start" if result.socket is None else str(result.socket)
    who = "QEMU listens, the daemon dials" if result.mode == "bind" else "the daemon listens"
    _out.print(f"{domain}: agent channel ({result.mode} mode: {who}) on {where}")
    _out.print(f"  persistent definition: {result.persistent}")
    live = result.live
    if live.startswith("impossible"):
        live += " (the channel appears at the next start)"
    _out.print(f"  running domain: {live}")


def install_hook(
    connect: ConnectOpt = "qemu:///system",
    unify: Annotated[
        str, typer.Option("--unify", click_type=click.Choice([str(u) for u in Unify]),
                          help="Cache unit the placement uses.")
    ] = "llc",
    state_dir: Annotated[
        Path, typer.Option("--state-dir", help="The daemon's state directory.")
    ] = Path("/run/unicache"),
    hooks_dir: HooksDirOpt = Path("/etc/libvirt/hooks"),
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="The daemon's TOML config: its [place] table "
                     "(capacity, profile) is what the hook places with."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Install the libvirt qemu hook that places each domain when it starts.

    It places as `unicache place` does (docs/placement.md): pins and memory nodes, live
    and in the domain's definition. A hook already there is kept
    (HOOKS_DIR/qemu.unicache-orig) and still runs first.
    """
    from unicache.config import load_config
    from unicache.host.libvirt.hook import HookConfig
    from unicache.host.libvirt.hook import install_hook as install

    if config is not None:
        load_config(config)  # a bad file is an error now, not at every domain start
        config = config.resolve()
    change = install(HookConfig(connect, Unify(unify), state_dir, config), hooks_dir)
    _report(change, json_out)


def remove_hook(hooks_dir: HooksDirOpt = Path("/etc/libvirt/hooks"), json_out: JsonOpt = False
                ) -> None:
    """Remove unicache's libvirt hook and put back the one that was there before."""
    from unicache.host.libvirt.hook import remove_hook as remove

    _report(remove(hooks_dir), json_out)


def _report(change: Any, json_out: bool) -> None:
    if json_out:
        print(json.dumps({
            "path": str(change.path), "action": change.action,
            "backup": None if change.backup is None else str(change.backup),
            "note": change.note,
        }, indent=2))
        return
    kept = "" if change.backup is None else f" (previous hook: {change.backup})"
    _out.print(f"{change.path}: {change.action}{kept}; {change.note}")


#: the commands and their names, mounted at the top level by :func:`register`
COMMANDS: tuple[tuple[str, Callable[..., None]], ...] = (
    ("attach", attach),
    ("install-hook", install_hook),
    ("remove-hook", remove_hook),
)

for _name, _func in COMMANDS:
    app.command(_name)(_func)


def register(parent: typer.Typer) -> None:
    """Add ``attach``, ``install-hook`` and ``remove-hook`` to ``parent`` (``unicache``)."""
    for name, func in COMMANDS:
        parent.command(name)(func)
