"""Shared memory between the agent and libunicache.so: the placement table and the counters.

The layout mirrors ``guest-agent/shim/uc_layout.h`` byte for byte and is documented in
docs/agent.md ("Shared memory layout"). The agent is the only writer of the table and the
only reader (and zeroer) of the counters; the shim reads the table and adds to the counters.

Table: a 64-byte header and two buffers. :meth:`TableWriter.publish` fills the inactive
buffer under that buffer's seqlock (odd sequence while writing), then flips ``active``; a
reader that overlaps a write sees the sequence change and retries, so a table is replaced
atomically from the shim's point of view.

Counters (``counters.py``): one file per user, in the layout the table header names
(layout 4). A 64-byte header, the vCPU claims (layout 3) and two regions. The shim adds
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
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

from .errors import ShmError

#: "UCTB", "UCCT" little-endian, as in uc_layout.h
TABLE_MAGIC = 0x42544355
CTR_MAGIC = 0x54434355
LAYOUT_VERSION = 4
MAX_VCPUS = 256
MASK_WORDS = MAX_VCPUS // 64
MAX_BUCKETS = 65536
MAX_SLOTS = 65536
#: guest nodes a replica bitmask and the per-node read counters cover
MAX_NODES = 32
MAX_GENS = 65536
ENTRY_USED = 1
ENTRY_CACHING = 2
ENTRY_COLOR = 4
ENTRY_REPLICA = 8
#: table buffer flags: valid, and some entry has home vCPUs (the shim unpins the threads it
#: moved once a table has none: uc_call.c)
TABLE_VALID = 1
TABLE_HOMES = 2
BUDGET_UNLIMITED = 0xFFFFFFFF
#: vCPU claim word: bits 0..23 the holder's tid (0 free), bits 24..63 its expiry in
#: CLOCK_MONOTONIC ms modulo 2**40 (uc_layout.h; the rule: uc_decide.h)
CLAIM_TID_BITS = 24
CLAIM_EXPIRY_BITS = 40
#: the claims follow the counters header: one u64 per possible vCPU, fixed size
CLAIMS_OFFSET = 64
CLAIMS_LEN = 8 * MAX_VCPUS
#: the counter regions follow the claims
REGIONS_OFFSET = CLAIMS_OFFSET + CLAIMS_LEN

DEFAULT_TABLE = "/dev/shm/unicache-table"
#: the counters directory: one file per user inside (``counters.py``)
DEFAULT_COUNTERS = "/dev/shm/unicache-counters"
#: default number of hash buckets per table buffer (load factor <= 1/2 at MAX_TABLE_ENTRIES)
DEFAULT_BUCKETS = 16384
#: default counter slots per region
DEFAULT_SLOTS = 8192
#: default number of file generations
DEFAULT_GENS = 4096

_M64 = (1 << 64) - 1
# magic layout salt nbuckets active gen agent_pid pad0, then (layout 4) the counters layout:
# ctr_nslots ctr_max_vcpus ctr_nnodes ctr_ngens
_HDR = struct.Struct("<IIQIIQIIIIII8x")
_BUF = struct.Struct("<QQQQII24x")  # seq version chunk_size min_read_size nentries flags
_ENTRY = struct.Struct("<QQIIHHI4Q")  # file_id chunk flags budget color pad replicas mask[4]
# magic layout nslots max_vcpus active slot_size dropped[2] clients nnodes ngens inserts
_CHDR = struct.Struct("<IIIIII2QQIIQ")
# serves fills rejects fill_aborts color_reads gen_bumps asks waits
_GHDR = struct.Struct("<8Q")
_SLOT = struct.Struct("<8Q")  # key file_id chunk bytes reads writes migrations nt_reads
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
    :param max_vcpus: per-vCPU counters per slot (the guest's possible CPUs, <= MAX_VCPUS).
    :param nnodes: per-node read counters per slot (highest guest node id + 1, <= MAX_NODES).
    :param ngens: file generations, a power of two <= MAX_GENS.
    """

    nslots: int = DEFAULT_SLOTS
    max_vcpus: int = 1
    nnodes: int = 1
    ngens: int = DEFAULT_GENS

    @classmethod
    def of(cls, max_vcpus: Optional[int] = None, nslots: int = DEFAULT_SLOTS, nnodes: int = 1,
           ngens: int = DEFAULT_GENS) -> CounterLayout:
        """A layout with vCPUs (default: this machine's CPUs) and nodes clamped to bounds.

        :raises ShmError: if ``nslots`` or ``ngens`` is not a power of two within bounds.
        """
        if nslots <= 0 or nslots > MAX_SLOTS or nslots & (nslots - 1):
            raise ShmError(f"nslots must be a power of two <= {MAX_SLOTS}, not {nslots}")
        if ngens <= 0 or ngens > MAX_GENS or ngens & (ngens - 1):
            raise ShmError(f"ngens must be a power of two <= {MAX_GENS}, not {ngens}")
        ncpu = max_vcpus if max_vcpus is not None else (os.cpu_count() or 1)
        return cls(nslots, max(1, min(ncpu, MAX_VCPUS)), max(1, min(nnodes, MAX_NODES)), ngens)

    @property
    def slot_size(self) -> int:
        """Bytes per slot (``uc_slot_size``)."""
        return (_SLOT.size + 8 * (self.max_vcpus + self.nnodes + 1) + 63) // 64 * 64

    @property
    def region_len(self) -> int:
        """Bytes per region."""
        return self.nslots * self.slot_size

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
                          self.slot_size, 0, 0, 0, self.nnodes, self.ngens, 0)

    def matches(self, header: bytes) -> bool:
        """Whether a file's header is of this layout (``active``, drops, clients aside)."""
        if len(header) < _CHDR.size:
            return False
        magic, layout, ns, mv, _a, ss, _d0, _d1, _cl, nn, ng, _in = _CHDR.unpack_from(
            header, 0)
        return (magic, layout, ns, mv, ss, nn, ng) == (
            CTR_MAGIC, LAYOUT_VERSION, self.nslots, self.max_vcpus, self.slot_size,
            self.nnodes, self.ngens)


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


