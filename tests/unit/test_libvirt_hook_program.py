"""The libvirt qemu hook program and the script that runs it, without libvirt (no libvirtd).

The script ``install-hook`` writes runs ``python -m unicache.hooks.libvirt_qemu``; scripts
installed by earlier versions run ``unicache.hooks.qemu``, which must keep working: a hook
that fails at ``prepare`` stops libvirt from starting the domain.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from unicache.host.libvirt.hook import BACKUP_NAME, HookConfig, install_hook


@pytest.mark.parametrize("module", ["unicache.hooks.libvirt_qemu", "unicache.hooks.qemu"],
                         ids=["current", "name-of-older-scripts"])
def test_the_hook_program_never_fails_a_domain_start(module: str) -> None:
    bad = subprocess.run([sys.executable, "-m", module, "vm1", "prepare", "begin", "-"],
                         input="<domain", capture_output=True, text=True, check=False)
    assert bad.returncode == 0
    assert bad.stderr.startswith("unicache hook: vm1 prepare: domain XML does not parse")
    other = subprocess.run([sys.executable, "-m", module, "vm1", "release", "end", "-"],
                           input="<domain/>", capture_output=True, text=True, check=False)
    assert (other.returncode, other.stderr) == (0, "")


@pytest.mark.parametrize("previous", [False, True], ids=["alone", "after-a-previous-hook"])
def test_the_installed_script_runs_the_hook_program(tmp_path: Path, previous: bool) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    if previous:
        (hooks / "qemu").write_text("#!/bin/sh\ncat >/dev/null\nexit 0\n")
        (hooks / "qemu").chmod(0o755)
    install_hook(HookConfig(state_dir=tmp_path / "state"), hooks, python=sys.executable)
    assert (hooks / BACKUP_NAME).exists() == previous
    assert "-m unicache.hooks.libvirt_qemu" in (hooks / "qemu").read_text()
    run = subprocess.run([str(hooks / "qemu"), "vm1", "prepare", "begin", "-"], input="<domain",
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0
    # the program ran: only it says why it left the XML alone
    assert run.stderr.startswith("unicache hook: vm1 prepare: domain XML does not parse")


def test_install_hook_takes_the_place_table_of_a_config(tmp_path: Path) -> None:
    unicache = [sys.executable, "-c", "from unicache.cli import main; main()"]
    config = tmp_path / "unicache.toml"
    config.write_text("[place]\ncpu_overcommit = 2.0\n")
    ok = subprocess.run([*unicache, "install-hook", "--hooks-dir", str(tmp_path / "h"),
                         "--config", str(config), "--json"],
                        capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    script = (tmp_path / "h" / "qemu").read_text()
    assert f"UNICACHE_HOOK_CONFIG={config}\n" in script
    assert HookConfig.from_env().config is None  # not exported here: the defaults
    config.write_text("[place]\ncpu_overcommit = 99\n")  # refused at install, not at start
    bad = subprocess.run([*unicache, "install-hook", "--hooks-dir", str(tmp_path / "h2"),
                          "--config", str(config)], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "cpu_overcommit must be within 1..16" in bad.stderr
    assert not (tmp_path / "h2" / "qemu").exists()
