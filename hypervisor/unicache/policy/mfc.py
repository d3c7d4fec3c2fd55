"""MFC's per-read decision, ``mfc_access`` of Figure 2, over cache units instead of cores.

This is the paper's algorithm (MFC paper §4.2-§4.7, Figure 2, equations 1-2) written so
that it can be read beside the pseudo-code. It is pure: no I/O, no clock, no threads.
Like Figure 2 it updates the table it is given (``f.cores``, ``f.use``); callers that
must not see the change work on :meth:`MfcTable.copy` (the policy round does).

Generalisations, each marked where it happens:

* a *core* of the paper is a cache unit (:class:`unicache.topology.CacheUnit`), and the
  table is global across all VMs of the host, because LLC capacity is shared by them;
* a read may only be sent to units where the reading VM has vCPUs (``allowed``);
* chunk sizes may differ (last chunk of a file), so where the paper evicts one LFU file
  to make room, this evicts LFU chunks until the new one fits: a unit's assigned bytes
  never exceed its capacity;
* a chunk is never held by more than ``max_copies`` units.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


@dataclass(slots=True)
class ChunkState:
    """MFC's per-file information (§4.2), for one chunk.

    :param size: ``S(f)`` in bytes.
    :param units: ``f.cores`` — the units believed to cache it.
    :param use: ``f.use[a]`` — use counts per unit, aged by ``update_use``.
    :param reads_from: reads issued from each unit since the last ``update_use``.
    :param migrations: migrations spent on it since the last ``update_use`` (§4.5).
    """

    size: int
    units: set[int] = field(default_factory=set)
    use: dict[int, int] = field(default_factory=dict)
    reads_from: dict[int, int] = field(default_factory=dict)
    migrations: int = 0

    def total_use(self) -> int:
        """``sum(f.use)``."""
        return sum(self.use.values())

    def copy(self) -> ChunkState:
        """A deep copy."""
        return ChunkState(
            self.size, set(self.units), dict(self.use), dict(self.reads_from), self.migrations
        )


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


@dataclass(frozen=True, slots=True)
class Access:
    """The answer of ``mfc_access``: where to read and how.

    :param unit: ``newcore`` — the unit whose vCPUs must issue the read.
    :param caching: caching or non-caching loads.
    :param rule: the Figure 2 rule that decided.
    :param evicted: chunks whose copy on ``unit`` was dropped to make room.
    """

    unit: int
    caching: bool
    rule: str
    evicted: tuple[ChunkKey, ...] = ()


def m_use(misses: int, level_lines: int, level_size: int) -> int:
    """Equation 1: a unit uses all of level ``l`` if it missed at least ``m_lines`` times.

    :param misses: ``M_miss(c, l)`` over the last interval.
    :param level_lines: ``m_lines``, the level's number of lines.
    :param level_size: ``M_size(l)`` in bytes.
    """
    return level_size if misses >= level_lines else 0


class MfcTable:
    """The state of Figure 2 over all chunks of all VMs, and ``mfc_access`` on it.

    :param params: the Figure 2 parameters.
    :param units: the cache units, with capacities and this round's loads.
    """

    def __init__(self, params: MfcParams, units: Iterable[UnitView]) -> None:
        self.params = params
        self.units: dict[int, UnitView] = {u.id: u for u in units}
        self.chunks: dict[ChunkKey, ChunkState] = {}
        # sum over chunks on a unit of S(f): the second term of eq. 2, kept incrementally
        self._assigned: dict[int, int] = dict.fromkeys(self.units, 0)
        # the chunks on each unit (the inverse of f.cores), so LFU lookups scan one unit's
        # few chunks instead of every chunk the host remembers
        self._on_unit: dict[int, set[ChunkKey]] = {u: set() for u in self.units}

    # --- bookkeeping ----------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MfcTable):
            return NotImplemented
        return (self.params, self.units, self.chunks) == (other.params, other.units, other.chunks)

    __hash__ = None  # type: ignore[assignment]  # mutable, like Figure 2's tables

    def copy(self) -> MfcTable:
        """A deep copy (the policy round decides on a copy and returns it as new state)."""
        other = MfcTable(self.params, self.units.values())
        other.chunks = {key: st.copy() for key, st in self.chunks.items()}
        other._assigned = dict(self._assigned)
        other._on_unit = {u: set(keys) for u, keys in self._on_unit.items()}
        return other

    def set_units(self, units: Iterable[UnitView]) -> None:
        """Replace this round's unit view (loads, counter use); capacities stay per unit."""
        self.units = {u.id: u for u in units}
        for unit in self.units:
            self._assigned.setdefault(unit, 0)
            self._on_unit.setdefault(unit, set())

    def restore_chunk(self, key: ChunkKey, state: ChunkState) -> None:
        """Put back a chunk of a saved table (a daemon restart), with its units' sums."""
        units, state.units = set(state.units), set()
        self.chunks[key] = state
        for unit in sorted(units):
            self._add(key, unit)

    def assigned_bytes(self, unit: int) -> int:
        """``sum_{f on c} S(f)`` of eq. 2."""
        return self._assigned.get(unit, 0)

    def cache_avail(self, unit: int) -> int:
        """Equation 2: ``M_avail(c) = M_on-chip - max(sum_l M_use(c,l), sum_f S(f))``."""
        view = self.units[unit]
        return view.capacity - max(view.counter_use, self._assigned.get(unit, 0))

    def _add(self, key: ChunkKey, unit: int) -> None:
        state = self.chunks[key]
        if unit not in state.units:
            state.units.add(unit)
            self._on_unit.setdefault(unit, set()).add(key)
            self._assigned[unit] = self._assigned.get(unit, 0) + state.size

    def _remove(self, key: ChunkKey, unit: int) -> None:
        state = self.chunks[key]
        if unit in state.units:
            state.units.discard(unit)
            self._on_unit[unit].discard(key)
            self._assigned[unit] -= state.size

    def _chunk(self, key: ChunkKey, size: int) -> ChunkState:
        state = self.chunks.get(key)
        if state is None:
            state = self.chunks[key] = ChunkState(size)
        elif state.size != size:
            # the guest saw the chunk grow or shrink (last chunk of a file): re-account,
            # and drop the copies on units that the larger chunk would over-commit
            for unit in sorted(state.units):
                self._assigned[unit] -= state.size
                if self.units[unit].capacity - self._assigned[unit] < size:
                    state.units.discard(unit)
                    self._on_unit[unit].discard(key)
                else:
                    self._assigned[unit] += size
            state.size = size
        return state

    def chunks_on(self, unit: int) -> list[ChunkKey]:
        """Chunks believed cached on a unit, in key order."""
        return sorted(self._on_unit.get(unit, ()))

    def lookup_lfu(self, unit: int, exclude: ChunkKey | None = None) -> ChunkKey | None:
        """``lookup_lfu_file(c)``: the least-used chunk on a unit (ties: lowest key)."""
        best: tuple[int, ChunkKey] | None = None
        for key in self._on_unit.get(unit, ()):
            if key != exclude:
                candidate = (self.chunks[key].use.get(unit, 0), key)
                if best is None or candidate < best:
                    best = candidate
        return None if best is None else best[1]

    def _lookup_lfu_any(
        self, allowed: frozenset[int], exclude: ChunkKey
    ) -> tuple[ChunkKey, int] | None:
        # ``lookup_lfu_file()`` over every allowed unit; sort keys: use count, unit, chunk
        best: tuple[int, int, ChunkKey] | None = None
        for unit in allowed:
            for key in self._on_unit.get(unit, ()):
                if key == exclude:
                    continue
                candidate = (self.chunks[key].use.get(unit, 0), unit, key)
                if best is None or candidate < best:
                    best = candidate
        return None if best is None else (best[2], best[1])

    def _make_room(self, unit: int, size: int, keep: ChunkKey) -> list[ChunkKey]:
        # Generalisation for unequal sizes: evict LFU chunks until ``size`` fits.
        evicted: list[ChunkKey] = []
        while self.units[unit].capacity - self._assigned.get(unit, 0) < size:
            victim = self.lookup_lfu(unit, exclude=keep)
            if victim is None:
                break
            self._remove(victim, unit)
            evicted.append(victim)
        return evicted

    def _fits(self, unit: int, size: int) -> bool:
        return self.units[unit].capacity - self._assigned.get(unit, 0) >= size

    # --- Figure 2 -------------------------------------------------------------------------

    def mfc_access(
        self,
        key: ChunkKey,
        size: int,
        curunit: int,
        allowed: frozenset[int],
        max_copies: int | None = None,
    ) -> Access:
        """Figure 2: decide which unit reads ``key`` and whether with caching loads.

        :param key: the chunk being read.
        :param size: its size ``f.size``.
        :param curunit: ``curcore`` — the unit of the vCPU that issued the read.
        :param allowed: units where the reading VM has vCPUs (``curunit`` is one).
        :param max_copies: the reading VM's own limit on copies (at most the table's
            ``max_copies``; ``None``: the table's).
        :returns: the unit, the load type and the rule that decided.
        """
        p = self.params
        copies = p.max_copies if max_copies is None else min(max(max_copies, 1), p.max_copies)
        f = self._chunk(key, size)
        f.reads_from[curunit] = f.reads_from.get(curunit, 0) + 1

        # lines 3-4: small chunks are read where the thread is
        if size < p.min_read_size:
            return Access(curunit, True, RULE_SMALL)

        holders = f.units & allowed
        if curunit not in f.units and len(f.units) < copies:
            # lines 6-10: spare capacity on curcore, and curcore is a frequent user (§4.2)
            frequent = self._frequent_user(f, curunit)
            if frequent and self.cache_avail(curunit) > size and self._fits(curunit, size):
                self._add(key, curunit)
                f.use[curunit] = f.use.get(curunit, 0) + 1
                return Access(curunit, True, RULE_REPLICATE_SPARE)

            # lines 12-16: migrate to the unit with the most spare capacity
            if not holders:
                # ties go to curunit: caching f there needs no migration
                maxunit = max(sorted(allowed), key=lambda u: (self.cache_avail(u), u == curunit))
                if self.cache_avail(maxunit) > size and self._fits(maxunit, size):
                    return self._migrate(key, f, curunit, maxunit, RULE_MIGRATE_MAX_AVAIL)

        # lines 18-29: not cached anywhere this VM can read it
        if not holders:
            found = self._lookup_lfu_any(allowed, exclude=key)
            if found is not None and len(f.units) < copies:
                lfu1, c = found
                # line 21: c holds lfu1, less popular than f
                if self.chunks[lfu1].use.get(c, 0) < f.total_use():
                    self._remove(lfu1, c)
                    evicted = [lfu1, *self._make_room(c, size, keep=key)]
                    if self._fits(c, size):
                        access = self._migrate(key, f, curunit, c, RULE_EVICT_LFU)
                        return Access(access.unit, access.caching, access.rule, tuple(evicted))
            # lines 27-29: too unpopular to cache: non-caching loads where the thread is
            f.use[curunit] = f.use.get(curunit, 0) + 1
            return Access(curunit, False, RULE_NON_CACHING)

        # line 31: the least loaded holder (ours: curunit first if it holds f and is not busy)
        if curunit in holders and self.units[curunit].runqueue_len <= p.busy_threshold:
            f.use[curunit] = f.use.get(curunit, 0) + 1
            return Access(curunit, True, RULE_STAY_HOLDER)
        newunit = min(sorted(holders), key=lambda u: self.units[u].runqueue_len)

        # lines 32-40: holder busy, curunit idle, and f much more popular than curunit's LFU
        busy = self.units[newunit].runqueue_len > p.busy_threshold
        idle = self.units[curunit].runqueue_len < p.idle_threshold
        if busy and idle and curunit not in f.units and len(f.units) < copies:
            lfu2 = self.lookup_lfu(curunit, exclude=key)
            lfu2_use = 0 if lfu2 is None else self.chunks[lfu2].use.get(curunit, 0)
            if f.use.get(newunit, 0) > 2 * lfu2_use:
                evicted = self._make_room(curunit, size, keep=key)
                if self._fits(curunit, size):
                    self._add(key, curunit)
                    f.use[curunit] = f.use.get(curunit, 0) + 1
                    return Access(curunit, True, RULE_REPLICATE_BUSY, tuple(evicted))

        # lines 42-43: migrate to the holder
        return self._migrate(key, f, curunit, newunit, RULE_MIGRATE_HOLDER)

    def _frequent_user(self, f: ChunkState, curunit: int) -> bool:
        # §4.2 "curcore is a frequent user of f": it read f at least frequent_reads times
        # since the last aging and at least as often as f's busiest copy is used. A first
        # read is no frequent use, nor is a thread passing through curunit on its way to the
        # holders (§4.4: one thread wants all caches to hold distinct files, not replicas).
        reads = f.reads_from.get(curunit, 0)
        busiest = max((f.use.get(u, 0) for u in f.units), default=0)
        return reads >= self.params.frequent_reads and reads >= busiest

    def _migrate(
        self, key: ChunkKey, f: ChunkState, curunit: int, target: int, rule: str
    ) -> Access:
        if target != curunit:
            # §4.5 competitive rule: once the migrations spent on f cost more than one
            # load from off-chip memory, stop migrating and read where the thread is.
            spent = (f.migrations + 1) * self.params.migration_cycles
            if spent > self.params.load_cost_cycles(f.size):
                f.use[curunit] = f.use.get(curunit, 0) + 1
                return Access(curunit, True, RULE_COMPETITIVE)
            f.migrations += 1
        self._add(key, target)
        f.use[target] = f.use.get(target, 0) + 1
        return Access(target, True, rule)

    def update_use(self, max_chunks: int) -> None:
        """Figure 2 lines 45-47: age every use count by halving it.

        Also halves the competitive rule's migration count and forgets uncached chunks
        whose use reached zero, then the least-used uncached ones beyond ``max_chunks``,
        so the table stays bounded whatever the guests read.

        :param max_chunks: the most chunks the table may remember.
        """
        for state in self.chunks.values():
            state.use = {u: n // 2 for u, n in state.use.items() if n // 2 > 0}
            state.reads_from.clear()
            state.migrations //= 2
        forgotten = [k for k, st in self.chunks.items() if not st.units and not st.use]
        for key in forgotten:
            del self.chunks[key]
        excess = len(self.chunks) - max_chunks
        if excess > 0:
            uncached = sorted((st.total_use(), k) for k, st in self.chunks.items() if not st.units)
            for _, key in uncached[:excess]:
                del self.chunks[key]

    def holders(self) -> Mapping[ChunkKey, frozenset[int]]:
        """Chunk -> units holding it (read-only copy)."""
        return {k: frozenset(st.units) for k, st in self.chunks.items() if st.units}
