"""The placement table's writer: the agent's one table file, published atomically.

The layout (``shm.py``, mirroring ``guest-agent/shim/uc_layout.h``): a 64-byte header, each
CPU's guest node and, one page in, two buffers, each a one-page head (its header and the
file filter) and the entries. :meth:`TableWriter.publish` fills the inactive buffer under
that buffer's seqlock (odd sequence while writing), then flips ``active`` and bumps
``gen``; a reader that overlaps a write sees the sequence change and retries, so a table
is replaced atomically from the shim's point of view. Files the shims map are never
resized in place: they are retired (zero magic) and replaced (:func:`open_shared_map`).
"""

from __future__ import annotations

import mmap
import os
import secrets
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from .errors import ShmError
from .shm import (
    _BUF,
    _CPUS_END,
    _CPUS_OFF,
    _ENTRY,
    _HDR,
    _HDR_ACTIVE_OFF,
    _HDR_GEN_OFF,
    _HDR_HARVESTS_OFF,
    _M64,
    _U32,
    _U64,
    BUDGET_UNLIMITED,
    BUF_HEAD_LEN,
    DEFAULT_BUCKETS,
    DEFAULT_TABLE,
    ENTRY_CACHING,
    ENTRY_COLOR,
    ENTRY_HOMES,
    ENTRY_REPLICA,
    ENTRY_USED,
    EVERY_OPEN,
    FILE_CHUNK,
    FILTER_BYTES,
    LAYOUT_VERSION,
    MASK_WORDS,
    MAX_BUCKETS,
    MAX_NODES,
    MAX_VCPUS,
    TABLE_BUFS_OFFSET,
    TABLE_HOMES,
    TABLE_MAGIC,
    TABLE_NUMA,
    TABLE_VALID,
    CounterLayout,
    CpuNodes,
    OpenSample,
    ShmEntry,
    bucket_hash,
    filter_bits,
)


def retire_shared(fd: int, path: str) -> None:
    """Zero the magic of a file the shims may have mapped, then unlink it.

    Shims notice the zero magic and map the new file; the old inode stays valid for them,
    so nobody is ever left with a mapping beyond the end of a shrunk file (SIGBUS).
    """
    with mmap.mmap(fd, 4, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
        m[0:4] = bytes(4)
    os.unlink(path)


def open_shared_map(path: str, size: int, magic: int, mode: int) -> Tuple[mmap.mmap, bool]:
    """Open (creating if needed) a shared file of ``size`` bytes; returns (map, created).

    Never follows a symlink. An existing file that is not ours (another owner, or writable
    by others when ``mode`` says it must not be) is unlinked and recreated, so nobody but
    the agent can shrink a file the shims map. An existing file of another size is retired
    and replaced, never resized in place.
    """
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags | os.O_CREAT, mode)
        st = os.fstat(fd)
        foreign = st.st_uid != os.geteuid() or bool(st.st_mode & 0o022 & ~mode)
        if foreign or st.st_size not in (0, size):
            if (not foreign and st.st_size >= 4
                    and _U32.unpack(os.pread(fd, 4, 0))[0] == magic):
                retire_shared(fd, path)
            else:
                os.unlink(path)
            os.close(fd)
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, mode)
            st = os.fstat(fd)
        os.fchmod(fd, mode)  # whatever the umask said
    except OSError as err:
        raise ShmError(f"cannot open {path}") from err
    try:
        created = st.st_size == 0
        if st.st_size != size:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE), created
    except OSError as err:
        raise ShmError(f"cannot map {path}") from err
    finally:
        os.close(fd)


#: the table: written by the agent only, read by every process
TABLE_MODE = 0o644


@dataclass(frozen=True)
class TableSnapshot:
    """The active table buffer as a shim reads it (tests and ``status``).

    :param entries: the chunk entries.
    :param files: (file_id, flags) of each file entry, by file id.
    :param sample: which opens the shims count.
    """

    version: int
    chunk_size: int
    min_read_size: int
    nentries: int
    flags: int
    entries: Tuple[ShmEntry, ...]
    files: Tuple[Tuple[int, int], ...]
    sample: OpenSample = EVERY_OPEN


