"""The guest-wide replica store (NCC in the guest): one copy of a chunk per node, for all.

The host's table says which chunks each node replicates. A process that reads such a
chunk on such a node asks the agent (``replica_server.py``), passing a descriptor of the
file: the store fills the replica from it once (``replica_files.read_chunk``), and every
later request of any process on that node gets the same file. The store enforces, per
node, what the paper's NCC manager does (docs/replicas.md):

* **budget**: replica memory (header and data pages) at most ``budget_ratio`` of the
  node's memory (default 10 %), and at most ``size=`` of the node's tmpfs;
* **MQ order**: hits (the shims' reads per node, harvested every round) raise a replica's
  frequency; ``Q_i`` holds frequencies ``2^i .. 2^(i+1)-1`` (8 queues); aging lowers every
  frequency by one per round, never below one; victims go lowest queue first, least
  recently used first;
* **memory-tight timer**: every round, a node whose free share (free memory and inactive
  page cache, ``numa_mem.node_headroom``) is below ``min_free_ratio`` makes no new replicas;
* **2:1 shrink**: on such a node, for every ``n`` pages it lacks below the floor, replicas
  give back ``ceil(2n/3)`` pages in MQ order (the page cache is left the rest);
* **coherence**: a write the agent learns of (fanotify, the shims' write counts) drops
  every replica of the file; the shim checks every serve anyway (``fstat``, generations).
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from . import numa_mem
from .replica_files import (
    DEFAULT_MARGIN_NS,
    ChunkKey,
    SourceState,
    charge,
    drop_replica,
    intact,
    read_chunk,
    write_replica,
)
from .shm import ChunkCounts

log = logging.getLogger(__name__)

#: paper §3.2: MQ queues Q_0..Q_7
MQ_QUEUES = 8
#: paper §3.2 "reclaim hooks": replica pages freed per primary page
NCC_RECLAIM_RATIO = 2
#: paper §3.2 timer: free share below which a node makes no replicas (the host's default)
MIN_FREE_RATIO = 0.10
#: default replica budget: this share of each node's memory
DEFAULT_BUDGET_RATIO = 0.10
PAGE = 4096


@dataclass
class Replica:
    """One replica file and its MQ bookkeeping.

    :param key: the chunk and node.
    :param path: the file.
    :param charged: bytes of node memory it holds.
    :param source: the source file it was filled from.
    :param length: bytes of the chunk it holds.
    :param freq: accesses, aged (>= 1).
    :param last: round of the last access (LRU order).
    """

    key: ChunkKey
    path: str
    charged: int
    source: SourceState
    length: int
    freq: int = 1
    last: int = 0

    @property
    def queue(self) -> int:
        """MQ queue: ``Q_i`` holds frequencies ``2^i .. 2^(i+1)-1``, capped at Q_7."""
        return min(MQ_QUEUES - 1, max(1, self.freq).bit_length() - 1)


@dataclass(frozen=True)
class NodeUsage:
    """A node's replicas now: count, bytes held, budget, and whether memory is tight."""

    node: int
    replicas: int
    bytes_held: int
    budget: int
    tight: bool


@dataclass
class StoreStats:
    """What the store did since it started (monotonic)."""

    fills: int = 0
    hits: int = 0
    refused: Dict[str, int] = field(default_factory=dict)
    dropped: Dict[str, int] = field(default_factory=dict)


