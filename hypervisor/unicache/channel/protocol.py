"""The host's side of the unicache wire protocol: constants, framing, typed guest messages.

Defined in docs/protocol.md. Guest lines are checked at the boundary and turned into typed
messages (:class:`Hello`, :class:`Report`, ...) or a :class:`GuestProtocolError` whose
``kind`` names the problem; nothing a guest sends can raise anything else (the fuzz test
in tests/channel/test_fuzz.py holds this). The guest mirrors these constants in
``guest-agent/unicache_agent/protocol.py``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from unicache.errors import (
    GuestProtocolError as GuestProtocolError,  # the wire's error, re-exported
)
from unicache.errors import ProtocolError
from unicache.model import (
    BUDGET_UNLIMITED,
    AgentHealth,
    ChunkAccess,
    ChunkId,
    GuestReport,
    NodeMemory,
    PlacementTable,
)

# --- constants (docs/protocol.md "Constants") ----------------------------------------------------
PROTOCOL_VERSION = 1
PORT_NAME = "org.unicache.agent.0"
#: a line (JSON text plus the newline) longer than this is dropped whole
MAX_LINE_BYTES = 131072
#: report chunks or placement entries in one message
MAX_ENTRIES_PER_MESSAGE = 1024
#: entries of one placement table (all its parts)
MAX_TABLE_ENTRIES = 8192
#: parts of one placement table
MAX_TABLE_PARTS = 8
#: (vcpu, bytes) pairs of one chunk; also the highest vCPU index + 1
MAX_VCPUS = 256
#: NUMA node ids in a report
MAX_NODES = 64
#: file-level records (fanotify capture) in one report
MAX_FILE_RECORDS = 1024
#: messages the host accepts per second from one guest (token bucket rate)
MAX_MESSAGES_PER_SECOND = 20
#: token bucket depth
RATE_BURST = 40
#: chunks the host keeps per VM between policy rounds
MAX_CHUNKS_PER_VM = 65536
#: error replies the host sends per second (more are counted, not sent)
MAX_ERRORS_PER_SECOND = 2
#: longest string field (agent name, capability, error message)
MAX_STRING = 256
#: capabilities in a hello
MAX_CAPS = 16
#: the byte that precedes a sync-ack; it never occurs in UTF-8 text
SYNC_BYTE = 0xFF
#: chunk sizes a table may use
MIN_CHUNK_SIZE = 4096
MAX_CHUNK_SIZE = 1 << 30
#: report interval bounds (seconds)
MIN_REPORT_INTERVAL_S = 0.1
MAX_REPORT_INTERVAL_S = 60.0
#: largest integer in a counter field
MAX_COUNTER = (1 << 63) - 1
#: largest chunk index
MAX_CHUNK_INDEX = (1 << 48) - 1

T_HELLO = "hello"
T_WELCOME = "welcome"
T_REPORT = "report"
T_APPLIED = "applied"
T_PLACEMENT = "placement"
T_PARAMS = "params"
T_COLORS = "colors"
T_REPLICAS = "replicas"
T_ERROR = "error"
T_SYNC = "sync"
T_SYNC_ACK = "sync-ack"
GUEST_TYPES = (T_HELLO, T_REPORT, T_APPLIED, T_ERROR, T_SYNC, T_SYNC_ACK)
HOST_TYPES = (T_WELCOME, T_PLACEMENT, T_PARAMS, T_COLORS, T_REPLICAS, T_ERROR, T_SYNC, T_SYNC_ACK)
#: types reserved for later tables; a receiver answers ``reserved-type``
RESERVED_TYPES = (T_COLORS, T_REPLICAS)

E_LINE_TOO_LONG = "line-too-long"
E_BAD_JSON = "bad-json"
E_BAD_MESSAGE = "bad-message"
E_UNKNOWN_TYPE = "unknown-type"
E_BAD_FIELD = "bad-field"
E_UNSUPPORTED_VERSION = "unsupported-version"
E_TOO_MANY_ENTRIES = "too-many-entries"
E_RATE_LIMITED = "rate-limited"
E_STATE_FULL = "state-full"
E_NOT_READY = "not-ready"
E_RESERVED_TYPE = "reserved-type"
ERROR_KINDS = (
    E_LINE_TOO_LONG,
    E_BAD_JSON,
    E_BAD_MESSAGE,
    E_UNKNOWN_TYPE,
    E_BAD_FIELD,
    E_UNSUPPORTED_VERSION,
    E_TOO_MANY_ENTRIES,
    E_RATE_LIMITED,
    E_STATE_FULL,
    E_NOT_READY,
    E_RESERVED_TYPE,
)

#: SRM-buffer color nodes in placement entries (docs/protocol.md "Capabilities")
CAP_COLORS = "colors"
#: NCC replica nodes in placement entries
CAP_REPLICAS = "replicas"
#: capabilities this host speaks
HOST_CAPS = ("report", "placement", "nt-copy", "fanotify", CAP_COLORS, CAP_REPLICAS)


# --- typed guest messages ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hello:
    """``hello``: the agent introduces itself (docs/protocol.md "hello")."""

    agent: str
    versions: tuple[int, ...]
    caps: tuple[str, ...]
    vcpus: int
    nodes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FileAccess:
    """File-level accesses captured by fanotify for processes without the shim.

    :param file_id: opaque file id.
    :param accesses: read events.
    :param modifies: write events.
    """

    file_id: int
    accesses: int
    modifies: int


@dataclass(frozen=True, slots=True)
class Report:
    """``report``: one interval of chunk accesses; :meth:`to_guest_report` gives the model's."""

    seq: int
    interval_s: float
    vcpus: int
    nodes: tuple[int, ...]
    chunks: tuple[ChunkAccess, ...]
    files: tuple[FileAccess, ...]
    health: AgentHealth
    node_memory: tuple[NodeMemory, ...] = ()

    def to_guest_report(self, vm: str) -> GuestReport:
        """The model's report, with ``vm`` taken from the socket (never from the guest).

        :param vm: the VM whose socket the report came through.
        :returns: the report.
        """
        return GuestReport(
            vm=vm,
            seq=self.seq,
            interval_s=self.interval_s,
            chunks=self.chunks,
            guest_vcpus=self.vcpus,
            guest_nodes=self.nodes,
            health=self.health,
            node_memory=self.node_memory,
            modified_files=frozenset(f.file_id for f in self.files if f.modifies > 0),
        )


