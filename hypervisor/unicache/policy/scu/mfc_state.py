"""MFC's state, apart from its decision: the per-file information of §4.2 (kept per chunk,
§4.7), the parameters of Figure 2, what eq. 1-2 know of a cache unit, and the names of
Figure 2's rules with the answer (:class:`Access`) the decision gives.

:mod:`unicache.policy.scu.mfc` holds the decision, ``mfc_access`` of Figure 2, over these
types (and re-exports them). Pure: plain values, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from unicache.model import ChunkId

# Rule names (Figure 2 line numbers) as they appear in reasons, logs and metrics.
RULE_SMALL = "fig2:3-4 small"
RULE_REPLICATE_SPARE = "fig2:6-10 replicate-spare"
RULE_MIGRATE_MAX_AVAIL = "fig2:12-16 migrate-max-avail"
RULE_EVICT_LFU = "fig2:18-26 evict-lfu"
RULE_NON_CACHING = "fig2:27-29 non-caching"
RULE_REPLICATE_BUSY = "fig2:31-40 replicate-busy"
RULE_MIGRATE_HOLDER = "fig2:42-43 migrate-holder"
RULE_STAY_HOLDER = "fig2:31 stay-holder"
RULE_COMPETITIVE = "§4.5 competitive"

#: every rule, in Figure 2 order
RULES = (
    RULE_SMALL,
    RULE_REPLICATE_SPARE,
    RULE_MIGRATE_MAX_AVAIL,
    RULE_EVICT_LFU,
    RULE_NON_CACHING,
    RULE_STAY_HOLDER,
    RULE_REPLICATE_BUSY,
    RULE_MIGRATE_HOLDER,
    RULE_COMPETITIVE,
)


@dataclass(frozen=True, slots=True)
class Access:
    """The answer of ``mfc_access``: where to read and how.

    :param unit: ``newcore`` — the unit whose vCPUs must issue the read.
    :param caching: caching or non-caching loads.
    :param rule: the Figure 2 rule that decided.
    :param evicted: chunks whose copy on ``unit`` was dropped to make room.
    :param capped: the reading VM's share of the units refused a copy that Figure 2 over
        every VM's chunks together would have made (spare room, or a less used chunk of
        another VM to evict).
    """

    unit: int
    caching: bool
    rule: str
    evicted: tuple[ChunkKey, ...] = ()
    capped: bool = False


@dataclass(frozen=True, slots=True, order=True)
class ChunkKey:
    """A chunk of one VM: guests choose file ids, so the VM is part of the key.

    :param vm: the VM.
    :param chunk: the chunk inside that VM.
    """

    vm: str
    chunk: ChunkId


@dataclass(frozen=True, slots=True)
class MfcParams:
    """The parameters of Figure 2, named as the paper names them.

    :param min_read_size: §4.5 — reads of smaller chunks never migrate.
    :param busy_threshold: Figure 2 line 32 — a unit whose run-queue length per CPU is
        above this is busy.
    :param idle_threshold: Figure 2 line 33 — below this a unit is idle enough to take a
        replica.
    :param migration_cycles: §4.5 — cost of one thread migration.
    :param offchip_bytes_per_cycle: §4.5 — what one core reading from DRAM achieves.
    :param max_copies: a chunk is never held by more units than this.
    :param frequent_reads: the fewest reads from a unit since the last ``update_use`` that
        make it a "frequent user" (§4.2, the condition on lines 6-10 the pseudo-code leaves
        out); it must also read the chunk at least as often as the chunk's busiest copy is
        used.
    """

    min_read_size: int
    busy_threshold: float = 1.5
    idle_threshold: float = 0.75
    migration_cycles: int = 20_000
    offchip_bytes_per_cycle: float = 1.0
    max_copies: int = 4
    frequent_reads: int = 2

    def load_cost_cycles(self, size: int) -> float:
        """§4.5: the cost of loading ``size`` bytes from off-chip memory."""
        return size / self.offchip_bytes_per_cycle

    def migration_budget(self, size: int) -> int:
        """§4.5 competitive rule: migrations whose total cost stays below one load."""
        return int(self.load_cost_cycles(size) // self.migration_cycles)


#: the units of a chunk no unit holds (one object for them all)
NO_UNITS: frozenset[int] = frozenset()


class _NoReads(Mapping[int, int]):
    """An empty read-only mapping that copies (``copy``, ``deepcopy``) and pickles as
    itself: a ``MappingProxyType`` does neither, so a table holding it could not be copied
    whole (the simple form the fork tests compare with)."""

    __slots__ = ()

    def __getitem__(self, unit: int) -> int:
        raise KeyError(unit)

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __copy__(self) -> _NoReads:
        return self

    def __deepcopy__(self, memo: object) -> _NoReads:
        return self

    def __reduce__(self) -> str:
        return "NO_READS"

    def __repr__(self) -> str:
        return "NO_READS"


#: the reads of a chunk not read since the last aging (one read-only object for them all)
NO_READS: Mapping[int, int] = _NoReads()
#: the use counts of a chunk used nowhere (:attr:`ChunkState.use_pairs`)
NO_USE: tuple[int, ...] = ()


def use_pairs(use: Mapping[int, int]) -> tuple[int, ...]:
    """``f.use`` as :attr:`ChunkState.use_pairs` keeps it: ``(unit, count)`` pairs, flat,
    in the mapping's order."""
    return tuple(x for unit, count in use.items() for x in (unit, count))


