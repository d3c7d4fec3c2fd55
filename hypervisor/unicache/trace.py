"""Observation traces: JSON lines of VM events, counter samples and guest reports.

The schema is in docs/trace.md. A malformed line is reported with its line number and
skipped; a file that cannot be read at all is a :class:`~unicache.errors.TraceError`.
Everything read here is bounded like the live channel bounds guest input.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unicache.cpulist import parse_list
from unicache.errors import ConfigError, TraceError
from unicache.model import (
    ID_SPACE,
    MAX_FILE_ID,
    ChunkAccess,
    ChunkId,
    CounterSample,
    CounterSource,
    GuestNode,
    GuestReport,
    NodeMemory,
    Observation,
    VcpuId,
    Vm,
)

#: trace format version this reader understands
TRACE_VERSION = 1
#: bounds on a trace line, as for guest messages
MAX_LINE_BYTES = 1 << 20
MAX_CHUNKS_PER_REPORT = 4096
MAX_VCPUS = 1024
MAX_NODES = 64
MAX_COLORS = 1 << 16


@dataclass(frozen=True, slots=True)
class TraceHeader:
    """The optional first line: which machine and unification the trace was made for.

    :param model: machine model name.
    :param unify: unification level.
    :param interval_s: seconds per tick.
    """

    model: str | None = None
    unify: str | None = None
    interval_s: float = 1.0


@dataclass(frozen=True, slots=True)
class VmStart:
    """A VM appears (``type: vm``), with its guest NUMA nodes if the trace gives them."""

    name: str
    vcpus: int
    memory_bytes: int
    nodes: tuple[GuestNode, ...] = ()


@dataclass(frozen=True, slots=True)
class VmStop:
    """A VM goes away (``type: vm-stop``)."""

    name: str


TraceEvent = VmStart | VmStop | CounterSample | GuestReport


@dataclass(slots=True)
class Trace:
    """A parsed trace: events per tick, plus the lines that were skipped.

    :param header: the header (defaults if absent).
    :param ticks: tick -> events in file order.
    :param skipped: ``(line number, why)`` for every malformed line.
    """

    header: TraceHeader = field(default_factory=TraceHeader)
    ticks: dict[int, list[TraceEvent]] = field(default_factory=dict)
    skipped: list[tuple[int, str]] = field(default_factory=list)


class _Bad(Exception):
    """A malformed line (internal: becomes an entry in ``Trace.skipped``)."""


def read_trace(path: Path) -> Trace:
    """Read a trace file.

    :param path: the JSON-lines file.
    :returns: the parsed trace; malformed lines are in ``skipped``.
    :raises TraceError: if the file cannot be opened or read.
    """
    try:
        handle = path.open("rb")
    except OSError as err:
        raise TraceError(f"cannot read trace {path}") from err
    trace = Trace()
    with handle:
        try:
            for number, raw in enumerate(_lines(handle), start=1):
                _read_line(trace, number, raw)
        except OSError as err:
            raise TraceError(f"cannot read trace {path}") from err
    return trace


def _lines(handle: Any) -> Iterator[bytes]:
    while True:
        raw: bytes = handle.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            # swallow the rest of the over-long line so the next one starts clean
            while raw and not raw.endswith(b"\n"):
                raw = handle.readline(MAX_LINE_BYTES)
            yield b"\x00too-long"
            continue
        yield raw


def _read_line(trace: Trace, number: int, raw: bytes) -> None:
    if raw == b"\x00too-long":
        trace.skipped.append((number, f"line longer than {MAX_LINE_BYTES} bytes"))
        return
    text = raw.strip()
    if not text or text.startswith(b"#"):
        return
    try:
        obj = json.loads(text)
        if not isinstance(obj, dict):
            raise _Bad("not a JSON object")
        kind = obj.get("type")
        if kind == "header":
            version = _int(obj, "version", 1)
            if version != TRACE_VERSION:
                raise _Bad(f"trace version {version} (this reader knows {TRACE_VERSION})")
            trace.header = TraceHeader(
                _opt_str(obj, "model"), _opt_str(obj, "unify"), _float(obj, "interval_s", 1.0)
            )
            return
        tick = _int(obj, "tick")
        event = _event(kind, obj)
    except (_Bad, ValueError, TypeError, KeyError) as err:
        trace.skipped.append((number, str(err) or type(err).__name__))
        return
    trace.ticks.setdefault(tick, []).append(event)


def _event(kind: object, obj: dict[str, Any]) -> TraceEvent:
    if kind == "vm":
        vcpus = _int(obj, "vcpus")
        if not 1 <= vcpus <= MAX_VCPUS:
            raise _Bad(f"vcpus {vcpus} out of range 1..{MAX_VCPUS}")
        memory = _int(obj, "memory_mib", 0) * 1024 * 1024
        return VmStart(_str(obj, "name"), vcpus, memory, _nodes(obj.get("nodes", []), vcpus))
    if kind == "vm-stop":
        return VmStop(_str(obj, "name"))
    if kind == "sample":
        return _sample(obj)
    if kind == "report":
        return _report(obj)
    raise _Bad(f"unknown type {kind!r} (expected header, vm, vm-stop, sample or report)")


def _sample(obj: dict[str, Any]) -> CounterSample:
    levels = obj.get("level_misses")
    if levels is not None and (
        not isinstance(levels, list) or not all(isinstance(n, int) and n >= 0 for n in levels)
    ):
        raise _Bad("level_misses must be a list of non-negative integers")
    busy = _float(obj, "busy", 0.0)
    if not 0.0 <= busy <= 1.0:
        raise _Bad(f"busy {busy} out of range 0..1")
    return CounterSample(
        vcpu=VcpuId(_str(obj, "vm"), _int(obj, "vcpu")),
        source=CounterSource(obj.get("source", "trace")),
        cycles=_opt_int(obj, "cycles"),
        instructions=_opt_int(obj, "instructions"),
        llc_references=_opt_int(obj, "llc_references"),
        llc_misses=_opt_int(obj, "llc_misses"),
        level_misses=None if levels is None else tuple(levels),
        busy=busy,
        guest_bytes=_opt_int(obj, "guest_bytes"),
    )


def _report(obj: dict[str, Any]) -> GuestReport:
    chunks = obj.get("chunks")
    if not isinstance(chunks, list):
        raise _Bad("report needs a 'chunks' list")
    if len(chunks) > MAX_CHUNKS_PER_REPORT:
        raise _Bad(f"{len(chunks)} chunks in one report (limit {MAX_CHUNKS_PER_REPORT})")
    accesses = []
    for item in chunks:
        if not isinstance(item, dict):
            raise _Bad("chunk entries must be objects")
        file_id = int(str(item["file"]), 16)
        if not 0 <= file_id <= MAX_FILE_ID:
            raise _Bad(f"file id {item['file']!r} is not an unsigned 64-bit hex number")
        pairs = item.get("vcpu_bytes", [])
        if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and x >= 0 for x in p)
            for p in pairs
        ):
            raise _Bad("vcpu_bytes must be a list of [vcpu, bytes] pairs")
        home = item.get("home_node", -1)
        if home != -1 and (not isinstance(home, int) or not 0 <= home < MAX_NODES):
            raise _Bad(f"home_node must be -1 or a node id below {MAX_NODES}")
        accesses.append(
            ChunkAccess(
                ChunkId(file_id, _int(item, "chunk")),
                _int(item, "bytes"),
                _int(item, "reads"),
                _int(item, "writes", 0),
                tuple(sorted((p[0], p[1]) for p in pairs)),
                home_node=int(home),
                node_reads=_pairs(item.get("node_reads", []), "node_reads"),
            )
        )
    memory = obj.get("node_memory", [])
    if not isinstance(memory, list) or len(memory) > MAX_NODES or not all(
        isinstance(m, list) and len(m) == 3 and all(_natural(x) for x in m) for m in memory
    ):
        raise _Bad(f"node_memory must be at most {MAX_NODES} [node, free, total] triples")
    modified = obj.get("modified_files", [])
    if not isinstance(modified, list) or len(modified) > MAX_CHUNKS_PER_REPORT:
        raise _Bad("modified_files must be a list of hex file ids")
    return GuestReport(
        vm=_str(obj, "vm"),
        seq=_int(obj, "seq", 0),
        interval_s=_float(obj, "interval_s", 1.0),
        chunks=tuple(accesses),
        guest_nodes=tuple(sorted({n for a in accesses for n, _ in a.node_reads})),
        node_memory=tuple(NodeMemory(m[0], m[1], m[2]) for m in memory),
        modified_files=frozenset(_file_id(f) for f in modified),
        id_space=_id_space(obj.get("id_space", "")),
    )


def _id_space(value: object) -> str:
    if value == "":
        return ""
    if not isinstance(value, str) or not ID_SPACE.fullmatch(value):
        raise _Bad(f"id_space {value!r} is not 16 lowercase hex digits")
    return value


def _natural(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _file_id(text: object) -> int:
    try:
        value = int(str(text), 16)
    except ValueError:
        raise _Bad(f"file id {text!r} is not a hex number") from None
    if not 0 <= value <= MAX_FILE_ID:
        raise _Bad(f"file id {text!r} is not an unsigned 64-bit hex number")
    return value


def _pairs(value: object, name: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list) or len(value) > MAX_NODES or not all(
        isinstance(p, list) and len(p) == 2 and all(_natural(x) for x in p) for p in value
    ):
        raise _Bad(f"{name} must be at most {MAX_NODES} [node, count] pairs")
    if any(p[0] >= MAX_NODES for p in value):
        raise _Bad(f"{name}: node ids must be below {MAX_NODES}")
    return tuple(sorted((p[0], p[1]) for p in value))


def _nodes(value: object, vcpus: int) -> tuple[GuestNode, ...]:
    """``nodes`` of a ``vm`` line: ``{node, vcpus, memory_mib, colors}`` objects."""
    if not isinstance(value, list) or len(value) > MAX_NODES:
        raise _Bad(f"nodes must be a list of at most {MAX_NODES} objects")
    nodes = []
    for item in value:
        if not isinstance(item, dict):
            raise _Bad("nodes entries must be objects")
        try:
            cpus = parse_list(str(item.get("vcpus", "")))
            colors = parse_list(str(item.get("colors", "")))
        except ConfigError as err:
            raise _Bad(f"nodes: {err}") from None
        node = _int(item, "node")
        if node >= MAX_NODES or any(c >= vcpus for c in cpus) or any(
            c >= MAX_COLORS for c in colors
        ):
            raise _Bad(f"nodes: node {node} out of range, or a vCPU or color that does not exist")
        nodes.append(GuestNode(node, cpus, _int(item, "memory_mib", 0) << 20, colors))
    if len({n.node for n in nodes}) != len(nodes):
        raise _Bad("nodes: a node id appears twice")
    return tuple(sorted(nodes, key=lambda n: n.node))


def _int(obj: dict[str, Any], key: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{key!r} must be an integer")
    if value < 0:
        raise _Bad(f"{key!r} must not be negative")
    return int(value)


def _opt_int(obj: dict[str, Any], key: str) -> int | None:
    return None if obj.get(key) is None else _int(obj, key)


def _float(obj: dict[str, Any], key: str, default: float) -> float:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(f"{key!r} must be a number")
    return float(value)


def _str(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value or len(value) > 64:
        raise _Bad(f"{key!r} must be a non-empty string of at most 64 characters")
    return value


def _opt_str(obj: dict[str, Any], key: str) -> str | None:
    return None if obj.get(key) is None else _str(obj, key)


class TraceWriter:
    """Observations as trace lines (docs/trace.md): the reader's schema, written.

    A recorded run (the simulator's rounds, ``tools/gen_traces.py``) becomes a trace that
    ``unicache replay`` feeds to the same policies. A VM's ``vm`` line is written at the
    first tick it appears (again if its shape changes), a ``vm-stop`` when it is gone.

    :param model: the machine model the trace was made for (the header's ``model``).
    :param unify: the unification level (the header's ``unify``).
    :param interval_s: seconds per tick (the header's ``interval_s``).
    """

    def __init__(self, model: str | None, unify: str | None, interval_s: float = 1.0) -> None:
        header: dict[str, Any] = {"type": "header", "version": TRACE_VERSION}
        if model is not None:
            header["model"] = model
        if unify is not None:
            header["unify"] = unify
        header["interval_s"] = interval_s
        #: the lines written so far, in order
        self.lines: list[dict[str, Any]] = [header]
        self._vms: dict[str, dict[str, Any]] = {}

    def add(self, obs: Observation, tick: int | None = None) -> None:
        """One observation's lines, at ``tick`` (default: the observation's own)."""
        at = obs.tick if tick is None else tick
        seen = set()
        for vm in obs.vms:
            seen.add(vm.name)
            line = _vm_line(vm)
            if self._vms.get(vm.name) != line:
                self._vms[vm.name] = line
                self.lines.append({"type": "vm", "tick": at, **line})
        for gone in sorted(set(self._vms) - seen):
            del self._vms[gone]
            self.lines.append({"type": "vm-stop", "tick": at, "name": gone})
        self.lines.extend(_sample_line(at, s) for s in obs.samples)
        self.lines.extend(_report_line(at, r) for r in obs.reports)

    def write(self, path: Path) -> None:
        """Write the lines, one compact JSON object a line."""
        with path.open("w") as out:
            for line in self.lines:
                out.write(json.dumps(line, separators=(",", ":")) + "\n")


def _list_text(values: frozenset[int]) -> str:
    return ",".join(str(v) for v in sorted(values))


def _vm_line(vm: Vm) -> dict[str, Any]:
    line: dict[str, Any] = {
        "name": vm.name, "vcpus": len(vm.vcpus), "memory_mib": vm.memory_bytes >> 20,
    }
    if vm.nodes:
        nodes = []
        for n in vm.nodes:
            node: dict[str, Any] = {
                "node": n.node, "vcpus": _list_text(n.vcpus), "memory_mib": n.memory_bytes >> 20,
            }
            if n.colors:
                node["colors"] = _list_text(n.colors)
            nodes.append(node)
        line["nodes"] = nodes
    return line


def _sample_line(tick: int, s: CounterSample) -> dict[str, Any]:
    line: dict[str, Any] = {
        "type": "sample", "tick": tick, "vm": s.vcpu.vm, "vcpu": s.vcpu.index,
        "source": s.source.value,
    }
    for key in ("cycles", "instructions", "llc_references", "llc_misses", "guest_bytes"):
        value = getattr(s, key)
        if value is not None:
            line[key] = value
    if s.level_misses is not None:
        line["level_misses"] = list(s.level_misses)
    line["busy"] = round(s.busy, 4)
    return line


def _report_line(tick: int, r: GuestReport) -> dict[str, Any]:
    chunks = []
    for a in r.chunks:
        chunk: dict[str, Any] = {
            "file": f"{a.chunk.file_id:x}", "chunk": a.chunk.index, "bytes": a.bytes_read,
            "reads": a.reads, "writes": a.writes, "vcpu_bytes": [list(p) for p in a.vcpu_bytes],
        }
        if a.home_node != -1:
            chunk["home_node"] = a.home_node
        if a.node_reads:
            chunk["node_reads"] = [list(p) for p in a.node_reads]
        chunks.append(chunk)
    line: dict[str, Any] = {
        "type": "report", "tick": tick, "vm": r.vm, "seq": r.seq,
        "interval_s": round(r.interval_s, 6), "chunks": chunks,
    }
    if r.node_memory:
        line["node_memory"] = [[m.node, m.free_bytes, m.total_bytes] for m in r.node_memory]
    if r.modified_files:
        line["modified_files"] = [f"{f:x}" for f in sorted(r.modified_files)]
    if r.id_space:
        line["id_space"] = r.id_space
    return line
