"""Shared memory between the agent and libunicache.so: the placement table and the counters.

The layout mirrors ``guest-agent/shim/uc_layout.h`` byte for byte and is documented in
docs/agent.md ("Shared memory layout"). The agent is the only writer of the table and the
only reader (and zeroer) of the counters; the shim reads the table and adds to the counters.

Table (layout 5): a 64-byte header, each CPU's guest node (256 bytes: :class:`CpuNodes`)
and, one page in, two buffers: each a one-page head (a 64-byte header and a file filter)
and the entries. :meth:`TableWriter.publish` fills the inactive buffer under that buffer's
seqlock (odd sequence while writing), then flips ``active`` and bumps ``gen``; a reader
that overlaps a write sees the sequence change and retries, so a table is replaced
atomically from the shim's point of view. Besides its chunk entries a table holds one
*file entry* per file they name (chunk :data:`FILE_CHUNK`): a process looks a file up once
per table and descriptor, and a file without one costs no lookup per call. The file
filter (:func:`filter_bits`: two bits per file entry) answers most of those lookups
before any entry is read, so a process that reads only files the table does not name
touches no page of the entries.

Counters (``counters.py``): one file per user, in the layout the table header names
(layout 5). A 64-byte header, the vCPU claims (layout 3) and two regions. A region is a
64-byte head (the slots taken so far: the shims take them in order, so one process's new
chunks sit side by side), an index the shims find a chunk's slot by, and the slots: a
64-byte head, then one packed cell per vCPU (runs and bytes read there). The shim adds
into region ``active``; :meth:`CounterHarvester.harvest` flips ``active``, waits a grace
period for calls already past the flip, reads the other region and zeroes it. After the regions
(layout 2): the shim's monotonic statistics and one generation per bucket of file ids, bumped
by every write the shim sees and by the agent for writes it learns of (fanotify); replicas
check them. The claims (one word per vCPU: which reading thread holds it, until when) are
the shims' alone: the agent creates them zeroed and only reads them.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import secrets
import struct
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple

from .cpu_nodes import DEFAULT_SYS_ROOT, read_cpu_nodes
from .errors import ShmError

#: "UCTB", "UCCT" little-endian, as in uc_layout.h
TABLE_MAGIC = 0x42544355
CTR_MAGIC = 0x54434355
LAYOUT_VERSION = 5
MAX_VCPUS = 256
MASK_WORDS = MAX_VCPUS // 64
MAX_BUCKETS = 65536
MAX_SLOTS = 65536
#: guest nodes a replica bitmask and the table's node_mask cover
MAX_NODES = 32
MAX_GENS = 65536
ENTRY_USED = 1
ENTRY_CACHING = 2
ENTRY_COLOR = 4
ENTRY_REPLICA = 8
#: file entry: some chunk entry of the file has home vCPUs
ENTRY_HOMES = 16
#: the chunk index of a file entry (the host's chunk indexes are below 2**48)
FILE_CHUNK = (1 << 64) - 1
#: table buffer flags: valid; some entry has home vCPUs (the shim unpins the threads it
#: moved once a table has none: uc_call.c); NCC runs in this guest, so the shims record
#: each chunk's home node (the agent reports it: see ``Agent.reports_homes``)
TABLE_VALID = 1
TABLE_HOMES = 2
TABLE_NUMA = 4
#: ``uc_table_cpus``: a CPU no guest node names
NO_NODE = 0xFF
#: a counters cell: bytes read in bits 0..39, runs above (``uc_cell``)
CELL_BYTES_BITS = 40
CELL_BYTES_MASK = (1 << CELL_BYTES_BITS) - 1
#: a slot's ``home``: being looked up, or the page was not resident (no node)
HOME_BUSY = 0xFFFF
BUDGET_UNLIMITED = 0xFFFFFFFF
#: vCPU claim word: bits 0..23 the holder's tid (0 free), bits 24..63 its expiry in
#: CLOCK_MONOTONIC ms modulo 2**40 (uc_layout.h; the rule: uc_decide.h)
CLAIM_TID_BITS = 24
CLAIM_EXPIRY_BITS = 40
#: the claims follow the counters header: one u64 per possible vCPU, fixed size
CLAIMS_OFFSET = 64
CLAIMS_LEN = 8 * MAX_VCPUS
#: the counter regions follow the claims; each starts with a 64-byte head (``next``: the
#: slots taken, in order), then its index (``uc_index_pos``), then its slots
REGIONS_OFFSET = CLAIMS_OFFSET + CLAIMS_LEN
REGION_HEAD_LEN = 64

DEFAULT_TABLE = "/dev/shm/unicache-table"
#: the counters directory: one file per user inside (``counters.py``)
DEFAULT_COUNTERS = "/dev/shm/unicache-counters"
#: default hash buckets per table buffer: its capacity (half of them) holds the host's
#: MAX_TABLE_ENTRIES (8192) chunk entries and a file entry for each (8192 files at most)
DEFAULT_BUCKETS = 32768
#: default counter slots per region
DEFAULT_SLOTS = 8192
#: default number of file generations
DEFAULT_GENS = 4096

_M64 = (1 << 64) - 1
# magic layout salt nbuckets active gen agent_pid pad0, then (layout 4) the counters layout
# ctr_nslots ctr_max_vcpus, (layout 5) node_mask, and ctr_ngens
_HDR = struct.Struct("<IIQIIQIIIIII8x")
#: uc_table_cpus: one byte per possible CPU, after the header; the buffers follow it
_CPUS_OFF = _HDR.size
_CPUS_END = _CPUS_OFF + MAX_VCPUS
#: the buffers start one page in (``UC_TABLE_BUFS_OFF``)
TABLE_BUFS_OFFSET = 4096
#: a buffer's head: its header and file filter, one page (``UC_BUF_HEAD_LEN``)
BUF_HEAD_LEN = 4096
FILTER_BYTES = 4032
FILTER_BITS = 8 * FILTER_BYTES
_BUF = struct.Struct("<QQQQII24x")  # seq version chunk_size min_read_size nentries flags
_ENTRY = struct.Struct("<QQIIHHI4Q")  # file_id chunk flags budget color pad replicas mask[4]
# magic layout nslots max_vcpus active slot_size dropped[2] clients reserved ngens inserts
_CHDR = struct.Struct("<IIIIII2QQIIQ")
# serves fills rejects fill_aborts color_reads gen_bumps asks waits
_GHDR = struct.Struct("<8Q")
# key file_id chunk writes migrations nt_reads home pad; max_vcpus cells follow
_SLOT = struct.Struct("<8Q")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")

_HDR_ACTIVE_OFF = 20
_HDR_GEN_OFF = 24


def mix64(x: int) -> int:
    """The splitmix64 finalizer both sides use (``uc_mix64``).

    :param x: unsigned 64-bit input.
    :returns: the mixed value.
    """
    x &= _M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M64
    x ^= x >> 31
    return x


def file_id_of(salt: int, dev: int, ino: int) -> int:
    """The opaque file id of (st_dev, st_ino) under the per-boot salt (``uc_file_id_of``).

    :param salt: the table's salt.
    :param dev: ``st_dev``.
    :param ino: ``st_ino``.
    :returns: a non-zero unsigned 64-bit id.
    """
    fid = mix64(mix64((salt ^ dev) & _M64) ^ (ino & _M64))
    return fid or 1


def id_space_of(salt: int) -> str:
    """The hello's ``id_space``: a one-way 64-bit digest of the per-boot salt, as 16 hex
    digits. It tells the host that the guest booted again (its file ids mean something
    else now) without handing it the salt.

    :param salt: the table's salt.
    :returns: 16 lowercase hex digits.
    """
    return hashlib.blake2b(salt.to_bytes(8, "little"), digest_size=8,
                           person=b"unicache-ids").hexdigest()


def slot_key(file_id: int, chunk: int) -> int:
    """Key of a chunk's counters slot, never 0 (``uc_slot_key``)."""
    return mix64(file_id + ((0x632BE59BD9B4E019 * (chunk + 1)) & _M64)) | 1


