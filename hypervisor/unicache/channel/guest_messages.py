"""Guest lines into typed messages, every field checked at the boundary.

A guest line becomes a :class:`Hello`, :class:`Report`, ... or a
:class:`GuestProtocolError` whose ``kind`` names the problem; nothing a guest sends can
raise anything else (``tests/channel/test_channel_fuzz.py`` holds this).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from unicache.channel.wire import (
    E_BAD_FIELD,
    E_BAD_JSON,
    E_BAD_MESSAGE,
    E_TOO_MANY_ENTRIES,
    E_UNKNOWN_TYPE,
    E_UNSUPPORTED_VERSION,
    GUEST_TYPES,
    MAX_CAPS,
    MAX_CHUNK_INDEX,
    MAX_COUNTER,
    MAX_ENTRIES_PER_MESSAGE,
    MAX_FILE_RECORDS,
    MAX_NODES,
    MAX_STRING,
    MAX_TABLE_ENTRIES,
    MAX_VCPUS,
    PROTOCOL_VERSION,
    T_APPLIED,
    T_ERROR,
    T_HELLO,
    T_REPORT,
    T_SYNC,
)
from unicache.errors import (
    GuestProtocolError as GuestProtocolError,  # the wire's error, re-exported
)
from unicache.model import (
    ID_SPACE,
    AgentHealth,
    ChunkAccess,
    ChunkId,
    GuestReport,
    NodeMemory,
)


@dataclass(frozen=True, slots=True)
class Hello:
    """``hello``: the agent introduces itself (docs/protocol.md "hello")."""

    agent: str
    versions: tuple[int, ...]
    caps: tuple[str, ...]
    vcpus: int
    nodes: tuple[int, ...]
    #: the guest boot's file-id space (hex digest of its salt; empty: not said)
    id_space: str = ""


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

    def to_guest_report(self, vm: str, id_space: str = "") -> GuestReport:
        """The model's report, with ``vm`` taken from the socket (never from the guest).

        :param vm: the VM whose socket the report came through.
        :param id_space: the file-id space of the hello before it on this connection.
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
            id_space=id_space,
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
        _id_space(obj),
    )


def _id_space(obj: dict[str, Any]) -> str:
    """The hello's optional ``id_space``: 16 lowercase hex digits."""
    value = obj.get("id_space", "")
    if value == "":
        return ""
    if not isinstance(value, str) or not ID_SPACE.fullmatch(value):
        raise GuestProtocolError(
            "'hello' id_space must be 16 lowercase hex digits", E_BAD_FIELD, _seq_of(obj)
        )
    return value


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
