"""The agent loop: handshake with the host, periodic reports up, placement tables down.

One thread, one ``select``. States: closed (waiting to open the port, with backoff),
greeting (sync + hello sent, waiting for welcome, resent on a timeout), ready (reports
every ``report_interval_s``, and early when the shims count reads of a chunk the host has
not heard of (:mod:`unicache_agent.early`); tables applied as they arrive). docs/agent.md
describes it.
"""

from __future__ import annotations

import logging
import select
import time
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from . import __version__, numa_mem
from . import protocol as p
from .counters import CounterHarvester
from .early import EARLY_POLL_S, EarlyReports
from .errors import AgentError, MessageError, PortError
from .guest_facts import guest_topology, node_memory
from .port import Transport
from .replica_service import ReplicaService
from .shm import MAX_NODES as SHM_MAX_NODES
from .shm import Harvest, ShmEntry, id_space_of
from .table_writer import TableWriter

log = logging.getLogger(__name__)

#: seconds between attempts to open an absent port (doubles up to MAX_BACKOFF_S)
MIN_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
#: seconds to wait for welcome before greeting again
HELLO_TIMEOUT_S = 5.0
#: chunk size and min_read_size used until the host sends its own (MFC §4.7: half an L2)
DEFAULT_CHUNK_SIZE = 256 * 1024
DEFAULT_MIN_READ_SIZE = 64 * 1024