@dataclass(frozen=True, slots=True)
class Applied:
    """``applied``: the guest published placement table ``version`` with ``entries``."""

    version: int
    entries: int


@dataclass(frozen=True, slots=True)
class PeerError:
    """``error``: the guest could not use something the host sent."""

    kind: str
    message: str
    seq: int | None


@dataclass(frozen=True, slots=True)
class Sync:
    """``sync``: the peer asks for a SYNC_BYTE-delimited ``sync-ack`` with ``id``."""

    id: int


@dataclass(frozen=True, slots=True)
class SyncAck:
    """``sync-ack``: the answer to our sync."""

    id: int


GuestMessage = Hello | Report | Applied | PeerError | Sync | SyncAck


# --- framing -------------------------------------------------------------------------------------


class LineFramer:
    """Bounded line framing; never holds more than ``max_line`` bytes of a partial line.

    A SYNC_BYTE drops the partial line (the peer resynchronises). Each overlong line yields
    one ``None`` and is skipped up to its newline. :meth:`feed` takes a line budget: past
    it, the rest of the data is dropped with C-speed scans only, so a flood of short lines
    or sync bytes costs the host no per-line Python work.

    :param max_line: the longest line accepted, newline included.
    """

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._max = max_line
        self._buf = bytearray()
        self._skipping = False

    @property
    def buffered(self) -> int:
        """Bytes of the partial line held now (always <= max_line)."""
        return len(self._buf)

    def feed(self, data: bytes, budget: int = 1 << 30) -> tuple[list[bytes | None], int]:
        """Add bytes; return up to ``budget`` lines and how many lines were dropped.

        :param data: bytes from the socket.
        :param budget: most lines to return (complete lines without newline, ``None`` for
            an overlong one); later complete lines in ``data`` are dropped and counted.
        :returns: (lines in order, lines dropped).
        """
        out: list[bytes | None] = []
        sync = bytes([SYNC_BYTE])
        pos, n, steps = 0, len(data), 0
        while pos < n:
            if len(out) >= budget or steps > budget + 64:
                return out, self._drop_rest(data, pos)
            steps += 1
            nl = data.find(b"\n", pos)
            ff = data.find(sync, pos, n if nl == -1 else nl)
            if ff != -1:
                # a SYNC_BYTE: drop the partial line before it, keep complete ones
                self._buf.clear()
                self._skipping = False
                pos = ff + 1
                continue
            end = n if nl == -1 else nl
            has_line, line = self._add(data[pos:end], complete=nl != -1)
            if has_line:
                out.append(line)
            pos = end + 1
        return out, 0

    def _add(self, piece: bytes, complete: bool) -> tuple[bool, bytes | None]:
        """Append to the partial line; return (whether a line is out, the line or None
        for an overlong one)."""
        out: tuple[bool, bytes | None] = (False, None)
        if not self._skipping:
            if len(self._buf) + len(piece) + (1 if complete else 0) > self._max:
                self._buf.clear()
                self._skipping = True
                out = (True, None)
            else:
                self._buf += piece
        if complete:
            if not self._skipping:
                out = (True, bytes(self._buf))
            self._buf.clear()
            self._skipping = False
        return out

    def _drop_rest(self, data: bytes, pos: int) -> int:
        last = max(data.rfind(b"\n", pos), data.rfind(bytes([SYNC_BYTE]), pos))
        dropped = 0
        if last != -1:
            dropped = data.count(b"\n", pos, last + 1)
            self._buf.clear()
            self._skipping = False
            pos = last + 1
        tail = data[pos:]
        if not self._skipping:
            if len(self._buf) + len(tail) > self._max:
                self._buf.clear()
                self._skipping = True
                dropped += 1
            else:
                self._buf += tail
        return dropped


