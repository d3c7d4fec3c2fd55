"""The host package unicache .deb and the unicache wheel (`make packages`): the deb installs
into a clean Debian 12 root, its files are where its unit and docs/operations.md say, its
commands run (density and the benchmarks too, from /), the libvirt hook installs on request
and goes with the package, and purge leaves the root as before; the wheel, in a fresh venv
outside the checkout, runs the benchmarks and, with the simulator's wheel, density."""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

from unicache.bench.shim import TARGETS as SHIM_TARGETS

from tests.packaging.chroot import (
    ROOT,
    VERSION,
    Packages,
    copy_in,
    differences,
    in_root,
    inventory,
)

UNIT = "/usr/lib/systemd/system/unicache.service"


def _unit(root: Path) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((root / UNIT.lstrip("/")).read_text())
    return unit


def _exists_in(root: Path, path: str) -> bool:
    """Whether ``path`` exists in ``root``, following a link's absolute target there too."""
    inside = root / path.lstrip("/")
    if inside.is_symlink():
        target = os.readlink(inside)
        return _exists_in(root, target if target.startswith("/") else
                          str(Path(path).parent / target))
    return inside.exists()


def _documented_paths() -> list[str]:
    """The paths of docs/operations.md's table of what the host package installs."""
    text = (ROOT / "docs/operations.md").read_text(encoding="utf-8")
    table = text.split("<!-- host package files -->", 2)[1]
    return re.findall(r"^\| `(/[^`]+)`", table, re.MULTILINE)


def test_the_wheel_is_the_unicache_package_at_the_version(packages: Packages) -> None:
    with zipfile.ZipFile(packages.wheel) as whl:
        names = whl.namelist()
        meta = whl.read(f"unicache-{VERSION}.dist-info/METADATA").decode()
    assert "unicache/cli/__init__.py" in names and "unicache/models/" in " ".join(names)
    assert f"Version: {VERSION}" in meta and "Requires-Dist: typer" in meta
    assert "Requires-Dist: qemu.qmp" in meta  # the package imports it (host/qemu/qmp.py)


