"""One guest's protocol session, without I/O: bytes in, replies and reports out, all bounded.

:class:`GuestSession` is the whole host-side protocol for one VM: framing, the hello /
welcome handshake, sync, rate limits, checks, and the bounded queue of reports waiting for
the daemon. The asyncio server (:mod:`unicache.channel.server`) only moves bytes; tests and
the fuzz target drive the session directly.

Limits (docs/protocol.md "Limits"), each answered with an ``error`` naming it:

* a line over MAX_LINE_BYTES is skipped (``line-too-long``), never buffered;
* more than MAX_MESSAGES_PER_SECOND lines (burst RATE_BURST) are dropped unparsed
  (``rate-limited``); raw bytes are budgeted too and the server stops reading while the
  budget is negative, so a flood costs the host bounded CPU;
* at most MAX_CHUNKS_PER_VM chunks wait in the report queue (``state-full``);
* error replies are themselves limited to MAX_ERRORS_PER_SECOND.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter, deque
from dataclasses import dataclass, field

from unicache.channel import protocol as p
from unicache.errors import ProtocolError
from unicache.model import GuestReport, PlacementTable

log = logging.getLogger(__name__)

#: raw bytes per second a guest may send before the server pauses reading
MAX_BYTES_PER_SECOND = 1 << 20
#: byte budget depth
BYTE_BURST = 4 * p.MAX_LINE_BYTES
#: reports kept per VM until the daemon drains them (oldest dropped first); with
#: MAX_ENTRIES_PER_MESSAGE chunks each this is MAX_CHUNKS_PER_VM
MAX_PENDING_REPORTS = 64


class Runstate(enum.Enum):
    """Where a session is in its handshake."""

    #: connected, no valid hello yet
    AWAITING_HELLO = "awaiting-hello"
    #: hello accepted, welcome sent: reports are accepted
    READY = "ready"


@dataclass
class TokenBucket:
    """A token bucket: ``rate`` tokens per second, at most ``burst`` stored.

    :param rate: refill per second.
    :param burst: capacity.
    """

    rate: float
    burst: float
    tokens: float = field(init=False)
    last: float | None = None

    def __post_init__(self) -> None:
        self.tokens = self.burst

    def take(self, now: float, amount: float = 1.0) -> bool:
        """Spend ``amount`` tokens if available.

        :param now: monotonic seconds.
        :param amount: tokens to spend.
        :returns: whether they were available (and spent).
        """
        self._refill(now)
        if self.tokens >= amount:
            self.tokens -= amount
            return True
        return False

    def available(self, now: float) -> int:
        """Whole tokens available now."""
        self._refill(now)
        return max(0, int(self.tokens))

    def spend(self, now: float, amount: float) -> None:
        """Spend unconditionally (the balance may go negative)."""
        self._refill(now)
        self.tokens -= amount

    def deficit_s(self, now: float) -> float:
        """Seconds until the balance is back to zero (0 when it is not negative)."""
        self._refill(now)
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    def _refill(self, now: float) -> None:
        if self.last is not None and now > self.last:
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        if self.last is None or now > self.last:
            self.last = now


@dataclass(frozen=True, slots=True)
class FeedResult:
    """What one call to :meth:`GuestSession.feed` produced.

    :param outgoing: lines to send to the guest, in order.
    :param errors: problems found (each also answered, unless error replies were limited).
    :param reports: the reports these bytes completed, as queued for :meth:`drain` (the
        daemon looks at them on arrival: ``unicache.roundpace``).
    """

    outgoing: tuple[bytes, ...]
    errors: tuple[ProtocolError, ...]
    reports: tuple[GuestReport, ...] = ()


@dataclass
class SessionStats:
    """Counters of one VM's session (kept across reconnections)."""

    lines: int = 0
    rate_dropped: int = 0
    reports: int = 0
    bytes_in: int = 0
    dropped_reports: int = 0
    errors_sent: int = 0
    errors_suppressed: int = 0
    errors_by_kind: Counter[str] = field(default_factory=Counter)
    applied_version: int = -1
    applied_entries: int = 0