# --- checking ------------------------------------------------------------------------------------


def _int(obj: dict[str, Any], key: str, lo: int, hi: int, kind: str) -> int:
    val = obj.get(key)
    if type(val) is not int or not lo <= val <= hi:
        raise GuestProtocolError(
            f"'{kind}' requires integer '{key}' in [{lo}, {hi}]", E_BAD_FIELD, _seq_of(obj)
        )
    return val


def _num(obj: dict[str, Any], key: str, lo: float, hi: float, kind: str) -> float:
    val = obj.get(key)
    if not isinstance(val, int | float) or isinstance(val, bool) or not lo <= float(val) <= hi:
        raise GuestProtocolError(
            f"'{kind}' requires number '{key}' in [{lo}, {hi}]", E_BAD_FIELD, _seq_of(obj)
        )
    return float(val)


def _str(obj: dict[str, Any], key: str, kind: str) -> str:
    val = obj.get(key)
    if type(val) is not str or len(val) > MAX_STRING:
        raise GuestProtocolError(
            f"'{kind}' requires string '{key}' of at most {MAX_STRING} " "characters",
            E_BAD_FIELD,
            _seq_of(obj),
        )
    return val


def _seq_of(obj: dict[str, Any]) -> int | None:
    seq = obj.get("seq")
    return seq if type(seq) is int and 0 <= seq <= MAX_COUNTER else None


def _int_list(obj: dict[str, Any], key: str, limit: int, hi: int, kind: str) -> tuple[int, ...]:
    val = obj.get(key)
    if not isinstance(val, list):
        raise GuestProtocolError(f"'{kind}' requires list '{key}'", E_BAD_FIELD, _seq_of(obj))
    if len(val) > limit:
        raise GuestProtocolError(
            f"'{kind}' '{key}' has {len(val)} items, limit {limit}",
            E_TOO_MANY_ENTRIES,
            _seq_of(obj),
        )
    if any(type(v) is not int or not 0 <= v <= hi for v in val):
        raise GuestProtocolError(
            f"'{kind}' '{key}' items must be integers in [0, {hi}]", E_BAD_FIELD, _seq_of(obj)
        )
    return tuple(val)


