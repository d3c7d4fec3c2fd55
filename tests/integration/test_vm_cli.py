"""``unicache vm start|list|exec|stop`` end to end with a real guest (one boot for the module)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache.host.qemu import GuestImage, ensure_image

VM_NAME = "uctest-cli"
UNICACHE = str(Path(sys.executable).parent / "unicache")


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest) -> GuestImage:
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    return ensure_image(lambda line: tr.write_line(f"[make image] {line}") if tr else None)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, image: GuestImage) -> dict[str, str]:
    return {**os.environ, "UNICACHE_STATE_DIR": str(tmp_path_factory.mktemp("vms")),
            "UNICACHE_IMAGE_DIR": str(image.directory)}


def _cli(env: dict[str, str], *args: str,
         timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([UNICACHE, "vm", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def started(env: dict[str, str]) -> Iterator[dict[str, object]]:
    res = _cli(env, "start", VM_NAME, "--vcpus", "2", "--memory", "512", "--json")
    try:
        assert res.returncode == 0, res.stderr
        yield json.loads(res.stdout)
    finally:
        _cli(env, "stop", "--all", "--force")


def test_start_prints_the_record_and_the_accelerator_line(started: dict[str, object],
                                                          env: dict[str, str]) -> None:
    assert started["name"] == VM_NAME and started["vcpus"] == 2 and started["memory_mib"] == 512
    assert started["accel"] in ("kvm", "tcg") and started["accel_reason"]
    assert isinstance(started["boot_s"], float)
    assert Path(f"/proc/{started['pid']}").exists()
    assert str(started["agent_socket"]).startswith(env["UNICACHE_STATE_DIR"])


def test_list_json_shows_the_running_vm(started: dict[str, object], env: dict[str, str]) -> None:
    res = _cli(env, "list", "--json")
    assert res.returncode == 0, res.stderr
    names = {v["name"]: v["pid"] for v in json.loads(res.stdout)}
    assert names == {VM_NAME: started["pid"]}


def test_exec_returns_the_guest_command_exit_code(started: dict[str, object],
                                                  env: dict[str, str]) -> None:
    res = _cli(env, "exec", VM_NAME, "--", "sh", "-c", "hostname; exit 4")
    assert res.returncode == 4
    assert res.stdout.strip() == VM_NAME


def test_starting_a_running_vm_again_is_one_line_exit_2(started: dict[str, object],
                                                       env: dict[str, str]) -> None:
    res = _cli(env, "start", VM_NAME)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"unicache: error: vm {VM_NAME}: is already running (pid {started['pid']})"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("start", "x", "--numa", "0:512"), "leaves vCPU 1 on no node"),
        (("start", "bad/name"), "bad VM name"),
        (("stop",), "give either a VM name or --all"),
        (("stop", "nosuchvm"), "no VM named nosuchvm"),
        (("start", "y", "--accel", "xen"), "unknown accelerator 'xen'"),
    ],
    ids=["numa", "name", "stop-nothing", "stop-unknown", "accel"],
)
def test_user_errors_are_one_line_exit_2(env: dict[str, str], args: tuple[str, ...],
                                         message: str) -> None:
    res = _cli(env, *args, timeout=60)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_stop_by_name_leaves_no_process(started: dict[str, object], env: dict[str, str]) -> None:
    res = _cli(env, "stop", VM_NAME, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [{"name": VM_NAME, "stopped": "powerdown"}]
    stat = Path(f"/proc/{started['pid']}/stat")
    # the CLI that started QEMU has exited: QEMU is reparented, so at most a zombie remains
    # until init reaps it
    assert not stat.exists() or stat.read_text().split(")")[1].split()[0] == "Z"
    listed = _cli(env, "list", "--json")
    assert json.loads(listed.stdout) == []
