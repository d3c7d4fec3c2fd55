"""Per-user counters: find, check and harvest every user's counters file in the directory.

The shim of a process whose effective user is U counts into ``<dir>/U``, a file of U's
own, mode 0600, created by U's first process in the layout the table header names
(``uc_layout.h``; docs/agent.md "Per-user counters"). So no user can write into another
user's counters, nor shrink a file another user's process maps (which would kill it with
SIGBUS).

The agent runs as root and reads files its users wrote: it treats them as untrusted. It
never maps them (a user may truncate their own file at any moment; a read past the end
of a mapping would kill the agent), it opens each by descriptor without following links,
uses a file only if it is a regular file owned by the user it is named for and of the
agent's layout, and it reads at most :data:`MAX_FILES` files of :data:`MAX_ENTRIES`
directory entries per harvest. A file of another layout is retired (magic zeroed, then
unlinked) so that its user's shims map a new one; a file not owned by the user it is named
for is unlinked.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import struct
import time
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

from .errors import ShmError
from .shm import (
    _CHDR,
    _GHDR,
    _M64,
    _SLOT,
    _U32,
    _U64,
    CELL_BYTES_BITS,
    CELL_BYTES_MASK,
    CLAIMS_OFFSET,
    MAX_NODES,
    NO_NODE,
    ChunkCounts,
    CounterLayout,
    CpuNodes,
    Harvest,
    ShimStats,
    mix64,
    slot_key,
)

log = logging.getLogger("unicache_agent")

#: the directory: root's (the agent's), sticky, users may create their file but not list
DIR_MODE = 0o1733
#: users' files harvested per round (a guest with more users counting at once loses the rest)
MAX_FILES = 32
#: directory entries looked at per round (junk names cannot make a harvest unbounded)
MAX_ENTRIES = 4096
#: a shim's private temporary file (``<uid>.<pid>.new``) older than this is left over
STALE_TMP_S = 60.0
_ACTIVE_OFF = 16
_DROPPED_OFF = 24
_CLIENTS_OFF = 40
_INSERTS_OFF = 56


class CounterHarvester:
    """Keeper of the counters directory and harvester of every user's file in it.

    :param directory: the counters directory (``UNICACHE_COUNTERS``).
    :param layout: the layout every file must have (the table header's).
    :param cpu_nodes: each CPU's guest node, to sum a chunk's reads per node: the map the
        table publishes (``TableWriter.cpu_nodes``; default: this guest's, from sysfs).
    :raises ShmError: when the directory cannot be made or opened.
    """

    def __init__(self, directory: str, layout: CounterLayout,
                 cpu_nodes: Optional[CpuNodes] = None) -> None:
        self.path = directory
        self.layout = layout
        self.cpu_nodes = cpu_nodes if cpu_nodes is not None else CpuNodes.from_sysfs()
        self._fd = _own_directory(directory)
        self._zeros = bytes(layout.region_len)
        self._warned_full = False
        #: name -> (descriptor, device, inode) of the files bumped last time: a write the
        #: agent learns of bumps through these, reopening only a name whose file changed
        self._held: Dict[str, Tuple[int, int, int]] = {}
        for fd in self._files():  # retire files of another layout now, not at the harvest
            os.close(fd)

    def user_path(self, uid: Optional[int] = None) -> str:
        """The counters file of one user (default: the agent's)."""
        return os.path.join(self.path, str(os.geteuid() if uid is None else uid))

    def harvest(self, grace_s: float = 0.01) -> Harvest:
        """Flip every user's active region, wait ``grace_s``, read and zero the old ones.

        :param grace_s: time for calls that loaded the old region index to finish counting.
        :returns: what the shims of every user counted since the previous harvest, one
            entry per chunk (users' counts added).
        """
        files = list(self._files())
        flipped: List[Tuple[int, int]] = []
        for fd in files:
            try:
                active = _U32.unpack(_pread(fd, 4, _ACTIVE_OFF))[0] & 1
                os.pwrite(fd, _U32.pack(1 - active), _ACTIVE_OFF)
                flipped.append((fd, active))
            except (OSError, ShmError):
                continue  # its user shrank or broke it: that user's loss
        if grace_s > 0 and flipped:
            time.sleep(grace_s)
        merged: Dict[Tuple[int, int], ChunkCounts] = {}
        dropped = clients = 0
        for fd, active in flipped:
            try:
                d, c = self._harvest_one(fd, active, merged)
            except (OSError, ShmError):
                continue
            dropped += d
            clients += c
        for fd in files:
            os.close(fd)
        chunks = sorted(merged.values(), key=lambda c: (-c.bytes_read, c.file_id, c.chunk))
        return Harvest(tuple(chunks), dropped, clients)

    def inserts(self) -> int:
        """The slots the shims took so far, every user's added (``inserts`` of each file's
        header): it moves when some chunk is read for the first time since the last
        harvest. One 8-byte read per user's file, through descriptors held across calls,
        so the agent may poll it often (:mod:`unicache_agent.early`)."""
        total = 0
        for fd in self._held_files():
            # a user who shrank or broke their file: that user's loss
            with contextlib.suppress(OSError, ShmError):
                total += int(_U64.unpack(_pread(fd, 8, _INSERTS_OFF))[0])
        return total & _M64

    def active_chunks(self) -> Set[Tuple[int, int]]:
        """(file_id, chunk) of every used slot of every user's active region: the chunks
        read since the last harvest, looked at without harvesting (nothing is zeroed).

        A slot whose file id and chunk are not yet written after its key (a shim between
        its two stores) is left out: its key does not match them.
        """
        lay = self.layout
        step = lay.slot_size // 8
        out: Set[Tuple[int, int]] = set()
        for fd in self._held_files():
            try:
                active = _U32.unpack(_pread(fd, 4, _ACTIVE_OFF))[0] & 1
                slots_len = lay.region_len - lay.slots_offset
                region = _pread(fd, slots_len, lay.region_offset(active) + lay.slots_offset)
            except (OSError, ShmError):
                continue
            words = memoryview(region).cast("Q")
            # three columns sliced in C: a Python loop over every slot is ~100 ms under TCG
            for key, fid, chunk in zip(words[0::step].tolist(), words[1::step].tolist(),
                                       words[2::step].tolist()):
                if key and key == slot_key(fid, chunk):
                    out.add((fid, chunk))
        return out

    def _harvest_one(self, fd: int, active: int,
                     merged: Dict[Tuple[int, int], ChunkCounts]) -> Tuple[int, int]:
        lay = self.layout
        base = lay.region_offset(active)
        region = _pread(fd, lay.region_len, base)
        os.pwrite(fd, self._zeros, base)  # head, index and slots: the next interval's
        cells = struct.Struct(f"<{lay.max_vcpus}Q")
        # the used slots first, in C: a Python unpack of every slot costs ~100 ms a harvest
        # under TCG, on the vCPU the guest's own work runs on. Every slot with a key is
        # read, whatever the index and the head say (this user's file is untrusted), and
        # two slots of one chunk (two processes' race) are added
        first = lay.slots_offset
        keys = memoryview(region)[first:].cast("Q")[:: lay.slot_size // 8].tolist()
        for i in [i for i, k in enumerate(keys) if k]:
            counts = _slot_counts(region, first + i * lay.slot_size, cells,
                                  self.cpu_nodes.cpu_node)
            fid, chunk = counts.file_id, counts.chunk
            old = merged.get((fid, chunk))
            merged[(fid, chunk)] = counts if old is None else _add(old, counts)
        doff = _DROPPED_OFF + 8 * active
        dropped = int(_U64.unpack(_pread(fd, 8, doff))[0])
        os.pwrite(fd, _U64.pack(0), doff)
        clients = int(_U64.unpack(_pread(fd, 8, _CLIENTS_OFF))[0])
        return dropped, clients

    def _files(self) -> Iterator[int]:
        """Open descriptors of the users' files of this layout (the caller closes them)."""
        for uid, name in self._names():
            fd = self._open_checked(uid, name)
            if fd is not None:
                yield fd

    def _names(self) -> List[Tuple[int, str]]:
        """(uid, name) of the users' files in the directory, at most :data:`MAX_FILES`
        of :data:`MAX_ENTRIES` entries; a shim's stale temporary file is removed."""
        names: List[Tuple[int, str]] = []
        now = time.time()
        with os.scandir(self._fd) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_ENTRIES:
                    break
                name = entry.name
                if name.isdigit() and len(name) <= 10:
                    names.append((int(name), name))
                elif name.endswith(".new"):
                    self._drop_stale_tmp(name, now)
        if len(names) > MAX_FILES and not self._warned_full:
            self._warned_full = True
            log.warning("%d users' counters files in %s: only %d are harvested",
                        len(names), self.path, MAX_FILES)
        return sorted(names)[:MAX_FILES]

    def _open_checked(self, uid: int, name: str) -> Optional[int]:
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=self._fd)
        except OSError:
            self._unlink(name)  # a link, a FIFO, a socket: nothing a shim makes
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
                # not the user's own file: a squatter on the name; the user's shim refuses
                # it too, so make room for the real one
                self._unlink(name)
            elif st.st_size != self.layout.size or not self.layout.matches(
                    _pread(fd, _CHDR.size, 0)):
                # another layout (the agent restarted with new settings): zero the magic so
                # that the user's shims map a new file, then unlink this one
                os.pwrite(fd, bytes(4), 0)
                self._unlink(name)
            else:
                return fd
        except (OSError, ShmError):
            pass
        os.close(fd)
        return None

    def _drop_stale_tmp(self, name: str, now: float) -> None:
        try:
            st = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
            if now - st.st_mtime > STALE_TMP_S:
                self._unlink(name)
        except OSError:
            pass

    def _unlink(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=self._fd)

    def _user_file(self, uid: Optional[int]) -> Optional[int]:
        name = str(os.geteuid() if uid is None else uid)
        try:
            os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except OSError:
            return None
        return self._open_checked(int(name), name)

    def _gen_off(self, file_id: int) -> int:
        idx = mix64((file_id ^ 0x2545F4914F6CDD1D) & _M64) & (self.layout.ngens - 1)
        return self.layout.gen_base + _GHDR.size + 8 * idx

    def generation(self, file_id: int, uid: Optional[int] = None) -> int:
        """The generation of a file id's bucket (``uc_gen_hash``) in one user's file.

        :param file_id: opaque file id.
        :param uid: the user (default: the agent's); 0 if that user has no file.
        """
        fd = self._user_file(uid)
        if fd is None:
            return 0
        try:
            return int(_U64.unpack(_pread(fd, 8, self._gen_off(file_id)))[0])
        except (OSError, ShmError):
            return 0
        finally:
            os.close(fd)

    def bump_generation(self, file_id: int) -> None:
        """Invalidate the replicas of a file in every user's processes (a write the agent
        learnt of, e.g. fanotify).

        Not atomic against a concurrent shim bump: the value still changes, and the
        generations are a fast hint only (every replica serve is also checked with fstat,
        docs/replicas.md "Coherence").

        :param file_id: opaque file id.
        """
        off = self._gen_off(file_id)
        for fd in self._held_files():
            try:
                cur = int(_U64.unpack(_pread(fd, 8, off))[0])
                os.pwrite(fd, _U64.pack((cur + 2) & _M64), off)
            except (OSError, ShmError):
                pass  # its user shrank or broke it: that user's loss

    def _held_files(self) -> List[int]:
        """Descriptors of every user's file, for a bump or a poll of the inserts.

        Writes come in bursts (every FAN_MODIFY of any process) and the agent polls the
        inserts many times a second: this lists the directory and stats each name, but
        opens and checks only a file it does not hold yet (a new user, or a user's file
        replaced since), not all of them each time.
        """
        held: Dict[str, Tuple[int, int, int]] = {}
        for uid, name in self._names():
            try:
                st = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
            except OSError:
                continue
            known = self._held.pop(name, None)
            if known is not None and known[1:] == (st.st_dev, st.st_ino):
                held[name] = known
                continue
            if known is not None:
                os.close(known[0])
            fd = self._open_checked(uid, name)
            if fd is not None:
                fst = os.fstat(fd)
                held[name] = (fd, fst.st_dev, fst.st_ino)
        self._drop_held()
        self._held = held
        return [fd for fd, _dev, _ino in held.values()]

    def _drop_held(self) -> None:
        for fd, _dev, _ino in self._held.values():
            os.close(fd)
        self._held = {}

    def claims(self, uid: Optional[int] = None) -> Tuple[int, ...]:
        """The vCPU claim words one user's shims hold now (0: free), one per vCPU.

        :param uid: the user (default: the agent's); empty if that user has no file.
        :returns: the raw words; tid = ``word & (2**CLAIM_TID_BITS - 1)``, expiry (ms modulo
            2**40) = ``word >> CLAIM_TID_BITS``.
        """
        fd = self._user_file(uid)
        if fd is None:
            return ()
        try:
            raw = _pread(fd, 8 * self.layout.max_vcpus, CLAIMS_OFFSET)
            return tuple(int(w) for w in struct.unpack(f"<{self.layout.max_vcpus}Q", raw))
        finally:
            os.close(fd)

    def stats(self) -> ShimStats:
        """The shims' monotonic statistics, every user's added."""
        total = [0] * (_GHDR.size // 8)  # every field a u64
        for fd in self._files():
            try:
                values = _GHDR.unpack(_pread(fd, _GHDR.size, self.layout.gen_base))
                total = [t + int(v) for t, v in zip(total, values)]
            except (OSError, ShmError):
                pass
            finally:
                os.close(fd)
        return ShimStats(*total)

    def close(self) -> None:
        """Close the directory and the files held (the files stay for the shims)."""
        self._drop_held()
        os.close(self._fd)


def _own_directory(path: str) -> int:
    """The counters directory, made if missing: the agent's own, mode :data:`DIR_MODE`.

    Something else at the path (a user's directory, a link, a file, made before the agent
    started) is renamed aside, never used or followed.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(3):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as err:
            raise ShmError(f"cannot create the counters directory {path}") from err
        try:
            fd = os.open(path, flags)
        except OSError as err:
            if err.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise ShmError(f"cannot open the counters directory {path}") from err
            _rename_aside(path)
            continue
        st = os.fstat(fd)
        if st.st_uid == os.geteuid():
            os.fchmod(fd, DIR_MODE)
            return fd
        os.close(fd)
        _rename_aside(path)
    raise ShmError(f"cannot take the counters directory {path}: it keeps being replaced")


def _rename_aside(path: str) -> None:
    aside = f"{path}.foreign.{os.getpid()}.{time.monotonic_ns()}"
    log.warning("%s is not the agent's: moved to %s", path, aside)
    try:
        os.rename(path, aside)
    except OSError as err:
        raise ShmError(f"cannot move {path} aside") from err


def _pread(fd: int, n: int, off: int) -> bytes:
    data = os.pread(fd, n, off)
    if len(data) != n:
        raise ShmError("counters file shorter than its layout")
    return data


def _slot_counts(region: bytes, off: int, cells: struct.Struct,
                 node_of: Sequence[int]) -> ChunkCounts:
    """One used slot's counts: the chunk's reads (runs) and bytes summed over its cells, the
    bytes per vCPU, the runs per guest node through ``node_of`` (a CPU without a node
    counts to none), and its home node (-1 unknown: 0, or ``HOME_BUSY`` and beyond)."""
    _key, fid, chunk, writes, migr, nt, home, _pad = _SLOT.unpack_from(region, off)
    reads = nbytes = 0
    vcpu_bytes: List[Tuple[int, int]] = []
    node_reads: Dict[int, int] = {}
    for v, cell in enumerate(cells.unpack_from(region, off + _SLOT.size)):
        if not cell:
            continue
        runs, got = cell >> CELL_BYTES_BITS, cell & CELL_BYTES_MASK
        reads += runs
        nbytes += got
        if got:
            vcpu_bytes.append((v, got))
        node = node_of[v]
        if runs and node != NO_NODE:
            node_reads[node] = node_reads.get(node, 0) + runs
    home_node = home - 1 if 0 < home <= MAX_NODES else -1
    return ChunkCounts(fid, chunk, nbytes, reads, writes, migr, nt, tuple(vcpu_bytes),
                       home_node, tuple(sorted(node_reads.items())))


def _add(a: ChunkCounts, b: ChunkCounts) -> ChunkCounts:
    """Two users' counts of one chunk, added (saturating: each stays a u64)."""
    vcpus = dict(a.vcpu_bytes)
    for v, n in b.vcpu_bytes:
        vcpus[v] = min(vcpus.get(v, 0) + n, _M64)
    nodes = dict(a.node_reads)
    for v, n in b.node_reads:
        nodes[v] = min(nodes.get(v, 0) + n, _M64)
    return ChunkCounts(
        a.file_id, a.chunk, min(a.bytes_read + b.bytes_read, _M64), min(a.reads + b.reads, _M64),
        min(a.writes + b.writes, _M64), min(a.migrations + b.migrations, _M64),
        min(a.nt_reads + b.nt_reads, _M64), tuple(sorted(vcpus.items())),
        a.home_node if a.home_node >= 0 else b.home_node, tuple(sorted(nodes.items())))
