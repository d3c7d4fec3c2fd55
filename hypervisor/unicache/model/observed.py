"""What a host observes in one interval: VMs, vCPUs, chunks, counter samples, guest reports.

The input half of :mod:`unicache.model`: small frozen dataclasses that hosts (live,
replayed or simulated) build from what they observe, and that policies only read. No
file names ever appear here: a guest identifies a file by an opaque 64-bit id.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

#: the largest opaque file id a guest may use (ids are unsigned 64-bit)
MAX_FILE_ID = 2**64 - 1
#: a guest boot's file-id space (:attr:`GuestReport.id_space`): 16 lowercase hex digits
ID_SPACE = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True, slots=True, order=True)
class VcpuId:
    """One virtual CPU of one VM.

    :param vm: the VM's name (unique on the host).
    :param index: the vCPU index inside the VM (0-based, as QEMU and libvirt count).
    """

    vm: str
    index: int

    def __str__(self) -> str:
        return f"{self.vm}/vcpu{self.index}"


@dataclass(frozen=True, slots=True)
class Vcpu:
    """A vCPU as the host sees it now.

    :param id: which vCPU.
    :param thread_id: the host thread running it (QMP ``thread-id``), if known.
    :param cpus: the host CPUs it may currently run on (its affinity).
    :param cpu: the host CPU it last ran on (``/proc/TID/stat`` field 39), if known.
    """

    id: VcpuId
    thread_id: int | None
    cpus: frozenset[int]
    cpu: int | None = None


@dataclass(frozen=True, slots=True)
class GuestNode:
    """One guest NUMA node as the host built it.

    :param node: the guest's node id.
    :param vcpus: vCPU indices on the node (empty: a memory-only node).
    :param memory_bytes: the node's memory.
    :param colors: host LLC page colors backing the node's memory; empty = not colored
        (its pages may have any color). SRM-buffer confines page cache to colored nodes.
    """

    node: int
    vcpus: frozenset[int]
    memory_bytes: int
    colors: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Vm:
    """A virtual machine managed by unicache.

    :param name: unique name on the host.
    :param vcpus: its vCPUs, ordered by index.
    :param memory_bytes: guest RAM.
    :param nodes: its guest NUMA nodes, by node id (empty: unknown or one node).
    """

    name: str
    vcpus: tuple[Vcpu, ...]
    memory_bytes: int = 0
    nodes: tuple[GuestNode, ...] = ()

    def colored_nodes(self) -> tuple[GuestNode, ...]:
        """The guest nodes backed by host pages of chosen colors, by node id."""
        return tuple(n for n in self.nodes if n.colors)

    def node_of_vcpu(self, index: int) -> int:
        """The guest node of a vCPU (-1 when the VM has no NUMA layout or lacks the vCPU)."""
        return next((n.node for n in self.nodes if index in n.vcpus), -1)


@dataclass(frozen=True, slots=True, order=True)
class ChunkId:
    """A chunk of a guest file: an opaque file id and the chunk's index in the file.

    :param file_id: opaque unsigned 64-bit id chosen by the guest (never a name).
    :param index: chunk number, ``offset // chunk_size``.
    """

    file_id: int
    index: int

    def __str__(self) -> str:
        return f"{self.file_id:016x}:{self.index}"


class CounterSource(enum.StrEnum):
    """Where a counter sample came from; recorded in every sample and every weight."""

    #: perf_event_open hardware events (cycles, instructions, LLC references/misses)
    HARDWARE = "hardware"
    #: software events only (task-clock) plus the bytes the guest agent reported
    SOFTWARE = "software"
    #: the trace-driven simulator
    SIMULATED = "simulated"
    #: replayed from a recorded trace
    TRACE = "trace"


@dataclass(frozen=True, slots=True)
class CounterSample:
    """Counters of one vCPU over the last interval.

    Fields that the source cannot measure are ``None``, never zero.

    :param vcpu: which vCPU.
    :param source: what produced the numbers.
    :param cycles: CPU cycles the vCPU thread ran.
    :param instructions: instructions retired.
    :param llc_references: last-level cache references.
    :param llc_misses: last-level cache misses.
    :param level_misses: misses per cache level, index 0 = L1 (for MFC eq. 1), if known.
    :param busy: fraction of the interval the vCPU thread was running (task-clock / wall).
    :param guest_bytes: bytes the guest agent reported this vCPU read in the interval.
    :param task_clock_ns: CPU time the vCPU thread ran in the interval (software event).
    """

    vcpu: VcpuId
    source: CounterSource
    cycles: int | None = None
    instructions: int | None = None
    llc_references: int | None = None
    llc_misses: int | None = None
    level_misses: tuple[int, ...] | None = None
    busy: float = 0.0
    guest_bytes: int | None = None
    task_clock_ns: int | None = None


@dataclass(frozen=True, slots=True)
class ChunkAccess:
    """What a guest read (and wrote) of one chunk during one report interval.

    :param chunk: which chunk.
    :param bytes_read: total bytes read.
    :param reads: read runs: calls, except one that continues the same thread's previous
        read inside the chunk (a chunk read in small buffers counts once per pass).
    :param writes: number of write calls that touched the chunk.
    :param vcpu_bytes: ``(vcpu index, bytes read)`` pairs, sorted by vCPU index.
    :param home_node: the guest node holding the chunk's page-cache pages (its first
        page), -1 when unknown (NCC's primary copy).
    :param node_reads: ``(guest node, reads)`` pairs, sorted by node: reads by threads
        running on that node's vCPUs (NCC counts remote reads per node).
    """

    chunk: ChunkId
    bytes_read: int
    reads: int
    writes: int = 0
    vcpu_bytes: tuple[tuple[int, int], ...] = ()
    home_node: int = -1
    node_reads: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class AgentHealth:
    """The guest agent's own account of itself (informational, never trusted for decisions).

    :param uptime_s: seconds since the agent started.
    :param shim_clients: processes currently using the preload shim.
    :param dropped: events or counters the agent dropped since the last report.
    :param errors: errors the agent saw since the last report.
    """

    uptime_s: float = 0.0
    shim_clients: int = 0
    dropped: int = 0
    errors: int = 0


@dataclass(frozen=True, slots=True)
class NodeMemory:
    """Free memory of one NUMA node (a guest's, from its report; or the host's).

    :param node: the node.
    :param free_bytes: free memory.
    :param total_bytes: total memory.
    """

    node: int
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True, slots=True)
class GuestReport:
    """One periodic report from a guest agent, already validated and bounded by the channel.

    :param vm: the VM it came from (set by the host from the socket, never by the guest).
    :param seq: the agent's report sequence number.
    :param interval_s: the interval it covers.
    :param chunks: per-chunk accesses.
    :param guest_vcpus: how many vCPUs the guest sees online.
    :param guest_nodes: the guest's NUMA node ids.
    :param health: the agent's health.
    :param node_memory: the guest nodes' free memory (NCC turns replication off on a
        node whose free share is low).
    :param modified_files: file ids written in the interval by processes without the shim
        (fanotify/inotify), whose replicas must all be dropped.
    :param id_space: the file-id space of the guest's boot, from its agent's hello (set by
        the host's session; empty: the agent did not say). A new one means the guest
        booted again and its old file ids name nothing (``unicache.policy.guestboot``).
    """

    vm: str
    seq: int
    interval_s: float
    chunks: tuple[ChunkAccess, ...]
    guest_vcpus: int = 0
    guest_nodes: tuple[int, ...] = ()
    health: AgentHealth = field(default_factory=AgentHealth)
    node_memory: tuple[NodeMemory, ...] = ()
    modified_files: frozenset[int] = frozenset()
    id_space: str = ""


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything a host observed in one interval; the only input of a policy round.

    :param tick: the round number (policies use it instead of a clock).
    :param vms: the managed VMs and their vCPUs.
    :param samples: per-vCPU counter samples for the interval.
    :param reports: guest reports received in the interval.
    """

    tick: int
    vms: tuple[Vm, ...]
    samples: tuple[CounterSample, ...] = ()
    reports: tuple[GuestReport, ...] = ()
