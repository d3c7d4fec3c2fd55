"""The guest's side of the unicache wire protocol: constants, framing, checks of host messages.

Mirrors the host's side in ``hypervisor/unicache/channel/``: the constants of ``wire.py``
(the ones the guest uses), the line framing of ``framing.py``, and checks of what
``host_messages.py`` encodes. Both follow docs/protocol.md, whose constants table is
checked against both by ``tests/channel/test_channel_constants.py``. A copy, not an
import: the agent ships to guests alone. Standard library only; written and type-checked
as Python 3.9 code, tested on 3.11.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

from .errors import MessageError

# --- constants (docs/protocol.md "Constants") -------------------------------------------------
# the ones the guest uses; the host's own limits (its rate limits, what it keeps per VM,
# the capabilities and message types it accepts) are the host's alone
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
#: longest string field (agent name, capability, error message)
MAX_STRING = 256
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
#: migration budget meaning "no limit"
BUDGET_UNLIMITED = 0xFFFFFFFF

# message types
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
HOST_TYPES = (T_WELCOME, T_PLACEMENT, T_PARAMS, T_COLORS, T_REPLICAS, T_ERROR, T_SYNC,
              T_SYNC_ACK)
#: types reserved for later tables; a receiver answers ``reserved-type``
RESERVED_TYPES = (T_COLORS, T_REPLICAS)

# error kinds
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
ERROR_KINDS = (E_LINE_TOO_LONG, E_BAD_JSON, E_BAD_MESSAGE, E_UNKNOWN_TYPE, E_BAD_FIELD,
               E_UNSUPPORTED_VERSION, E_TOO_MANY_ENTRIES, E_RATE_LIMITED, E_STATE_FULL,
               E_NOT_READY, E_RESERVED_TYPE)

CAPS = ("report", "placement", "nt-copy", "fanotify")
#: capabilities announced only when the shim supports them (placement entries then carry
#: color_node and replica_nodes, report chunks home_node and node_reads)
CAP_COLORS = "colors"
CAP_REPLICAS = "replicas"
SHIM_CAPS = (CAP_COLORS, CAP_REPLICAS)


def encode(msg: Dict[str, Any]) -> bytes:
    """One message as a line: compact JSON, ``v`` added, newline-terminated.

    :param msg: the message fields (``type`` required).
    :returns: the encoded line.
    :raises MessageError: when the line would exceed MAX_LINE_BYTES.
    """
    body = dict(msg)
    body.setdefault("v", PROTOCOL_VERSION)
    line = json.dumps(body, separators=(",", ":"), allow_nan=False).encode() + b"\n"
    if len(line) > MAX_LINE_BYTES:
        raise MessageError(f"{msg.get('type')} message of {len(line)} bytes exceeds "
                           f"{MAX_LINE_BYTES}", E_LINE_TOO_LONG)
    return line


def sync_ack_bytes(sync_id: int) -> bytes:
    """The reply to a sync: SYNC_BYTE then the sync-ack line (qemu-ga guest-sync-delimited).

    :param sync_id: the id the peer sent.
    :returns: the bytes to write.
    """
    return bytes([SYNC_BYTE]) + encode({"type": T_SYNC_ACK, "id": sync_id})


class LineReader:
    """Bounded line framing: never holds more than MAX_LINE_BYTES of a partial line.

    A SYNC_BYTE drops any partial line (the peer is resynchronising). An overlong line is
    skipped up to its newline and reported once as ``None`` in the output.
    """

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._max = max_line
        self._buf = bytearray()
        self._skipping = False
        #: sync bytes seen since the last call to :meth:`take_syncs`
        self.syncs = 0

    def feed(self, data: bytes) -> List[Optional[bytes]]:
        """Add bytes; return complete lines (without newline), ``None`` per overlong line.

        :param data: bytes read from the port.
        :returns: the complete lines, in order.
        """
        out: List[Optional[bytes]] = []
        start = 0
        n = len(data)
        while start < n:
            nl = data.find(b"\n", start)
            ff = data.find(bytes([SYNC_BYTE]), start)
            if ff != -1 and (nl == -1 or ff < nl):
                self._buf.clear()
                self._skipping = False
                self.syncs += 1
                start = ff + 1
                continue
            end = n if nl == -1 else nl
            piece = data[start:end]
            if not self._skipping:
                if len(self._buf) + len(piece) + (1 if nl != -1 else 0) > self._max:
                    self._buf.clear()
                    self._skipping = True
                    out.append(None)
                else:
                    self._buf += piece
            if nl == -1:
                break
            if not self._skipping:
                out.append(bytes(self._buf))
            self._buf.clear()
            self._skipping = False
            start = nl + 1
        return out


# --- host messages, checked ---------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    """Parameters the host sets (welcome or params message)."""

    chunk_size: int
    min_read_size: int
    report_interval_s: float


@dataclass(frozen=True)
class WireEntry:
    """One placement entry as received."""

    file_id: int
    chunk: int
    vcpus: FrozenSet[int]
    caching: bool
    migration_budget: int
    #: SRM-buffer color node, -1 none (only from hosts that saw the ``colors`` cap)
    color_node: int = -1
    #: NCC replica nodes (only from hosts that saw the ``replicas`` cap)
    replica_nodes: FrozenSet[int] = frozenset()


@dataclass(frozen=True)
class PlacementPart:
    """One part of a placement table."""

    version: int
    part: int
    parts: int
    chunk_size: int
    min_read_size: int
    entries: Tuple[WireEntry, ...]


def _int(obj: Dict[str, Any], key: str, lo: int, hi: int) -> int:
    val = obj.get(key)
    if type(val) is not int or not lo <= val <= hi:
        raise MessageError(f"'{obj.get('type')}' requires integer '{key}' in [{lo}, {hi}]",
                           E_BAD_FIELD)
    return val


def _float(obj: Dict[str, Any], key: str, lo: float, hi: float) -> float:
    val = obj.get(key)
    if not isinstance(val, (int, float)) or isinstance(val, bool) or not lo <= val <= hi:
        raise MessageError(f"'{obj.get('type')}' requires number '{key}' in [{lo}, {hi}]",
                           E_BAD_FIELD)
    return float(val)


def parse_file_id(val: Any, where: str) -> int:
    """A file id on the wire: 1 to 16 lowercase hex digits.

    :param val: the JSON value.
    :param where: message type for the error.
    :returns: the id.
    :raises MessageError: ``bad-field``.
    """
    if type(val) is not str or not 1 <= len(val) <= 16:
        raise MessageError(f"'{where}' file id must be 1-16 hex digits", E_BAD_FIELD)
    try:
        return int(val, 16)
    except ValueError as err:
        raise MessageError(f"'{where}' file id must be 1-16 hex digits", E_BAD_FIELD) from err


def parse_params(obj: Dict[str, Any]) -> Params:
    """Check a params object (the ``params`` message or welcome's ``params``).

    :raises MessageError: ``bad-field``.
    """
    cs = _int(obj, "chunk_size", MIN_CHUNK_SIZE, MAX_CHUNK_SIZE)
    if cs & (cs - 1):
        raise MessageError("'chunk_size' must be a power of two", E_BAD_FIELD)
    return Params(cs, _int(obj, "min_read_size", 0, MAX_COUNTER),
                  _float(obj, "report_interval_s", MIN_REPORT_INTERVAL_S, MAX_REPORT_INTERVAL_S))


def parse_placement(obj: Dict[str, Any]) -> PlacementPart:
    """Check one placement part.

    :raises MessageError: ``bad-field`` or ``too-many-entries``.
    """
    version = _int(obj, "version", 0, MAX_COUNTER)
    parts = _int(obj, "parts", 1, MAX_TABLE_PARTS)
    part = _int(obj, "part", 0, parts - 1)
    cs = _int(obj, "chunk_size", MIN_CHUNK_SIZE, MAX_CHUNK_SIZE)
    if cs & (cs - 1):
        raise MessageError("'chunk_size' must be a power of two", E_BAD_FIELD)
    mrs = _int(obj, "min_read_size", 0, MAX_COUNTER)
    raw = obj.get("entries")
    if not isinstance(raw, list):
        raise MessageError("'placement' requires list 'entries'", E_BAD_FIELD)
    if len(raw) > MAX_ENTRIES_PER_MESSAGE:
        raise MessageError(f"'placement' has {len(raw)} entries, limit "
                           f"{MAX_ENTRIES_PER_MESSAGE}", E_TOO_MANY_ENTRIES)
    entries: List[WireEntry] = []
    for e in raw:
        if not isinstance(e, list) or len(e) not in (5, 7):
            raise MessageError("placement entry must be [file_id, chunk, vcpus, caching, budget"
                               "(, color_node, replica_nodes)]", E_BAD_FIELD)
        fid = parse_file_id(e[0], T_PLACEMENT)
        chunk, vcpus, caching, budget = e[1], e[2], e[3], e[4]
        if type(chunk) is not int or not 0 <= chunk <= MAX_CHUNK_INDEX:
            raise MessageError("placement entry chunk out of range", E_BAD_FIELD)
        if (not isinstance(vcpus, list) or len(vcpus) > MAX_VCPUS
                or any(type(v) is not int or not 0 <= v < MAX_VCPUS for v in vcpus)):
            raise MessageError("placement entry vcpus must be indices below "
                               f"{MAX_VCPUS}", E_BAD_FIELD)
        if type(caching) is not bool:
            raise MessageError("placement entry caching must be true or false", E_BAD_FIELD)
        if type(budget) is not int or not 0 <= budget <= BUDGET_UNLIMITED:
            raise MessageError("placement entry budget out of range", E_BAD_FIELD)
        color: int = -1
        replicas: FrozenSet[int] = frozenset()
        if len(e) == 7:
            color, replicas = _color_replicas(e[5], e[6])
        entries.append(WireEntry(fid, chunk, frozenset(vcpus), caching, budget, color,
                                 replicas))
    return PlacementPart(version, part, parts, cs, mrs, tuple(entries))


def _color_replicas(color: Any, nodes: Any) -> Tuple[int, FrozenSet[int]]:
    """Check the two trailing items of a placement entry (types and ranges only; whether
    the nodes exist in this guest is the agent's check)."""
    if type(color) is not int or not -1 <= color < MAX_NODES:
        raise MessageError(f"placement entry color_node must be -1 or a node below {MAX_NODES}",
                           E_BAD_FIELD)
    if (not isinstance(nodes, list) or len(nodes) > MAX_NODES
            or any(type(n) is not int or not 0 <= n < MAX_NODES for n in nodes)
            or len(set(nodes)) != len(nodes)):
        raise MessageError(f"placement entry replica_nodes must be distinct nodes below "
                           f"{MAX_NODES}", E_BAD_FIELD)
    return color, frozenset(nodes)


def decode_host_line(line: bytes) -> Dict[str, Any]:
    """Decode and check the envelope of one host line.

    :param line: the line without its newline.
    :returns: the message object (``type`` checked against HOST_TYPES).
    :raises MessageError: with the kind naming the problem.
    """
    try:
        obj = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError) as err:
        raise MessageError("line is not JSON", E_BAD_JSON) from err
    if not isinstance(obj, dict):
        raise MessageError("message must be a JSON object", E_BAD_MESSAGE)
    if obj.get("v") != PROTOCOL_VERSION:
        raise MessageError(f"unsupported protocol version {obj.get('v')!r}",
                           E_UNSUPPORTED_VERSION)
    kind = obj.get("type")
    if kind not in HOST_TYPES:
        raise MessageError(f"unknown message type {str(kind)[:40]!r}", E_UNKNOWN_TYPE)
    return obj


def error_message(kind: str, message: str, seq: Optional[int] = None) -> Dict[str, Any]:
    """An ``error`` message naming the problem.

    :param kind: one of ERROR_KINDS.
    :param message: one line, truncated to MAX_STRING.
    :param seq: the offending message's seq, if known.
    :returns: the message fields.
    """
    msg: Dict[str, Any] = {"type": T_ERROR, "kind": kind, "message": message[:MAX_STRING]}
    if seq is not None:
        msg["seq"] = seq
    return msg