def parse_file_id(val: object, seq: int | None) -> int:
    """A file id on the wire: 1 to 16 hex digits.

    :param val: the JSON value.
    :param seq: the message's seq for the error.
    :returns: the id.
    :raises GuestProtocolError: ``bad-field``.
    """
    if type(val) is str and 1 <= len(val) <= 16 and all(c in "0123456789abcdef" for c in val):
        return int(val, 16)
    raise GuestProtocolError("file id must be 1-16 lowercase hex digits", E_BAD_FIELD, seq)


def _chunk(raw: object, seq: int | None) -> ChunkAccess:
    if not isinstance(raw, list) or not 6 <= len(raw) <= 8:
        raise GuestProtocolError(
            "report chunk must be [file_id, index, bytes, reads, writes, vcpu_bytes"
            "(, home_node(, node_reads))]",
            E_BAD_FIELD,
            seq,
        )
    fid = parse_file_id(raw[0], seq)
    index, nbytes, reads, writes, pairs = raw[1], raw[2], raw[3], raw[4], raw[5]
    if type(index) is not int or not 0 <= index <= MAX_CHUNK_INDEX:
        raise GuestProtocolError("report chunk index out of range", E_BAD_FIELD, seq)
    for name, v in (("bytes", nbytes), ("reads", reads), ("writes", writes)):
        if type(v) is not int or not 0 <= v <= MAX_COUNTER:
            raise GuestProtocolError(f"report chunk {name} out of range", E_BAD_FIELD, seq)
    if not isinstance(pairs, list):
        raise GuestProtocolError("report chunk vcpu_bytes must be a list", E_BAD_FIELD, seq)
    if len(pairs) > MAX_VCPUS:
        raise GuestProtocolError(
            f"report chunk has {len(pairs)} vcpu entries, limit {MAX_VCPUS}",
            E_TOO_MANY_ENTRIES,
            seq,
        )
    out: list[tuple[int, int]] = []
    for p in pairs:
        if (
            not isinstance(p, list)
            or len(p) != 2
            or type(p[0]) is not int
            or type(p[1]) is not int
            or not 0 <= p[0] < MAX_VCPUS
            or not 0 <= p[1] <= MAX_COUNTER
        ):
            raise GuestProtocolError(
                "report chunk vcpu_bytes items must be [vcpu, bytes]", E_BAD_FIELD, seq
            )
        out.append((p[0], p[1]))
    vcpus = sorted(dict(out).items())
    if len(vcpus) != len(out):
        raise GuestProtocolError("report chunk lists a vcpu twice", E_BAD_FIELD, seq)
    home = raw[6] if len(raw) > 6 else -1
    if type(home) is not int or not -1 <= home < MAX_NODES:
        raise GuestProtocolError(
            f"report chunk home_node must be -1 or a node below {MAX_NODES}", E_BAD_FIELD, seq
        )
    node_reads = _node_pairs(raw[7], seq) if len(raw) > 7 else ()
    return ChunkAccess(
        ChunkId(fid, index), nbytes, reads, writes, tuple(vcpus), home, node_reads
    )


def _node_pairs(raw: object, seq: int | None) -> tuple[tuple[int, int], ...]:
    """``node_reads``: at most MAX_NODES ``[node, reads]`` pairs, each node once."""
    if not isinstance(raw, list):
        raise GuestProtocolError("report chunk node_reads must be a list", E_BAD_FIELD, seq)
    if len(raw) > MAX_NODES:
        raise GuestProtocolError(
            f"report chunk has {len(raw)} node_reads entries, limit {MAX_NODES}",
            E_TOO_MANY_ENTRIES,
            seq,
        )
    out: dict[int, int] = {}
    for p in raw:
        if (
            not isinstance(p, list)
            or len(p) != 2
            or type(p[0]) is not int
            or type(p[1]) is not int
            or not 0 <= p[0] < MAX_NODES
            or not 0 <= p[1] <= MAX_COUNTER
            or p[0] in out
        ):
            raise GuestProtocolError(
                f"report chunk node_reads items must be [node < {MAX_NODES}, reads], each "
                "node once",
                E_BAD_FIELD,
                seq,
            )
        out[p[0]] = p[1]
    return tuple(sorted(out.items()))


