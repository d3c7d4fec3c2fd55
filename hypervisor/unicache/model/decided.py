"""What a policy round decides: placement tables, actions with their reasons, refusals.

The output half of :mod:`unicache.model`: hosts carry out the actions; the decision log
records each with the rule that produced it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from unicache.model.observed import ChunkId, VcpuId

#: a placement entry's migration budget meaning "no limit" (the wire and the shim's value)
BUDGET_UNLIMITED = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class PlacementEntry:
    """Where the guest must read one chunk.

    :param chunk: which chunk.
    :param vcpus: the VM's vCPUs (indices) pinned in a unit that holds the chunk.
    :param caching: ``False`` = read with non-temporal loads (MFC §4.3 non-caching).
    :param migration_budget: migrations per interval the shim may spend on it (MFC §4.5);
        ``BUDGET_UNLIMITED`` where every migration pays, 0 = none.
    :param unit: the first host cache unit holding the chunk (informational for the guest).
    :param color_node: SRM-buffer: the guest node (a colored memory-only node) where the
        page cache of this chunk must be allocated; -1 = wherever the guest kernel puts it.
    :param replica_nodes: NCC: guest nodes that keep a node-local replica of the chunk
        and serve reads from threads running there.
    """

    chunk: ChunkId
    vcpus: frozenset[int]
    caching: bool = True
    migration_budget: int = 0
    unit: int = -1
    color_node: int = -1
    replica_nodes: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class PlacementTable:
    """The whole placement table of one VM; the guest replaces its table atomically.

    :param vm: which VM.
    :param version: increases with every table sent to that VM.
    :param chunk_size: bytes per chunk the guest must use to compute chunk indices.
    :param min_read_size: reads shorter than this never migrate (MFC §4.5).
    :param entries: one entry per placed chunk, sorted by chunk.
    :param id_space: the file-id space of the guest boot its file ids come from (empty:
        not known); a guest of another boot is not sent it.
    """

    vm: str
    version: int
    chunk_size: int
    min_read_size: int
    entries: tuple[PlacementEntry, ...]
    id_space: str = ""


class ActionKind(enum.StrEnum):
    """Stable names of action kinds, used in logs and metrics."""

    PIN_VCPU = "pin-vcpu"
    RELEASE_VCPU = "release-vcpu"
    SET_CPU_WEIGHT = "set-cpu-weight"
    PUBLISH_PLACEMENT = "publish-placement"
    ASSIGN_COLOR = "assign-color"
    REPLICATE = "replicate"
    DROP_REPLICA = "drop-replica"


@dataclass(frozen=True, slots=True)
class PinVcpu:
    """Pin a vCPU thread to a set of host CPUs.

    :param vcpu: which vCPU.
    :param cpus: the host CPUs it may run on.
    :param unit: the cache unit those CPUs belong to.
    :param reason: why, naming the rule that produced it.
    """

    kind: ClassVar[ActionKind] = ActionKind.PIN_VCPU
    vcpu: VcpuId
    cpus: frozenset[int]
    unit: int
    reason: str

    @property
    def target(self) -> str:
        """The key under which the reconciler remembers what it applied."""
        return f"affinity/{self.vcpu}"


@dataclass(frozen=True, slots=True)
class ReleaseVcpu:
    """Give a vCPU back the CPUs it had before unicache pinned it (its journaled affinity).

    :param vcpu: which vCPU.
    :param reason: why, naming the rule that produced it.
    """

    kind: ClassVar[ActionKind] = ActionKind.RELEASE_VCPU
    vcpu: VcpuId
    reason: str

    @property
    def target(self) -> str:
        """The key of the pin it undoes (the same as :class:`PinVcpu`'s)."""
        return f"affinity/{self.vcpu}"


@dataclass(frozen=True, slots=True)
class SetCpuWeight:
    """Set the CPU weight of a vCPU (cgroup v2 ``cpu.weight``, 1..10000).

    :param vcpu: which vCPU.
    :param weight: the new weight.
    :param reason: why, naming the rule that produced it.
    """

    kind: ClassVar[ActionKind] = ActionKind.SET_CPU_WEIGHT
    vcpu: VcpuId
    weight: int
    reason: str

    @property
    def target(self) -> str:
        """The key under which the reconciler remembers what it applied."""
        return f"cpu.weight/{self.vcpu}"


@dataclass(frozen=True, slots=True)
class PublishPlacement:
    """Send a placement table to a VM's guest agent.

    :param vm: which VM.
    :param table: the table.
    :param reason: why, summarising the rules behind the entries.
    """

    kind: ClassVar[ActionKind] = ActionKind.PUBLISH_PLACEMENT
    vm: str
    table: PlacementTable
    reason: str

    @property
    def target(self) -> str:
        """The key under which the reconciler remembers what it applied."""
        return f"placement/{self.vm}"


@dataclass(frozen=True, slots=True)
class AssignColor:
    """SRM-buffer: the page cache of a run of a guest file's chunks goes to one color node.

    Carried out by the VM's next placement table (``PlacementEntry.color_node``); hosts
    record it, the guest's shim enforces it.

    :param vm: which VM.
    :param file_id: the guest's opaque file id.
    :param first_chunk: first chunk index of the run.
    :param last_chunk: last chunk index of the run (inclusive).
    :param color: the color index in the VM's colored zone (its colored nodes, in order).
    :param color_node: the guest node holding that color.
    :param rule: the paper rule that produced it.
    :param reason: one line for humans.
    """

    kind: ClassVar[ActionKind] = ActionKind.ASSIGN_COLOR
    vm: str
    file_id: int
    first_chunk: int
    last_chunk: int
    color: int
    color_node: int
    rule: str
    reason: str

    @property
    def target(self) -> str:
        """The key under which the reconciler remembers what it applied."""
        return f"color/{self.vm}/{self.file_id:016x}:{self.first_chunk}"


@dataclass(frozen=True, slots=True)
class _ReplicaAction:
    """NCC: a decision about the replica of a chunk on one guest node.

    :param vm: which VM.
    :param chunk: the chunk.
    :param node: the guest node of the replica.
    :param rule: the paper rule that produced it.
    :param reason: one line for humans.
    """

    vm: str
    chunk: ChunkId
    node: int
    rule: str
    reason: str

    @property
    def target(self) -> str:
        """The key under which the reconciler remembers what it applied."""
        return f"replica/{self.vm}/{self.chunk}@{self.node}"


@dataclass(frozen=True, slots=True)
class Replicate(_ReplicaAction):
    """NCC: keep a node-local replica of a chunk on a guest node.

    Carried out by the VM's next placement table (``PlacementEntry.replica_nodes``).
    """

    kind: ClassVar[ActionKind] = ActionKind.REPLICATE


@dataclass(frozen=True, slots=True)
class DropReplica(_ReplicaAction):
    """NCC: drop the replica of a chunk on a guest node."""

    kind: ClassVar[ActionKind] = ActionKind.DROP_REPLICA


#: every action a policy can return
Action = (
    PinVcpu | ReleaseVcpu | SetCpuWeight | PublishPlacement | AssignColor | Replicate | DropReplica
)

#: actions a host carries out through the VM's placement table, not on their own
TABLE_ACTIONS = (AssignColor, Replicate, DropReplica)


@dataclass(frozen=True, slots=True)
class ChunkDecision:
    """One decision about one chunk, kept for ``explain`` and the decision log.

    :param vm: the VM whose read triggered it.
    :param chunk: which chunk.
    :param unit: the unit chosen.
    :param caching: caching or non-caching loads.
    :param rule: the Figure 2 rule (line numbers) that produced it.
    :param reason: one line for humans.
    """

    vm: str
    chunk: ChunkId
    unit: int
    caching: bool
    rule: str
    reason: str


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request a policy could not satisfy.

    :param kind: stable reason, e.g. ``LLC_EXHAUSTED``.
    :param reason: one line for humans.
    """

    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class Decision:
    """What one policy round decided.

    :param policy: the policy's name.
    :param actions: actions for the host to carry out, in order.
    :param chunk_decisions: per-chunk decisions behind the placement tables.
    :param refusals: what could not be done.
    """

    policy: str
    actions: tuple[Action, ...] = ()
    chunk_decisions: tuple[ChunkDecision, ...] = ()
    refusals: tuple[Refusal, ...] = ()