def filter_bits(file_id: int) -> Tuple[int, int]:
    """The two bits of a file id in a buffer's file filter (``uc_filter_bits``)."""
    return ((file_id & 0xFFFFFFFF) * FILTER_BITS) >> 32, ((file_id >> 32) * FILTER_BITS) >> 32


def buffer_offset(nbuckets: int, which: int) -> int:
    """Where buffer ``which`` (0 or 1) of a table of ``nbuckets`` starts; its entries start
    :data:`BUF_HEAD_LEN` further."""
    return TABLE_BUFS_OFFSET + (which & 1) * (BUF_HEAD_LEN + nbuckets * _ENTRY.size)


def bucket_hash(file_id: int, chunk: int) -> int:
    """Bucket hash of a table key (``uc_bucket_hash``)."""
    return mix64(file_id ^ ((chunk * 0x9E3779B97F4A7C15) & _M64))


@dataclass(frozen=True)
class ShmEntry:
    """One placement entry as the shim sees it.

    :param file_id: opaque file id.
    :param chunk: chunk index.
    :param vcpus: home vCPUs (indices < MAX_VCPUS).
    :param caching: ``False``: the shim reads it through the non-temporal path.
    :param migration_budget: migrations per report interval (MFC §4.5 competitive rule).
    :param color_node: SRM-buffer: guest node the chunk's page cache is allocated on
        (-1: none).
    :param replica_nodes: NCC: guest nodes (< MAX_NODES) whose threads read a node-local
        replica.
    """

    file_id: int
    chunk: int
    vcpus: FrozenSet[int]
    caching: bool = True
    migration_budget: int = BUDGET_UNLIMITED
    color_node: int = -1
    replica_nodes: FrozenSet[int] = frozenset()


