"""The agent and the shim in a real guest (QEMU, TCG) with the host channel over virtio-serial.

Builds the guest image when it is missing (``make image``, as tests/integration does) and
fails, never skips, without QEMU. Commands run in the guest through
the image's demo runner (images/guest/unicache-runner.py, control port).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path

from unicache.channel import ChannelParams, ChannelServer
from unicache.host.qemu import ensure_image
from unicache.model import ChunkId, GuestReport, PlacementEntry, PlacementTable, PublishPlacement

IMAGE = ensure_image().directory
QEMU = shutil.which("qemu-system-x86_64") or "qemu-system-x86_64 (not installed: make setup)"


async def guest_run(ctl: Path, argv: list[str], timeout: float = 60) -> dict[str, object]:
    """Run a command in the test guest through its demo runner (images/guest)."""
    for _ in range(600):
        try:
            r, w = await asyncio.open_unix_connection(str(ctl), limit=1 << 23)
            break
        except OSError:
            await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"no guest control socket at {ctl}")
    w.write(json.dumps({"id": 1, "argv": argv, "timeout": timeout}).encode() + b"\n")
    await w.drain()
    while True:
        reply = json.loads(await asyncio.wait_for(r.readline(), timeout + 30))
        if reply.get("id") == 1:
            w.close()
            return dict(reply)


def test_mfc_loop_in_a_real_guest(tmp_path: Path) -> None:
    """Guest reads under the shim reach the host as chunk reports; the host's table then
    moves the guest's reader to the vCPU it names (vCPU 1 of 2)."""
    reports: list[GuestReport] = []
    shim = "/usr/lib/unicache-agent/libunicache.so"

    async def main() -> None:
        server = ChannelServer(tmp_path, params=ChannelParams(report_interval_s=0.5),
                               on_report=reports.append)
        sock = await server.add_vm("t")
        ctl = tmp_path / "ctl.sock"
        qemu = subprocess.Popen([*_argv(sock, tmp_path), "-chardev",
                                 f"socket,id=ctl0,path={ctl},server=on,wait=off", "-device",
                                 "virtserialport,bus=vser0.0,chardev=ctl0,"
                                 "name=org.unicache.control.0"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            t0 = time.monotonic()
            while not server.is_ready("t") and time.monotonic() - t0 < 120:
                await asyncio.sleep(0.25)
            assert server.is_ready("t"), (tmp_path / "console.log").read_text()[-2000:]
            made = await guest_run(ctl, ["sh", "-c", "head -c 3000000 /dev/urandom > /tmp/d"])
            assert made["exit"] == 0, made
            read = await guest_run(ctl, ["sh", "-c", f"LD_PRELOAD={shim} cat /tmp/d >/dev/null"])
            assert read["exit"] == 0, read
            fid = None
            while fid is None and time.monotonic() - t0 < 150:
                await asyncio.sleep(0.25)
                per_file: dict[int, int] = {}
                for rep in reports:
                    for c in rep.chunks:
                        per_file[c.chunk.file_id] = per_file.get(c.chunk.file_id, 0) + c.bytes_read
                fid = next((f for f, n in per_file.items() if n == 3_000_000), None)
            assert fid is not None, "the guest's 3,000,000-byte read was not reported"
            # place every chunk of that file on vCPU 1
            entries = tuple(PlacementEntry(ChunkId(fid, i), frozenset({1}), True, 0xFFFFFFFF)
                            for i in range(3_000_000 // 262144 + 1))
            server.publish(PublishPlacement("t", PlacementTable("t", 9, 262144, 65536, entries),
                                            "test"))
            while server.status()[0].applied_version != 9 and time.monotonic() - t0 < 160:
                await asyncio.sleep(0.25)
            assert server.status()[0].applied_version == 9
            moved = await guest_run(ctl, [
                "env", f"LD_PRELOAD={shim}", "python3", "-c",
                "import os; os.sched_setaffinity(0, {0}); open('/tmp/d', 'rb').read(); "
                "print(sorted(os.sched_getaffinity(0)))"])
            assert moved["exit"] == 0, moved
            assert str(moved["stdout"]).strip() == "[1]"
        finally:
            qemu.terminate()
            qemu.wait(30)
            await server.close()

    asyncio.run(main())


def _argv(sock: Path, tmp_path: Path) -> list[str]:
    return [str(QEMU), "-accel", "tcg", "-smp", "2", "-m", "512M", "-nodefaults",
            "-no-user-config", "-nographic", "-no-reboot",
            "-kernel", str(IMAGE / "vmlinuz"), "-initrd", str(IMAGE / "initrd.img"),
            "-append", "console=ttyS0 root=/dev/vda rw quiet panic=-1",
            "-drive", f"file={IMAGE / 'rootfs.ext4'},format=raw,if=virtio,snapshot=on",
            "-device", "virtio-serial-pci,id=vser0",
            "-chardev", f"socket,id=uc0,path={sock},reconnect=1",
            "-device", "virtserialport,bus=vser0.0,chardev=uc0,name=org.unicache.agent.0",
            "-serial", f"file:{tmp_path / 'console.log'}"]
