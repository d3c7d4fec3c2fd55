"""The host's side of the unicache wire protocol, in one import: ``from unicache.channel
import protocol as p``.

Defined in docs/protocol.md; each part lives in its own module: the constants
(:mod:`.wire`), the line framing (:mod:`.framing`), guest lines into typed, checked
messages (:mod:`.guest_messages`) and host messages out (:mod:`.host_messages`).
"""

from __future__ import annotations

from unicache.channel.framing import LineFramer
from unicache.channel.guest_messages import (
    Applied,
    FileAccess,
    GuestMessage,
    Hello,
    PeerError,
    Report,
    Sync,
    SyncAck,
    parse_file_id,
    parse_guest_line,
)
from unicache.channel.host_messages import (
    ChannelParams,
    encode,
    encode_error,
    encode_params,
    encode_placement,
    encode_sync,
    encode_sync_ack,
    encode_welcome,
)
from unicache.channel.wire import *  # noqa: F403 (every constant of docs/protocol.md)
from unicache.errors import GuestProtocolError

__all__ = [
    "Applied",
    "ChannelParams",
    "FileAccess",
    "GuestMessage",
    "GuestProtocolError",
    "Hello",
    "LineFramer",
    "PeerError",
    "Report",
    "Sync",
    "SyncAck",
    "encode",
    "encode_error",
    "encode_params",
    "encode_placement",
    "encode_sync",
    "encode_sync_ack",
    "encode_welcome",
    "parse_file_id",
    "parse_guest_line",
]
