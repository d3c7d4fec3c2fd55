"""`unicache-agent scope` (guest-agent/unicache_agent/scope*.py) on a temporary root
(UNICACHE_SCOPE_ROOT): the files each kind of scope writes, idempotence, atomic writes of
shim.conf, bad targets, non-root callers, the budget check of `everywhere`, the kill switch,
`list` and `apply` (the package's postinst).

The load check is the package's own helper (guest-agent/packaging/preload) run against a
shim compiled here: an empty library that loads, and one that aborts every program.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from unicache_agent import scope_conf
from unicache_agent.__main__ import main as agent_main
from unicache_agent.scope import main as scope_main

REPO = Path(__file__).resolve().parents[2]
HELPER = REPO / "guest-agent/packaging/preload"
SHIM = "/usr/lib/unicache-agent/libunicache.so"
DROPIN = "50-unicache-shim.conf"
OTHER_LIB = "/usr/lib/other/libother.so"


@dataclass(frozen=True)
class Shims:
    good: Path
    crashing: Path


@pytest.fixture(scope="session")
def shims(tmp_path_factory: pytest.TempPathFactory) -> Shims:
    where = tmp_path_factory.mktemp("shims")
    (where / "good.c").write_text("int uc_test_shim_loaded;\n")
    (where / "crash.c").write_text("#include <stdlib.h>\n"
                                   "__attribute__((constructor)) static void c(void) "
                                   "{ abort(); }\n")
    for name in ("good", "crash"):
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(where / f"{name}.so"),
                        str(where / f"{name}.c")], check=True)
    return Shims(where / "good.so", where / "crash.so")


@dataclass(frozen=True)
class Guest:
    """A temporary guest root the CLI acts on."""

    root: Path

    def at(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    @property
    def conf(self) -> Path:
        return self.at("/etc/unicache-agent/shim.conf")

    @property
    def preload(self) -> Path:
        return self.at("/etc/ld.so.preload")

    def dropin(self, unit: str) -> Path:
        return self.at(f"/etc/systemd/system/{unit}.d/{DROPIN}")

    @property
    def reloads(self) -> int:
        log = self.root / "systemctl.log"
        return log.read_text().count("daemon-reload") if log.exists() else 0

    def lines(self) -> list[str]:
        return self.conf.read_text().splitlines() if self.conf.exists() else []


def make_guest(root: Path, shim: Path) -> Guest:
    lib = root / "usr/lib/unicache-agent"
    lib.mkdir(parents=True)
    shutil.copy(shim, lib / "libunicache.so")
    shutil.copy(HELPER, lib / "preload")
    (root / "usr/bin").mkdir(parents=True)
    shutil.copy("/bin/true", root / "usr/bin/prog")
    (root / "bin").symlink_to("usr/bin")  # merged /usr: /bin/prog runs as /usr/bin/prog
    (root / "etc").mkdir()
    (root / "run/systemd/system").mkdir(parents=True)  # "systemd runs this root"
    return Guest(root)


@pytest.fixture
def guest(tmp_path: Path, shims: Shims, monkeypatch: pytest.MonkeyPatch) -> Guest:
    g = make_guest(tmp_path / "root", shims.good)
    fake = tmp_path / "systemctl"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {g.root}/systemctl.log\n')
    fake.chmod(0o755)
    monkeypatch.setenv("UNICACHE_SCOPE_ROOT", str(g.root))
    monkeypatch.setenv("UNICACHE_SYSTEMCTL", str(fake))
    for name in ("UNICACHE_PRELOAD_HELPER", "UNICACHE_UC_BENCH", "UNICACHE_SHIM_PATH"):
        monkeypatch.delenv(name, raising=False)
    return g


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def said(self) -> list[str]:
        return self.err.splitlines()


ScopeRun = Callable[..., Ran]


@pytest.fixture
def scope(capsys: pytest.CaptureFixture[str]) -> ScopeRun:
    def run(*argv: str) -> Ran:
        capsys.readouterr()
        try:
            code = scope_main(list(argv))
        except SystemExit as done:  # argparse: a bad flag
            code = int(done.code or 0)
        out, err = capsys.readouterr()
        return Ran(code, out, err)
    return run


def _bench(tmp_path: Path, stdout: str, code: int) -> Path:
    """A stand-in for uc_bench that records its arguments and prints ``stdout``."""
    script = tmp_path / "uc_bench"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/bench.args\n"
                      f"cat <<'EOF'\n{stdout}\nEOF\nexit {code}\n")
    script.chmod(0o755)
    return script


# -- each kind of scope -----------------------------------------------------------------


def test_a_unit_scope_writes_the_drop_in_records_the_unit_and_reloads_systemd(
        guest: Guest, scope: ScopeRun) -> None:
    ran = scope("add", "unit:nginx")
    assert ran.code == 0, ran.err
    assert guest.dropin("nginx.service").read_text().splitlines()[1:] == [
        "[Service]", f"Environment=LD_PRELOAD={SHIM}"]
    assert guest.lines() == ["unit nginx.service"]
    assert guest.reloads == 1
    assert "restart" in ran.out and "systemctl restart nginx.service" in ran.out
    assert not guest.preload.exists()  # a unit needs no global preload

    # the administrator's own drop-in of another unit keeps its directory
    guest.dropin("web.service").parent.mkdir(parents=True)
    (guest.dropin("web.service").parent / "override.conf").write_text("[Service]\n")
    assert scope("add", "unit:web.service").code == 0
    assert scope("remove", "unit:nginx.service", "unit:web").code == 0
    assert not guest.dropin("nginx.service").parent.exists()
    assert not guest.dropin("web.service").exists()
    assert (guest.dropin("web.service").parent / "override.conf").exists()
    assert guest.lines() == []
    assert guest.reloads == 3


def test_exe_and_cgroup_scopes_put_the_shim_first_in_the_list_and_the_last_removal_takes_it_out(
        guest: Guest, scope: ScopeRun) -> None:
    guest.preload.write_text(OTHER_LIB)  # the administrator's, no newline at its end
    ran = scope("add", "exe:/usr/bin/prog", "cgroup:/system.slice/php-fpm.service")
    assert ran.code == 0, ran.err
    assert guest.preload.read_text().splitlines() == [SHIM, OTHER_LIB]
    assert guest.lines() == ["exe /usr/bin/prog", "cgroup /system.slice/php-fpm.service"]
    assert guest.reloads == 0  # nothing of systemd's changed

    assert scope("remove", "exe:/usr/bin/prog").code == 0
    assert guest.preload.read_text().splitlines() == [SHIM, OTHER_LIB]  # the cgroup needs it
    ran = scope("remove", "cgroup:/system.slice/php-fpm.service")
    assert ran.code == 0 and "out of /etc/ld.so.preload" in ran.out
    assert guest.preload.read_text() == OTHER_LIB  # byte for byte


def test_a_list_the_scope_created_is_deleted_when_empty_again(
        guest: Guest, scope: ScopeRun) -> None:
    assert scope("add", "exe:/usr/bin/prog").code == 0
    assert guest.preload.read_text() == SHIM + "\n"
    assert scope("remove", "exe:/usr/bin/prog").code == 0
    assert not guest.preload.exists()


def test_an_exe_scope_is_recorded_as_proc_self_exe_names_the_program(
        guest: Guest, scope: ScopeRun) -> None:
    ran = scope("add", "exe:/bin/prog")
    assert ran.code == 0 and "/usr/bin/prog" in ran.out
    assert guest.lines() == ["exe /usr/bin/prog"]
    assert scope("remove", "exe:/bin/prog").code == 0  # the same program, by its link
    assert guest.lines() == []


def test_adding_twice_changes_nothing_and_removing_what_is_not_there_is_no_error(
        guest: Guest, scope: ScopeRun) -> None:
    assert scope("add", "exe:/usr/bin/prog", "unit:a.service").code == 0
    before = (guest.conf.stat().st_ino, guest.preload.stat().st_ino,
              guest.dropin("a.service").stat().st_ino)
    ran = scope("add", "unit:a", "exe:/usr/bin/prog", "exe:/usr/bin/prog")
    assert ran.code == 0 and ran.out.count("already scoped") == 2, ran.out
    assert (guest.conf.stat().st_ino, guest.preload.stat().st_ino,
            guest.dropin("a.service").stat().st_ino) == before  # not even rewritten
    assert guest.lines() == ["exe /usr/bin/prog", "unit a.service"]
    assert guest.preload.read_text().count(SHIM) == 1
    assert scope("remove", "unit:a", "exe:/usr/bin/prog").code == 0
    ran = scope("remove", "unit:a", "exe:/usr/bin/prog", "cgroup:/x")
    assert ran.code == 0 and ran.out.count("was not scoped") == 3


def test_shim_conf_is_a_new_root_owned_0644_file_that_keeps_the_administrators_lines(
        guest: Guest, scope: ScopeRun) -> None:
    guest.conf.parent.mkdir(parents=True)
    mine = ["# the administrator's note", "frobnicate 3   # a directive of a later version",
            "", "exe /usr/bin/prog  # kept with its comment"]
    guest.conf.write_text("\n".join(mine) + "\n")
    guest.conf.chmod(0o666)  # a file the shim would ignore
    ino = guest.conf.stat().st_ino
    assert scope("add", "cgroup:/a", "exe:/usr/bin/prog").code == 0
    st = guest.conf.stat()
    assert st.st_ino != ino  # renamed over, never rewritten in place
    assert stat.S_IMODE(st.st_mode) == 0o644
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (0, 0)
    assert guest.lines() == [*mine, "cgroup /a"]
    assert sorted(p.name for p in guest.conf.parent.iterdir()) == ["shim.conf"]
    listed = json.loads(scope("list", "--json").out)
    assert listed["not_understood"] == ["frobnicate 3   # a directive of a later version"]


def test_a_failed_write_leaves_shim_conf_as_it_was_and_no_temporary_file(
        guest: Guest, scope: ScopeRun, monkeypatch: pytest.MonkeyPatch) -> None:
    assert scope("add", "unit:a").code == 0
    before = guest.conf.read_bytes()

    def no_rename(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(scope_conf.os, "replace", no_rename)
    ran = scope("add", "unit:b")
    assert ran.code == 1 and len(ran.said) == 1, ran.err
    assert "cannot write" in ran.said[0] and "No space left" in ran.said[0]
    assert guest.conf.read_bytes() == before
    assert sorted(p.name for p in guest.conf.parent.iterdir()) == ["shim.conf"]


def test_commands_at_once_lose_no_line(guest: Guest) -> None:
    """Each command holds shim.conf's directory locked while it reads and rewrites."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "guest-agent")}
    procs = [subprocess.Popen([sys.executable, "-m", "unicache_agent", "scope", "add",
                               f"cgroup:/system.slice/s{i}.service"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for i in range(6)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    assert sorted(guest.lines()) == [f"cgroup /system.slice/s{i}.service" for i in range(6)]
    assert guest.preload.read_text() == SHIM + "\n"


# -- what is refused ----------------------------------------------------------------------


@pytest.mark.parametrize("target", [
    "bogus", "unit:", "unit:a/b.service", "unit:nginx.socket", "unit:unicache-agent",
    "exe:usr/bin/prog", "exe:/usr/../usr/bin/prog", "exe:/no/such/program", "cgroup:/",
    "cgroup:/a//b", "cgroup:/a#b", "Everywhere", "exe:",
])
def test_a_bad_target_exits_2_with_one_line_and_changes_nothing(
        guest: Guest, scope: ScopeRun, target: str) -> None:
    ran = scope("add", "exe:/usr/bin/prog", target)  # the good one is not applied either
    assert ran.code == 2
    assert len(ran.said) == 1 and ran.said[0].startswith("unicache-agent: scope add: "), ran.err
    assert ran.out == ""
    assert not guest.conf.exists() and not guest.preload.exists()


def test_a_bad_flag_exits_2_with_one_line(scope: ScopeRun) -> None:
    for argv in (("add", "--bogus", "unit:a"), ("frob",), ("list", "extra"), ()):
        ran = scope(*argv)
        assert ran.code == 2 and len(ran.said) == 1, (argv, ran.err)
        assert "--help" in ran.said[0]


def test_a_shim_that_does_not_load_is_never_scoped(
        guest: Guest, scope: ScopeRun, shims: Shims) -> None:
    shutil.copy(shims.crashing, guest.at(SHIM))
    for target in ("exe:/usr/bin/prog", "unit:a"):
        ran = scope("add", target)
        assert ran.code == 1 and len(ran.said) == 1, ran.err
        assert "does not load in a test process" in ran.said[0], ran.said
    assert not guest.preload.exists() and not guest.dropin("a.service").exists()
    assert guest.lines() == []


def test_only_root_changes_scopes_and_anyone_may_list_them(
        shims: Shims) -> None:
    """Run as `nobody` on a root-owned root when the tests run as root; as this user on the
    real / otherwise (refused before anything is looked at)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "guest-agent")}
    env.pop("UNICACHE_SYSTEMCTL", None)
    user = None
    # the guest's kind of python3 (stdlib only); the .venv's lives under /root, closed to nobody
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    where = Path(tempfile.mkdtemp(prefix="uc-scope-"))  # 0700 pytest dirs hide it from nobody
    try:
        where.chmod(0o755)
        if os.geteuid() == 0:
            guest = make_guest(where / "root", shims.good)
            env["UNICACHE_SCOPE_ROOT"] = str(guest.root)
            user = "nobody"
        else:
            guest = Guest(Path("/"))
            env["UNICACHE_SCOPE_ROOT"] = "/"
        conf_before = guest.conf.read_bytes() if guest.conf.exists() else None
        for argv in (["add", "exe:/usr/bin/prog"], ["remove", "unit:a"], ["off"], ["apply"]):
            done = subprocess.run([python, "-m", "unicache_agent", "scope", *argv],
                                  env=env, user=user, capture_output=True, text=True)
            assert done.returncode == 2, (argv, done.stderr)
            assert done.stderr.count("\n") == 1 and "only root" in done.stderr, done.stderr
        assert (guest.conf.read_bytes() if guest.conf.exists() else None) == conf_before
        done = subprocess.run([python, "-m", "unicache_agent", "scope", "list"],
                              env=env, user=user, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    finally:
        shutil.rmtree(where)


# -- everywhere and its budgets -----------------------------------------------------------

_OVER = json.dumps({"cases": [
    {"case": "read_4k", "upper_ns": 912.4, "limit_ns": 500, "met": False},
    {"case": "pread_256k", "upper_ns": 40000, "limit_ns": 60000, "met": True},
    {"case": "readv_4k", "upper_ns": 1500, "limit_ns": 700, "met": False}], "met": False})
_MET = json.dumps({"cases": [
    {"case": "read_4k", "upper_ns": 300, "limit_ns": 500, "met": True}], "met": True})


def test_everywhere_is_refused_without_a_budget_runner_and_says_how_to_force(
        guest: Guest, scope: ScopeRun) -> None:
    ran = scope("add", "everywhere")
    assert ran.code == 2 and len(ran.said) == 1, ran.err
    assert "uc_bench is not installed" in ran.said[0] and "--force" in ran.said[0]
    assert not guest.preload.exists() and guest.lines() == []


def test_everywhere_is_refused_over_budget_naming_the_failing_cases(
        guest: Guest, scope: ScopeRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICACHE_UC_BENCH", str(_bench(tmp_path, _OVER, 1)))
    ran = scope("add", "everywhere")
    assert ran.code == 2 and len(ran.said) == 1, ran.err
    assert "2 of 3 cases" in ran.said[0]
    assert "read_4k 912 ns > 500 ns" in ran.said[0] and "readv_4k 1500 ns > 700 ns" in ran.said[0]
    assert "pread_256k" not in ran.said[0]
    # under the shim, over a fresh file no table names (no agent table here: "none")
    args = (tmp_path / "bench.args").read_text().split()
    assert args[:2] == ["budget", "--file"] and args[3:] == ["--table-state", "none"]
    assert not Path(args[2]).exists()  # the measurement's file is gone again
    assert not guest.preload.exists() and guest.lines() == []


@pytest.mark.parametrize(("stdout", "code"), [
    ("not json", 0), (_MET, 1), (json.dumps({"cases": [], "met": False}), 0), ("", 139)])
def test_everywhere_is_refused_when_the_runner_does_not_say_every_budget_is_met(
        guest: Guest, scope: ScopeRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        stdout: str, code: int) -> None:
    monkeypatch.setenv("UNICACHE_UC_BENCH", str(_bench(tmp_path, stdout, code)))
    ran = scope("add", "everywhere")
    assert ran.code == 2 and len(ran.said) == 1 and "refused" in ran.said[0], ran.err
    assert not guest.preload.exists()


def test_everywhere_within_budget_or_forced_preloads_the_shim(
        guest: Guest, scope: ScopeRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICACHE_UC_BENCH", str(_bench(tmp_path, _MET, 0)))
    ran = scope("add", "everywhere")
    assert ran.code == 0, ran.err
    assert guest.lines() == ["everywhere"] and guest.preload.read_text() == SHIM + "\n"
    assert scope("remove", "everywhere").code == 0 and not guest.preload.exists()

    (tmp_path / "bench.args").unlink()
    monkeypatch.setenv("UNICACHE_UC_BENCH", str(_bench(tmp_path, _OVER, 1)))
    ran = scope("add", "--force", "everywhere")
    assert ran.code == 0 and "skipped (--force)" in ran.out, ran.err
    assert not (tmp_path / "bench.args").exists()  # not even run
    assert guest.lines() == ["everywhere"] and guest.preload.read_text() == SHIM + "\n"


# -- the kill switch, list, apply --------------------------------------------------------


def test_off_and_on_add_and_remove_the_kill_switch_only(
        guest: Guest, scope: ScopeRun) -> None:
    assert scope("add", "exe:/usr/bin/prog").code == 0
    ran = scope("off")
    assert ran.code == 0
    assert "running processes keep their state" in ran.out
    assert "unicache.shim=off on the kernel command line" in ran.out
    assert guest.lines() == ["exe /usr/bin/prog", "off"]
    ino = guest.conf.stat().st_ino
    assert "already off" in scope("off").out and guest.conf.stat().st_ino == ino
    listed = json.loads(scope("list", "--json").out)
    assert listed["off"] is True and listed["scopes"][0]["in_effect"] is False
    assert guest.preload.read_text() == SHIM + "\n"  # the kill switch is the shim's to read
    assert scope("on").code == 0
    assert guest.lines() == ["exe /usr/bin/prog"]
    assert "was not off" in scope("on").out


def test_list_says_what_each_scope_does_and_which_is_not_in_effect(
        guest: Guest, scope: ScopeRun) -> None:
    ran = scope("list")
    assert ran.code == 0 and ran.out.startswith("no scope")
    assert scope("add", "unit:a", "exe:/usr/bin/prog", "cgroup:/system.slice/x").code == 0
    guest.dropin("a.service").unlink()  # by hand
    lines = scope("list").out.splitlines()
    assert [line.split()[0] for line in lines] == [
        "unit:a.service", "exe:/usr/bin/prog", "cgroup:/system.slice/x"]
    assert "NOT IN EFFECT" in lines[0] and "drop-in is missing" in lines[0]
    assert "processes running /usr/bin/prog" in lines[1] and "NOT IN EFFECT" not in lines[1]
    listed = json.loads(scope("list", "--json").out)
    assert [(e["target"], e["in_effect"]) for e in listed["scopes"]] == [
        ("unit:a.service", False), ("exe:/usr/bin/prog", True),
        ("cgroup:/system.slice/x", True)]
    assert listed["preload"] is True and listed["off"] is False


def test_apply_makes_the_files_match_shim_conf(
        guest: Guest, scope: ScopeRun) -> None:
    guest.conf.parent.mkdir(parents=True)
    guest.conf.write_text("# kept\nunit a.service\nexe /usr/bin/prog\n")
    ran = scope("apply")
    assert ran.code == 0 and ran.err == "", ran.err
    assert guest.dropin("a.service").is_file() and guest.preload.read_text() == SHIM + "\n"
    assert guest.reloads == 1
    ran = scope("apply")  # again: nothing to do, nothing said
    assert (ran.code, ran.out, ran.err, guest.reloads) == (0, "", "", 1)


def test_apply_takes_an_unscoped_global_preload_out_and_says_so_once(
        guest: Guest, scope: ScopeRun) -> None:
    guest.preload.write_text(SHIM + "\n" + OTHER_LIB + "\n")  # what a version before scopes left
    ran = scope("apply")
    assert ran.code == 0 and len(ran.said) == 1, ran.err
    assert "no longer preloaded in every process" in ran.said[0]
    assert "scope add" in ran.said[0]
    assert guest.preload.read_text() == OTHER_LIB + "\n"
    assert scope("apply").err == ""  # said once
    # a deb upgrade: the old prerm took the line out already; the preinst's mark remains
    ran = scope("apply", "--was-global")
    assert ran.code == 0 and len(ran.said) == 1 and "no longer preloaded" in ran.said[0]


def test_apply_with_a_shim_that_does_not_load_takes_every_scope_out_in_one_line(
        guest: Guest, scope: ScopeRun, shims: Shims) -> None:
    assert scope("add", "unit:a", "exe:/usr/bin/prog").code == 0
    shutil.copy(shims.crashing, guest.at(SHIM))  # an upgrade brought a broken one
    ran = scope("apply")
    assert ran.code == 1 and len(ran.said) == 1, ran.err
    assert "not applied" in ran.said[0] and "does not load" in ran.said[0]
    assert not guest.dropin("a.service").exists() and not guest.preload.exists()
    assert guest.lines() == ["unit a.service", "exe /usr/bin/prog"]  # kept for a fixed one


def test_a_root_other_than_slash_never_reloads_this_machines_systemd(
        guest: Guest, scope: ScopeRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\ntouch {tmp_path}/host-systemctl-ran\n")
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("UNICACHE_SYSTEMCTL")
    assert scope("add", "unit:a").code == 0 and guest.dropin("a.service").is_file()
    assert not (tmp_path / "host-systemctl-ran").exists()


def test_the_agent_command_dispatches_scope_and_its_help_names_it(
        guest: Guest, capsys: pytest.CaptureFixture[str]) -> None:
    assert agent_main(["scope", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scopes"] == []
    with pytest.raises(SystemExit):
        agent_main(["--help"])
    assert "unicache-agent scope" in capsys.readouterr().out
