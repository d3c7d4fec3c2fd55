"""The paper-versus-unicache table: one row per paper figure or table, and its markdown.

``make figures`` (``unicache-sim figures``) writes ``docs/reproduction.md`` from these rows.
A row names the paper's figure, the command that reproduces it, what the paper reports,
what the simulator gives (median over seeds and the spread) and a verdict with its reason.
Rows for experiments not attempted carry the verdict ``not attempted`` and say why, so the
table covers every figure and table of the five papers that evaluates a mechanism.
"""

from __future__ import annotations

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


#: a gain within this share of the paper's gain counts as reproduced (on ``x - 1``)
CLOSE = 0.25
#: a ratio within this of 1.0 is "no effect"
NOISE = 0.02
#: a percentage within this many points of the paper's counts as reproduced
CLOSE_POINTS = 10.0


def gain_verdict(paper: float, sim: float) -> tuple[Verdict, str]:
    """Reproduced: the gain (``x - 1``) points the paper's way and is within :data:`CLOSE`
    of the paper's gain; shape only: it points the same way; otherwise not reproduced."""
    paper_gain, sim_gain = paper - 1, sim - 1
    same_way = (sim_gain > NOISE) == (paper_gain > NOISE) and (sim_gain < -NOISE) == (
        paper_gain < -NOISE
    )
    if same_way and abs(sim_gain - paper_gain) <= CLOSE * abs(paper_gain) + 1e-12:
        return Verdict.REPRODUCED, ""
    if same_way:
        direction = "smaller" if sim < paper else "larger"
        return Verdict.SHAPE, f"the gain is {direction} than the paper's"
    return (
        Verdict.NOT_REPRODUCED,
        f"the simulator gives {sim:.2f}x where the paper has {paper:.2f}x",
    )


def points_verdict(paper_pct: float, sim_pct: float) -> tuple[Verdict, str]:
    """Reproduced within :data:`CLOSE_POINTS`; shape only if it has the sign of the paper's
    effect (and the paper has one); otherwise not reproduced."""
    if abs(sim_pct - paper_pct) <= CLOSE_POINTS:
        return Verdict.REPRODUCED, ""
    # the paper has no effect (within the margin) and the simulator has one: not a shape
    if abs(paper_pct) > CLOSE_POINTS and (sim_pct > 0) == (paper_pct > 0):
        return Verdict.SHAPE, f"{sim_pct:.0f}% where the paper has {paper_pct:.0f}%"
    return Verdict.NOT_REPRODUCED, f"{sim_pct:.0f}% where the paper has {paper_pct:.0f}%"


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
