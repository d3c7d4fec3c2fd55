"""SCU's placement table of one VM, built from the MFC table's chunks.

A chunk some unit holds goes to the VM's vCPUs pinned in its holders (Figure 2 line 31:
readers go to a holder; copies let several units serve a popular chunk, §4.4), with
§4.5's migration budget; a used chunk no unit holds is read with non-caching loads
(lines 27-29) wherever the thread is. The table is bounded, the most used chunks first,
and carries the colors (SRM-buffer) and replicas (NCC) other policies decided. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from unicache.model import ChunkId, PlacementEntry
from unicache.policy.mfcstate import ChunkKey, ChunkState


@dataclass(frozen=True, slots=True)
class ChunkExtras:
    """What other policies add to a chunk's placement entry.

    :param color_node: SRM-buffer's color node (-1: none).
    :param replica_nodes: NCC's replica nodes.
    """

    color_node: int = -1
    replica_nodes: frozenset[int] = frozenset()


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
        units = sorted(state.units & vm_units)
        if units:
            # every holder may serve the read (Figure 2 line 31: readers go to a holder;
            # replicas exist so that several units serve a popular chunk, §4.4)
            unit = units[0]
            vcpus = frozenset(i for i, u in vcpu_units.items() if u in units)
            # §4.5 competitive rule, enforced by the guest's shim per aging period
            entries.append(
                (
                    state.total_use(),
                    PlacementEntry(key.chunk, vcpus, True, budget(state.size), unit),
                )
            )
        elif state.use and state.size >= min_read_size:
            everywhere = frozenset(vcpu_units)
            entries.append((state.total_use(), PlacementEntry(key.chunk, everywhere, False, 0)))
    # the table is bounded: keep the most used chunks; sort keys: use desc, chunk
    entries.sort(key=lambda e: (-e[0], e[1].chunk))
    kept = [e for _, e in entries[:max_entries]]
    merged = {e.chunk: e for e in kept}
    for chunk, extra in extras.items():
        # SRM colors and NCC replicas ride on SCU's entry, or on one that never migrates
        entry = merged.get(chunk) or PlacementEntry(chunk, frozenset())
        merged[chunk] = replace(
            entry, color_node=extra.color_node, replica_nodes=extra.replica_nodes
        )
    return tuple(merged[c] for c in sorted(merged))
