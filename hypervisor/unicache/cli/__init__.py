"""The ``unicache`` command line: one module per group of commands (``unicache --help``).

Every command has ``--json`` (``run``: the decision log's records on stdout); humans get
tables. A user error (bad flag value, unreadable
file, unknown model) is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys

import click
import typer

from unicache import __version__
from unicache.cli import bench, libvirt, vm
from unicache.cli.common import JsonOpt, app, err
from unicache.errors import UnicacheError

__all__ = ["app", "main"]

# the commands' modules, in the order --help lists them
for _group in ("topology", "replay", "run", "place", "status", "density"):
    importlib.import_module(f"unicache.cli.{_group}")


@app.command()
def version(json_out: JsonOpt = False) -> None:
    """Print the version."""
    print(json.dumps({"version": __version__}) if json_out else __version__)


app.add_typer(bench.app, name="bench", help="Benchmarks (shim, ...).")
app.add_typer(vm.app, name="vm", help="Start, stop and list VMs run by unicache's own QEMU.")
libvirt.register(app)  # top-level commands: attach, install-hook, remove-hook


def main() -> None:
    """Console entry point: one line and exit 2 on a user error, never a traceback."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        # without standalone mode click returns typer.Exit's code instead of exiting
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except UnicacheError as error:
        # plain write: one line, never wrapped to the terminal width
        sys.stderr.write(f"unicache: error: {error}\n")
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("unicache: aborted", highlight=False)
        sys.exit(130)
    except click.ClickException as exc:  # usage errors, in standalone_mode=False
        # one line as every user error, with where the help is (click's own is three)
        where = ""
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            where = f" (see {exc.ctx.command_path} --help)"
        message = " ".join(exc.format_message().split())
        sys.stderr.write(f"unicache: error: {message}{where}\n")
        sys.exit(exc.exit_code)
