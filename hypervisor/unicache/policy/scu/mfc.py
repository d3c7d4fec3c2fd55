"""MFC's per-read decision, ``mfc_access`` of Figure 2, over cache units instead of cores.

This is the paper's algorithm (MFC paper §4.2-§4.7, Figure 2, equations 1-2) written so
that it can be read beside the pseudo-code. It is pure: no I/O, no clock, no threads.
Like Figure 2 it updates the table it is given (``f.cores``, ``f.use``); callers that
must not see the change work on :meth:`MfcTable.copy` (the policy round does). The state
it works on (§4.2's per-file information, eq. 1, the units' views) is in
:mod:`unicache.policy.scu.mfc_state`.

Generalisations, each marked where it happens:

* a *core* of the paper is a cache unit (:class:`unicache.topology.CacheUnit`), and one
  table holds the chunks of all VMs of the host, because LLC capacity is shared by them;
* a read may only be sent to units where the reading VM has vCPUs (``allowed``);
* chunk sizes may differ (last chunk of a file), so where the paper evicts one LFU file
  to make room, this evicts LFU chunks until the new one fits: a unit's assigned bytes
  never exceed its capacity;
* a chunk is never held by more than ``max_copies`` units;
* §4.6's "other uses" of a cache are, for a VM, the other VMs whose vCPUs run in the
  unit: each of them counts on an even share of it (:meth:`MfcTable.share`), its
  ``M_avail`` (eq. 2) is taken within that share, and it evicts only its own chunks, so one
  VM's reports, forged or not, never evict another VM's chunks nor change where its chunks
  go (issue #12). A unit without tenants is one cache, as in the paper.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from unicache.model import ChunkId
from unicache.policy.scu.mfc_chunks import ChunkStore, ChunkView
from unicache.policy.scu.mfc_state import (
    NO_UNITS,
    RULE_COMPETITIVE,
    RULE_EVICT_LFU,
    RULE_MIGRATE_HOLDER,
    RULE_MIGRATE_MAX_AVAIL,
    RULE_NON_CACHING,
    RULE_REPLICATE_BUSY,
    RULE_REPLICATE_SPARE,
    RULE_SMALL,
    RULE_STAY_HOLDER,
    Access,
    ChunkKey,
    ChunkState,
    MfcParams,
    UnitView,
)


class MfcTable:
    """The state of Figure 2 over all chunks of all VMs, and ``mfc_access`` on it.

    :param params: the Figure 2 parameters.
    :param units: the cache units, with capacities and this round's loads.
    :param tenants: per unit, the VMs whose vCPUs run there (:meth:`share`); none: every
        unit is one cache shared by all chunks, as in the paper.
    """

    def __init__(
        self,
        params: MfcParams,
        units: Iterable[UnitView],
        tenants: Mapping[int, frozenset[str]] | None = None,
    ) -> None:
        self.params = params
        self.units: dict[int, UnitView] = {u.id: u for u in units}
        self.tenants: dict[int, frozenset[str]] = dict(tenants or {})
        # every chunk's state, per VM, shared with the table this one was copied from
        # until either changes it (mfcchunks: a round costs what it touches)
        self._store = ChunkStore()
        # sum over chunks on a unit of S(f): the second term of eq. 2, kept incrementally
        self._assigned: dict[int, int] = dict.fromkeys(self.units, 0)
        # the same per (unit, VM): the second term of eq. 2 within a VM's share
        self._vm_bytes: dict[tuple[int, str], int] = {}
        # the chunks on each unit (the inverse of f.cores), so LFU lookups scan one unit's
        # few chunks instead of every chunk the host remembers
        self._on_unit: dict[int, set[ChunkKey]] = {u: set() for u in self.units}

    # --- bookkeeping ----------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MfcTable):
            return NotImplemented
        return (self.params, self.units, self.tenants, self.chunks) == (
            other.params,
            other.units,
            other.tenants,
            other.chunks,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, like Figure 2's tables

    @property
    def chunks(self) -> ChunkView:
        """Every chunk's state, read-only (the table changes them through Figure 2)."""
        return ChunkView(self._store)

    def changed_vms(self) -> frozenset[str]:
        """The VMs whose chunks this table added, changed or dropped since it was copied."""
        return frozenset(self._store.changed)

    def changed_chunks(self, vm: str) -> frozenset[ChunkId]:
        """One VM's chunks this table added, changed or dropped since it was copied (or
        whose use an aging emptied)."""
        return frozenset(self._store.changed_chunks.get(vm, ()))

    def chunk(self, key: ChunkKey) -> ChunkState | None:
        """A chunk's state (read-only), or ``None`` if the table does not remember it."""
        return self._store.get(key)

    def chunks_of(self, vm: str) -> list[tuple[ChunkKey, ChunkState]]:
        """One VM's chunks with their states (read-only)."""
        return [(ChunkKey(vm, c), st) for c, st in self._store.of_vm(vm)]

    def count_of(self, vm: str) -> int:
        """How many chunks the table remembers for one VM."""
        return self._store.count_of(vm)

    def copy(self) -> MfcTable:
        """A copy that changes independently of this table (the policy round decides on a
        copy and returns it as new state); chunks are shared until either side changes one."""
        other = MfcTable(self.params, self.units.values(), self.tenants)
        other._store = self._store.fork()
        other._assigned = dict(self._assigned)
        other._vm_bytes = dict(self._vm_bytes)
        other._on_unit = {u: set(keys) for u, keys in self._on_unit.items()}
        return other

    def set_units(
        self, units: Iterable[UnitView], tenants: Mapping[int, frozenset[str]] | None = None
    ) -> None:
        """Replace this round's unit view (loads, counter use); capacities stay per unit.

        :param units: the units' views.
        :param tenants: this round's VMs per unit (``None``: keep the last ones). A VM left
            over its share by a new tenant keeps its chunks until a VM within its share
            needs the room (:meth:`_make_physical_room`).
        """
        self.units = {u.id: u for u in units}
        if tenants is not None:
            self.tenants = dict(tenants)
        for unit in self.units:
            self._assigned.setdefault(unit, 0)
            self._on_unit.setdefault(unit, set())

    def restore_chunk(self, key: ChunkKey, state: ChunkState) -> None:
        """A saved table's chunk back, evicting nothing (``ScuPolicy.start`` checks it)."""
        self._store.put(key, state)
        for unit in state.units:
            self._on_unit.setdefault(unit, set()).add(key)
            self._assigned[unit] = self._assigned.get(unit, 0) + state.size
            self._vm_bytes[unit, key.vm] = self.vm_bytes(unit, key.vm) + state.size

    def forget_vm(self, vm: str) -> int:
        """Forget every chunk of one VM (its guest booted again: its file ids mean nothing
        now), freeing the units they were on.

        :returns: how many chunks were forgotten.
        """
        held = self.chunks_of(vm)
        for key, state in held:
            for unit in state.units:
                self._remove(key, unit)
            self._store.delete(key)
        return len(held)

    def assigned_bytes(self, unit: int) -> int:
        """``sum_{f on c} S(f)`` of eq. 2."""
        return self._assigned.get(unit, 0)

    def share(self, unit: int, vm: str) -> int:
        """``M_on-chip`` of one VM on a unit.

        §4.6: MFC "must share the caches with other uses", in "unknown quantities". For a
        VM, the other uses are the other VMs whose vCPUs run in the unit, so each tenant
        counts on an even share of the unit, and a VM without vCPUs there on none. A unit
        without tenants is one cache for every chunk, as in the paper.

        :param unit: the unit.
        :param vm: the VM.
        :returns: bytes of the unit the VM's chunks may take.
        """
        capacity = self.units[unit].capacity
        tenants = self.tenants.get(unit)
        if not tenants:
            return capacity
        return capacity // len(tenants) if vm in tenants else 0

    def vm_bytes(self, unit: int, vm: str) -> int:
        """``sum_{f of vm on c} S(f)``: what one VM's chunks take of a unit."""
        return self._vm_bytes.get((unit, vm), 0)

    def cache_avail(self, unit: int, vm: str | None = None) -> int:
        """Equation 2: ``M_avail(c) = M_on-chip - max(sum_l M_use(c,l), sum_f S(f))``.

        With ``vm``, on a unit with tenants: eq. 2 within the VM's :meth:`share`, the
        counted use taken in proportion and the files being the VM's own.
        """
        view = self.units[unit]
        if vm is None or not self.tenants.get(unit):
            return view.capacity - max(view.counter_use, self._assigned.get(unit, 0))
        share = self.share(unit, vm)
        counted = view.counter_use * share // max(view.capacity, 1)
        return share - max(counted, self.vm_bytes(unit, vm))

    def _add(self, key: ChunkKey, unit: int) -> list[ChunkKey]:
        """Put ``key`` on ``unit`` (it fits the VM's share); returns the chunks of VMs over
        their share that made physical room for it."""
        state = self._store.own(key)
        if unit in state.units:
            return []
        evicted = self._make_physical_room(unit, state.size, key)
        state.units = state.units | {unit}
        self._on_unit.setdefault(unit, set()).add(key)
        self._assigned[unit] = self._assigned.get(unit, 0) + state.size
        self._vm_bytes[unit, key.vm] = self.vm_bytes(unit, key.vm) + state.size
        return evicted

    def _remove(self, key: ChunkKey, unit: int) -> None:
        shared = self._store.get(key)
        if shared is not None and unit in shared.units:
            state = self._store.own(key)
            state.units = state.units - {unit} or NO_UNITS
            self._on_unit[unit].discard(key)
            self._assigned[unit] -= state.size
            self._vm_bytes[unit, key.vm] -= state.size

    def _make_physical_room(self, unit: int, size: int, keep: ChunkKey) -> list[ChunkKey]:
        """Free ``size`` bytes of ``unit`` for ``keep`` (which fits its VM's share): LFU
        chunks of the VM furthest over its share go first (a VM over its share is one a
        new tenant shrank; shares add up to at most the unit, so one always is)."""
        evicted: list[ChunkKey] = []
        capacity = self.units[unit].capacity
        while capacity - self._assigned.get(unit, 0) < size:
            # sort keys: bytes over the share, then VM name
            over = [
                (held - self.share(u, vm), vm)
                for (u, vm), held in self._vm_bytes.items()
                if u == unit and vm != keep.vm and held > self.share(u, vm)
            ]
            victim = self.lookup_lfu(unit, vm=max(over)[1]) if over else None
            if victim is None:
                break
            self._remove(victim, unit)
            evicted.append(victim)
        return evicted

    def _chunk(self, key: ChunkKey, size: int) -> ChunkState:
        if self._store.get(key) is None:
            state = ChunkState(size)
            self._store.put(key, state)
            return state
        state = self._store.own(key)  # Figure 2 changes the chunk it reads
        if state.size != size:
            # the guest saw the chunk grow or shrink (last chunk of a file): re-account,
            # and drop the copies on units that the larger chunk would over-commit
            held = sorted(state.units)
            for unit in held:
                self._remove(key, unit)
            state.size = size
            for unit in held:
                if self._fits(unit, size, key.vm):
                    self._add(key, unit)
        return state

    def chunks_on(self, unit: int) -> list[ChunkKey]:
        """Chunks believed cached on a unit, in key order."""
        return sorted(self._on_unit.get(unit, ()))

    def _use(self, key: ChunkKey, unit: int) -> int:
        """``f.use[unit]`` of a chunk the table holds."""
        return self._store.use_on(key, unit)

    def _candidates(self, unit: int, vm: str | None) -> Iterator[ChunkKey]:
        """The chunks on a unit that ``vm`` may evict: its own where the unit has tenants,
        every chunk otherwise (or with ``vm`` ``None``)."""
        keys = self._on_unit.get(unit, ())
        if vm is None or not self.tenants.get(unit):
            return iter(keys)
        return (k for k in keys if k.vm == vm)

    def lookup_lfu(
        self, unit: int, exclude: ChunkKey | None = None, vm: str | None = None
    ) -> ChunkKey | None:
        """``lookup_lfu_file(c)``: the least-used chunk on a unit (ties: lowest key).

        :param unit: the unit.
        :param exclude: a chunk not to return.
        :param vm: only among the chunks ``vm`` may evict (:meth:`_candidates`).
        """
        best: tuple[int, ChunkKey] | None = None
        for key in self._candidates(unit, vm):
            if key != exclude:
                candidate = (self._use(key, unit), key)
                if best is None or candidate < best:
                    best = candidate
        return None if best is None else best[1]

    def _lookup_lfu_any(
        self, allowed: frozenset[int], exclude: ChunkKey, vm: str | None = None
    ) -> tuple[ChunkKey, int] | None:
        # ``lookup_lfu_file()`` over every allowed unit; sort keys: use count, unit, chunk
        best: tuple[int, int, ChunkKey] | None = None
        for unit in allowed:
            for key in self._candidates(unit, vm):
                if key == exclude:
                    continue
                candidate = (self._use(key, unit), unit, key)
                if best is None or candidate < best:
                    best = candidate
        return None if best is None else (best[2], best[1])

    def _make_room(self, unit: int, size: int, keep: ChunkKey) -> list[ChunkKey]:
        # Generalisation for unequal sizes: evict LFU chunks (of keep's VM, where the unit
        # has tenants) until ``size`` fits (in that VM's share).
        evicted: list[ChunkKey] = []
        while not self._fits(unit, size, keep.vm):
            victim = self.lookup_lfu(unit, exclude=keep, vm=keep.vm)
            if victim is None:
                break
            self._remove(victim, unit)
            evicted.append(victim)
        return evicted

    def _fits(self, unit: int, size: int, vm: str | None = None) -> bool:
        if vm is None or not self.tenants.get(unit):
            return self.units[unit].capacity - self._assigned.get(unit, 0) >= size
        return self.share(unit, vm) - self.vm_bytes(unit, vm) >= size

    def _shared_out(self, key: ChunkKey, f: ChunkState, allowed: frozenset[int]) -> bool:
        """Whether Figure 2 over every VM's chunks together (lines 12-26) would have cached
        ``f``, which its VM's shares refused: spare room on an allowed unit, or a chunk of
        another VM there less used than ``f`` (never, for a VM alone in its units)."""
        if not any(self.tenants.get(u) for u in allowed):
            return False
        if any(self.cache_avail(u) > f.size and self._fits(u, f.size) for u in allowed):
            return True
        found = self._lookup_lfu_any(allowed, exclude=key)
        if found is None or found[0].vm == key.vm:
            return False
        return self._use(found[0], found[1]) < f.total_use()

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
        vm = key.vm
        copies = p.max_copies if max_copies is None else min(max(max_copies, 1), p.max_copies)
        f = self._chunk(key, size)
        f.reads_from = {**f.reads_from, curunit: f.reads_from.get(curunit, 0) + 1}

        # lines 3-4: small chunks are read where the thread is
        if size < p.min_read_size:
            return Access(curunit, True, RULE_SMALL)

        holders = f.units & allowed
        if curunit not in f.units and len(f.units) < copies:
            # lines 6-10: spare capacity on curcore, and curcore is a frequent user (§4.2)
            frequent = self._frequent_user(f, curunit)
            if frequent and self.cache_avail(curunit, vm) > size and self._fits(curunit, size, vm):
                evicted = self._add(key, curunit)
                f.add_use(curunit)
                return Access(curunit, True, RULE_REPLICATE_SPARE, tuple(evicted))

            # lines 12-16: migrate to the unit with the most spare capacity
            if not holders:
                # ties go to curunit: caching f there needs no migration
                maxunit = max(
                    sorted(allowed), key=lambda u: (self.cache_avail(u, vm), u == curunit)
                )
                if self.cache_avail(maxunit, vm) > size and self._fits(maxunit, size, vm):
                    return self._migrate(key, f, curunit, maxunit, RULE_MIGRATE_MAX_AVAIL)

        # lines 18-29: not cached anywhere this VM can read it
        if not holders:
            return self._not_held(key, f, size, curunit, allowed, copies)

        # line 31: the least loaded holder (ours: curunit first if it holds f and is not busy)
        if curunit in holders and self.units[curunit].runqueue_len <= p.busy_threshold:
            f.add_use(curunit)
            return Access(curunit, True, RULE_STAY_HOLDER)
        newunit = min(sorted(holders), key=lambda u: self.units[u].runqueue_len)

        # lines 32-40: holder busy, curunit idle, and f much more popular than curunit's LFU
        busy = self.units[newunit].runqueue_len > p.busy_threshold
        idle = self.units[curunit].runqueue_len < p.idle_threshold
        if busy and idle and curunit not in f.units and len(f.units) < copies:
            lfu2 = self.lookup_lfu(curunit, exclude=key, vm=vm)
            lfu2_use = 0 if lfu2 is None else self._use(lfu2, curunit)
            if f.use_of(newunit) > 2 * lfu2_use:
                evicted = self._make_room(curunit, size, keep=key)
                if self._fits(curunit, size, vm):
                    evicted += self._add(key, curunit)
                    f.add_use(curunit)
                    return Access(curunit, True, RULE_REPLICATE_BUSY, tuple(evicted))

        # lines 42-43: migrate to the holder
        return self._migrate(key, f, curunit, newunit, RULE_MIGRATE_HOLDER)

    def _not_held(
        self,
        key: ChunkKey,
        f: ChunkState,
        size: int,
        curunit: int,
        allowed: frozenset[int],
        copies: int,
    ) -> Access:
        """Figure 2 lines 18-29: ``f`` is cached in no unit the VM can read it from: evict
        the least used chunk of any allowed unit if ``f`` is more popular and migrate there
        (lines 19-25), else read it with non-caching loads where the thread is (27-29)."""
        vm = key.vm
        found = self._lookup_lfu_any(allowed, exclude=key, vm=vm)
        if found is not None and len(f.units) < copies:
            lfu1, c = found
            # line 21: c holds lfu1, less popular than f
            if self._use(lfu1, c) < f.total_use():
                self._remove(lfu1, c)
                evicted = [lfu1, *self._make_room(c, size, keep=key)]
                if self._fits(c, size, vm):
                    access = self._migrate(key, f, curunit, c, RULE_EVICT_LFU)
                    evicted += access.evicted
                    return Access(access.unit, access.caching, access.rule, tuple(evicted))
        # lines 27-29: too unpopular to cache: non-caching loads where the thread is
        capped = len(f.units) < copies and self._shared_out(key, f, allowed)
        f.add_use(curunit)
        return Access(curunit, False, RULE_NON_CACHING, capped=capped)

    def _frequent_user(self, f: ChunkState, curunit: int) -> bool:
        # §4.2 "curcore is a frequent user of f": it read f at least frequent_reads times
        # since the last aging and at least as often as f's busiest copy is used. A first
        # read is no frequent use, nor is a thread passing through curunit on its way to the
        # holders (§4.4: one thread wants all caches to hold distinct files, not replicas).
        reads = f.reads_from.get(curunit, 0)
        busiest = max((f.use_of(u) for u in f.units), default=0)
        return reads >= self.params.frequent_reads and reads >= busiest

    def _migrate(
        self, key: ChunkKey, f: ChunkState, curunit: int, target: int, rule: str
    ) -> Access:
        if target != curunit:
            # §4.5 competitive rule: once the migrations spent on f cost more than one
            # load from off-chip memory, stop migrating and read where the thread is.
            spent = (f.migrations + 1) * self.params.migration_cycles
            if spent > self.params.load_cost_cycles(f.size):
                f.add_use(curunit)
                return Access(curunit, True, RULE_COMPETITIVE)
            f.migrations += 1
        evicted = self._add(key, target)
        f.add_use(target)
        return Access(target, True, rule, tuple(evicted))

    def update_use(self, max_chunks: int) -> dict[str, int]:
        """Figure 2 lines 45-47: age every use count by halving it.

        Also halves the competitive rule's migration count and forgets uncached chunks
        whose use reached zero, then uncached ones beyond ``max_chunks``, so the table stays
        bounded whatever the guests read: the least used of the VM remembering the most
        chunks first, so that a VM flooding the table forgets its own chunks, not others'.
        The halving is lazy (:meth:`ChunkStore.age`): an aging costs the chunks it
        forgets, not every chunk; only a table over ``max_chunks`` looks at them all.

        :param max_chunks: the most chunks the table may remember.
        :returns: per VM, the chunks forgotten over ``max_chunks`` (not those aged out).
        """
        self._store.age()
        return self._forget_excess(max_chunks)

    def _forget_excess(self, max_chunks: int) -> dict[str, int]:
        """Forget uncached chunks over ``max_chunks`` (:meth:`update_use`)."""
        return self._store.forget_excess(max_chunks)

    def holders(self) -> Mapping[ChunkKey, frozenset[int]]:
        """Chunk -> units holding it (read-only copy)."""
        return {k: frozenset(st.units) for k, st in self._store.items() if st.units}
