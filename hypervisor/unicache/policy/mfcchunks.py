"""MFC's per-chunk information (§4.2, per chunk §4.7) for every VM, copied on write.

Figure 2 updates its table in place; the policy round must not (a round's input state stays
what it was), and a host tracks up to a million chunks, of which a round reads a few
thousand. So the store is forked, not copied: a fork shares every VM's chunk map and
chunk state with its parent, and copies a VM's map, or a chunk's state, the first time
it changes one (:meth:`ChunkStore.own`). A round costs what it touches, not what the host
remembers. Chunks are kept per VM (guest file ids are the guest's own), which also tells
the round which VMs' chunks changed since the fork (:attr:`ChunkStore.changed`).
Pure: plain values, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from unicache.model import ChunkId
from unicache.policy.mfcstate import ChunkKey, ChunkState


class ChunkStore:
    """Chunk -> its :class:`ChunkState`, per VM, copy-on-write between forks."""

    def __init__(self) -> None:
        self._vms: dict[str, dict[ChunkId, ChunkState]] = {}
        # the VM maps, and the chunk states, this store may change in place (not shared)
        self._own_maps: set[str] = set()
        self._own_states: dict[str, set[ChunkId]] = {}
        self._count = 0
        #: VMs whose chunks were added, changed or dropped since this store was forked
        self.changed: set[str] = set()

    def fork(self) -> ChunkStore:
        """A store with the same chunks that shares them until either side changes one."""
        other = ChunkStore()
        other._vms = dict(self._vms)
        other._count = self._count
        self._own_maps.clear()  # both sides now share every map and state
        self._own_states.clear()
        return other

    def __len__(self) -> int:
        return self._count

    def get(self, key: ChunkKey) -> ChunkState | None:
        """A chunk's state, to read (:meth:`own` to change it)."""
        chunks = self._vms.get(key.vm)
        return None if chunks is None else chunks.get(key.chunk)

    def of_vm(self, vm: str) -> Mapping[ChunkId, ChunkState]:
        """One VM's chunks, to read."""
        return self._vms.get(vm, {})

    def vms(self) -> Iterator[str]:
        """The VMs with chunks."""
        return iter(self._vms)

    def items(self) -> Iterator[tuple[ChunkKey, ChunkState]]:
        """Every chunk, VM by VM."""
        for vm, chunks in self._vms.items():
            for chunk, state in chunks.items():
                yield ChunkKey(vm, chunk), state

    def own(self, key: ChunkKey) -> ChunkState:
        """A chunk's state this store alone holds, to change in place.

        :raises KeyError: if the store has no such chunk.
        """
        chunks = self._map(key.vm)
        owned = self._own_states.setdefault(key.vm, set())
        state = chunks[key.chunk]
        if key.chunk not in owned:
            state = chunks[key.chunk] = state.copy()
            owned.add(key.chunk)
        self.changed.add(key.vm)
        return state

    def put(self, key: ChunkKey, state: ChunkState) -> None:
        """Add or replace a chunk (the store takes ``state`` over)."""
        chunks = self._map(key.vm)
        if key.chunk not in chunks:
            self._count += 1
        chunks[key.chunk] = state
        self._own_states.setdefault(key.vm, set()).add(key.chunk)
        self.changed.add(key.vm)

    def delete(self, key: ChunkKey) -> None:
        """Forget a chunk.

        :raises KeyError: if the store has no such chunk.
        """
        chunks = self._map(key.vm)
        del chunks[key.chunk]
        self._count -= 1
        self._own_states.get(key.vm, set()).discard(key.chunk)
        self.changed.add(key.vm)
        if not chunks:
            del self._vms[key.vm]
            self._own_maps.discard(key.vm)
            self._own_states.pop(key.vm, None)

    def rebuild(self, age: Callable[[ChunkState], ChunkState | None]) -> None:
        """Replace every chunk's state by ``age(state)`` (a new object), dropping those it
        maps to ``None``: one pass, every VM changed."""
        vms: dict[str, dict[ChunkId, ChunkState]] = {}
        count = 0
        for vm, chunks in self._vms.items():
            kept = {}
            for chunk, state in chunks.items():
                new = age(state)
                if new is not None:
                    kept[chunk] = new
            if kept:
                vms[vm] = kept
                count += len(kept)
            self.changed.add(vm)
        self._vms = vms
        self._count = count
        self._own_maps = set(vms)
        self._own_states = {vm: set(chunks) for vm, chunks in vms.items()}

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
    state, :meth:`~unicache.policy.mfc.MfcTable.holders`)."""

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