class GuestSession:
    """The host side of the protocol for one VM.

    :param vm: the VM's name (reports are stamped with it, never with anything the guest says).
    :param params: the parameters sent in welcome.
    """

    def __init__(self, vm: str, params: p.ChannelParams | None = None) -> None:
        self.vm = vm
        self.params = params or p.ChannelParams()
        self.log = log.getChild(vm)
        self.framer = p.LineFramer()
        self.state = Runstate.AWAITING_HELLO
        self.hello: p.Hello | None = None
        self.stats = SessionStats()
        self._msgs = TokenBucket(p.MAX_MESSAGES_PER_SECOND, p.RATE_BURST)
        self._bytes = TokenBucket(MAX_BYTES_PER_SECOND, BYTE_BURST)
        self._errs = TokenBucket(p.MAX_ERRORS_PER_SECOND, p.MAX_ERRORS_PER_SECOND)
        self._reports: deque[GuestReport] = deque()
        self._arrived: list[GuestReport] = []
        self._pending_chunks = 0
        self._table: PlacementTable | None = None
        self._table_lines: list[bytes] = []
        self._table_caps: tuple[str, ...] = ()
        self._sync_id = 0
        # the file-id space of the guest's boot, from its last hello that named one
        self._id_space = ""

    # Section: connection lifecycle

    def connected(self) -> list[bytes]:
        """A (re)connection: restart the handshake, ask the guest to resync.

        :returns: lines to send first (a sync, so a half-sent line of the last connection
            is dropped by the guest's framer as well).
        """
        self.framer = p.LineFramer()
        self.state = Runstate.AWAITING_HELLO
        self.hello = None
        self._sync_id += 1
        return [p.encode_sync(self._sync_id)]

    def throttle_s(self, now: float) -> float:
        """How long the server should stop reading (raw byte budget exhausted).

        :param now: monotonic seconds.
        """
        return self._bytes.deficit_s(now)

    # Section: input

    def feed(self, data: bytes, now: float) -> FeedResult:
        """Process bytes from the guest.

        :param data: bytes as read from the socket (any size).
        :param now: monotonic seconds (the session reads no clock).
        :returns: replies and the problems found. Never raises for guest input.
        """
        self.stats.bytes_in += len(data)
        self._bytes.spend(now, len(data))
        out: list[bytes] = []
        errors: list[ProtocolError] = []
        self._arrived = []
        # every line, empty ones included, spends a token; lines past the tokens available
        # are dropped by the framer without being looked at
        lines, dropped = self.framer.feed(data, self._msgs.available(now))
        self.stats.lines += len(lines) + dropped
        for line in lines:
            self._msgs.take(now)
            if line is not None and not line.strip():
                continue  # an empty line is a keep-alive
            if line is None:
                self._problem(p.GuestProtocolError(
                    f"line longer than {p.MAX_LINE_BYTES} bytes; dropped",
                    p.E_LINE_TOO_LONG), now, out, errors)
                continue
            try:
                msg = p.parse_guest_line(line)
                out.extend(self._handle(msg))
            except p.GuestProtocolError as err:
                self._problem(err, now, out, errors)
        if dropped:
            self.stats.rate_dropped += dropped
            self._problem(p.GuestProtocolError(
                f"more than {p.MAX_MESSAGES_PER_SECOND} messages per second "
                f"(burst {p.RATE_BURST}); {dropped} dropped", p.E_RATE_LIMITED),
                now, out, errors)
        return FeedResult(tuple(out), tuple(errors), tuple(self._arrived))

    def _problem(self, err: ProtocolError, now: float, out: list[bytes],
                 errors: list[ProtocolError]) -> None:
        errors.append(err)
        self.stats.errors_by_kind[err.kind] += 1
        if self._errs.take(now):
            self.stats.errors_sent += 1
            out.append(p.encode_error(err))
            self.log.warning("vm=%s kind=%s %s", self.vm, err.kind, err.error_message)
        else:
            self.stats.errors_suppressed += 1

    def _handle(self, msg: p.GuestMessage) -> list[bytes]:
        if isinstance(msg, p.Sync):
            return [p.encode_sync_ack(msg.id)]
        if isinstance(msg, p.SyncAck | p.PeerError):
            if isinstance(msg, p.PeerError):
                self.log.warning("vm=%s guest error kind=%r %r", self.vm, msg.kind,
                                 msg.message)
            return []
        if isinstance(msg, p.Hello):
            if msg.id_space and self._id_space and msg.id_space != self._id_space:
                # the guest booted again: the table kept for it names the old boot's file
                # ids, and undrained reports are the old guest's
                self.log.info("vm=%s guest booted again (file-id space %s, was %s): its "
                              "last table is not sent", self.vm, msg.id_space, self._id_space)
                self._table = None
                self._table_lines = []
                self._table_caps = ()
                self._reports.clear()
                self._pending_chunks = 0
            self._id_space = msg.id_space or self._id_space
            self.hello = msg
            self.state = Runstate.READY
            caps = tuple(c for c in p.HOST_CAPS if c in msg.caps)
            out = [p.encode_welcome(self.params, caps)]
            if self._table is not None and caps != self._table_caps:
                # the table's extra fields depend on the caps: re-encode only when they change
                try:
                    self._table_lines = p.encode_placement(self._table, caps)
                except ProtocolError as err:  # the extra fields overflow a line
                    self.log.error("vm=%s table with caps %s: %s; sent without them",
                                   self.vm, list(caps), err)
                    self._table_lines = p.encode_placement(self._table)
                self._table_caps = caps
            if self._table_fits():
                out.extend(self._table_lines)  # encoded once: a hello flood costs no encoding
            self.log.info("vm=%s agent=%r vcpus=%d ready", self.vm, msg.agent, msg.vcpus)
            return out
        if self.state is not Runstate.READY:
            raise p.GuestProtocolError("send hello first", p.E_NOT_READY,
                                       getattr(msg, "seq", None))
        if isinstance(msg, p.Applied):
            self.stats.applied_version = msg.version
            self.stats.applied_entries = msg.entries
            return []
        self._queue(msg)
        return []

    def _queue(self, msg: p.Report) -> None:
        """Keep a report for the daemon; past the per-VM bound the oldest make room."""
        n = len(msg.chunks)  # <= MAX_ENTRIES_PER_MESSAGE <= MAX_CHUNKS_PER_VM (parser)
        dropped = 0
        while self._reports and (len(self._reports) >= MAX_PENDING_REPORTS
                                 or self._pending_chunks + n > p.MAX_CHUNKS_PER_VM):
            old = self._reports.popleft()
            self._pending_chunks -= len(old.chunks)
            dropped += 1
        report = msg.to_guest_report(self.vm, self._id_space)
        self._reports.append(report)
        self._arrived.append(report)
        self._pending_chunks += n
        self.stats.reports += 1
        if dropped:
            self.stats.dropped_reports += dropped
            raise p.GuestProtocolError(
                f"more than {p.MAX_CHUNKS_PER_VM} chunks or {MAX_PENDING_REPORTS} reports held "
                f"for this VM; dropped the {dropped} oldest", p.E_STATE_FULL, msg.seq)

    # Section: output to the daemon

    def drain(self) -> list[GuestReport]:
        """Take the reports received since the last drain (oldest first)."""
        out = list(self._reports)
        self._reports.clear()
        self._pending_chunks = 0
        return out

    @property
    def pending_chunks(self) -> int:
        """Chunks held in undrained reports (always <= MAX_CHUNKS_PER_VM)."""
        return self._pending_chunks

    def set_table(self, table: PlacementTable) -> list[bytes]:
        """Remember the VM's latest table; return its lines if the guest is ready.

        :param table: the table to publish.
        :returns: lines to send now (empty before the handshake; sent after welcome).
        :raises ProtocolError: when the table cannot be encoded within the limits.
        """
        caps = self.caps
        lines = p.encode_placement(table, caps)
        self._table = table
        self._table_lines = lines
        self._table_caps = caps
        return list(lines) if self.state is Runstate.READY and self._table_fits() else []

    def _table_fits(self) -> bool:
        """Whether the kept table's file ids are the current guest's: a table built for
        another boot (a daemon restarted after the guest rebooted) waits for the next."""
        table = self._table
        if table is None:
            return False
        if table.id_space and self._id_space and table.id_space != self._id_space:
            self.log.info("vm=%s table version=%d is for file-id space %s, the guest's is "
                          "%s: not sent", self.vm, table.version, table.id_space,
                          self._id_space)
            return False
        return True

    @property
    def caps(self) -> tuple[str, ...]:
        """The capabilities the current guest's hello and this host share (none before)."""
        if self.hello is None:
            return ()
        return tuple(c for c in p.HOST_CAPS if c in self.hello.caps)

    def set_params(self, params: p.ChannelParams) -> list[bytes]:
        """Change the parameters; return the ``params`` line if the guest is ready."""
        self.params = params
        return [p.encode_params(params)] if self.state is Runstate.READY else []