def test_the_wheel_runs_its_benchmarks_from_a_fresh_venv_outside_the_checkout(
        packages: Packages, tmp_path: Path) -> None:
    # the wheel and its dependencies at the project's pins, in a venv of the system's python3
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin/pip"), "install", "-q", "--disable-pip-version-check",
                    "-c", str(ROOT / "requirements.txt"), str(packages.wheel)], check=True)
    run = subprocess.run([str(venv / "bin/unicache"), "bench", "policy", "--vms", "10",
                          "--chunks", "1000", "--json"], cwd=tmp_path, capture_output=True,
                         text=True, check=False,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["bench"] == "policy" and [p["vms"] for p in doc["points"]] == [10]
    assert doc["points"][0]["tracked_chunks"] > 0
    # one cell of the shim's bench, on a shim laid out as the agent package installs it
    kit = tmp_path / "unicache-agent"
    shutil.copytree(ROOT / "guest-agent/unicache_agent", kit / "unicache_agent")
    for name in SHIM_TARGETS:
        shutil.copy2(ROOT / "guest-agent/shim" / name, kit / name)
    run = subprocess.run([str(venv / "bin/unicache"), "bench", "shim", "--kinds", "read",
                          "--sizes", "4096", "--patterns", "seq", "--tables", "unplaced",
                          "--rounds", "1", "--seconds", "0.02", "--shim-dir", str(kit),
                          "--json"], cwd=tmp_path, capture_output=True, text=True,
                         check=False, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["counted_reads"]["unplaced"] > 0
    # the benchmarks that boot guests are in the wheel too: with no guest image here (nor
    # the simulator the live one drives its guests with) each says so in one line, exit 2
    assert _guest_bench(venv, tmp_path, "live") == (
        "unicache bench live: the live bench drives its guests and daemon with the "
        "simulator's package, which is not installed (make sim-build; the host package has it)")
    assert "no guest image at" in _guest_bench(venv, tmp_path, "programs")
    # and the simulator's wheel beside it (the one the host package carries): a density run
    (sim_wheel,) = (ROOT / "tools/sim/target/wheels").glob(f"unicache_sim-{VERSION}-*.whl")
    pins = tmp_path / "sim-pins.txt"  # pip takes no extras in a constraint
    pins.write_text(re.sub(r"\[[^]]*\]", "", (ROOT / "tools/sim/requirements.txt").read_text()))
    subprocess.run([str(venv / "bin/pip"), "install", "-q", "--disable-pip-version-check",
                    "-c", str(ROOT / "requirements.txt"), "-c", str(pins), str(sim_wheel)],
                   check=True)
    run = subprocess.run([str(venv / "bin/unicache"), "density", "--model", "epyc-2s",
                          "--random-mixes", "1", "--seeds", "1", "--out", str(tmp_path / "d"),
                          "--json"], cwd=tmp_path, capture_output=True, text=True,
                         check=False, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    (mix,) = json.loads(run.stdout)["mixes"]
    assert mix["vms"]["linux"] > 0 and mix["vms"]["unicache"] > 0
    assert "no guest image at" in _guest_bench(venv, tmp_path, "live")


def _guest_bench(venv: Path, cwd: Path, name: str) -> str:
    """``unicache bench NAME`` of ``venv`` in ``cwd``, which must exit 2 with one line: it."""
    run = subprocess.run([str(venv / "bin/unicache"), "bench", name, "--json"], cwd=cwd,
                         capture_output=True, text=True, check=False,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)})
    assert run.returncode == 2 and not run.stdout, run.stderr
    (line,) = run.stderr.strip().splitlines()
    return line


def test_the_host_deb_installs_where_its_unit_and_docs_say_and_purges_without_a_trace(
        packages: Packages, clean_root: Path) -> None:
    root = clean_root
    deb = copy_in(root, packages.host_deb)
    before = inventory(root)
    in_root(root, "dpkg", "-i", deb)

    # the unit: its program, its config and its documentation are there
    unit = _unit(root)
    exec_start = unit["Service"]["ExecStart"].split()
    assert exec_start[:2] == ["/opt/unicache/.venv/bin/unicache", "run"]
    assert _exists_in(root, exec_start[0])
    config = exec_start[exec_start.index("--config") + 1]
    assert config == "/etc/unicache/unicache.toml"
    in_root(root, "/opt/unicache/.venv/bin/python", "-c",
            f"from pathlib import Path; from unicache.config import load_config; "
            f"load_config(Path({config!r}))")
    for doc in unit["Unit"]["Documentation"].split():
        assert (root / doc.removeprefix("file:///")).is_file(), doc
    # what docs/operations.md lists
    documented = _documented_paths()
    assert len(documented) >= 5
    for path in documented:
        assert _exists_in(root, path), f"docs/operations.md names {path}"

    # the commands run (the venv was made elsewhere and works at /opt/unicache/.venv)
    assert in_root(root, "unicache", "version").stdout.strip() == VERSION
    assert "attach" in in_root(root, "unicache", "--help").stdout
    assert "Usage" in in_root(root, "unicache-sim", "--help").stdout
    in_root(root, "/opt/unicache/.venv/bin/python", "-c", "import unicache_sim._native")
    _density_runs_from_the_package(root)
    _benchmarks_run_from_the_package(root, packages)

    # the libvirt hook on request; it runs the package's python and goes with the package
    in_root(root, "mkdir", "-p", "/etc/libvirt/hooks")
    in_root(root, "unicache", "install-hook")
    hook = (root / "etc/libvirt/hooks/qemu").read_text()
    assert "UNICACHE_PYTHON=/opt/unicache/.venv/bin/python" in hook
    in_root(root, "dpkg", "-r", "unicache")
    assert not (root / "etc/libvirt/hooks/qemu").exists()
    in_root(root, "rmdir", "/etc/libvirt/hooks", "/etc/libvirt")

    in_root(root, "dpkg", "-P", "unicache")
    assert differences(before, inventory(root)) == []


def _density_runs_from_the_package(root: Path) -> None:
    """A real `unicache density` from /, outside any checkout: the simulator, its Dask
    cluster and its Parquet cache, all from the package's venv. Dask's workers read /proc,
    which a chroot has only while it is mounted there; what the run leaves (its --out, Dask's
    scratch space and config, matplotlib's font cache) goes before the purge's check."""
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    try:
        run = in_root(root, "sh", "-c", "cd / && unicache density --model epyc-2s "
                      "--random-mixes 1 --seeds 1 --out /tmp/density --json")
    finally:
        subprocess.run(["umount", str(root / "proc")], check=True)
    doc = json.loads(run.stdout)
    assert doc["model"] == "epyc-2s" and doc["policies"] == ["linux", "unicache"]
    (mix,) = doc["mixes"]
    assert mix["vms"]["linux"] > 0 and mix["vms"]["unicache"] > 0
    assert doc["catalogue"].startswith("/opt/unicache/.venv/")
    in_root(root, "rm", "-rf", "/tmp/density", "/tmp/dask-scratch-space", "/root/.cache",
            "/root/.config")


def _benchmarks_run_from_the_package(root: Path, packages: Packages) -> None:
    """`unicache bench policy`, and one cell of `unicache bench shim` on the shim the
    unicache-agent package installs beside it (/usr/lib/unicache-agent), from /."""
    bench = json.loads(in_root(root, "sh", "-c", "cd / && unicache bench policy --vms 10 "
                               "--chunks 1000 --json").stdout)
    assert bench["bench"] == "policy" and [p["vms"] for p in bench["points"]] == [10]
    in_root(root, "dpkg", "-i", copy_in(root, packages.agent_deb))
    shim = json.loads(in_root(root, "sh", "-c", "cd / && unicache bench shim --kinds read "
                              "--sizes 4096 --patterns seq --tables unplaced --rounds 1 "
                              "--seconds 0.02 --json").stdout)
    assert [(c["kind"], c["size"], c["table"]) for c in shim["cells"]] == [
        ("read", 4096, "unplaced")]
    assert shim["counted_reads"]["unplaced"] > 0  # the installed shim ran, and counted
    in_root(root, "dpkg", "-P", "unicache-agent")
    in_root(root, "rm", "-f", f"/tmp/{packages.agent_deb.name}")
