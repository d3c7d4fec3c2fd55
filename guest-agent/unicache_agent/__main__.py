"""Command line of unicache-agent (``python3 -m unicache_agent`` or ``unicache-agent``)."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
import time
from typing import Dict, List, NoReturn, Optional, Tuple

from . import __version__
from .agent import Agent
from .counters import CounterHarvester
from .errors import AgentError, ShmError, UsageError
from .guest_facts import DEFAULT_SHIM, guest_topology, node_memory, shim_caps
from .port import FdTransport, PortTransport, SocketTransport, Transport
from .protocol import PORT_NAME
from .replica_server import ReplicaServer
from .replica_service import ReplicaService
from .replica_store import DEFAULT_BUDGET_RATIO, ReplicaStore, node_totals
from .shm import (
    AGENT_OPEN_SAMPLE,
    DEFAULT_COUNTERS,
    DEFAULT_TABLE,
    CounterLayout,
    CpuNodes,
    OpenSample,
)
from .table_writer import TableWriter

#: where the replicas and their socket live (the shim's UNICACHE_REPLICAS default)
DEFAULT_REPLICAS = "/run/unicache/replicas"

#: the agent's niceness: on a busy vCPU its round (harvest, report, table) runs in what
#: the guest's own threads leave, so the agent never adds to their latency
DEFAULT_NICE = 19


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad flag reported as every user error is: one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _open_sample(text: str) -> OpenSample:
    """``--open-sample BYTES:SHIFT`` (argparse's one clear line and exit 2 otherwise)."""
    try:
        size, shift = text.split(":")
        return OpenSample(int(size), int(shift))
    except (ValueError, ShmError) as err:
        raise argparse.ArgumentTypeError(
            f"takes BYTES:SHIFT, files up to 4 GiB and a shift of 0 to 15, not {text!r}"
        ) from err


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="unicache-agent",
                                 description="unicache guest agent: reports file-chunk reads "
                                             "to the host, publishes its placement tables.",
                 epilog="unicache-agent scope add|remove|list|off|on: where the shim "
                        "libunicache.so runs (unicache-agent scope --help)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--port", default=PORT_NAME,
                       help="virtio-serial port name (default %(default)s)")
    where.add_argument("--device", help="open this device instead of finding the port by name")
    where.add_argument("--socket", help="talk over this unix socket (tests)")
    where.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (tests)")
    ap.add_argument("--table", default=os.environ.get("UNICACHE_TABLE", DEFAULT_TABLE),
                    help="shared placement table file (env UNICACHE_TABLE)")
    ap.add_argument("--counters", default=os.environ.get("UNICACHE_COUNTERS", DEFAULT_COUNTERS),
                    help="counters directory: the shim of each user counts into a file of "
                         "its own there, <dir>/<uid> (env UNICACHE_COUNTERS)")
    ap.add_argument("--shim", default=os.environ.get("UNICACHE_SHIM", DEFAULT_SHIM),
                    help="the guest's libunicache.so: the agent announces the colors and "
                         "replicas capabilities only when it enforces them (env UNICACHE_SHIM)")
    ap.add_argument("--replicas", default=os.environ.get("UNICACHE_REPLICAS", DEFAULT_REPLICAS),
                    help="directory of the guest-wide replicas (NCC): one tmpfs bound to "
                         "each node inside, and the socket processes ask on "
                         "(env UNICACHE_REPLICAS)")
    ap.add_argument("--replica-budget", type=float, default=DEFAULT_BUDGET_RATIO * 100,
                    metavar="PERCENT",
                    help="replica memory per node, in %% of the node's memory "
                         "(default %(default)g; 0 serves no replicas)")
    ap.add_argument("--open-sample", type=_open_sample, metavar="BYTES:SHIFT",
                    default=AGENT_OPEN_SAMPLE,
                    help="which opens the shims count: one in 2^SHIFT read-only opens of "
                         "files up to BYTES, its counts scaled by 2^SHIFT (default "
                         f"{AGENT_OPEN_SAMPLE.max_bytes}:{AGENT_OPEN_SAMPLE.shift}: every open "
                         "counted whole; 262144:3 spares a program of many small files most "
                         "of the shim's per-file work, and hides from SCU part of the small "
                         "files a VM re-reads: docs/agent.md \"The open sample\")")
    ap.add_argument("--fanotify", action="store_true",
                    help="also capture file reads of processes without the shim (needs root)")
    ap.add_argument("--nice", type=int, default=DEFAULT_NICE, choices=range(0, 20),
                    metavar="0-19",
                    help="the agent's CPU niceness (default %(default)s: its reports and tables "
                         "wait for the guest's own work, never the other way round; 0 keeps "
                         "the caller's)")
    ap.add_argument("--duration", type=float, default=0.0,
                    help="stop after this many seconds (0: run until signalled)")
    ap.add_argument("--log-level", default="info",
                    choices=["debug", "info", "warning", "error"])
    ap.add_argument("--version", action="version", version=f"unicache-agent {__version__}")
    return ap


#: why a path the user named cannot be used: theirs to fix (exit 2), not a failure while
#: running (a full /dev/shm, a directory that keeps being replaced: exit 1)
_PATH_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM,
                          errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP})


def _raise_if_unusable(err: ShmError, flag: str, path: str) -> None:
    """Raise ``err`` as a :class:`UsageError` naming ``flag`` when the path itself cannot be
    used (its cause is an ``OSError`` with an errno of :data:`_PATH_ERRNOS`).

    :raises UsageError: then; otherwise returns, and the caller re-raises ``err``.
    """
    cause = err.__cause__
    if isinstance(cause, OSError) and cause.errno in _PATH_ERRNOS:
        raise UsageError(f"{flag} {path}: {err}") from err