@dataclass(frozen=True)
class CpuNodes:
    """Each CPU's guest node and the online nodes, as the table publishes them
    (``uc_table_cpus`` and the header's ``node_mask``).

    :param cpu_node: MAX_VCPUS bytes: the node of each CPU, :data:`NO_NODE` for none.
    :param node_mask: bit n: guest node n is online (memory-only nodes too).
    :raises ShmError: when a field is out of the layout's bounds.
    """

    cpu_node: Tuple[int, ...]
    node_mask: int

    def __post_init__(self) -> None:
        if len(self.cpu_node) != MAX_VCPUS or any(
                not (0 <= n < MAX_NODES or n == NO_NODE) for n in self.cpu_node):
            raise ShmError(f"cpu_node must be {MAX_VCPUS} nodes below {MAX_NODES} or NO_NODE")
        if not 0 <= self.node_mask < 1 << MAX_NODES:
            raise ShmError(f"node_mask must fit {MAX_NODES} bits, not {self.node_mask:#x}")

    @classmethod
    def of(cls, cpu_node: Mapping[int, int], nodes: Iterable[int]) -> CpuNodes:
        """The map of ``cpu -> node`` pairs and online ``nodes``; CPUs and nodes beyond
        the layout are left out (such a CPU has no node)."""
        by_cpu = [NO_NODE] * MAX_VCPUS
        for cpu, node in cpu_node.items():
            if 0 <= cpu < MAX_VCPUS and 0 <= node < MAX_NODES:
                by_cpu[cpu] = node
        mask = 0
        for node in nodes:
            if 0 <= node < MAX_NODES:
                mask |= 1 << node
        return cls(tuple(by_cpu), mask)

    @classmethod
    def from_sysfs(cls, sys_root: str = DEFAULT_SYS_ROOT) -> CpuNodes:
        """This guest's map (``cpu_nodes.read_cpu_nodes``; one node 0 without NUMA).

        :param sys_root: sysfs ``devices/system`` (tests pass a fake one).
        """
        cpu_node, online = read_cpu_nodes(sys_root, MAX_VCPUS, MAX_NODES)
        return cls.of(cpu_node, online)

    def nodes_with_cpus(self) -> FrozenSet[int]:
        """The nodes some CPU is on."""
        return frozenset(n for n in self.cpu_node if n != NO_NODE)