def _node_memory(obj: dict[str, Any], seq: int | None) -> tuple[NodeMemory, ...]:
    """``report.node_memory``: at most MAX_NODES ``[node, free_bytes, total_bytes]``."""
    raw = obj.get("node_memory", [])
    if not isinstance(raw, list):
        raise GuestProtocolError("'report' node_memory must be a list", E_BAD_FIELD, seq)
    if len(raw) > MAX_NODES:
        raise GuestProtocolError(
            f"'report' has {len(raw)} node_memory entries, limit {MAX_NODES}",
            E_TOO_MANY_ENTRIES,
            seq,
        )
    out: list[NodeMemory] = []
    for m in raw:
        if (
            not isinstance(m, list)
            or len(m) != 3
            or any(type(v) is not int for v in m)
            or not 0 <= m[0] < MAX_NODES
            or not 0 <= m[1] <= m[2] <= MAX_COUNTER
            or any(x.node == m[0] for x in out)
        ):
            raise GuestProtocolError(
                f"'report' node_memory items must be [node < {MAX_NODES}, free_bytes, "
                "total_bytes] with free <= total, each node once",
                E_BAD_FIELD,
                seq,
            )
        out.append(NodeMemory(m[0], m[1], m[2]))
    return tuple(sorted(out, key=lambda x: x.node))


def _file(raw: object, seq: int | None) -> FileAccess:
    if (
        not isinstance(raw, list)
        or len(raw) != 3
        or type(raw[1]) is not int
        or type(raw[2]) is not int
        or not 0 <= raw[1] <= MAX_COUNTER
        or not 0 <= raw[2] <= MAX_COUNTER
    ):
        raise GuestProtocolError(
            "report file must be [file_id, accesses, modifies]", E_BAD_FIELD, seq
        )
    return FileAccess(parse_file_id(raw[0], seq), raw[1], raw[2])


def _health(obj: dict[str, Any], seq: int | None) -> AgentHealth:
    raw = obj.get("health", {})
    if not isinstance(raw, dict):
        raise GuestProtocolError("'report' health must be an object", E_BAD_FIELD, seq)
    up = raw.get("uptime_s", 0.0)
    if not isinstance(up, int | float) or isinstance(up, bool) or not 0 <= float(up) <= 1e10:
        raise GuestProtocolError("health uptime_s out of range", E_BAD_FIELD, seq)
    vals: list[int] = []
    for key in ("shim_clients", "dropped", "errors"):
        v = raw.get(key, 0)
        if type(v) is not int or not 0 <= v <= MAX_COUNTER:
            raise GuestProtocolError(f"health {key} out of range", E_BAD_FIELD, seq)
        vals.append(v)
    return AgentHealth(float(up), vals[0], vals[1], vals[2])


def _parse_hello(obj: dict[str, Any]) -> Hello:
    caps = obj.get("caps")
    if (
        not isinstance(caps, list)
        or len(caps) > MAX_CAPS
        or any(type(c) is not str or len(c) > 64 for c in caps)
    ):
        raise GuestProtocolError(
            f"'hello' caps must be at most {MAX_CAPS} short strings", E_BAD_FIELD, _seq_of(obj)
        )
    versions = _int_list(obj, "versions", 16, 1 << 16, T_HELLO)
    if PROTOCOL_VERSION not in versions:
        raise GuestProtocolError(
            f"agent speaks versions {list(versions)}, host speaks " f"{PROTOCOL_VERSION}",
            E_UNSUPPORTED_VERSION,
            _seq_of(obj),
        )
    return Hello(
        _str(obj, "agent", T_HELLO),
        versions,
        tuple(caps),
        _int(obj, "vcpus", 1, MAX_VCPUS, T_HELLO),
        _int_list(obj, "nodes", MAX_NODES, 1 << 16, T_HELLO),
    )


