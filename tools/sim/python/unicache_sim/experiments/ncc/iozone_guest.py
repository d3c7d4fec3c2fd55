"""The guest side of the NCC iozone experiment: page cache, node memory, shim and agent.

:mod:`unicache_sim.experiments.ncc.iozone` runs iozone's threads; this module keeps what
the guest kernel, the preload shim and the guest agent would, so the host's round
(:func:`unicache.policy.ncc.replicas.replicas_round`, the daemon's) sees the reports they send:

* **page cache (NC)**: a file's page is placed when first written, on the writer's node
  (first touch), or on another node when the writer's is full (Linux's zonelist
  fallback); pages stay (the files fit in memory, as in the paper);
* **node memory**: a node's free bytes are its memory less the system's share (the
  kernel and every other process), its page-cache pages and its replicas;
* **shim counters** (``uc_count``): per chunk, reads per node counted in runs (a read
  that continues the thread's previous read inside the chunk adds nothing, one at a
  chunk's start always counts), writes, and the home (the node of the chunk's first
  page); they make one :class:`~unicache.model.GuestReport` per round with the nodes'
  free memory;
* **agent's replica store**: the table's replicas are filled on the first read of the
  chunk on their node (the reader's copy from the primary: a read there and a write
  here), unless the node was memory-tight at the agent's last round (``ENOSPC``) or
  lacks the room; each is charged as the agent charges its file
  (:func:`~unicache.policy.ncc.memory.replica_bytes`); a written file's replicas are
  dropped at the agent's round, and until then the shim's check (the file's change
  time against the fill's) refuses to serve them: **no read is ever served stale**.
"""

from __future__ import annotations

from dataclasses import dataclass

from unicache.errors import ConfigError
from unicache.model import ChunkAccess, ChunkId, GuestReport, NodeMemory
from unicache.policy.ncc.cache import MIN_FREE_RATIO
from unicache.policy.ncc.memory import replica_bytes

from unicache_sim import _native

#: the VM that stands for the paper's machine
VM_NAME = "iozone"
PAGE = 4096


@dataclass(slots=True)
class _Counts:
    """The shim's counters of one chunk since the last report."""

    reads: list[int]
    writes: int = 0
    bytes_read: int = 0


@dataclass(slots=True)
class Replica:
    """A filled replica: its engine object, the bytes it charges, the file version it holds.

    :param obj: engine object holding the chunk's bytes on the node.
    :param charged: node memory it holds (header page and data pages).
    :param version: the file's write count when it was filled.
    """

    obj: int
    charged: int
    version: int


