"""What the ``unicache-sim`` commands share: the error console, the one-line user error and
seed lists."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text
from unicache.errors import UnicacheError

#: progress bars and errors go to stderr, results to stdout
stderr = Console(stderr=True)


def user_error(error: Exception) -> NoReturn:
    """A user error (a bad option, an unreadable file, an unreachable scheduler): one line
    on stderr, exit 2; the message is printed as text, never read as markup."""
    stderr.print(Text.assemble(("error:", "red"), f" {error}"), soft_wrap=True)
    raise typer.Exit(2)


def parse_seeds(text: str) -> tuple[int, ...]:
    """``5`` (seeds 1-5), ``1-5`` or ``1,3,7``.

    :raises UnicacheError: on anything else, or fewer than one seed.
    """
    try:
        if text.isdigit():
            seeds = tuple(range(1, int(text) + 1))
        elif "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            seeds = tuple(range(lo, hi + 1))
        else:
            seeds = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as err:
        raise UnicacheError(f"--seeds wants N, A-B or a list, not {text!r}") from err
    if not seeds:
        raise UnicacheError("--seeds names no seed")
    return seeds
