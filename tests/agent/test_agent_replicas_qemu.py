"""Guest-wide NCC replicas in a real two-node guest: one copy per node, served to every
process and every read call a replica serves (issue #20; the vectored reads are never
served since issue #33: the shim does not read an iovec array before the call).

The guest (QEMU TCG, the image of ``make image``) has two nodes of 256 MiB with one vCPU
each. The host publishes, through the real channel server, a table replicating every chunk
of a 1 MiB guest file on both nodes. In the guest (images/scripts/replica_readers.py), for
each read call (read, pread, readv, preadv, sendfile) three reader processes per node, under
the shim (default settings: it never waits for the agent more than 5 ms), pinned to their
node's CPU, read inside every chunk pass after pass for 3 s (and, for read, pread and
sendfile, on until five passes after every chunk was served) and compare with the plain
calls. Checked: every reader read the right bytes; every reader of read, pread and sendfile
mapped its node's replicas and was served every chunk, and once a chunk was served, every
later read of it; no readv or preadv was served (the reader's own count: reads that made no read
system call); the agent's store holds one file per chunk on each node, and
its tmpfs (mounted with ``mpol=bind:N``) exactly one copy's bytes, however many processes
read; each reader's mappings of a node's replicas have their pages on that node.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from unicache.channel import ChannelParams, ChannelServer
from unicache.model import ChunkId, PlacementEntry, PlacementTable, PublishPlacement
from unicache.policy.ncc.memory import replica_bytes

from tests.agent.test_agent_numa_qemu import _guest_run_stdin, start_numa_guest, write_data
from tests.agent.test_agent_qemu import guest_run

READERS = (Path(__file__).resolve().parents[2] / "images" / "scripts"
           / "replica_readers.py").read_text()
DATA = "/var/tmp/colored"  # write_data's file: on the ext4 root (/tmp is a tmpfs in the guest)
SIZE = 1 << 20
CHUNK = 262144
PROCS = 3
#: the read calls a replica serves (the vectored ones never: docs/agent.md)
SERVED = ("read", "pread", "sendfile")
NUMA = ["-object", "memory-backend-ram,id=m0,size=256M",
        "-numa", "node,nodeid=0,cpus=0,memdev=m0",
        "-object", "memory-backend-ram,id=m1,size=256M",
        "-numa", "node,nodeid=1,cpus=1,memdev=m1"]


def test_one_replica_per_node_serves_every_process_and_call(tmp_path: Path) -> None:
    async def run(ctl: Path, argv: list[str], stdin: str | None = None,
                  timeout: float = 120) -> dict[str, object]:
        if stdin is None:
            res = await guest_run(ctl, argv, timeout=timeout)
        else:
            res = await _guest_run_stdin(ctl, argv, stdin)
        assert res["exit"] == 0, res
        return res

    async def main() -> dict[str, object]:
        server = ChannelServer(tmp_path, params=ChannelParams(chunk_size=CHUNK,
                                                              report_interval_s=1.0))
        t0 = time.monotonic()
        qemu, ctl = await start_numa_guest(server, "r", tmp_path, NUMA)
        try:
            fid = await write_data(ctl, SIZE)
            entries = tuple(PlacementEntry(ChunkId(fid, i), frozenset(), True, 0,
                                           replica_nodes=frozenset({0, 1}))
                            for i in range(SIZE // CHUNK))
            server.publish(PublishPlacement("r", PlacementTable("r", 3, CHUNK, 65536,
                                                                entries), "test"))
            while (server.status()[0].applied_version != 3
                   and time.monotonic() - t0 < 400):
                await asyncio.sleep(0.25)
            assert server.status()[0].applied_version == 3
            await run(ctl, ["sh", "-c", "cat > /var/tmp/replica_readers.py"], stdin=READERS)
            res = await run(ctl, ["python3", "/var/tmp/replica_readers.py", "main", DATA,
                                  str(CHUNK), str(PROCS)], timeout=900)
            return dict(json.loads(str(res["stdout"])))
        finally:
            if qemu.returncode is None:
                qemu.terminate()
            await qemu.wait()
            await server.close()

    got = asyncio.run(main())
    print(json.dumps(got, indent=1))
    readers = got["readers"]
    assert isinstance(readers, list) and len(readers) == 5 * 2 * PROCS
    assert all(r.get("bad") == 0 for r in readers), readers  # byte-identical, no crash
    kinds = got["kinds"]
    assert isinstance(kinds, dict)
    # every call a replica serves, served (the shims' statistics); the vectored reads
    # never (the shim does not read an iovec array before the call), compared all the same
    for kind, serves in kinds.items():
        if kind in SERVED:
            assert serves >= 2 * PROCS * SIZE // CHUNK, (kind, serves)
        else:
            assert serves == 0, (kind, serves)
    # every process, on both nodes, served every chunk (its own count: reads that made no
    # read system call), and from then on every read of it: a process waits for nothing
    # but the agent's first answer (the agent answers from a process of normal priority)
    for r in readers:
        if r["kind"] not in SERVED:
            assert r["served"] == 0 and r["first"] == [None] * (SIZE // CHUNK), r
            continue
        assert None not in r["first"], r
        assert r["lapses"] == 0, r
        assert r["passes"] - max(r["first"]) > 5, r
    # one copy per node, whoever read it: 4 files, 4 replicas' bytes, on each node
    store = got["store"]
    assert isinstance(store, dict)
    for node in ("node0", "node1"):
        assert store[node] == {"files": SIZE // CHUNK,
                               "bytes": SIZE // CHUNK * replica_bytes(CHUNK)}, store
    mounts = got["mounts"]
    assert isinstance(mounts, list)
    assert sorted(m.split("mpol=")[1].split(",")[0] for m in mounts) == ["bind:0", "bind:1"]
    # every process mapped its own node's replicas (the shim maps a replica to serve from
    # it), whose pages are on that node only
    for r in readers:
        if r["kind"] not in SERVED:
            continue
        assert list(r["pages"]) == [f"node{r['node']}"], r
        for where, pages in r["pages"].items():
            assert set(pages) == {where[4:]}, r
