"""Host messages to the guest agent: welcome, params and placement, encoded as lines."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from unicache.channel.wire import (
    CAP_COLORS,
    CAP_REPLICAS,
    E_BAD_FIELD,
    E_LINE_TOO_LONG,
    E_TOO_MANY_ENTRIES,
    MAX_CHUNK_SIZE,
    MAX_ENTRIES_PER_MESSAGE,
    MAX_LINE_BYTES,
    MAX_NODES,
    MAX_STRING,
    MAX_TABLE_ENTRIES,
    MAX_VCPUS,
    MIN_CHUNK_SIZE,
    PROTOCOL_VERSION,
    SYNC_BYTE,
    T_ERROR,
    T_PARAMS,
    T_PLACEMENT,
    T_SYNC,
    T_SYNC_ACK,
    T_WELCOME,
)
from unicache.errors import (
    GuestProtocolError as GuestProtocolError,  # the wire's error, re-exported
)
from unicache.errors import ProtocolError
from unicache.model import (
    BUDGET_UNLIMITED,
    PlacementTable,
)


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