class GuestCache:
    """Files, their page homes, node memory, the shim's counters and the agent's replicas.

    :param engine: the native engine the files live in.
    :param nodes: NUMA nodes.
    :param node_bytes: memory of a node (scaled).
    :param system_bytes: memory of a node used by the kernel and other processes.
    :param files: one size in bytes per file.
    :param chunk: the product's chunk size.
    """

    def __init__(
        self,
        engine: _native.Engine,
        nodes: int,
        node_bytes: int,
        system_bytes: int,
        files: list[int],
        chunk: int,
    ) -> None:
        self.engine = engine
        self.nodes = nodes
        self.node_bytes = node_bytes
        self.system_bytes = system_bytes
        self.chunk = chunk
        self.sizes = files
        self.objects = [engine.add_object(size, "first_touch") for size in files]
        #: node of each page of each file (-1: never written)
        self.page_home: list[list[int]] = [[-1] * -(-s // PAGE) for s in files]
        self.cache_pages = [0] * nodes
        #: writes of each file so far (the shim's change check compares them)
        self.version = [0] * len(files)
        self.written: set[int] = set()
        self.counts: dict[ChunkId, _Counts] = {}
        #: (file, chunk index, node) -> filled replica
        self.replicas: dict[tuple[int, int, int], Replica] = {}
        self.replica_held = [0] * nodes
        #: engine objects of dropped replicas not freed yet
        self.dropped: list[int] = []
        self.replica_peak = [0] * nodes
        #: chunks the host's table replicates, and on which nodes
        self.wanted: dict[ChunkId, frozenset[int]] = {}
        #: nodes the agent found memory-tight at its last round
        self.tight: frozenset[int] = frozenset()
        self.fills = self.fills_refused = self.stale_refused = 0
        self.dropped_by_write = self.dropped_by_table = 0

    # -- memory -----------------------------------------------------------------------
    def free_bytes(self, node: int) -> int:
        """Free memory of a node now."""
        used = self.system_bytes + self.cache_pages[node] * PAGE + self.replica_held[node]
        return self.node_bytes - used

    def node_memory(self) -> tuple[NodeMemory, ...]:
        """What the agent reports (its ``node_memory``)."""
        return tuple(
            NodeMemory(n, max(0, self.free_bytes(n)), self.node_bytes) for n in range(self.nodes)
        )

    def place(self, f: int, page: int, node: int) -> int:
        """The node of a file page, placing it on first write (first touch, else fallback).

        :raises ConfigError: when no node has room (the files must fit in memory).
        """
        home = self.page_home[f][page]
        if home >= 0:
            return home
        order = [node, *(n for n in range(self.nodes) if n != node)]
        home = next((n for n in order if self.free_bytes(n) >= PAGE), -1)
        if home < 0:
            raise ConfigError("the files do not fit in the nodes' memory: fewer --threads")
        self.engine.place_page(self.objects[f], page, home)
        self.page_home[f][page] = home
        self.cache_pages[home] += 1
        return home

    # -- the shim ---------------------------------------------------------------------
    def _counts(self, f: int, offset: int) -> _Counts:
        key = ChunkId(f, offset // self.chunk)
        c = self.counts.get(key)
        if c is None:
            c = self.counts[key] = _Counts([0] * self.nodes)
        return c

    def count_read(self, f: int, offset: int, length: int, node: int, run: bool) -> None:
        """Count one read call inside one chunk (``run``: it starts a new run)."""
        c = self._counts(f, offset)
        c.reads[node] += 1 if run else 0
        c.bytes_read += length

    def table_state(self, f: int, offset: int) -> str:
        """What the table says of the call's chunk, for the shim's cost
        (:data:`unicache_sim.guest.shimcost.TABLE_STATES`): placed when it lists a replica."""
        return "placed" if self.wanted.get(ChunkId(f, offset // self.chunk)) else "unplaced"

    def count_write(self, f: int, offset: int) -> None:
        """Count one write call inside one chunk; the file changes (its version)."""
        self._counts(f, offset).writes += 1
        self.version[f] += 1
        self.written.add(f)

    def report(self, seq: int, interval_s: float) -> GuestReport:
        """The agent's report of what the shims counted since the last one (then reset)."""
        chunks = []
        for key, c in sorted(self.counts.items()):
            reads = sum(c.reads)
            first_page = key.index * self.chunk // PAGE
            home = self.page_home[key.file_id][first_page] if reads else -1
            node_reads = tuple((n, r) for n, r in enumerate(c.reads) if r)
            chunks.append(
                ChunkAccess(
                    key, c.bytes_read, reads, c.writes, home_node=home, node_reads=node_reads
                )
            )
        self.counts = {}
        nodes = tuple(range(self.nodes))
        return GuestReport(
            VM_NAME,
            seq,
            interval_s,
            tuple(chunks),
            guest_nodes=nodes,
            node_memory=self.node_memory(),
        )

    # -- the agent --------------------------------------------------------------------
    def agent_round(self, wanted: dict[ChunkId, frozenset[int]]) -> None:
        """The agent's round: the host's new table, drops of written files' replicas and of
        replicas the table no longer lists, and the memory-tight timer's verdict."""
        self.wanted = wanted
        for key in list(self.replicas):
            f, index, node = key
            if f in self.written:
                self._drop(key)
                self.dropped_by_write += 1
            elif node not in wanted.get(ChunkId(f, index), frozenset()):
                self._drop(key)
                self.dropped_by_table += 1
        self.written = set()
        self.tight = frozenset(
            m.node for m in self.node_memory() if m.free_bytes < m.total_bytes * MIN_FREE_RATIO
        )

    def _drop(self, key: tuple[int, int, int]) -> None:
        replica = self.replicas.pop(key)
        self.replica_held[key[2]] -= replica.charged
        # the other CPU may have reads of it queued: its frames go at the test's end
        self.dropped.append(replica.obj)

    def free_dropped(self) -> None:
        """Free the engine objects of dropped replicas (call when no access is queued)."""
        for obj in self.dropped:
            self.engine.free_object(obj)
        self.dropped = []

    def replica_for(self, f: int, index: int, node: int) -> Replica | None:
        """The replica a read of chunk ``index`` on ``node`` may be served from, if any
        (one that holds the file's current bytes: the shim refuses an older one)."""
        replica = self.replicas.get((f, index, node))
        if replica is None:
            return None
        if replica.version != self.version[f]:
            self.stale_refused += 1
            return None
        return replica

    def want_fill(self, f: int, index: int, node: int) -> bool:
        """Whether a read on ``node`` asks the agent for a replica it may fill now."""
        if (f, index, node) in self.replicas:
            return False
        if node not in self.wanted.get(ChunkId(f, index), frozenset()):
            return False
        length = min(self.chunk, self.sizes[f] - index * self.chunk)
        if node in self.tight or self.free_bytes(node) < replica_bytes(length):
            self.fills_refused += 1
            return False
        return True

    def fill(self, f: int, index: int, node: int) -> int:
        """Make the replica (the caller charges the copy); returns its engine object."""
        length = min(self.chunk, self.sizes[f] - index * self.chunk)
        obj = self.engine.add_object(length, "node", node)
        charged = replica_bytes(length)
        self.replicas[(f, index, node)] = Replica(obj, charged, self.version[f])
        self.replica_held[node] += charged
        self.replica_peak[node] = max(self.replica_peak[node], self.replica_held[node])
        self.fills += 1
        return obj
