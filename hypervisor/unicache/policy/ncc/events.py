"""NCC's events and actions: what a round of :mod:`unicache.policy.ncc.cache` reads (a read, a
write, a reclaim, an aging) and returns (the model's replica actions and the primary
cache's share of a reclaim), keyed by :class:`ReplicaKey`. The events are the ones the
dual-layered file cache paper's §3.2 handles: "Generation of NCC entries" (remote reads),
"Cache Coherence" (a write), "Hooks for reclaiming" (the 2:1 shrink) and "Management of
NCC entries" (the MQ queues' aging).

Split from :mod:`unicache.policy.ncc.cache`, which re-exports every name here. Pure values.
"""

from __future__ import annotations

from dataclasses import dataclass

from unicache.model import ChunkId, DropReplica, Replicate


@dataclass(frozen=True, slots=True, order=True)
class ReplicaKey:
    """A chunk of one VM (guests choose file ids, so the VM is part of the key).

    :param vm: the VM.
    :param chunk: the chunk.
    """

    vm: str
    chunk: ChunkId

    def __str__(self) -> str:
        return f"{self.vm}/{self.chunk}"

    @staticmethod
    def of(action: Replicate | DropReplica) -> ReplicaKey:
        """The chunk a replica action is about.

        :param action: a replica made or dropped.
        :returns: its VM and chunk as a key.
        """
        return ReplicaKey(action.vm, action.chunk)


@dataclass(frozen=True, slots=True)
class Read:
    """A guest read of a chunk by a vCPU running on ``node``.

    :param key: the chunk.
    :param node: the node of the reading vCPU.
    :param home: the node holding the primary copy.
    :param nbytes: the bytes it read (0: unknown), what a replica serving it saves
        (:mod:`unicache.policy.ncc.gain` weighs a replica's reads by them).
    """

    key: ReplicaKey
    node: int
    home: int
    nbytes: int = 0


@dataclass(frozen=True, slots=True)
class Write:
    """A write (or memory-mapped write) to a chunk.

    :param key: the chunk.
    """

    key: ReplicaKey


@dataclass(frozen=True, slots=True)
class PrimaryReclaimed:
    """The primary copy of a chunk was reclaimed.

    :param key: the chunk.
    """

    key: ReplicaKey


@dataclass(frozen=True, slots=True)
class Reclaim:
    """The host must free pages (chunks) on a node.

    :param node: the node.
    :param pages: how many chunks to free.
    """

    node: int
    pages: int


@dataclass(frozen=True, slots=True)
class Age:
    """The primary cache refilled its inactive list: age every replica (MQ aging)."""


#: every event the policy handles, in the order they happened
NccEvent = Read | Write | PrimaryReclaimed | Reclaim | Age


@dataclass(frozen=True, slots=True)
class ReclaimPrimary:
    """The primary cache's share of a reclaim: the caller frees this many primary chunks.

    :param node: the node.
    :param pages: how many chunks.
    :param reason: one line for humans.
    """

    node: int
    pages: int
    reason: str


#: every action the policy returns: the model's replica actions (the host carries them out
#: through the VM's placement table), and the primary cache's share of a reclaim
NccAction = Replicate | DropReplica | ReclaimPrimary
