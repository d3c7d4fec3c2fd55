"""The layout of the memory the agent and libunicache.so share: the table and the counters.

The layout mirrors ``guest-agent/shim/uc_layout.h`` byte for byte and is documented in
docs/agent.md ("Shared memory layout"). The agent is the only writer of the table and the
only reader (and zeroer) of the counters; the shim reads the table and adds to the counters.

Table (layout 5): a 64-byte header, each CPU's guest node (256 bytes: :class:`CpuNodes`)
and, one page in, two buffers: each a one-page head (a 64-byte header and a file filter)
and the entries, written by ``table_writer.py`` (a seqlock per buffer: a table is replaced
atomically from the shim's point of view). Besides its chunk entries a table holds one
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
import os
import struct
from dataclasses import dataclass
from typing import FrozenSet, Iterable, Mapping, Optional, Tuple

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
# magic layout salt nbuckets active gen agent_pid harvests, then (layout 4) the counters layout
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
# seq version chunk_size min_read_size nentries flags sample_bytes sample_shift
_BUF = struct.Struct("<QQQQIIIB19x")
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
_HDR_HARVESTS_OFF = 36


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


#: the largest ``sample_shift`` a table may carry (``UC_SAMPLE_SHIFT_MAX``: the shim keeps it
#: in four bits of a descriptor's decision)
SAMPLE_SHIFT_MAX = 15


@dataclass(frozen=True)
class OpenSample:
    """Which opens the shims count, published in each table buffer (``sample_bytes``,
    ``sample_shift`` of ``uc_table_buf``).

    A read-only open of a regular file of at most ``max_bytes`` bytes is counted with
    probability 2^-``shift`` (one draw per open) and its counts go out multiplied by
    2^``shift``; the other opens of such files pass every call straight through, unless
    the table names the file. Larger files, files opened for writing, and every open when
    ``shift`` is 0 are counted whole. Why: a program that reads many small files (tar,
    a web server) pays the shim's per-file work (its run of counts opened and sent) on each;
    sampled, it pays it on one file in 2^``shift``, and the host still sees unbiased counts
    (docs/agent.md "Counting").

    :param max_bytes: the largest file sampled (0: none).
    :param shift: log2 of the sampling interval, 0..:data:`SAMPLE_SHIFT_MAX`.
    """

    max_bytes: int = 0
    shift: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.max_bytes <= 0xFFFFFFFF or not 0 <= self.shift <= SAMPLE_SHIFT_MAX:
            raise ShmError(f"an open sample takes files up to 4 GiB and a shift of 0 to "
                           f"{SAMPLE_SHIFT_MAX}, not {self.max_bytes} and {self.shift}")


#: every open counted whole (a table writer's default: tests and tools count exactly)
EVERY_OPEN = OpenSample()
#: an opt-in (``unicache-agent --open-sample 262144:3``): one in 8 read-only opens of files
#: up to 256 KiB, one chunk at the default chunk size (MFC §4.7: half an L2), so a file of
#: several chunks opened once (a scan) is still seen whole and a file of one chunk costs
#: its reader the per-file work once in 8 opens. Not the default: a VM that re-reads small
#: files opens each one a few times in a report window, so 1 in 8 of those opens shows SCU
#: well under half of its hot files, and SCU steps aside where counting every open would
#: have placed them (docs/agent.md "The open sample")
SMALL_FILES_SAMPLE = OpenSample(256 * 1024, 3)
#: the agent's default: every open counted whole
AGENT_OPEN_SAMPLE = EVERY_OPEN


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
