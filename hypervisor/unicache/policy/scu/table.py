"""SCU's placement table of one VM, built from the MFC table's chunks.

A chunk some unit holds goes to the VM's vCPUs pinned in its holders (Figure 2 line 31:
readers go to a holder; copies let several units serve a popular chunk, §4.4), with
§4.5's migration budget; a used chunk no unit holds is read with non-caching loads
(lines 27-29) wherever the thread is. The table is bounded, the most used chunks first,
and carries the colors (SRM-buffer) and replicas (NCC) other policies decided. Pure.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from unicache.model import ChunkId, PlacementEntry
from unicache.policy.scu.mfc_state import ChunkKey, ChunkState


@dataclass(frozen=True, slots=True)
class ChunkExtras:
    """What other policies add to a chunk's placement entry.

    :param color_node: SRM-buffer's color node (-1: none).
    :param replica_nodes: NCC's replica nodes.
    """

    color_node: int = -1
    replica_nodes: frozenset[int] = frozenset()


class VmExtras(Mapping[ChunkId, ChunkExtras]):
    """One VM's extras as SRM and NCC hand them over: its colored chunks' color nodes and
    its replicated chunks' replica nodes, seen as one map ``chunk -> ChunkExtras``.

    Kept as the two maps, not merged a chunk at a time each round: two rounds' extras
    compare in one step where the policies hand back the same maps, and otherwise map
    by map in C, not entry by entry (a VM's replicas grow to thousands of chunks).

    :param colors: colored chunk -> its color node (SRM-buffer).
    :param replicas: replicated chunk -> its replica nodes (NCC).
    """

    __slots__ = ("colors", "replicas")

    def __init__(
        self,
        colors: Mapping[ChunkId, int] | None = None,
        replicas: Mapping[ChunkId, frozenset[int]] | None = None,
    ) -> None:
        self.colors: Mapping[ChunkId, int] = colors or {}
        self.replicas: Mapping[ChunkId, frozenset[int]] = replicas or {}

    def __getitem__(self, chunk: ChunkId) -> ChunkExtras:
        color = self.colors.get(chunk, -1)
        nodes = self.replicas.get(chunk)
        if nodes is None:
            if chunk not in self.colors:
                raise KeyError(chunk)
            return ChunkExtras(color)
        return ChunkExtras(color, nodes)

    def __contains__(self, chunk: object) -> bool:
        return chunk in self.colors or chunk in self.replicas

    def __iter__(self) -> Iterator[ChunkId]:
        yield from self.colors
        yield from (c for c in self.replicas if c not in self.colors)

    def __len__(self) -> int:
        return len(self.colors) + sum(1 for c in self.replicas if c not in self.colors)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VmExtras):
            return NotImplemented
        # a tuple compares its items identity first: the same maps are equal at once
        return (self.colors, self.replicas) == (other.colors, other.replicas)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"VmExtras(colors={self.colors!r}, replicas={self.replicas!r})"

    def adds_nothing_somewhere(self) -> bool:
        """Whether some chunk's extras add nothing to its entry (no color, no replica):
        such an extra cannot be told from its absence in a built table."""
        if min(self.colors.values(), default=0) >= 0 and all(self.replicas.values()):
            return False  # (the usual answer, from two passes in C)
        return any(self.colors.get(c, -1) < 0 and not self.replicas.get(c) for c in self)

    def changed_since(self, before: VmExtras) -> set[ChunkId]:
        """The chunks whose extras differ from ``before``'s (added, changed, dropped)."""
        out: set[ChunkId] = set()
        for now, then in ((self.colors, before.colors), (self.replicas, before.replicas)):
            if now is not then:
                # values are ints and frozensets: the items compare as a set, in C
                out.update(chunk for chunk, _ in now.items() ^ then.items())
        return out


#: a VM without colors or replicas
NO_EXTRAS = VmExtras()


def placement_entries(
    chunks: Iterable[tuple[ChunkKey, ChunkState]],
    vcpu_units: Mapping[int, int],
    extras: Mapping[ChunkId, ChunkExtras],
    budget: Callable[[int], int],
    min_read_size: int,
    max_entries: int,
) -> tuple[PlacementEntry, ...]:
    """The entries of one VM's placement table.

    :param chunks: the VM's chunks in the MFC table, with their state.
    :param vcpu_units: the VM's vCPU index -> the unit it is pinned in.
    :param extras: colors and replicas of the VM's chunks.
    :param budget: a chunk's migration budget from its size (§4.5).
    :param min_read_size: used chunks smaller than this get no non-caching entry.
    :param max_entries: the most entries SCU's own placement adds (colors and replicas
        ride on them, or add entries that never migrate).
    :returns: the entries, sorted by chunk.
    """
    entries = []
    vm_units = set(vcpu_units.values())
    for key, state in chunks:
        entry = chunk_entry(key.chunk, state, vcpu_units, vm_units, budget, min_read_size)
        if entry is not None:
            entries.append((state.total_use(), entry))
    if len(entries) > max_entries:
        # the table is bounded: keep the most used chunks; sort keys: use desc, chunk
        entries.sort(key=lambda e: (-e[0], e[1].chunk))
    kept = [e for _, e in entries[:max_entries]]
    merged = {e.chunk: e for e in kept}
    for chunk, extra in extras.items():
        merged[chunk] = _with_extras(merged.get(chunk), chunk, extra)
    # ChunkId's own order, compared as plain tuples (one key per chunk, not a call per
    # comparison)
    return tuple(merged[c] for c in sorted(merged, key=lambda c: (c.file_id, c.index)))


def chunk_entry(
    chunk: ChunkId,
    state: ChunkState,
    vcpu_units: Mapping[int, int],
    vm_units: AbstractSet[int],
    budget: Callable[[int], int],
    min_read_size: int,
) -> PlacementEntry | None:
    """SCU's own entry for one chunk of a VM (:func:`placement_entries`), if any.

    :param vm_units: the units of ``vcpu_units``.
    """
    units = sorted(state.units & vm_units)
    if units:
        # every holder may serve the read (Figure 2 line 31: readers go to a holder;
        # replicas exist so that several units serve a popular chunk, §4.4)
        vcpus = frozenset(i for i, u in vcpu_units.items() if u in units)
        # §4.5 competitive rule, enforced by the guest's shim per aging period
        return PlacementEntry(chunk, vcpus, True, budget(state.size), units[0])
    if state.use_pairs and state.size >= min_read_size:
        return PlacementEntry(chunk, frozenset(vcpu_units), False, 0)
    return None


def patched_entries(
    previous: tuple[PlacementEntry, ...],
    changed: Iterable[tuple[ChunkId, ChunkState | None]],
    vcpu_units: Mapping[int, int],
    extras: Mapping[ChunkId, ChunkExtras],
    budget: Callable[[int], int],
    min_read_size: int,
) -> tuple[PlacementEntry, ...]:
    """:func:`placement_entries` again after some chunks changed, from the table built
    before: the entries of ``changed`` chunks (``None``: forgotten) recomputed, the others
    kept. The same table only where neither table is cut to ``max_entries`` (the caller
    checks) and nothing else it is built on changed (vCPUs' units, extras).

    :param previous: the table built before (sorted by chunk).
    :param changed: the chunks that changed since, with their states now.
    """
    entries = list(previous)
    order = [e.chunk for e in entries]
    vm_units = set(vcpu_units.values())
    for chunk, state in sorted(changed, key=lambda c: c[0]):
        entry = None
        if state is not None:
            entry = chunk_entry(chunk, state, vcpu_units, vm_units, budget, min_read_size)
        if chunk in extras:
            entry = _with_extras(entry, chunk, extras[chunk])
        at = bisect.bisect_left(order, chunk)
        present = at < len(order) and order[at] == chunk
        if present and entry is None:
            del entries[at], order[at]
        elif present and entry is not None:
            entries[at] = entry
        elif entry is not None:
            entries.insert(at, entry)
            order.insert(at, chunk)
    return tuple(entries)


def _with_extras(
    entry: PlacementEntry | None, chunk: ChunkId, extra: ChunkExtras
) -> PlacementEntry:
    # SRM colors and NCC replicas ride on SCU's entry, or on one that never migrates
    # (the constructor, not dataclasses.replace: a call per colored or replicated chunk)
    if entry is None:
        return PlacementEntry(
            chunk, frozenset(), color_node=extra.color_node, replica_nodes=extra.replica_nodes
        )
    return PlacementEntry(
        entry.chunk,
        entry.vcpus,
        entry.caching,
        entry.migration_budget,
        entry.unit,
        extra.color_node,
        extra.replica_nodes,
    )
