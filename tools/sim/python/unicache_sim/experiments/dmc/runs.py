"""``unicache-sim dmc``'s microbenchmarks: the three of DMC §6 (Figures 3-5) over their
x-axes, on the paper's platform. SCU on DMC hardware, the what-if that runs the MFC
experiment, is :mod:`unicache_sim.experiments.scu_on_dmc` (above both experiments).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from unicache_sim.experiments.dmc.micro import ScanPoint, linked_list, pingpong, scan
from unicache_sim.spread import Spread

#: Figure 3's segment sizes, Figure 4's pushed lines, Figure 5's extra lines
SCAN_LINES = (1, 2, 4, 8)
PUSHED_LINES = tuple(range(9))
EXTRA_LINES = (0, 1, 2, 4, 8)

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ListPoint:
    """Figure 5 at one number of extra lines, over the seeds.

    :param extra: extra lines modified under the lock.
    :param lw: cycles per operation, plain loads and stores.
    :param cmsg: cycles per operation, in a cmsg handler.
    :param faster: 1 - cmsg / lw, per seed.
    """

    extra: int
    lw: Spread
    cmsg: Spread
    faster: Spread


def run_micro(
    seeds: tuple[int, ...], progress: Progress
) -> tuple[tuple[ScanPoint, ...], tuple[tuple[int, float], ...], tuple[ListPoint, ...]]:
    """Figures 3-5. The scan and the ping-pong have nothing random (contiguous memory,
    one program order); the list draws its issuers and operations from each seed."""
    scans = []
    for n in SCAN_LINES:
        scans.append(scan(n))
        progress(f"Figure 3, {n} line(s)")
    trips = []
    for k in PUSHED_LINES:
        trips.append((k, pingpong(k)))
        progress(f"Figure 4, {k} pushed")
    lists = []
    for extra in EXTRA_LINES:
        lw = [linked_list(extra, False, s) for s in seeds]
        cm = [linked_list(extra, True, s) for s in seeds]
        lists.append(
            ListPoint(
                extra,
                Spread.of(lw),
                Spread.of(cm),
                Spread.of([1 - c / w for c, w in zip(cm, lw, strict=True)]),
            )
        )
        progress(f"Figure 5, {extra} extra")
    return tuple(scans), tuple(trips), tuple(lists)
