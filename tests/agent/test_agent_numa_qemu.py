"""SRM-buffer colors in a real two-node guest: the shim puts a chunk's page cache on its node.

The guest (QEMU TCG, the image of ``make image``) has node 0 with both vCPUs and 384 MiB,
and node 1 with 128 MiB and no CPU (a memory-only node, as colored memory appears in a
guest). The host publishes, through the real channel server, a table giving every chunk of
a guest file the color node 1; the guest reads the file with ``cat`` under the shim after
dropping its caches; then the guest maps the file and asks ``move_pages`` (no target nodes)
for the node of every resident page-cache page. Without the color entry the same read
leaves the pages on node 0. The guest's reports carry the chunks' per-node reads and node
memory back to the host, but no home node: the agent reports homes (and the shims look them
up) only where NCC runs, with the `replicas` capability and two nodes with CPUs.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from unicache.channel import ChannelParams, ChannelServer
from unicache.model import ChunkId, GuestReport, PlacementEntry, PlacementTable, PublishPlacement

from tests.agent.test_agent_qemu import _argv, guest_run

#: prints the guest node of each resident page-cache page of a file (run in the guest)
PAGE_NODES = (Path(__file__).resolve().parents[2] / "images" / "scripts"
              / "page_nodes.py").read_text()
SHIM = "/usr/lib/unicache-agent/libunicache.so"
DATA = "/var/tmp/colored"  # on the ext4 root: /tmp is a tmpfs in the test guest
SIZE = 8 << 20
CHUNK = 262144
NUMA = ["-object", "memory-backend-ram,id=m0,size=384M",
        "-numa", "node,nodeid=0,cpus=0-1,memdev=m0",
        "-object", "memory-backend-ram,id=m1,size=128M",
        "-numa", "node,nodeid=1,memdev=m1"]


#: runs in the guest: the file id the shim and agent give DATA (the table's salt)
FILE_ID = (
    "import os, struct, sys; sys.path.insert(0, '/usr/lib/unicache-agent'); "
    "from unicache_agent.shm import file_id_of; "
    "salt = struct.unpack('<Q', open('/dev/shm/unicache-table', 'rb').read(16)[8:])[0]; "
    f"st = os.stat('{DATA}'); print(file_id_of(salt, st.st_dev, st.st_ino))")


def test_colored_chunks_page_cache_lands_on_the_color_node(tmp_path: Path) -> None:
    reports: list[GuestReport] = []

    async def run(ctl: Path, argv: list[str], stdin: str | None = None) -> dict[str, object]:
        if stdin is None:
            res = await guest_run(ctl, argv, timeout=120)
        else:
            res = await _guest_run_stdin(ctl, argv, stdin)
        assert res["exit"] == 0, res
        return res

    async def placement(server: ChannelServer, version: int, fid: int, color: int,
                        t0: float) -> None:
        entries = tuple(PlacementEntry(ChunkId(fid, i), frozenset(), True, 0, color_node=color)
                        for i in range(SIZE // CHUNK))
        server.publish(PublishPlacement("n", PlacementTable("n", version, CHUNK, 65536,
                                                            entries), "test"))
        while server.status()[0].applied_version != version and time.monotonic() - t0 < 400:
            await asyncio.sleep(0.25)
        assert server.status()[0].applied_version == version

    async def colored_read(ctl: Path) -> dict[int, int]:
        await run(ctl, ["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"])
        await run(ctl, ["sh", "-c", f"LD_PRELOAD={SHIM} cat {DATA} > /dev/null"])
        res = await run(ctl, ["python3", "-", DATA], stdin=PAGE_NODES)
        got = json.loads(str(res["stdout"]))
        assert got["resident"] >= got["pages"] * 0.9, got  # cat read the whole file
        return {int(k): int(v) for k, v in got["nodes"].items()}

    async def homes(fid: int, since: int, t0: float) -> set[int]:
        """The home nodes the reports since ``since`` give the file's chunks (-1 unknown),
        once a report names them."""
        while time.monotonic() - t0 < 400:
            got = {c.home_node for r in reports[since:] for c in r.chunks
                   if c.chunk.file_id == fid}
            if got:
                return got
            await asyncio.sleep(0.25)
        raise AssertionError("no report of the file's chunks")

    async def main() -> None:
        server = ChannelServer(tmp_path, params=ChannelParams(chunk_size=CHUNK,
                                                              report_interval_s=0.5),
                               on_report=reports.append)
        t0 = time.monotonic()
        qemu, ctl = await start_numa_guest(server, "n", tmp_path, NUMA)
        try:
            fid = await write_data(ctl, SIZE)

            await placement(server, 9, fid, 1, t0)
            since = len(reports)
            colored = await colored_read(ctl)
            # SRM-buffer enforcement: every page the colored reads brought in is on node 1
            assert colored.get(1, 0) >= 0.98 * sum(colored.values()), colored
            assert await homes(fid, since, t0) == {-1}  # no NCC here: no home looked up

            await placement(server, 10, fid, -1, t0)
            since = len(reports)
            plain = await colored_read(ctl)
            print(f"pages per node: colored {colored}, uncolored {plain}")
            assert plain.get(0, 0) >= 0.98 * sum(plain.values()), plain
            assert await homes(fid, since, t0) == {-1}
            # the other NUMA fields reach the host too
            last = [r for r in reports if r.node_memory][-1]
            assert [m.node for m in last.node_memory] == [0, 1]
            assert all(0 < m.free_bytes <= m.total_bytes for m in last.node_memory)
            reads = [c.node_reads for r in reports for c in r.chunks if c.chunk.file_id == fid]
            assert reads and all(n == 0 for nr in reads for n, _ in nr)  # vCPUs on node 0
        finally:
            if qemu.returncode is None:
                qemu.terminate()
            await qemu.wait()
            await server.close()

    asyncio.run(main())


async def start_numa_guest(server: ChannelServer, vm: str, tmp_path: Path,
                           numa: list[str]) -> tuple[asyncio.subprocess.Process, Path]:
    """Boot the test guest with the NUMA options ``numa`` and a control port; return once
    its agent is ready and it sees nodes 0-1.

    :returns: the QEMU process (the caller stops it) and the control socket.
    """
    sock = await server.add_vm(vm)
    ctl = tmp_path / "ctl.sock"
    # no_timer_check: a TCG guest on a busy host may find its timer too slow and panic
    argv = [a + " no_timer_check" if a.startswith("console=") else a
            for a in _argv(sock, tmp_path)]
    qemu = await asyncio.create_subprocess_exec(
        *argv, *numa, "-chardev", f"socket,id=ctl0,path={ctl},server=on,wait=off",
        "-device", "virtserialport,bus=vser0.0,chardev=ctl0,name=org.unicache.control.0",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    t0 = time.monotonic()
    while not server.is_ready(vm) and time.monotonic() - t0 < 180 and qemu.returncode is None:
        await asyncio.sleep(0.25)
    if not server.is_ready(vm):
        if qemu.returncode is None:
            qemu.terminate()
        await qemu.wait()
        raise AssertionError((tmp_path / "console.log").read_text()[-2000:])
    nodes = await guest_run(ctl, ["cat", "/sys/devices/system/node/online"], timeout=120)
    assert str(nodes["stdout"]).strip() == "0-1", nodes
    return qemu, ctl


async def write_data(ctl: Path, size: int) -> int:
    """Write ``size`` random bytes to :data:`DATA` in the guest; returns its file id."""
    res = await guest_run(ctl, ["sh", "-c", f"head -c {size} /dev/urandom > {DATA}; sync"],
                          timeout=120)
    assert res["exit"] == 0, res
    res = await guest_run(ctl, ["python3", "-c", FILE_ID], timeout=120)
    assert res["exit"] == 0, res
    return int(str(res["stdout"]))


async def _guest_run_stdin(ctl: Path, argv: list[str], stdin: str) -> dict[str, object]:
    """guest_run with the runner's ``stdin`` field (a script for ``python3 -``)."""
    r, w = await asyncio.open_unix_connection(str(ctl), limit=1 << 23)
    w.write(json.dumps({"id": 2, "argv": argv, "timeout": 120, "stdin": stdin}).encode()
            + b"\n")
    await w.drain()
    while True:
        reply = json.loads(await asyncio.wait_for(r.readline(), 150))
        if reply.get("id") == 2:
            w.close()
            return dict(reply)