@dataclass(frozen=True)
class ChunkCounts:
    """What the shim counted for one chunk in one harvested region."""

    file_id: int
    chunk: int
    bytes_read: int
    reads: int
    writes: int
    migrations: int
    nt_reads: int
    vcpu_bytes: Tuple[Tuple[int, int], ...]
    #: guest node of the chunk's first page-cache page (-1 unknown)
    home_node: int = -1
    #: (guest node, reads) pairs, by node
    node_reads: Tuple[Tuple[int, int], ...] = ()


@dataclass(frozen=True)
class ShimStats:
    """The shims' monotonic statistics (never zeroed; all processes together)."""

    replica_serves: int = 0
    replica_fills: int = 0
    replica_rejects: int = 0
    fill_aborts: int = 0
    color_reads: int = 0
    gen_bumps: int = 0
    replica_asks: int = 0
    replica_waits: int = 0


@dataclass(frozen=True)
class Harvest:
    """One harvested counter region.

    :param chunks: per-chunk counts, largest byte count first.
    :param dropped: reads the shim could not count because the region was full.
    :param clients: processes that ever mapped the counters.
    """

    chunks: Tuple[ChunkCounts, ...]
    dropped: int
    clients: int


@dataclass(frozen=True)
class CounterLayout:
    """The layout of every user's counters file; the agent publishes it in the table header.

    :param nslots: slots per region, a power of two <= MAX_SLOTS.
    :param max_vcpus: cells (per-vCPU counters) per slot (the guest's possible CPUs,
        <= MAX_VCPUS).
    :param ngens: file generations, a power of two <= MAX_GENS.
    """

    nslots: int = DEFAULT_SLOTS
    max_vcpus: int = 1
    ngens: int = DEFAULT_GENS

    @classmethod
    def of(cls, max_vcpus: Optional[int] = None, nslots: int = DEFAULT_SLOTS,
           ngens: int = DEFAULT_GENS) -> CounterLayout:
        """A layout with vCPUs (default: this machine's CPUs) clamped to bounds.

        :raises ShmError: if ``nslots`` or ``ngens`` is not a power of two within bounds.
        """
        if nslots <= 0 or nslots > MAX_SLOTS or nslots & (nslots - 1):
            raise ShmError(f"nslots must be a power of two <= {MAX_SLOTS}, not {nslots}")
        if ngens <= 0 or ngens > MAX_GENS or ngens & (ngens - 1):
            raise ShmError(f"ngens must be a power of two <= {MAX_GENS}, not {ngens}")
        ncpu = max_vcpus if max_vcpus is not None else (os.cpu_count() or 1)
        return cls(nslots, max(1, min(ncpu, MAX_VCPUS)), ngens)

    @property
    def slot_size(self) -> int:
        """Bytes per slot: the head and one cell per vCPU, 64 B aligned (``uc_slot_size``)."""
        return (_SLOT.size + 8 * self.max_vcpus + 63) // 64 * 64

    @property
    def index_len(self) -> int:
        """Bytes of a region's index: two u32 entries per slot, 64 B aligned
        (``uc_index_len``)."""
        return (8 * self.nslots + 63) // 64 * 64

    @property
    def slots_offset(self) -> int:
        """Where a region's slots start in it: after its 64-byte head and its index."""
        return REGION_HEAD_LEN + self.index_len

    @property
    def region_len(self) -> int:
        """Bytes per region: head, index and slots (``uc_region_len``)."""
        return self.slots_offset + self.nslots * self.slot_size

    def region_offset(self, which: int) -> int:
        """Where region ``which`` (0 or 1) starts in the file."""
        return REGIONS_OFFSET + (which & 1) * self.region_len

    @property
    def gen_base(self) -> int:
        """Offset of the statistics header; the generations follow it."""
        return REGIONS_OFFSET + 2 * self.region_len

    @property
    def size(self) -> int:
        """Bytes of a counters file (``uc_ctr_len``)."""
        return self.gen_base + _GHDR.size + 8 * self.ngens

    def header(self, active: int = 0) -> bytes:
        """The header a new file starts with."""
        return _CHDR.pack(CTR_MAGIC, LAYOUT_VERSION, self.nslots, self.max_vcpus, active,
                          self.slot_size, 0, 0, 0, 0, self.ngens, 0)

    def matches(self, header: bytes) -> bool:
        """Whether a file's header is of this layout (``active``, drops, clients aside)."""
        if len(header) < _CHDR.size:
            return False
        magic, layout, ns, mv, _a, ss, _d0, _d1, _cl, reserved, ng, _in = _CHDR.unpack_from(
            header, 0)
        return (magic, layout, ns, mv, ss, reserved, ng) == (
            CTR_MAGIC, LAYOUT_VERSION, self.nslots, self.max_vcpus, self.slot_size, 0,
            self.ngens)