def _parse_report(obj: dict[str, Any]) -> Report:
    seq = _int(obj, "seq", 0, MAX_COUNTER, T_REPORT)
    interval = _num(obj, "interval_s", 0.0, 3600.0, T_REPORT)
    raw = obj.get("chunks")
    if not isinstance(raw, list):
        raise GuestProtocolError("'report' requires list 'chunks'", E_BAD_FIELD, seq)
    if len(raw) > MAX_ENTRIES_PER_MESSAGE:
        raise GuestProtocolError(
            f"'report' has {len(raw)} chunks, limit " f"{MAX_ENTRIES_PER_MESSAGE}",
            E_TOO_MANY_ENTRIES,
            seq,
        )
    files_raw = obj.get("files", [])
    if not isinstance(files_raw, list):
        raise GuestProtocolError("'report' files must be a list", E_BAD_FIELD, seq)
    if len(files_raw) > MAX_FILE_RECORDS:
        raise GuestProtocolError(
            f"'report' has {len(files_raw)} files, limit " f"{MAX_FILE_RECORDS}",
            E_TOO_MANY_ENTRIES,
            seq,
        )
    chunks = tuple(_chunk(c, seq) for c in raw)
    if len({c.chunk for c in chunks}) != len(chunks):
        raise GuestProtocolError("'report' lists a chunk twice", E_BAD_FIELD, seq)
    return Report(
        seq,
        interval,
        _int(obj, "vcpus", 1, MAX_VCPUS, T_REPORT),
        _int_list(obj, "nodes", MAX_NODES, 1 << 16, T_REPORT),
        chunks,
        tuple(_file(f, seq) for f in files_raw),
        _health(obj, seq),
        _node_memory(obj, seq),
    )


def parse_guest_line(line: bytes) -> GuestMessage:
    """Check one guest line and return its typed message.

    :param line: the line without its newline (at most MAX_LINE_BYTES).
    :returns: the message.
    :raises GuestProtocolError: with the kind naming the problem; never anything else.
    """
    try:
        obj = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:
        raise GuestProtocolError("line is not JSON", E_BAD_JSON) from err
    if not isinstance(obj, dict):
        raise GuestProtocolError("message must be a JSON object", E_BAD_MESSAGE)
    if obj.get("v") != PROTOCOL_VERSION or type(obj.get("v")) is not int:
        raise GuestProtocolError(
            f"unsupported protocol version {str(obj.get('v'))[:20]}",
            E_UNSUPPORTED_VERSION,
            _seq_of(obj),
        )
    kind = obj.get("type")
    if type(kind) is not str or kind not in GUEST_TYPES:
        raise GuestProtocolError(
            f"unknown message type {str(kind)[:40]!r}", E_UNKNOWN_TYPE, _seq_of(obj)
        )
    if kind == T_HELLO:
        return _parse_hello(obj)
    if kind == T_REPORT:
        return _parse_report(obj)
    if kind == T_APPLIED:
        return Applied(
            _int(obj, "version", 0, MAX_COUNTER, kind),
            _int(obj, "entries", 0, MAX_TABLE_ENTRIES, kind),
        )
    if kind == T_ERROR:
        ekind = _str(obj, "kind", kind)
        return PeerError(ekind, _str(obj, "message", kind), _seq_of(obj))
    if kind == T_SYNC:
        return Sync(_int(obj, "id", 0, MAX_COUNTER, kind))
    return SyncAck(_int(obj, "id", 0, MAX_COUNTER, kind))


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


# --- encoding host messages ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChannelParams:
    """Parameters the host sends in ``welcome`` and ``params``.

    :param chunk_size: bytes per chunk (MFC §4.7: half a core's L2).
    :param min_read_size: reads shorter than this never migrate (MFC §4.5).
    :param report_interval_s: how often the agent reports.
    """

    chunk_size: int = 256 * 1024
    min_read_size: int = 64 * 1024
    report_interval_s: float = 1.0

    def as_wire(self) -> dict[str, Any]:
        """The fields as sent."""
        return {
            "chunk_size": self.chunk_size,
            "min_read_size": self.min_read_size,
            "report_interval_s": self.report_interval_s,
        }


def encode(msg: dict[str, Any]) -> bytes:
    """One message as a compact JSON line with ``v`` set.

    :param msg: the fields (``type`` required).
    :returns: the line, newline-terminated.
    :raises ProtocolError: when the line would exceed MAX_LINE_BYTES.
    """
    line = (
        json.dumps({"v": PROTOCOL_VERSION, **msg}, separators=(",", ":"), allow_nan=False).encode()
        + b"\n"
    )
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(
            f"{msg.get('type')} line of {len(line)} bytes exceeds " f"{MAX_LINE_BYTES}",
            E_LINE_TOO_LONG,
        )
    return line


