"""Colors and replicas end to end, decided by the daemon (not by the test) in a real guest.

The guest has a vCPU on each of two guest nodes and two colored memory-only nodes (the
2 MiB-hugepage fallback without the patched QEMU), the agent runs with --fanotify, and
the daemon runs as an operator runs it. The checks are those of ``make demo``
(``tools/demo.py`` ``colors_and_replicas``, imported, not copied): a throttled backup stream
read on vCPU 0 gets SRM-buffer colors and its page cache lands on a colored node
(move_pages in the guest); a hot file cached on node 0 and read from vCPU 1 gets an NCC
replica the shim serves; a write without the shim drops it.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from unicache.host.qemu import GuestImage, QemuVm, VmConfig, ensure_image, parse_numa
from unicache.host.qemu.colored import host_page_colors

from tests.integration.test_daemon_vm import UNICACHE

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="colored nodes reserve hugepages through sysfs as root")


def _demo() -> ModuleType:
    # the demo imports its own modules beside it, as `python tools/demo.py` finds them
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    spec = importlib.util.spec_from_file_location("unicache_demo", ROOT / "tools" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def image() -> GuestImage:
    return ensure_image()


@pytest.fixture(scope="module")
def vm(image: GuestImage, tmp_path_factory: pytest.TempPathFactory
       ) -> Iterator[tuple[QemuVm, Path]]:
    registry = tmp_path_factory.mktemp("e2e-vms")
    quarter = host_page_colors() // 4
    layout = f"0:384/1:384/-:128@0-{quarter - 1}/-:128@{quarter}-{2 * quarter - 1}"
    machine = QemuVm(VmConfig("uctest-e2e", vcpus=2, memory_mib=1024,
                              numa=parse_numa(layout, 2, 1024), image_dir=image.directory,
                              append=("unicache.agent_args=--fanotify",)), registry)
    machine.start()
    try:
        machine.wait_for_boot(120)
        yield machine, registry
    finally:
        machine.stop()


def test_the_daemon_colors_a_stream_and_replicates_a_remote_hot_file_in_a_real_guest(
    vm: tuple[QemuVm, Path], tmp_path: Path
) -> None:
    machine, registry = vm
    state = tmp_path / "state"
    daemon = subprocess.Popen(
        [UNICACHE, "run", "--unify", "l2", "--always-place", "--interval", "1",
         "--state-dir", str(state), "--connect", "none", "--quiet"],
        env=dict(os.environ, UNICACHE_STATE_DIR=str(registry)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        log = state / "decisions.jsonl"
        demo = _demo()
        # the daemon must see the guest's agent before the stream starts
        for _ in range(120):
            if log.exists() and "listening for its agent" in log.read_text():
                break
            assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
            time.sleep(0.25)
        failed = demo.colors_and_replicas(machine, log, colored_nodes=(2, 3))
        assert failed == [], failed
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=30)
    assert code == 0, daemon.stderr.read() if daemon.stderr else ""
