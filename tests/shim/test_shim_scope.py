"""Which processes the shim works in: its own decision at a process's first open.

A process is in scope when its LD_PRELOAD names the shim (a unit's drop-in put it there),
or, when it got the shim some other way (/etc/ld.so.preload: here a link whose name does
not say libunicache), when a trusted shim.conf says `everywhere` or names its executable
or cgroup; `off` there, or UNICACHE_DISABLE=1, keeps the shim out of every process
(uc_scope.c, docs/agent.md "Scopes"). What shows it: the shim makes this user's counters
file when it starts working in a process, and in no other case.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.shim.shimtools import ShimEnv


def _counters_made(shim: ShimEnv, preload: Path, conf: Path | None,
                   extra: dict[str, str] | None = None) -> bool:
    """Whether `cat` of a file, with `preload` and `conf`, made the user's counters file."""
    path = Path(shim.counters.user_path())
    path.unlink(missing_ok=True)
    env = {**shim.env, "LD_PRELOAD": str(preload), **(extra or {})}
    env["UNICACHE_SHIM_CONF"] = str(conf) if conf else "/nonexistent/shim.conf"
    subprocess.run(["cat", "/etc/hostname"], env=env, check=True, capture_output=True)
    return path.exists()


@pytest.fixture
def unnamed_preload(shim_env: ShimEnv, tmp_path: Path) -> Path:
    """The shim under a name without `libunicache`, as /etc/ld.so.preload would load it:
    only shim.conf can put such a process in scope."""
    link = tmp_path / "libpreloaded.so"
    link.symlink_to(Path(shim_env.env["LD_PRELOAD"]))
    return link


def _conf(tmp_path: Path, text: str, mode: int = 0o644) -> Path:
    conf = tmp_path / "shim.conf"
    conf.write_text(text)
    conf.chmod(mode)
    return conf


def _my_cgroup() -> str:
    line = next(ln for ln in Path("/proc/self/cgroup").read_text().splitlines()
                if ln.startswith("0::"))
    return line[3:]


def test_a_preload_that_names_the_shim_is_in_scope_without_shim_conf(
        shim_env: ShimEnv) -> None:
    assert _counters_made(shim_env, Path(shim_env.env["LD_PRELOAD"]), None)


def test_a_process_that_got_the_shim_otherwise_is_out_of_scope_without_shim_conf(
        shim_env: ShimEnv, unnamed_preload: Path) -> None:
    assert not _counters_made(shim_env, unnamed_preload, None)


@pytest.mark.parametrize("line", ["everywhere", "exe /usr/bin/cat", "cgroup {cgroup}"])
def test_shim_conf_puts_a_process_in_scope_by_everywhere_its_exe_or_its_cgroup(
        shim_env: ShimEnv, unnamed_preload: Path, tmp_path: Path, line: str) -> None:
    conf = _conf(tmp_path, f"# scopes\n{line.format(cgroup=_my_cgroup())}\n")
    assert _counters_made(shim_env, unnamed_preload, conf)


@pytest.mark.parametrize("line", ["exe /usr/bin/tac", "cgroup /no.slice/such.service"])
def test_shim_conf_naming_another_exe_or_cgroup_leaves_the_process_out(
        shim_env: ShimEnv, unnamed_preload: Path, tmp_path: Path, line: str) -> None:
    assert not _counters_made(shim_env, unnamed_preload, _conf(tmp_path, line + "\n"))


def test_off_in_shim_conf_keeps_even_a_named_preload_out(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    conf = _conf(tmp_path, "everywhere\noff\n")
    assert not _counters_made(shim_env, Path(shim_env.env["LD_PRELOAD"]), conf)


def test_a_shim_conf_others_may_write_is_not_trusted(
        shim_env: ShimEnv, unnamed_preload: Path, tmp_path: Path) -> None:
    assert os.geteuid() == 0, "the shim trusts only a shim.conf of root's: run as root"
    assert not _counters_made(shim_env, unnamed_preload,
                              _conf(tmp_path, "everywhere\n", mode=0o666))


def test_a_shim_conf_longer_than_a_page_is_read_to_its_end_up_to_64_kib(
        shim_env: ShimEnv, unnamed_preload: Path, tmp_path: Path) -> None:
    padding = "# " + "x" * 77 + "\n"
    near = _conf(tmp_path, padding * 300 + "everywhere\n")  # 24 KiB: past the stack buffer
    assert near.stat().st_size > 4096
    assert _counters_made(shim_env, unnamed_preload, near)
    far = _conf(tmp_path, padding * 900 + "everywhere\n")  # 72 KiB: its last line unseen
    assert far.stat().st_size > 65536
    assert not _counters_made(shim_env, unnamed_preload, far)


def test_unicache_disable_1_keeps_a_named_preload_out(
        shim_env: ShimEnv) -> None:
    named = Path(shim_env.env["LD_PRELOAD"])
    assert not _counters_made(shim_env, named, None, {"UNICACHE_DISABLE": "1"})
    # the control: the same run without it works, so the test would see a shim that ignored it
    assert _counters_made(shim_env, named, None, {"UNICACHE_DISABLE": "0"})