def _replica_server(args: argparse.Namespace, salt: int,
                    nodes: Tuple[int, ...]) -> Optional[ReplicaService]:
    """The guest-wide replica store and its socket, or None (budget 0, one NUMA node: NCC
    never replicates there, or it cannot be set up: one warning, and every read is served
    by the page cache)."""
    if args.replica_budget <= 0:
        return None
    if len(nodes) < 2:
        logging.getLogger("unicache_agent").info("one NUMA node: no replica store")
        return None
    try:
        store = ReplicaStore(args.replicas, node_totals(node_memory(nodes=nodes), nodes), salt,
                             budget_ratio=args.replica_budget / 100)
        return ReplicaService(ReplicaServer(store, os.path.join(args.replicas, "socket")))
    except OSError as err:
        logging.getLogger("unicache_agent").warning(
            "replicas off: cannot set up %s: %s", args.replicas, err)
        return None


def main(argv: Optional[List[str]] = None) -> int:
    """Run the agent.

    :param argv: arguments (default ``sys.argv[1:]``).
    :returns: the exit status: 0 stopped cleanly; 2 what the user gave cannot be used (a
        flag, a file it names), 1 any other error; either with one line on stderr. A bad
        flag exits 2 inside argparse, also with one line.
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["scope"]:  # a command of its own: the agent's flags do not apply
        from .scope import main as scope_main

        return scope_main(argv[1:])
    args = _args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="unicache-agent: %(levelname)s %(message)s", stream=sys.stderr)
    stop = {"now": False}

    def _stop(_sig: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        _serve(args, stop)
    except UsageError as err:
        print(f"unicache-agent: {err}", file=sys.stderr)
        return 2
    except AgentError as err:  # a failure while running (the port, the shared memory)
        print(f"unicache-agent: {err}", file=sys.stderr)
        return 1
    return 0


def _args(argv: List[str]) -> argparse.Namespace:
    """The agent's flags, their bounds checked (argparse's one line and exit 2)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.duration < 0:
        parser.error(f"argument --duration: must be 0 or more, not {args.duration:g}")
    if not 0 <= args.replica_budget <= 50:
        parser.error(f"argument --replica-budget: must be 0 to 50 (%), not "
                     f"{args.replica_budget:g}")
    return args


def _transport(args: argparse.Namespace) -> Transport:
    """Where the host is: stdio, a unix socket, or the virtio-serial port."""
    if args.stdio:
        return FdTransport(sys.stdin.fileno(), sys.stdout.fileno())
    if args.socket:
        return SocketTransport(args.socket)
    return PortTransport(args.port, args.device)


def _shared(args: argparse.Namespace, layout: CounterLayout,
            cpu_nodes: CpuNodes) -> Tuple[CounterHarvester, TableWriter]:
    """The counters directory, then the table (a shim that maps the table finds where to
    count); a path the user named that cannot be used is a UsageError."""
    try:
        counters = CounterHarvester(args.counters, layout, cpu_nodes)
    except ShmError as err:
        _raise_if_unusable(err, "--counters", args.counters)
        raise
    try:
        table = TableWriter(args.table, counters=layout, cpu_nodes=cpu_nodes,
                            sample=args.open_sample)
    except ShmError as err:
        _raise_if_unusable(err, "--table", args.table)
        raise
    return counters, table


def _serve(args: argparse.Namespace, stop: Dict[str, bool]) -> None:
    """The agent's life: its files, the replicas' process, the optional fanotify capture,
    and the loop until stopped or ``--duration`` is over; nothing left behind."""
    transport = _transport(args)
    _vcpus, nodes = guest_topology()
    layout = CounterLayout.of()
    # one map: the table publishes it to the shims, the harvester sums reads by it
    cpu_nodes = CpuNodes.from_sysfs()
    counters, table = _shared(args, layout, cpu_nodes)
    replicas = _replica_server(args, table.salt, nodes)

    def on_modify(file_id: int) -> None:
        counters.bump_generation(file_id)
        if replicas is not None:
            replicas.call("drop_file", file_id)

    capture = None
    if args.fanotify:
        from .fanotify import FanotifyCapture

        try:
            # writes of processes without the shim invalidate replicas (generations)
            capture = FanotifyCapture(table.salt, on_modify=on_modify)
        except AgentError as err:
            logging.getLogger("unicache_agent").warning(
                "%s; file-level capture is off (shim counts only)", err)
    agent = Agent(transport, table, counters, capture=capture,
                  extra_caps=shim_caps(args.shim), replicas=replicas)
    end = time.monotonic() + args.duration if args.duration > 0 else None
    if replicas is not None:
        # the replicas' process keeps the priority the agent started with (answers
        # are awaited by the processes that asked: replica_service.py) ...
        replicas.start()
    if args.nice:
        # ... and the agent is niced (before any thread starts: on Linux a thread's
        # nice value is its own, inherited by the threads it starts)
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)

    def should_stop() -> bool:
        return stop["now"] or (end is not None and time.monotonic() >= end)

    try:
        agent.run(should_stop)
    finally:
        if replicas is not None:  # replicas dropped, mounts undone: nothing left behind
            replicas.close(unmount=True)
    if capture is not None:
        capture.close()

if __name__ == "__main__":
    sys.exit(main())