class Agent:
    """The guest agent.

    :param transport: where the host is.
    :param table: the shared placement table the shim reads.
    :param counters: the users' counters the shims write.
    :param capture: optional file-level capture (fanotify) with ``drain() -> list``.
    :param clock: monotonic clock.
    :param report_interval_s: until the host says otherwise.
    :param extra_caps: optional capabilities to announce besides :data:`protocol.CAPS`
        (``colors``/``replicas`` when the shim enforces them, see :func:`shim_caps`).
    :param sys_root: sysfs ``devices/system`` (topology and node memory).
    :param replicas: the guest-wide replica store and its socket (NCC), served by a
        process of their own and filled as the host's tables say; None: no replicas are served.
    """

    def __init__(self, transport: Transport, table: TableWriter, counters: CounterHarvester,
                 capture: Optional[Any] = None, clock: Callable[[], float] = time.monotonic,
                 report_interval_s: float = 1.0, extra_caps: Sequence[str] = (),
                 sys_root: str = "/sys/devices/system",
                 replicas: Optional[ReplicaService] = None) -> None:
        self.transport = transport
        self.replicas = replicas
        self.table = table
        self.counters = counters
        self.capture = capture
        self.clock = clock
        self.interval = report_interval_s
        self.reader = p.LineReader()
        self.ready = False
        self.started = clock()
        self.seq = 0
        self.sync_id = 0
        self.errors = 0
        self.dropped = 0
        self.reports_sent = 0
        self.tables_applied = 0
        self.host_errors: List[Tuple[str, str]] = []
        self._parts: Dict[int, p.PlacementPart] = {}
        self._parts_version = -1
        self._next_report = 0.0
        self._greet_deadline = 0.0
        self._backoff = MIN_BACKOFF_S
        self._next_open = 0.0
        self._last_report_t = clock()
        #: the early-report rule, and the shims' insert count when last polled
        self.early = EarlyReports()
        self._inserts = -1
        self._next_poll = 0.0
        #: reports sent early (a fresh chunk read), out of ``reports_sent``
        self.early_reports = 0
        #: (file_id, chunk) of the chunks the last report built carried
        self._built: List[Tuple[int, int]] = []
        self.sys_root = sys_root
        self.vcpus, self.nodes = guest_topology(sys_root)
        self.caps: Tuple[str, ...] = tuple(p.CAPS) + tuple(
            c for c in p.SHIM_CAPS if c in extra_caps)
        #: capabilities the host's welcome granted
        self.granted: FrozenSet[str] = frozenset()
        #: placement fields ignored because they named a node this guest lacks
        self.field_errors = 0
        self._host_table = False
        # counting starts at once: an empty table carries chunk_size until the host's arrives
        self._default_table(p.Params(DEFAULT_CHUNK_SIZE, DEFAULT_MIN_READ_SIZE, self.interval))

    @property
    def reports_homes(self) -> bool:
        """Whether the shims record chunks' home nodes for the reports (``TABLE_NUMA``):
        the host runs NCC here (granted ``replicas``) and two or more nodes have CPUs."""
        return (p.CAP_REPLICAS in self.granted
                and len(self.table.cpu_nodes.nodes_with_cpus()) >= 2)

    def _default_table(self, params: p.Params) -> None:
        if not self._host_table:
            self.table.publish(0, params.chunk_size, params.min_read_size, [],
                               numa=self.reports_homes)
            if self.replicas is not None:
                self.replicas.call("set_table", params.chunk_size, {})

    # Section: connection

    def _greet(self) -> None:
        self.sync_id += 1
        self.reader = p.LineReader()
        self.ready = False
        hello = {"type": p.T_HELLO, "seq": 0, "agent": f"unicache-agent/{__version__}",
                 "versions": [p.PROTOCOL_VERSION], "caps": list(self.caps),
                 "vcpus": self.vcpus, "nodes": list(self.nodes),
                 "id_space": id_space_of(self.table.salt)}
        self._send(p.encode({"type": p.T_SYNC, "id": self.sync_id}) + p.encode(hello))
        self._greet_deadline = self.clock() + HELLO_TIMEOUT_S

    def _send(self, data: bytes) -> bool:
        if not self.transport.is_open:
            return False
        try:
            ok = self.transport.write(data)
        except PortError as err:
            log.warning("write failed: %s", err)
            self._lost()
            return False
        if not ok:
            self.dropped += 1
        return ok

    def _lost(self) -> None:
        self.ready = False
        if not self.transport.hangup_keeps_open:
            self.transport.close()
            self._next_open = self.clock() + self._backoff

    def _try_open(self, now: float) -> None:
        if now < self._next_open:
            return
        try:
            self.transport.open()
        except PortError as err:
            log.info("%s; retrying in %.1f s", err, self._backoff)
            self._next_open = now + self._backoff
            self._backoff = min(self._backoff * 2, MAX_BACKOFF_S)
            return
        self._backoff = MIN_BACKOFF_S
        log.info("opened %s", self.transport.describe())
        self._greet()

    # Section: the loop

    def step(self, max_wait_s: float = 1.0) -> None:
        """One turn of the loop: open if needed, wait for input or a deadline, act.

        :param max_wait_s: longest wait in ``select``.
        """
        now = self.clock()
        if not self.transport.is_open:
            self._try_open(now)
            if not self.transport.is_open:
                time.sleep(min(max_wait_s, max(0.0, self._next_open - now)))
                return
        if not self.ready and now >= self._greet_deadline:
            self._greet()
        deadline = min(self._report_due_at(), self._next_poll) if self.ready \
            else self._greet_deadline
        wait = max(0.0, min(max_wait_s, deadline - now))
        rfd = self.transport.rfd
        assert rfd is not None
        cfd = getattr(self.capture, "fd", None)
        fds = [rfd] if cfd is None else [rfd, cfd]
        r, _, _ = select.select(fds, [], [], wait)
        if cfd is not None and cfd in r:
            self.capture.poll(4096)  # type: ignore[union-attr]
        if rfd in r:
            try:
                data = self.transport.read()
            except PortError as err:
                log.warning("%s", err)
                self._lost()
                return
            if data == b"":
                # host absent (virtio port) or peer closed (socket)
                if self.transport.hangup_keeps_open:
                    self.ready = False
                    time.sleep(min(max_wait_s, 0.5))
                else:
                    log.info("host closed the connection")
                    self._lost()
                return
            if data is not None:
                for line in self.reader.feed(data):
                    self._on_line(line)
        if self.ready:
            self._poll_fresh()
            now = self.clock()
            if now >= self._report_due_at():
                self.send_report(early=now < self._next_report)

    def _report_due_at(self) -> float:
        """When the next report goes: the periodic one, or earlier an early one; both
        ``EARLY_REPORT_MIN_S`` after the last report at least."""
        periodic = max(self._next_report, self.early.last_report_t + self.early.min_gap_s)
        return min(periodic, self.early.due_at())

    def _poll_fresh(self) -> None:
        """Every ``EARLY_POLL_S``: the shims' insert count; when it moved, the chunks read
        since the last harvest, checked for one the host has not heard of."""
        now = self.clock()
        if now < self._next_poll:
            return
        self._next_poll = now + EARLY_POLL_S
        inserts = self.counters.inserts()
        if inserts != self._inserts:
            self._inserts = inserts
            self.early.saw(self.counters.active_chunks())

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Loop until ``should_stop()`` is true.

        :param should_stop: polled once per turn.
        """
        while not should_stop():
            self.step()

    # Section: host messages

    def _on_line(self, line: Optional[bytes]) -> None:
        try:
            if line is None:
                raise MessageError(f"line longer than {p.MAX_LINE_BYTES} bytes",
                                   p.E_LINE_TOO_LONG)
            if not line.strip():
                return
            msg = p.decode_host_line(line)
            self._handle(msg)
        except MessageError as err:
            self.errors += 1
            log.warning("host message dropped: kind=%s %s", err.kind, err.error_message)
            self._send(p.encode(p.error_message(err.kind, err.error_message)))
        except AgentError as err:
            self.errors += 1
            log.error("%s", err)

    def _handle(self, msg: Dict[str, Any]) -> None:
        kind = msg["type"]
        if kind == p.T_SYNC:
            sid = msg.get("id")
            if type(sid) is int and 0 <= sid <= p.MAX_COUNTER:
                self._send(p.sync_ack_bytes(sid))
            return
        if kind == p.T_SYNC_ACK:
            return
        if kind == p.T_ERROR:
            ek, em = str(msg.get("kind"))[:64], str(msg.get("message"))[:p.MAX_STRING]
            self.host_errors = [*self.host_errors, (ek, em)][-32:]
            log.warning("host error kind=%s %s", ek, em)
            if ek == p.E_NOT_READY and self.ready:
                # a host that never heard our hello: a daemon restarted while this agent
                # missed the port's hangup (a busy guest may not run in that window);
                # its reports would be refused until it greets again
                log.info("the host does not know this agent: greeting again")
                self._greet()
            return
        if kind == p.T_WELCOME:
            params = msg.get("params")
            if not isinstance(params, dict):
                raise MessageError("'welcome' requires object 'params'", p.E_BAD_FIELD)
            parsed = p.parse_params(params)
            caps = msg.get("caps")
            # the grants first: the table the params publish says whether homes are recorded
            self.granted = frozenset(c for c in caps if isinstance(c, str) and c in self.caps
                                     ) if isinstance(caps, list) else frozenset()
            self._apply_params(parsed)
            self.ready = True
            self._next_report = self.clock() + self.interval
            self.early.table(-1, ())  # a host (maybe restarted) that heard of nothing yet
            log.info("host ready; reporting every %.1f s", self.interval)
            return
        if kind in p.RESERVED_TYPES:
            raise MessageError(f"'{kind}' tables are reserved and not implemented yet",
                               p.E_RESERVED_TYPE)
        if not self.ready:
            raise MessageError(f"'{kind}' before welcome", p.E_NOT_READY)
        if kind == p.T_PARAMS:
            self._apply_params(p.parse_params(msg))
        elif kind == p.T_PLACEMENT:
            self._placement(p.parse_placement(msg))

    def _apply_params(self, params: p.Params) -> None:
        self.interval = params.report_interval_s
        self._default_table(params)

    def _placement(self, part: p.PlacementPart) -> None:
        if part.version != self._parts_version:
            if part.version < self._parts_version:
                return  # a late part of an older table
            self._parts = {}
            self._parts_version = part.version
        self._parts[part.part] = part
        if len(self._parts) < part.parts:
            return
        parts = [self._parts[i] for i in range(part.parts) if i in self._parts]
        self._parts = {}
        if len(parts) != part.parts:
            raise MessageError("placement parts disagree on their count", p.E_BAD_FIELD)
        entries = [self._shm_entry(e) for prt in parts for e in prt.entries]
        if len(entries) > p.MAX_TABLE_ENTRIES:
            raise MessageError(f"table of {len(entries)} entries exceeds "
                               f"{p.MAX_TABLE_ENTRIES}", p.E_TOO_MANY_ENTRIES)
        n = self.table.publish(part.version, part.chunk_size, part.min_read_size, entries,
                               numa=self.reports_homes)
        if self.replicas is not None:  # replicas the table no longer lists go now
            self.replicas.call("set_table", part.chunk_size, {
                (e.file_id, e.chunk): e.replica_nodes for e in entries if e.replica_nodes})
        self._host_table = True
        self.tables_applied += 1
        self.early.table(part.version, ((e.file_id, e.chunk) for e in entries))
        log.info("table version=%d entries=%d published", part.version, n)
        self._send(p.encode({"type": p.T_APPLIED, "version": part.version, "entries": n}))

    def _shm_entry(self, e: p.WireEntry) -> ShmEntry:
        """The table entry of a wire entry; a color or replica node this guest lacks is
        ignored (that field only) and counted in ``field_errors`` and ``health.errors``."""
        color = e.color_node
        if color >= 0 and (p.CAP_COLORS not in self.granted or color not in self.nodes
                           or color >= SHM_MAX_NODES):
            self._field_error(f"color_node {color} of chunk {e.file_id:x}:{e.chunk}")
            color = -1
        replicas = e.replica_nodes
        if replicas and (p.CAP_REPLICAS not in self.granted
                         or any(n not in self.nodes or n >= SHM_MAX_NODES for n in replicas)):
            self._field_error(f"replica_nodes {sorted(replicas)} of chunk "
                              f"{e.file_id:x}:{e.chunk}")
            replicas = frozenset()
        return ShmEntry(e.file_id, e.chunk, e.vcpus, e.caching, e.migration_budget, color,
                        replicas)

    def _field_error(self, what: str) -> None:
        self.field_errors += 1
        self.errors += 1
        if self.field_errors <= 8 or self.field_errors % 1000 == 0:
            log.warning("placement %s names no node of this guest (nodes %s); field ignored "
                        "(%d so far)", what, list(self.nodes), self.field_errors)

    # Section: reports

    def build_report(self, harvest: Harvest, files: List[Tuple[int, int, int]],
                     interval_s: float) -> bytes:
        """Encode one report within the line and entry limits.

        Chunks are sent largest byte count first; those that do not fit are counted in
        ``health.dropped``.

        :param harvest: counted chunks.
        :param files: file-level (file_id, accesses, modifies) records.
        :param interval_s: time the harvest covers.
        :returns: the encoded line.
        """
        numa = bool(self.granted & set(p.SHIM_CAPS))
        chunks: List[List[Any]] = []
        for c in harvest.chunks[:p.MAX_ENTRIES_PER_MESSAGE]:
            rec: List[Any] = [f"{c.file_id:x}", c.chunk, min(c.bytes_read, p.MAX_COUNTER),
                              min(c.reads, p.MAX_COUNTER), min(c.writes, p.MAX_COUNTER),
                              [[v, min(b, p.MAX_COUNTER)] for v, b in c.vcpu_bytes
                               if 0 <= v < p.MAX_VCPUS]]
            if numa:  # the trailing items only for a host that granted colors/replicas
                home = c.home_node
                if home < 0 and len(self.nodes) == 1 and c.reads:
                    home = self.nodes[0]  # one node: the shim does not ask the kernel
                rec.append(home if 0 <= home < p.MAX_NODES else -1)
                rec.append([[n, min(r, p.MAX_COUNTER)] for n, r in c.node_reads
                            if 0 <= n < p.MAX_NODES][:p.MAX_NODES])
            chunks.append(rec)
        keys = [(c.file_id, c.chunk) for c in harvest.chunks[:len(chunks)]]
        frecs = [[f"{fid:x}", min(a, p.MAX_COUNTER), min(m, p.MAX_COUNTER)]
                 for fid, a, m in files[:p.MAX_FILE_RECORDS]]
        lost = (len(harvest.chunks) - len(chunks)) + (len(files) - len(frecs))
        mem = node_memory(self.sys_root, self.nodes) if numa else ()
        self.seq += 1
        while True:
            msg = {"type": p.T_REPORT, "seq": self.seq,
                   "interval_s": round(min(max(interval_s, 0.0), 3600.0), 3),
                   "vcpus": self.vcpus, "nodes": list(self.nodes), "chunks": chunks,
                   "files": frecs,
                   **({"node_memory": [list(m) for m in mem]} if numa else {}),
                   "health": {"uptime_s": round(self.clock() - self.started, 3),
                              "shim_clients": min(harvest.clients, p.MAX_COUNTER),
                              "dropped": min(self.dropped + harvest.dropped + lost,
                                             p.MAX_COUNTER),
                              "errors": self.errors}}
            try:
                line = p.encode(msg)
                self._built = keys[:len(chunks)]
                return line
            except MessageError:
                cut = max(1, len(chunks) // 4) if chunks else 0
                fcut = 0 if chunks else max(1, len(frecs) // 4)
                lost += cut + fcut
                chunks = chunks[:len(chunks) - cut]
                frecs = frecs[:len(frecs) - fcut]

    def send_report(self, early: bool = False) -> None:
        """Harvest the counters and send one report.

        :param early: sent before the periodic one is due (a fresh chunk was read): the
            periodic report keeps its time.
        """
        now = self.clock()
        harvest = self.counters.harvest()
        self.table.mark_harvest()  # the shims' open runs go out at their next call
        files = self.capture.drain() if self.capture is not None else []
        if self.replicas is not None:  # NCC's round: hits, writes, timer, 2:1 shrink
            self.replicas.call("round", harvest.chunks,
                               numa_mem.node_headroom(self.sys_root, self.nodes))
        line = self.build_report(harvest, files, now - self._last_report_t)
        self._last_report_t = now
        sent = self._send(line)
        if sent:
            self.reports_sent += 1
            self.early_reports += early
            self.dropped = 0
            self.errors = 0
        self.early.reported(self._built if sent else (), now)
        if not early:
            self._next_report = now + self.interval