class TableWriter:
    """Writer of the placement table file (one per guest; the agent holds it).

    :param path: the table file (``UNICACHE_TABLE``).
    :param nbuckets: hash buckets per buffer, a power of two <= MAX_BUCKETS.
    :param counters: the layout of the users' counters files, published in the header.
    :raises ShmError: when the file cannot be created or mapped.
    """

    def __init__(self, path: str = DEFAULT_TABLE, nbuckets: int = DEFAULT_BUCKETS,
                 counters: Optional[CounterLayout] = None) -> None:
        if nbuckets <= 0 or nbuckets > MAX_BUCKETS or nbuckets & (nbuckets - 1):
            raise ShmError(f"nbuckets must be a power of two <= {MAX_BUCKETS}, not {nbuckets}")
        self.path = path
        self.nbuckets = nbuckets
        self._buf_len = _BUF.size + nbuckets * _ENTRY.size
        size = _HDR.size + 2 * self._buf_len
        ctr = counters if counters is not None else CounterLayout.of()
        #: the counters layout the shims create their files in
        self.counters = ctr
        ctr_fields = (ctr.nslots, ctr.max_vcpus, ctr.nnodes, ctr.ngens)
        self._map, _ = _open_map(path, size, TABLE_MAGIC, TABLE_MODE)
        magic, layout, salt, nb, active, gen, _pid, _, *have_ctr = _HDR.unpack_from(self._map, 0)
        if magic == TABLE_MAGIC and layout == LAYOUT_VERSION and nb == nbuckets and salt:
            #: the per-boot salt of file ids, kept across agent restarts
            self.salt: int = salt
            self._gen = gen
            if tuple(have_ctr) != ctr_fields:
                # shims that mapped the table keep their copies (and counters files); the
                # harvester retires those files, and the shims then map the new layout
                _HDR.pack_into(self._map, 0, TABLE_MAGIC, LAYOUT_VERSION, salt, nbuckets,
                               active, gen, os.getpid(), 0, *ctr_fields)
        else:
            self.salt = secrets.randbits(64) | 1
            self._gen = 0
            self._map[:] = bytes(size)
            _HDR.pack_into(self._map, 0, TABLE_MAGIC, LAYOUT_VERSION, self.salt, nbuckets, 0, 0,
                           os.getpid(), 0, *ctr_fields)
        self.version = 0

    @property
    def capacity(self) -> int:
        """Most entries a table may hold (half the buckets: probes stay short)."""
        return self.nbuckets // 2

    def _active(self) -> int:
        return int(_U32.unpack_from(self._map, _HDR_ACTIVE_OFF)[0]) & 1

    def publish(self, version: int, chunk_size: int, min_read_size: int,
                entries: Iterable[ShmEntry]) -> int:
        """Replace the table atomically (seqlock on the inactive buffer, then flip).

        :param version: the host's table version.
        :param chunk_size: bytes per chunk, a power of two.
        :param min_read_size: MFC §4.5 threshold below which reads never migrate.
        :param entries: the entries (at most :attr:`capacity`; duplicates keep the last).
        :returns: the number of entries written.
        :raises ShmError: on a bad chunk size or too many entries.
        """
        if chunk_size <= 0 or chunk_size & (chunk_size - 1):
            raise ShmError(f"chunk_size must be a power of two, not {chunk_size}")
        slots: Dict[int, bytes] = {}
        index: Dict[Tuple[int, int], int] = {}
        homes = False
        mask_bits = self.nbuckets - 1
        for e in entries:
            key = (e.file_id & _M64, e.chunk & _M64)
            mask = [0] * MASK_WORDS
            for v in e.vcpus:
                if 0 <= v < MAX_VCPUS:
                    mask[v // 64] |= 1 << (v % 64)
            homes = homes or any(mask)
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
            packed = _ENTRY.pack(key[0], key[1], flags, budget, color, 0, replicas, *mask)
            if key in index:
                slots[index[key]] = packed
                continue
            if len(index) >= self.capacity:
                raise ShmError(f"table holds at most {self.capacity} entries")
            slot = bucket_hash(key[0], key[1]) & mask_bits
            while slot in slots:
                slot = (slot + 1) & mask_bits
            slots[slot] = packed
            index[key] = slot
        target = 1 - self._active()
        base = _HDR.size + target * self._buf_len
        seq = int(_U64.unpack_from(self._map, base)[0])
        seq = seq + 1 if seq % 2 == 0 else seq + 2  # odd: writing
        _U64.pack_into(self._map, base, seq)
        ebase = base + _BUF.size
        self._map[ebase:ebase + self.nbuckets * _ENTRY.size] = bytes(self.nbuckets * _ENTRY.size)
        for slot, packed in slots.items():
            off = ebase + slot * _ENTRY.size
            self._map[off:off + _ENTRY.size] = packed
        table_flags = TABLE_VALID | (TABLE_HOMES if homes else 0)
        _BUF.pack_into(self._map, base, seq, version, chunk_size, min_read_size, len(index),
                       table_flags)
        _U64.pack_into(self._map, base, seq + 1)  # even: done
        _U32.pack_into(self._map, _HDR_ACTIVE_OFF, target)
        self._gen += 1
        _U64.pack_into(self._map, _HDR_GEN_OFF, self._gen)
        self.version = version
        return len(index)

    def read_active(self) -> Tuple[int, int, int, List[ShmEntry]]:
        """Read the active buffer back (for tests and ``status``).

        :returns: (version, chunk_size, min_read_size, entries).
        """
        base = _HDR.size + self._active() * self._buf_len
        _seq, version, cs, mrs, _n, _flags = _BUF.unpack_from(self._map, base)
        out: List[ShmEntry] = []
        for i in range(self.nbuckets):
            fid, chunk, flags, budget, color, _pad, replicas, *mask = _ENTRY.unpack_from(
                self._map, base + _BUF.size + i * _ENTRY.size)
            if flags & ENTRY_USED:
                vcpus = frozenset(w * 64 + b for w in range(MASK_WORDS) for b in range(64)
                                  if mask[w] >> b & 1)
                nodes = frozenset(n for n in range(MAX_NODES) if replicas >> n & 1)
                out.append(ShmEntry(fid, chunk, vcpus, bool(flags & ENTRY_CACHING), budget,
                                    color if flags & ENTRY_COLOR else -1,
                                    nodes if flags & ENTRY_REPLICA else frozenset()))
        return int(version), int(cs), int(mrs), out

    def close(self) -> None:
        """Unmap the file (the file itself stays for the shim)."""
        self._map.close()
