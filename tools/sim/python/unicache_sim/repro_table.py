"""The paper-versus-unicache table: one row per paper figure or table, and its markdown.

``make figures`` (``unicache-sim figures``) writes ``docs/reproduction.md`` from these rows.
A row names the paper's figure, the command that reproduces it, what the paper reports,
what the simulator gives (median over seeds and the spread) and a verdict with its reason.
Rows for experiments not attempted carry the verdict ``not attempted`` and say why, so the
table covers every figure and table of the five papers that evaluates a mechanism.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class Verdict(str, Enum):
    """How closely the simulator reproduces a paper's result."""

    REPRODUCED = "reproduced"
    SHAPE = "shape only"
    NOT_REPRODUCED = "not reproduced"
    NOT_ATTEMPTED = "not attempted"


#: papers in the order the table lists them, with their seed file's short name
PAPERS = ("MFC", "OBS", "SRM", "NCC", "DMC")


@dataclass(frozen=True, slots=True)
class Spread:
    """A value over seeds: its median, min and max, and how many seeds."""

    median: float
    low: float
    high: float
    seeds: int

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        """The spread of ``values`` (at least one)."""
        if not values:
            raise ValueError("a spread of no values")
        return Spread(statistics.median(values), min(values), max(values), len(values))

    def text(self, fmt: str = "{:.2f}", unit: str = "") -> str:
        """``median (low-high, N seeds)``; one seed or no spread shows the value alone."""
        mid = fmt.format(self.median) + unit
        if self.seeds <= 1 or self.low == self.high:
            return f"{mid} ({self.seeds} seed{'s' if self.seeds != 1 else ''})"
        return f"{mid} ({fmt.format(self.low)}-{fmt.format(self.high)}{unit}, {self.seeds} seeds)"


@dataclass(frozen=True, slots=True)
class ReproRow:
    """One paper figure or table, side by side with the simulator.

    :param paper: one of :data:`PAPERS`.
    :param figure: the paper's name for it ("Figure 3", "Table 1", "§6.6.1").
    :param what: what it shows, in a few words.
    :param command: the command that reproduces the simulator's value ("" if not attempted).
    :param paper_value: what the paper reports, in words and numbers.
    :param sim_value: what the simulator gives (median and spread), in words and numbers.
    :param verdict: how close.
    :param why: the reason for the verdict (always given unless reproduced).
    """

    paper: str
    figure: str
    what: str
    command: str
    paper_value: str
    sim_value: str
    verdict: Verdict
    why: str = ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows: Sequence[ReproRow], header: str) -> str:
    """The whole of ``docs/reproduction.md``: ``header``, then a table per paper."""
    out = [header.rstrip(), ""]
    counts = {v: sum(1 for r in rows if r.verdict is v) for v in Verdict}
    out.append(
        "Rows: "
        + ", ".join(f"{n} {v.value}" for v, n in counts.items() if n)
        + f" ({len(rows)} in all)."
    )
    for paper in PAPERS:
        mine = [r for r in rows if r.paper == paper]
        if not mine:
            continue
        out += ["", f"## {paper}", ""]
        out.append("| Figure | What | Paper | unicache-sim | Verdict | Command |")
        out.append("|---|---|---|---|---|---|")
        for r in mine:
            verdict = r.verdict.value + (f": {r.why}" if r.why else "")
            command = f"`{r.command}`" if r.command else "-"
            out.append(
                "| "
                + " | ".join(
                    _cell(c)
                    for c in (r.figure, r.what, r.paper_value, r.sim_value, verdict, command)
                )
                + " |"
            )
    return "\n".join(out) + "\n"