class ReplicaStore:
    """Replica files per node, budgeted, in MQ order.

    :param root: the store's directory; node N's replicas are in ``root/nodeN``.
    :param node_totals: each guest node's memory in bytes.
    :param salt: the table's file-id salt.
    :param budget_ratio: replica memory per node, as a share of the node's memory.
    :param mount: mount a tmpfs bound to each node (else the agent binds its writes).
    :param margin_ns: least age of a file's last change before it is replicated.
    """

    def __init__(self, root: str, node_totals: Mapping[int, int], salt: int,
                 budget_ratio: float = DEFAULT_BUDGET_RATIO, mount: bool = True,
                 margin_ns: int = DEFAULT_MARGIN_NS,
                 min_free_ratio: float = MIN_FREE_RATIO) -> None:
        self.root = root
        self.salt = salt
        self.margin_ns = margin_ns
        self.min_free_ratio = min_free_ratio
        self.budgets = {n: int(total * budget_ratio) // PAGE * PAGE
                        for n, total in node_totals.items()}
        self.replicas: Dict[ChunkKey, Replica] = {}
        #: file_id -> its replicas' keys: a write (every FAN_MODIFY) costs what it drops
        self._by_file: Dict[int, Set[ChunkKey]] = {}
        self.held: Dict[int, int] = {n: 0 for n in node_totals}
        self.tight: FrozenSet[int] = frozenset()
        self.stats = StoreStats()
        self.chunk_size = 0
        #: (file_id, chunk) -> nodes the host's table replicates it on
        self.wanted: Dict[Tuple[int, int], FrozenSet[int]] = {}
        self._round = 0
        self._seq = 0
        self._summary = ""
        os.makedirs(root, mode=0o711, exist_ok=True)
        os.chmod(root, 0o711)  # the socket is reachable, nothing is listed
        self.mounted: Dict[int, bool] = {}
        for n in node_totals:
            d = self.node_dir(n)
            os.makedirs(d, mode=0o700, exist_ok=True)
            self.mounted[n] = mount and numa_mem.mount_node_tmpfs(d, n, self.budgets[n])
            os.chmod(d, 0o700)
            self._clear_leftovers(d)

    def node_dir(self, node: int) -> str:
        """The directory of a node's replicas."""
        return os.path.join(self.root, f"node{node}")

    def _clear_leftovers(self, d: str) -> None:
        """Drop the files of an earlier agent: shims may still map them."""
        for name in os.listdir(d):
            drop_replica(os.path.join(d, name))

    # Section: what the host wants

    def set_table(self, chunk_size: int,
                  wanted: Mapping[Tuple[int, int], FrozenSet[int]]) -> None:
        """The host's table changed: replicas it no longer lists are dropped.

        :param chunk_size: the table's chunk size (replicas of another size are dropped).
        :param wanted: (file_id, chunk) -> the nodes replicating it.
        """
        self.chunk_size = chunk_size
        self.wanted = dict(wanted)
        for key in list(self.replicas):
            if (key.chunk_size != chunk_size
                    or key.node not in self.wanted.get((key.file_id, key.chunk), ())):
                self._drop(key, "table")

    # Section: requests

    def request(self, src_fd: int, file_id: int, chunk: int, chunk_size: int,
                node: int) -> Tuple[int, Optional[str]]:
        """A process on ``node`` asks for a replica of a chunk of the file it passed.

        :param src_fd: the process's descriptor of the source (checked readable by the
            caller), never used for anything but reading that chunk.
        :param file_id: the id of that file (computed by the caller from the descriptor).
        :returns: (0, path of the replica file) or (errno, None): ENOENT the table does
            not replicate it there, ENOSPC no room (memory tight, budget), EAGAIN the file
            changed too recently, EINVAL anything else.
        """
        key = ChunkKey(file_id, chunk, chunk_size, node)
        if (chunk_size != self.chunk_size or node not in self.held
                or node not in self.wanted.get((file_id, chunk), ())):
            return self._refuse("not-in-table", errno.ENOENT)
        try:
            st = SourceState.of(os.fstat(src_fd))
        except OSError:
            return self._refuse("bad-source", errno.EINVAL)
        have = self.replicas.get(key)
        if have is not None:
            if have.source != st:
                self._drop(key, "changed")
            elif not intact(have.path, key, have.source, have.length):
                self._drop(key, "corrupt")  # truncated or overwritten behind the agent
            else:
                self.stats.hits += 1
                return 0, have.path
        if node in self.tight:
            return self._refuse("memory-tight", errno.ENOSPC)
        got = read_chunk(src_fd, self.salt, file_id, chunk, chunk_size, self.margin_ns)
        if got.error or got.source is None:
            return self._refuse("too-fresh" if got.error == errno.EAGAIN else "bad-source",
                                got.error or errno.EINVAL)
        need = charge(len(got.data))
        if need > self.budgets[node] or not self._make_room(node, need):
            return self._refuse("budget", errno.ENOSPC)
        self._seq += 1
        path = os.path.join(self.node_dir(node), f"{file_id:016x}.{chunk}.{chunk_size}."
                                                 f"{self._seq}")
        try:
            with numa_mem.bound_to(node, enabled=not self.mounted[node]):
                held = write_replica(path, key, got.source, got.data)
        except OSError as err:
            drop_replica(path)
            log.warning("replica %s not written: %s", path, err)
            return self._refuse("write-failed", errno.ENOSPC)
        self.replicas[key] = Replica(key, path, held, got.source, len(got.data), 1,
                                     self._round)
        self._by_file.setdefault(file_id, set()).add(key)
        self.held[node] += held
        self.stats.fills += 1
        return 0, path

    def _refuse(self, why: str, err: int) -> Tuple[int, Optional[str]]:
        self.stats.refused[why] = self.stats.refused.get(why, 0) + 1
        return err, None

    def _make_room(self, node: int, need: int) -> bool:
        """Evict in MQ order until ``need`` more bytes fit the node's budget."""
        victims = self.mq_order(node)
        while self.held[node] + need > self.budgets[node] and victims:
            self._drop(victims.pop(0).key, "mq-victim")
        return self.held[node] + need <= self.budgets[node]

    def mq_order(self, node: int) -> List[Replica]:
        """A node's replicas, first victim first: lowest queue, then least recently used."""
        return sorted((r for r in self.replicas.values() if r.key.node == node),
                      key=lambda r: (r.queue, r.last, r.key.file_id, r.key.chunk))

    # Section: invalidation and rounds

    def _drop(self, key: ChunkKey, why: str) -> None:
        r = self.replicas.pop(key, None)
        if r is None:
            return
        keys = self._by_file.get(key.file_id)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_file[key.file_id]
        drop_replica(r.path)
        self.held[key.node] -= r.charged
        self.stats.dropped[why] = self.stats.dropped.get(why, 0) + 1
        log.debug("replica dropped file=%x chunk=%d node=%d why=%s", key.file_id, key.chunk,
                  key.node, why)

    def drop_file(self, file_id: int) -> int:
        """A write to the file: every replica of it goes (paper §3.2 write-invalidate).

        :returns: replicas dropped.
        """
        keys = list(self._by_file.get(file_id, ()))
        for k in keys:
            self._drop(k, "write")
        return len(keys)

    def round(self, chunks: Iterable[ChunkCounts],
              memory: Sequence[Tuple[int, int, int]]) -> None:
        """One round: hits and writes from the harvest, aging, the memory-tight timer and
        the 2:1 shrink.

        :param chunks: what the shims counted since the last round.
        :param memory: (node, free bytes, total bytes) of each node
            (``numa_mem.node_headroom``: free and inactive page cache).
        """
        self._round += 1
        by_chunk: Dict[Tuple[int, int], ChunkCounts] = {}
        for c in chunks:
            by_chunk[(c.file_id, c.chunk)] = c
            if c.writes:
                self.drop_file(c.file_id)
        for r in self.replicas.values():
            r.freq = max(1, r.freq - 1)  # aging: one per round
            seen = by_chunk.get((r.key.file_id, r.key.chunk))
            reads = dict(seen.node_reads).get(r.key.node, 0) if seen is not None else 0
            if reads:
                r.freq += reads
                r.last = self._round
        tight = set()
        for node, free, total in memory:
            if node not in self.held or total <= 0:
                continue
            floor = int(total * self.min_free_ratio)
            if free < floor:
                tight.add(node)
                self._shrink(node, floor - free)
        if tight != self.tight:
            log.info("replicas: memory-tight nodes now %s (free below %.0f %%)",
                     sorted(tight), 100 * self.min_free_ratio)
        self.tight = frozenset(tight)
        summary = (f"replicas: {len(self.replicas)} held ({sum(self.held.values())} bytes), "
                   f"{self.stats.fills} filled, {self.stats.hits} handed out again, "
                   f"refused {self.stats.refused}, dropped {self.stats.dropped}")
        if summary != self._summary:  # what changed since the last round, once
            log.info("%s", summary)
            self._summary = summary

    def _shrink(self, node: int, lacking_bytes: int) -> None:
        """2:1: for ``n`` pages the node lacks, replicas give back ``ceil(2n/3)`` pages."""
        pages = -(-lacking_bytes // PAGE)
        want = -(-pages * NCC_RECLAIM_RATIO // (NCC_RECLAIM_RATIO + 1)) * PAGE
        freed = 0
        for victim in self.mq_order(node):
            if freed >= want:
                break
            freed += victim.charged
            self._drop(victim.key, "memory-tight")

    def usage(self) -> Tuple[NodeUsage, ...]:
        """Each node's replicas now."""
        return tuple(NodeUsage(n, sum(1 for k in self.replicas if k.node == n), held,
                               self.budgets[n], n in self.tight)
                     for n, held in sorted(self.held.items()))

    def close(self, unmount: bool = False) -> None:
        """Drop every replica (processes fall back to the real calls); optionally unmount."""
        for key in list(self.replicas):
            self._drop(key, "shutdown")
        if unmount:
            for n, mounted in self.mounted.items():
                if mounted:
                    numa_mem.unmount(self.node_dir(n))


def node_totals(memory: Sequence[Tuple[int, int, int]], nodes: Sequence[int]) -> Dict[int, int]:
    """Each node's total memory from ``guest_facts.node_memory`` rows; a node without a readable
    meminfo gets this machine's memory divided by the node count."""
    totals = {n: total for n, _free, total in memory}
    fallback = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // max(1, len(nodes))
    return {n: totals.get(n, fallback) for n in nodes}