def _retire(fd: int, path: str) -> None:
    """Zero the magic of a file the shims may have mapped, then unlink it.

    Shims notice the zero magic and map the new file; the old inode stays valid for them,
    so nobody is ever left with a mapping beyond the end of a shrunk file (SIGBUS).
    """
    with mmap.mmap(fd, 4, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
        m[0:4] = bytes(4)
    os.unlink(path)


def _open_map(path: str, size: int, magic: int, mode: int) -> Tuple[mmap.mmap, bool]:
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
                _retire(fd, path)
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
    """

    version: int
    chunk_size: int
    min_read_size: int
    nentries: int
    flags: int
    entries: Tuple[ShmEntry, ...]
    files: Tuple[Tuple[int, int], ...]


class TableWriter:
    """Writer of the placement table file (one per guest; the agent holds it).

    :param path: the table file (``UNICACHE_TABLE``).
    :param nbuckets: hash buckets per buffer, a power of two <= MAX_BUCKETS.
    :param counters: the layout of the users' counters files, published in the header.
    :param cpu_nodes: each CPU's node and the online nodes, published after the header
        (default: this guest's, from sysfs).
    :raises ShmError: when the file cannot be created or mapped.
    """

    def __init__(self, path: str = DEFAULT_TABLE, nbuckets: int = DEFAULT_BUCKETS,
                 counters: Optional[CounterLayout] = None,
                 cpu_nodes: Optional[CpuNodes] = None) -> None:
        if nbuckets <= 0 or nbuckets > MAX_BUCKETS or nbuckets & (nbuckets - 1):
            raise ShmError(f"nbuckets must be a power of two <= {MAX_BUCKETS}, not {nbuckets}")
        self.path = path
        self.nbuckets = nbuckets
        self._buf_len = BUF_HEAD_LEN + nbuckets * _ENTRY.size
        size = TABLE_BUFS_OFFSET + 2 * self._buf_len
        ctr = counters if counters is not None else CounterLayout.of()
        #: the counters layout the shims create their files in
        self.counters = ctr
        #: the CPUs' nodes the shims and the harvester use
        self.cpu_nodes = cpu_nodes if cpu_nodes is not None else CpuNodes.from_sysfs()
        fields = (ctr.nslots, ctr.max_vcpus, self.cpu_nodes.node_mask, ctr.ngens)
        cpus = bytes(self.cpu_nodes.cpu_node)
        self._map, _ = _open_map(path, size, TABLE_MAGIC, TABLE_MODE)
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
                       table_flags)
        _U64.pack_into(self._map, base, seq + 1)  # even: done
        _U32.pack_into(self._map, _HDR_ACTIVE_OFF, target)
        self._gen += 1
        _U64.pack_into(self._map, _HDR_GEN_OFF, self._gen)
        self.version = version
        return nchunks

    def snapshot(self) -> TableSnapshot:
        """Read the active buffer back, chunk and file entries apart."""
        base = TABLE_BUFS_OFFSET + self._active() * self._buf_len
        _seq, version, cs, mrs, nentries, table_flags = _BUF.unpack_from(self._map, base)
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
                             tuple(out), tuple(sorted(files)))

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