class TableWriter:
    """Writer of the placement table file (one per guest; the agent holds it).

    :param path: the table file (``UNICACHE_TABLE``).
    :param nbuckets: hash buckets per buffer, a power of two <= MAX_BUCKETS.
    :param counters: the layout of the users' counters files, published in the header.
    :param cpu_nodes: each CPU's node and the online nodes, published after the header
        (default: this guest's, from sysfs).
    :param sample: which opens the shims count, written with every publish (default: every
        open, whole, as the agent's own default; ``--open-sample`` passes another).
    :raises ShmError: when the file cannot be created or mapped.
    """

    def __init__(self, path: str = DEFAULT_TABLE, nbuckets: int = DEFAULT_BUCKETS,
                 counters: Optional[CounterLayout] = None,
                 cpu_nodes: Optional[CpuNodes] = None,
                 sample: OpenSample = EVERY_OPEN) -> None:
        if nbuckets <= 0 or nbuckets > MAX_BUCKETS or nbuckets & (nbuckets - 1):
            raise ShmError(f"nbuckets must be a power of two <= {MAX_BUCKETS}, not {nbuckets}")
        self.path = path
        self.nbuckets = nbuckets
        #: which opens the shims count (``uc_table_buf.sample_*``)
        self.sample = sample
        self._buf_len = BUF_HEAD_LEN + nbuckets * _ENTRY.size
        size = TABLE_BUFS_OFFSET + 2 * self._buf_len
        ctr = counters if counters is not None else CounterLayout.of()
        #: the counters layout the shims create their files in
        self.counters = ctr
        #: the CPUs' nodes the shims and the harvester use
        self.cpu_nodes = cpu_nodes if cpu_nodes is not None else CpuNodes.from_sysfs()
        fields = (ctr.nslots, ctr.max_vcpus, self.cpu_nodes.node_mask, ctr.ngens)
        cpus = bytes(self.cpu_nodes.cpu_node)
        self._map, _ = open_shared_map(path, size, TABLE_MAGIC, TABLE_MODE)
        magic, layout, salt, nb, active, gen, _pid, _, *have = _HDR.unpack_from(self._map, 0)
        if magic == TABLE_MAGIC and layout == LAYOUT_VERSION and nb == nbuckets and salt:
            #: the per-boot salt of file ids, kept across agent restarts
            self.salt: int = salt
            self._gen = gen
            if tuple(have) != fields or self._map[_CPUS_OFF:_CPUS_END] != cpus:
                # shims that mapped the table keep their copies of the counters layout (and
                # their files); the harvester retires those files, and the shims then map
                # the new layout. The CPUs' nodes they read live: rewritten byte by byte,
                # each whole (a topology that changed between two runs of the agent)
                self._map[_CPUS_OFF:_CPUS_END] = cpus
                _HDR.pack_into(self._map, 0, TABLE_MAGIC, LAYOUT_VERSION, salt, nbuckets,
                               active, gen, os.getpid(), 0, *fields)
        else:
            self.salt = secrets.randbits(64) | 1
            self._gen = 0
            self._map[:] = bytes(size)
            self._map[_CPUS_OFF:_CPUS_END] = cpus
            _HDR.pack_into(self._map, 0, TABLE_MAGIC, LAYOUT_VERSION, self.salt, nbuckets, 0, 0,
                           os.getpid(), 0, *fields)
        self.version = 0

    @property
    def capacity(self) -> int:
        """Most entries, chunk and file entries together, a table may hold (half the
        buckets: probes stay short)."""
        return self.nbuckets // 2

    def _active(self) -> int:
        return int(_U32.unpack_from(self._map, _HDR_ACTIVE_OFF)[0]) & 1

    def publish(self, version: int, chunk_size: int, min_read_size: int,
                entries: Iterable[ShmEntry], numa: bool = False) -> int:
        """Replace the table atomically (seqlock on the inactive buffer, flip, bump ``gen``).

        Adds one file entry per file the chunk entries name (see the module's docstring).

        :param version: the host's table version.
        :param chunk_size: bytes per chunk, a power of two.
        :param min_read_size: MFC §4.5 threshold below which reads never migrate.
        :param entries: the chunk entries (duplicates keep the last).
        :param numa: set ``TABLE_NUMA``: the agent reports chunks' home nodes, so the shims
            record them.
        :returns: the number of chunk entries written (file entries besides).
        :raises ShmError: on a bad chunk size, a chunk index of :data:`FILE_CHUNK`, or more
            chunk and file entries than :attr:`capacity`.
        """
        if chunk_size <= 0 or chunk_size & (chunk_size - 1):
            raise ShmError(f"chunk_size must be a power of two, not {chunk_size}")
        chunks: Dict[Tuple[int, int], bytes] = {}
        shares: Dict[Tuple[int, int], int] = {}  # each chunk's flags for its file entry
        for e in entries:
            key = (e.file_id & _M64, e.chunk & _M64)
            if key[1] == FILE_CHUNK:
                raise ShmError(f"chunk index {FILE_CHUNK:#x} names file entries, not a chunk")
            if key not in chunks and len(chunks) >= self.capacity:
                raise ShmError(f"table holds at most {self.capacity} entries")
            chunks[key], shares[key] = _pack_entry(key[0], key[1], e)
        files: Dict[int, int] = {}
        for (fid, _chunk), share in shares.items():
            files[fid] = files.get(fid, ENTRY_USED) | share
        nchunks = len(chunks)
        nentries = nchunks + len(files)
        if nentries > self.capacity:
            raise ShmError(f"table holds at most {self.capacity} entries: {nchunks} "
                           f"chunks of {len(files)} files need {nentries}")
        for fid, flags in files.items():
            chunks[(fid, FILE_CHUNK)] = _ENTRY.pack(fid, FILE_CHUNK, flags, 0, 0, 0, 0,
                                                    *([0] * MASK_WORDS))
        body = bytearray(self.nbuckets * _ENTRY.size)
        bloom = bytearray(FILTER_BYTES)
        for fid in files:
            for bit in filter_bits(fid):
                bloom[bit // 8] |= 1 << (bit % 8)
        used = bytearray(self.nbuckets)
        mask_bits = self.nbuckets - 1
        for (fid, chunk), packed in chunks.items():  # chunk entries, then file entries
            slot = bucket_hash(fid, chunk) & mask_bits
            while used[slot]:
                slot = (slot + 1) & mask_bits
            used[slot] = 1
            body[slot * _ENTRY.size:(slot + 1) * _ENTRY.size] = packed
        homes = any(share & ENTRY_HOMES for share in shares.values())
        table_flags = (TABLE_VALID | (TABLE_HOMES if homes else 0)
                       | (TABLE_NUMA if numa else 0))
        target = 1 - self._active()
        base = TABLE_BUFS_OFFSET + target * self._buf_len
        seq = int(_U64.unpack_from(self._map, base)[0])
        seq = seq + 1 if seq % 2 == 0 else seq + 2  # odd: writing
        _U64.pack_into(self._map, base, seq)
        self._map[base + _BUF.size:base + BUF_HEAD_LEN] = bloom
        self._map[base + BUF_HEAD_LEN:base + self._buf_len] = body
        _BUF.pack_into(self._map, base, seq, version, chunk_size, min_read_size, nentries,
                       table_flags, self.sample.max_bytes, self.sample.shift)
        _U64.pack_into(self._map, base, seq + 1)  # even: done
        _U32.pack_into(self._map, _HDR_ACTIVE_OFF, target)
        self._gen += 1
        _U64.pack_into(self._map, _HDR_GEN_OFF, self._gen)
        self.version = version
        return nchunks

    @property
    def harvests(self) -> int:
        """The header's count of harvests (:meth:`mark_harvest`), modulo 2**32."""
        return int(_U32.unpack_from(self._map, _HDR_HARVESTS_OFF)[0])

    def mark_harvest(self) -> None:
        """Tell the shims the counters were harvested (the header's ``harvests``): a
        thread's open run of counts goes to the counters at its next call, so a slow
        reader's counts reach the harvest after next at the latest."""
        _U32.pack_into(self._map, _HDR_HARVESTS_OFF, (self.harvests + 1) & 0xFFFFFFFF)

    def snapshot(self) -> TableSnapshot:
        """Read the active buffer back, chunk and file entries apart."""
        base = TABLE_BUFS_OFFSET + self._active() * self._buf_len
        (_seq, version, cs, mrs, nentries, table_flags, sample_bytes,
         sample_shift) = _BUF.unpack_from(self._map, base)
        out: List[ShmEntry] = []
        files: List[Tuple[int, int]] = []
        for i in range(self.nbuckets):
            fid, chunk, flags, budget, color, _pad, replicas, *mask = _ENTRY.unpack_from(
                self._map, base + BUF_HEAD_LEN + i * _ENTRY.size)
            if not flags & ENTRY_USED:
                continue
            if chunk == FILE_CHUNK:
                files.append((fid, flags))
                continue
            vcpus = frozenset(w * 64 + b for w in range(MASK_WORDS) for b in range(64)
                              if mask[w] >> b & 1)
            nodes = frozenset(n for n in range(MAX_NODES) if replicas >> n & 1)
            out.append(ShmEntry(fid, chunk, vcpus, bool(flags & ENTRY_CACHING), budget,
                                color if flags & ENTRY_COLOR else -1,
                                nodes if flags & ENTRY_REPLICA else frozenset()))
        return TableSnapshot(int(version), int(cs), int(mrs), int(nentries), int(table_flags),
                             tuple(out), tuple(sorted(files)),
                             OpenSample(int(sample_bytes), int(sample_shift)))

    def read_active(self) -> Tuple[int, int, int, List[ShmEntry]]:
        """Read the active buffer's chunk entries back (for tests and ``status``).

        :returns: (version, chunk_size, min_read_size, entries).
        """
        snap = self.snapshot()
        return snap.version, snap.chunk_size, snap.min_read_size, list(snap.entries)

    def close(self) -> None:
        """Unmap the file (the file itself stays for the shim)."""
        self._map.close()


def _pack_entry(file_id: int, chunk: int, e: ShmEntry) -> Tuple[bytes, int]:
    """A chunk entry, and what it adds to its file entry's flags (COLOR, REPLICA, HOMES)."""
    mask = [0] * MASK_WORDS
    for v in e.vcpus:
        if 0 <= v < MAX_VCPUS:
            mask[v // 64] |= 1 << (v % 64)
    flags = ENTRY_USED | (ENTRY_CACHING if e.caching else 0)
    budget = min(max(e.migration_budget, 0), BUDGET_UNLIMITED)
    color = 0
    if 0 <= e.color_node < MAX_NODES:
        flags |= ENTRY_COLOR
        color = e.color_node
    replicas = 0
    for n in e.replica_nodes:
        if 0 <= n < MAX_NODES:
            replicas |= 1 << n
    if replicas:
        flags |= ENTRY_REPLICA
    share = flags & (ENTRY_COLOR | ENTRY_REPLICA) | (ENTRY_HOMES if any(mask) else 0)
    return _ENTRY.pack(file_id, chunk, flags, budget, color, 0, replicas, *mask), share
