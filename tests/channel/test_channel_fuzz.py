"""Fuzz target for the host parser and session: no exception escapes, memory stays bounded.

Two engines: hypothesis (structured, UNICACHE_FUZZ_EXAMPLES examples, default 100) and a
fast mutation loop (UNICACHE_FUZZ_INPUTS inputs, default 20000). CI runs both briefly;
``make agent-fuzz`` runs the mutation loop over 1,000,000 inputs.
"""

from __future__ import annotations

import json
import os
import random
import tracemalloc
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unicache.channel import protocol as p
from unicache.channel.session import GuestSession

EXAMPLES = int(os.environ.get("UNICACHE_FUZZ_EXAMPLES", "100"))
INPUTS = int(os.environ.get("UNICACHE_FUZZ_INPUTS", "20000"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))

_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                     st.floats(allow_nan=False), st.text(max_size=20))
_json = st.recursive(_scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=6), st.dictionaries(st.text(max_size=8), kids, max_size=6)),
    max_leaves=40)
_types = st.sampled_from([*p.GUEST_TYPES, *p.HOST_TYPES, "x", ""])
_field = st.sampled_from(["seq", "interval_s", "vcpus", "nodes", "chunks", "files", "health",
                          "agent", "versions", "caps", "id", "kind", "message", "version",
                          "entries", "node_memory"])
_near_chunk = st.lists(st.one_of(st.just("ab"), st.text(max_size=17), st.integers(-5, 2**64),
                                 st.lists(st.lists(st.integers(-2, 300), max_size=3),
                                          max_size=4)), min_size=0, max_size=9)


@st.composite
def near_valid(draw: st.DrawFn) -> bytes:
    """Messages shaped like real ones with a few fields replaced by anything."""
    msg: dict[str, Any] = {"v": draw(st.sampled_from([1, 1, 1, 2, "1"])), "type": draw(_types),
                           "seq": 1, "interval_s": 1.0, "vcpus": 2, "nodes": [0],
                           "agent": "a", "versions": [1], "caps": ["report"], "id": 3,
                           "chunks": draw(st.lists(_near_chunk, max_size=4))}
    for _ in range(draw(st.integers(0, 3))):
        msg[draw(_field)] = draw(_json)
    return json.dumps(msg).encode() + b"\n"


_chunks = st.lists(st.one_of(
    near_valid(),
    st.binary(max_size=300),
    _json.map(lambda o: json.dumps(o).encode() + b"\n"),
    st.sampled_from([b"\n", b"\xff", b"{", b"[" * 3000 + b"\n", b"x" * 140000 + b"\n",
                     b'{"v":1,"type":"hello","agent":"a","versions":[1],"caps":[],'
                     b'"vcpus":1,"nodes":[]}\n'])), max_size=8)


@FUZZ
@given(_chunks, st.floats(min_value=0, max_value=1e6))
def test_session_never_raises_and_stays_bounded(pieces: list[bytes], t0: float) -> None:
    s = GuestSession("fuzz")
    s.connected()
    for i, piece in enumerate(pieces):
        res = s.feed(piece, t0 + i * 0.01)
        assert all(len(x) <= p.MAX_LINE_BYTES + 1 for x in res.outgoing)
        assert s.framer.buffered <= p.MAX_LINE_BYTES
        assert s.pending_chunks <= p.MAX_CHUNKS_PER_VM
    s.drain()


@FUZZ
@given(st.one_of(near_valid(), st.binary(max_size=400)))
def test_parser_raises_only_protocol_errors(data: bytes) -> None:
    try:
        p.parse_guest_line(data.rstrip(b"\n"))
    except p.GuestProtocolError as err:
        assert err.kind in p.ERROR_KINDS


def test_memory_bounded_over_many_inputs() -> None:
    s = GuestSession("fuzz")
    s.connected()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    pieces = [b"x" * 50000, b"\n", b"{" * 2000 + b"\n", b'{"v":1}\n' * 100, bytes(range(256))]
    for i in range(3000):
        s.feed(pieces[i % len(pieces)], i * 0.001)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert used < 4 * 1024 * 1024


_SEEDS = [
    b'{"v":1,"type":"hello","seq":0,"agent":"a","versions":[1],"caps":["report"],"vcpus":2,'
    b'"nodes":[0]}',
    b'{"v":1,"type":"report","seq":1,"interval_s":1.0,"vcpus":2,"nodes":[0],"chunks":'
    b'[["ab",3,100,1,0,[[1,100]]],["cd",0,5,1,1,[]]],"files":[["ef",2,0]],"health":'
    b'{"uptime_s":1.5,"shim_clients":1,"dropped":0,"errors":0}}',
    b'{"v":1,"type":"report","seq":2,"interval_s":1.0,"vcpus":2,"nodes":[0,1],"chunks":'
    b'[["ab",3,100,1,0,[[1,100]],1,[[0,3],[1,2]]],["cd",0,5,1,1,[],-1,[]],["ef",1,5,1,0,[],0]],'
    b'"files":[["ef",2,1]],"node_memory":[[0,100,200],[1,0,50]]}',
    b'{"v":1,"type":"hello","seq":0,"agent":"a","versions":[1],"caps":["report","colors",'
    b'"replicas"],"vcpus":2,"nodes":[0,1]}',
    b'{"v":1,"type":"applied","version":3,"entries":1}',
    b'{"v":1,"type":"error","kind":"bad-field","message":"m","seq":4}',
    b'{"v":1,"type":"sync","id":9}',
]
_TOKENS = [b"{", b"}", b"[", b"]", b",", b":", b'"', b"-1", b"1e999", b"NaN", b"null", b"true",
           b"18446744073709551616", b"\\u0000", b"\xff", b"\n", b"0" * 5000, b"[" * 50]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        pos = rng.randrange(len(b) + 1)
        if op == 0 and b:
            del b[pos:pos + rng.randint(1, 8)]
        elif op == 1:
            b[pos:pos] = rng.choice(_TOKENS)
        elif op == 2 and b:
            b[min(pos, len(b) - 1)] = rng.randrange(256)
        else:
            b[pos:pos] = rng.choice(_SEEDS)
    return bytes(b)


def test_mutated_messages_never_raise() -> None:
    rng = random.Random(1234)
    s = GuestSession("fuzz")
    s.connected()
    t = 0.0
    for i in range(INPUTS):
        data = _mutate(rng, rng.choice(_SEEDS))
        try:
            p.parse_guest_line(data)
        except p.GuestProtocolError as err:
            assert err.kind in p.ERROR_KINDS
        if i % 8 == 0:
            t += 0.05
            s.feed(data + b"\n", t)
            assert s.framer.buffered <= p.MAX_LINE_BYTES
            assert s.pending_chunks <= p.MAX_CHUNKS_PER_VM
            if i % 4096 == 0:
                s.drain()