def use_map(pairs: tuple[int, ...]) -> dict[int, int]:
    """The ``(unit, count)`` pairs of :attr:`ChunkState.use_pairs` as ``f.use``, unit ->
    count, in a new dict (the inverse of :func:`use_pairs`)."""
    return dict(zip(pairs[::2], pairs[1::2], strict=True))


@dataclass(slots=True)
class ChunkState:
    """MFC's per-file information (§4.2), for one chunk.

    :param size: ``S(f)`` in bytes.
    :param units: ``f.cores`` — the units believed to cache it (immutable, replaced on
        change: most chunks are held nowhere and share one empty set).
    :param use_pairs: ``f.use[a]`` — use counts per unit, aged by ``update_use``, as flat
        ``(unit, count)`` pairs in the order the units were first counted (immutable,
        replaced on change): a host tracks up to a million chunks, most used from one
        unit, and one pair costs 56 bytes where a dict costs 224 (issue #19). Read it
        through :meth:`use_of`, :meth:`total_use` or :attr:`use`.
    :param reads_from: reads issued from each unit since the last ``update_use``
        (immutable, replaced on change: most chunks are not read between two agings and
        share one empty map).
    :param migrations: migrations spent on it since the last ``update_use`` (§4.5).
    :param aged: the table's agings (``update_use`` calls) these counts are current to:
        the table halves a chunk's counts when it next reads the chunk
        (:mod:`unicache.policy.scu.mfc_chunks`), not every chunk at every aging. The table
        sets it; the counts a table hands out are always current, and a saved table
        leaves it out.
    """

    size: int
    units: frozenset[int] = NO_UNITS
    use_pairs: tuple[int, ...] = NO_USE
    reads_from: Mapping[int, int] = field(default_factory=lambda: NO_READS)
    migrations: int = 0
    aged: int = field(default=0, compare=False, repr=False)

    @property
    def use(self) -> dict[int, int]:
        """``f.use``, unit -> count, as a new dict (to read whole: tests, the saved state)."""
        return use_map(self.use_pairs)

    def use_of(self, unit: int) -> int:
        """``f.use[unit]`` (0 for a unit never counted)."""
        pairs = self.use_pairs
        for i in range(0, len(pairs), 2):
            if pairs[i] == unit:
                return pairs[i + 1]
        return 0

    def add_use(self, unit: int) -> None:
        """``f.use[unit] += 1``."""
        pairs = self.use_pairs
        for i in range(0, len(pairs), 2):
            if pairs[i] == unit:
                self.use_pairs = (*pairs[: i + 1], pairs[i + 1] + 1, *pairs[i + 2 :])
                return
        self.use_pairs = (*pairs, unit, 1)

    def total_use(self) -> int:
        """``sum(f.use)``."""
        return sum(self.use_pairs[1::2])

    def copy(self) -> ChunkState:
        """A deep copy (the immutable parts shared)."""
        return ChunkState(
            self.size,
            self.units,
            self.use_pairs,
            self.reads_from,
            self.migrations,
            self.aged,
        )

    def aged_to(self, agings: int) -> ChunkState:
        """These counts after the agings since :attr:`aged` up to ``agings`` (Figure 2
        lines 45-47, each halving the use counts, dropping those that reach zero, and
        forgetting the reads since the last aging; the competitive rule's migrations
        halve too): ``k`` halvings of a count ``n`` are ``n >> k``. A new object."""
        k = agings - self.aged
        if k <= 0:
            return self.copy()
        pairs = self.use_pairs
        use = tuple(
            x
            for i in range(0, len(pairs), 2)
            if pairs[i + 1] >> k
            for x in (pairs[i], pairs[i + 1] >> k)
        )
        return ChunkState(self.size, self.units, use, NO_READS, self.migrations >> k, agings)

    def empty_at(self) -> int:
        """The first aging after which no use count is left (``aged`` + the halvings that
        empty the largest count; at least one: an aging forgets a chunk used zero times)."""
        largest = max(self.use_pairs[1::2], default=0)
        return self.aged + max(1, largest.bit_length())


@dataclass(frozen=True, slots=True)
class UnitView:
    """What ``mfc_access`` needs to know of a unit this round.

    :param id: the unit.
    :param capacity: ``M_on-chip`` (eq. 2).
    :param counter_use: ``sum_l M_use(c, l)`` from eq. 1 (0 without miss counters).
    :param runqueue_len: run-queue length per CPU (busy fraction of its vCPUs per CPU).
    """

    id: int
    capacity: int
    counter_use: int = 0
    runqueue_len: float = 0.0


def m_use(misses: int, level_lines: int, level_size: int) -> int:
    """Equation 1: a unit uses all of level ``l`` if it missed at least ``m_lines`` times.

    :param misses: ``M_miss(c, l)`` over the last interval.
    :param level_lines: ``m_lines``, the level's number of lines.
    :param level_size: ``M_size(l)`` in bytes.
    """
    return level_size if misses >= level_lines else 0
