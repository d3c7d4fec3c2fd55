"""What the ``unicache-sim`` commands share: the error console and the one-line user error."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

#: progress bars and errors go to stderr, results to stdout
stderr = Console(stderr=True)


def user_error(error: Exception) -> NoReturn:
    """A user error (a bad option, an unreadable file, an unreachable scheduler): one line
    on stderr, exit 2; the message is printed as text, never read as markup."""
    stderr.print(Text.assemble(("error:", "red"), f" {error}"), soft_wrap=True)
    raise typer.Exit(2)
