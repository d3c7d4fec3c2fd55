"""The virtio-serial channel between the host and each guest's unicache-agent.

Exports, most to least important: the asyncio server, the sans-IO session, the protocol's
typed messages and its error.
"""

from unicache.channel.protocol import (
    PROTOCOL_VERSION,
    ChannelParams,
    GuestProtocolError,
    Hello,
    Report,
    parse_guest_line,
)
from unicache.channel.server import ChannelServer, VmChannelStatus
from unicache.channel.session import FeedResult, GuestSession, Runstate

__all__ = [
    "PROTOCOL_VERSION",
    "ChannelParams",
    "ChannelServer",
    "FeedResult",
    "GuestProtocolError",
    "GuestSession",
    "Hello",
    "Report",
    "Runstate",
    "VmChannelStatus",
    "parse_guest_line",
]
