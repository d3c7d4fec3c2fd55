"""MFC's per-chunk information (§4.2, per chunk §4.7) for every VM, copied on write.

Figure 2 updates its table in place; the policy round must not (a round's input state stays
what it was), and a host tracks up to a million chunks, of which a round reads a few
thousand. So the store is forked, not copied: a fork shares every VM's chunk map and
chunk state with its parent, and copies a VM's map, or a chunk's state, the first time
it changes one (:meth:`ChunkStore.own`). A round costs what it touches, not what the host
remembers. Chunks are kept per VM (guest file ids are the guest's own), which also tells
the round which VMs' chunks changed since the fork (:attr:`ChunkStore.changed`).

Aging (Figure 2 lines 45-47: halve every use count, forget the uncached chunks no longer
used) is lazy for the same reason: a chunk's state records the agings its counts are
current to (:attr:`ChunkState.aged`), and the store brings it current when it is next
read or changed (``k`` halvings of ``n`` are ``n >> k``: the same counts as ``k`` passes).
What an aging must do at once, forget the uncached chunks whose counts reach zero, it
finds through per-aging lists: each changed chunk is listed under the aging that empties
its counts (:meth:`ChunkState.empty_at`) when the store is forked or aged, and an aging
looks at its own list only. A list may name chunks changed since (they are looked at and
kept); a chunk is listed at most once per change. Pure: plain values, no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping

from unicache.model import ChunkId
from unicache.policy.scu.mfc_state import NO_READS, NO_UNITS, ChunkKey, ChunkState


class ChunkStore:
    """Chunk -> its :class:`ChunkState`, per VM, copy-on-write between forks."""

    def __init__(self) -> None:
        self._vms: dict[str, dict[ChunkId, ChunkState]] = {}
        # the VM maps, and the chunk states, this store may change in place (not shared)
        self._own_maps: set[str] = set()
        self._own_states: dict[str, set[ChunkId]] = {}
        self._count = 0
        #: VMs whose chunks were added, changed or dropped since this store was forked
        #: (or whose chunks an aging may have changed the entries of: :meth:`age`)
        self.changed: set[str] = set()
        #: per VM, its chunks added, changed or dropped since this store was forked (or
        #: whose use an aging emptied)
        self.changed_chunks: dict[str, set[ChunkId]] = {}
        #: agings done (``update_use``)
        self.agings = 0
        # aging -> the chunks whose counts it may empty (tuples: shared between forks)
        # (per VM: the chunk ids the store holds anyway, not a key object per chunk)
        self._empties: dict[int, tuple[tuple[str, tuple[ChunkId, ...]], ...]] = {}
        # chunks changed since they were last listed in _empties
        self._unlisted: dict[str, set[ChunkId]] = {}

    def fork(self) -> ChunkStore:
        """A store with the same chunks that shares them until either side changes one."""
        self._list_changed()
        other = ChunkStore()
        other._vms = dict(self._vms)
        other._count = self._count
        other.agings = self.agings
        other._empties = dict(self._empties)
        self._own_maps.clear()  # both sides now share every map and state
        self._own_states.clear()
        return other

    def __len__(self) -> int:
        return self._count

    def get(self, key: ChunkKey) -> ChunkState | None:
        """A chunk's state with current counts, to read (:meth:`own` to change it)."""
        chunks = self._vms.get(key.vm)
        state = None if chunks is None else chunks.get(key.chunk)
        if state is None or state.aged == self.agings:
            return state
        return state.aged_to(self.agings)

    def use_on(self, key: ChunkKey, unit: int) -> int:
        """``f.use[unit]`` of a chunk the store holds, current (without a copy)."""
        state = self._vms[key.vm][key.chunk]
        return state.use_of(unit) >> (self.agings - state.aged)

    def count_of(self, vm: str) -> int:
        """How many chunks one VM has."""
        return len(self._vms.get(vm, ()))

    def of_vm(self, vm: str) -> Iterator[tuple[ChunkId, ChunkState]]:
        """One VM's chunks with current counts, to read."""
        for chunk, state in self._vms.get(vm, {}).items():
            yield chunk, state if state.aged == self.agings else state.aged_to(self.agings)

    def vms(self) -> Iterator[str]:
        """The VMs with chunks."""
        return iter(self._vms)

    def items(self) -> Iterator[tuple[ChunkKey, ChunkState]]:
        """Every chunk, VM by VM."""
        for vm in self._vms:
            for chunk, state in self.of_vm(vm):
                yield ChunkKey(vm, chunk), state

    def own(self, key: ChunkKey) -> ChunkState:
        """A chunk's state this store alone holds, to change in place.

        :raises KeyError: if the store has no such chunk.
        """
        chunks = self._map(key.vm)
        owned = self._own_states.setdefault(key.vm, set())
        state = chunks[key.chunk]
        if key.chunk not in owned:
            state = chunks[key.chunk] = state.aged_to(self.agings)
            owned.add(key.chunk)
        elif state.aged != self.agings:
            state = chunks[key.chunk] = state.aged_to(self.agings)
        self._changed(key)
        self._unlisted.setdefault(key.vm, set()).add(key.chunk)
        return state

    def put(self, key: ChunkKey, state: ChunkState) -> None:
        """Add or replace a chunk (the store takes ``state`` over)."""
        chunks = self._map(key.vm)
        if key.chunk not in chunks:
            self._count += 1
        state.aged = self.agings  # its counts are this table's own, as of now
        state.units = frozenset(state.units) or NO_UNITS  # (a restored chunk's: a list's)
        state.reads_from = state.reads_from or NO_READS  # (a restored chunk's own {})
        chunks[key.chunk] = state
        self._own_states.setdefault(key.vm, set()).add(key.chunk)
        self._changed(key)
        self._unlisted.setdefault(key.vm, set()).add(key.chunk)

    def delete(self, key: ChunkKey) -> None:
        """Forget a chunk.

        :raises KeyError: if the store has no such chunk.
        """
        chunks = self._map(key.vm)
        del chunks[key.chunk]
        self._count -= 1
        self._own_states.get(key.vm, set()).discard(key.chunk)
        self._changed(key)
        if not chunks:
            del self._vms[key.vm]
            self._own_maps.discard(key.vm)
            self._own_states.pop(key.vm, None)

    def age(self) -> None:
        """Figure 2 lines 45-47, lazily: one more aging for every chunk's counts (applied
        when each is next read), and the uncached chunks it leaves unused forgotten now.

        A cached chunk whose counts it empties stays, but its VM is marked
        :attr:`changed`: a table built on its counts may differ.
        """
        self._list_changed()
        self.agings += 1
        for vm, batch in self._empties.pop(self.agings, ()):
            for chunk in batch:
                chunks = self._vms.get(vm)
                state = None if chunks is None else chunks.get(chunk)
                if state is None or state.empty_at() > self.agings:
                    continue  # forgotten already, or used again since it was listed
                key = ChunkKey(vm, chunk)
                if state.units:
                    self._changed(key)
                else:
                    self.delete(key)

    def forget_excess(self, max_chunks: int) -> dict[str, int]:
        """Forget uncached chunks over ``max_chunks``: the least used of the VM holding the
        most first (``MfcTable.update_use``); a pass over every chunk, only when over.

        :returns: per VM, the chunks forgotten.
        """
        excess = len(self) - max_chunks
        dropped: dict[str, int] = {}
        if excess <= 0:
            return dropped
        held: dict[str, int] = {}
        uncached: dict[str, list[tuple[int, ChunkKey]]] = {}
        for k, st in self.items():
            held[k.vm] = held.get(k.vm, 0) + 1
            if not st.units:
                uncached.setdefault(k.vm, []).append((st.total_use(), k))
        for chunks in uncached.values():
            chunks.sort(reverse=True)  # pop() takes the least used (ties: lowest key)
        # sort keys: chunks the VM remembers (most first), then VM name
        heap = [(-held[vm], vm) for vm in uncached]
        heapq.heapify(heap)
        while excess > 0 and heap:
            count, vm = heapq.heappop(heap)
            _, key = uncached[vm].pop()
            self.delete(key)
            dropped[vm] = dropped.get(vm, 0) + 1
            excess -= 1
            if uncached[vm]:
                heapq.heappush(heap, (count + 1, vm))
        return dropped

    def _changed(self, key: ChunkKey) -> None:
        self.changed.add(key.vm)
        self.changed_chunks.setdefault(key.vm, set()).add(key.chunk)

    def _list_changed(self) -> None:
        """List every chunk changed since it was last listed under the aging that empties
        its counts (at most once per change, so the lists stay within the changes)."""
        batches: dict[int, dict[str, list[ChunkId]]] = {}
        for vm, changed in self._unlisted.items():
            chunks = self._vms.get(vm, {})
            for chunk in changed:
                state = chunks.get(chunk)
                if state is not None:
                    batches.setdefault(state.empty_at(), {}).setdefault(vm, []).append(chunk)
        self._unlisted = {}
        for when, by_vm in batches.items():
            listed = tuple((vm, tuple(ids)) for vm, ids in by_vm.items())
            self._empties[when] = (*self._empties.get(when, ()), *listed)

    def _map(self, vm: str) -> dict[ChunkId, ChunkState]:
        """The VM's chunk map, this store's own (copied from the shared one first)."""
        chunks = self._vms.get(vm)
        if chunks is None:
            chunks = self._vms[vm] = {}
        elif vm not in self._own_maps:
            chunks = self._vms[vm] = dict(chunks)
        self._own_maps.add(vm)
        return chunks


class ChunkView(Mapping[ChunkKey, ChunkState]):
    """A store seen as one read-only map ``ChunkKey -> ChunkState`` (tests, the saved
    state, :meth:`~unicache.policy.scu.mfc.MfcTable.holders`)."""

    def __init__(self, store: ChunkStore) -> None:
        self._store = store

    def __getitem__(self, key: ChunkKey) -> ChunkState:
        state = self._store.get(key)
        if state is None:
            raise KeyError(key)
        return state

    def __iter__(self) -> Iterator[ChunkKey]:
        return (key for key, _ in self._store.items())

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, ChunkKey) and self._store.get(key) is not None
