"""Statistics of ``unicache bench shim``: a paired median and its distribution-free interval.

Each sample is one of the driver's (guest-agent/shim/uc_bench: the same calls through the
preloaded function and through libc's own, four adjacent blocks, W O O W or O W W O): its
ns per call on each path. The added cost is the median of the paired differences
(with - without); its 95 % interval comes from order statistics, ``[x(k), x(n+1-k)]`` with
``k`` the largest rank whose binomial(n, 1/2) tail stays within 2.5 %, which holds whatever
the distribution of the differences, so long as the samples are independent (for large n,
about ``n/2 -+ 1.96 sqrt(n)/2``; computed exactly, as uc_bench_run.c does). Below 6 samples no
rank reaches 95 %: the interval is then the whole range.

The samples that are independent are the processes, not the blocks: a process's blocks
share its offset (where ASLR put the code and the buffers; between processes the shim's
median moves by some 20 ns at 4 KiB on the project machine), so a cell's figure is the
median of its processes' medians and its interval is over them (:func:`paired_runs`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: one tail of the interval
TAIL = 0.025


def ci_rank(n: int) -> int:
    """The 1-based rank ``k`` of the interval's low end among ``n`` sorted values."""
    lbase = math.lgamma(n + 1) - n * math.log(2.0)
    cdf, k = 0.0, 1
    for j in range(n // 2):
        cdf += math.exp(lbase - math.lgamma(j + 1) - math.lgamma(n - j + 1))
        if cdf > TAIL:
            break
        k = j + 1
    return k


def median_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """``(low, median, high)`` of ``values``: the median and its 95 % interval.

    :raises ValueError: when ``values`` is empty.
    """
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    k = ci_rank(len(ordered))
    return ordered[k - 1], statistics.median(ordered), ordered[len(ordered) - k]


@dataclass(frozen=True, slots=True)
class Paired:
    """The paired comparison of one cell (in the samples' unit: ns or us per call).

    :param added: median of with - without.
    :param ci_low: low end of its 95 % interval.
    :param ci_high: high end.
    :param with_: median of the with-preload path.
    :param without: median of libc's path.
    :param ratio: ``without / with`` (below 1: slower with).
    :param blocks: pairs.
    """

    added: float
    ci_low: float
    ci_high: float
    with_: float
    without: float
    ratio: float
    blocks: int


def paired_runs(run_added: Sequence[float], with_blocks: Sequence[float],
                without_blocks: Sequence[float]) -> Paired:
    """The comparison over processes: the median of each process's paired median
    (``run_added``) and its interval, the paths' medians from the pooled blocks.

    :raises ValueError: when there are no runs, or the blocks differ in length or are empty.
    """
    _check_blocks(with_blocks, without_blocks)
    return _paired(median_ci(run_added), with_blocks, without_blocks)


def paired(with_blocks: Sequence[float], without_blocks: Sequence[float]) -> Paired:
    """The comparison of pooled block pairs.

    :raises ValueError: when the two differ in length or are empty.
    """
    _check_blocks(with_blocks, without_blocks)
    diffs = [w - o for w, o in zip(with_blocks, without_blocks, strict=True)]
    return _paired(median_ci(diffs), with_blocks, without_blocks)


def _check_blocks(with_blocks: Sequence[float], without_blocks: Sequence[float]) -> None:
    if len(with_blocks) != len(without_blocks) or not with_blocks:
        raise ValueError(f"{len(with_blocks)} with-blocks against {len(without_blocks)}")


def _paired(added: tuple[float, float, float], with_blocks: Sequence[float],
            without_blocks: Sequence[float]) -> Paired:
    """A :class:`Paired` of an added cost ``(low, median, high)`` and the paths' blocks."""
    low, mid, high = added
    w, o = statistics.median(with_blocks), statistics.median(without_blocks)
    return Paired(mid, low, high, w, o, o / w if w > 0 else 0.0, len(with_blocks))