def encode_error(err: ProtocolError) -> bytes:
    """The ``error`` reply naming a problem.

    :param err: the problem.
    :returns: the line.
    """
    msg: dict[str, Any] = {
        "type": T_ERROR,
        "kind": err.kind,
        "message": err.error_message[:MAX_STRING],
    }
    seq = getattr(err, "seq", None)
    if seq is not None:
        msg["seq"] = seq
    return encode(msg)


def encode_welcome(params: ChannelParams, caps: tuple[str, ...]) -> bytes:
    """The ``welcome`` reply to a hello.

    :param params: the parameters the guest must use.
    :param caps: the capabilities both sides speak.
    :returns: the line.
    """
    return encode(
        {
            "type": T_WELCOME,
            "version": PROTOCOL_VERSION,
            "caps": list(caps),
            "params": params.as_wire(),
        }
    )


def encode_params(params: ChannelParams) -> bytes:
    """A ``params`` message.

    :param params: the new parameters.
    :returns: the line.
    """
    return encode({"type": T_PARAMS, **params.as_wire()})


def encode_sync(sync_id: int) -> bytes:
    """A ``sync`` request; the peer answers SYNC_BYTE + ``sync-ack``."""
    return encode({"type": T_SYNC, "id": sync_id})


def encode_sync_ack(sync_id: int) -> bytes:
    """The SYNC_BYTE-delimited answer to a sync (qemu-ga guest-sync-delimited)."""
    return bytes([SYNC_BYTE]) + encode({"type": T_SYNC_ACK, "id": sync_id})


def encode_placement(table: PlacementTable, caps: tuple[str, ...] = ()) -> list[bytes]:
    """A placement table as 1..MAX_TABLE_PARTS ``placement`` lines.

    Entries get the trailing ``color_node`` and ``replica_nodes`` only for a guest that
    announced ``colors`` or ``replicas``; the one it did not announce is sent empty.

    :param table: the table (at most MAX_TABLE_ENTRIES entries).
    :param caps: the capabilities the guest's hello and this host share.
    :returns: the lines, part 0 first; the guest applies the table when all parts arrived.
    :raises ProtocolError: ``too-many-entries`` or ``bad-field`` for a table the guest
        would refuse.
    """
    n = len(table.entries)
    if n > MAX_TABLE_ENTRIES:
        raise ProtocolError(
            f"table for {table.vm} has {n} entries, limit {MAX_TABLE_ENTRIES}", E_TOO_MANY_ENTRIES
        )
    cs = table.chunk_size
    if not MIN_CHUNK_SIZE <= cs <= MAX_CHUNK_SIZE or cs & (cs - 1):
        raise ProtocolError(
            f"table chunk_size {cs} is not a power of two in "
            f"[{MIN_CHUNK_SIZE}, {MAX_CHUNK_SIZE}]",
            E_BAD_FIELD,
        )
    colors, replicas = CAP_COLORS in caps, CAP_REPLICAS in caps
    parts = max(1, math.ceil(n / MAX_ENTRIES_PER_MESSAGE))
    out: list[bytes] = []
    for p in range(parts):
        chunk = table.entries[p * MAX_ENTRIES_PER_MESSAGE : (p + 1) * MAX_ENTRIES_PER_MESSAGE]
        entries: list[list[Any]] = []
        for e in chunk:
            entry: list[Any] = [
                f"{e.chunk.file_id:x}",
                e.chunk.index,
                sorted(v for v in e.vcpus if 0 <= v < MAX_VCPUS),
                e.caching,
                min(max(e.migration_budget, 0), BUDGET_UNLIMITED),
            ]
            if colors or replicas:
                color = e.color_node if colors and 0 <= e.color_node < MAX_NODES else -1
                nodes = sorted(n for n in e.replica_nodes if 0 <= n < MAX_NODES)
                entry += [color, nodes if replicas else []]
            entries.append(entry)
        out.append(
            encode(
                {
                    "type": T_PLACEMENT,
                    "version": table.version,
                    "part": p,
                    "parts": parts,
                    "chunk_size": cs,
                    "min_read_size": table.min_read_size,
                    "entries": entries,
                }
            )
        )
    return out
