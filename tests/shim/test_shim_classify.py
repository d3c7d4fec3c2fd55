"""What a descriptor's file costs to learn (uc_fdcache.c, uc_interpose_stat.c,
uc_pending.c, uc_sandbox.c uc_fstat).

An open makes no system call of the shim's: the program's own fstat tells the shim the
file (most programs ask it right after the open), and a file read by a program that never
asks is stat'ed once by the shim at its close, with the classic fstat system call (some
1,000 guest instructions, against 2,700 for glibc's fstat, newfstatat with an empty path:
docs/PERFORMANCE.md, "What an open costs"), only in a process the shim knows runs under no
seccomp filter: a filter written for today's glibc may allow the one and kill on the
other. Under a filter the shim asks nothing, and the counts of a file never stat'ed are
dropped and said. The counts are exact either way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.shim.shimtools import ShimEnv, build_files_reader

FILES = 40


# installs a filter that kills on the classic fstat and allows everything else (as a
# filter written for a glibc that never makes it may), then runs the program: the
# filter is there before the shim loads, as a service manager's is
NO_FSTAT = r"""
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fstat, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof(f) / sizeof(f[0]), f};
	if (argc < 2 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
		syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog))
		return 3;
	execv(argv[1], argv + 1);
	return 4;
}
"""


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("classify")
    (d / "no_fstat.c").write_text(NO_FSTAT)
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-o", str(d / "no_fstat"),
                    str(d / "no_fstat.c")], check=True)
    return {"reader": build_files_reader(d), "no_fstat": d / "no_fstat"}


def _files(d: Path) -> list[str]:
    out = []
    for i in range(FILES):
        p = d / f"f{i:02d}"
        p.write_bytes(b"x" * (1000 + i))
        out.append(str(p))
    return out


def _strace() -> str:
    path = shutil.which("strace")
    if path is None:
        pytest.fail("strace is needed (make setup installs it: guest-agent/agent.mk)")
    return path


def _trace(programs: dict[str, Path], env: dict[str, str], log: Path,
           *args: str) -> str:
    out = subprocess.run([_strace(), "-f", "-qq", "-e", "trace=fstat,newfstatat,openat",
                          "-o", str(log), str(programs["reader"]), *args], env=env,
                         capture_output=True, text=True, check=True)
    assert int(out.stdout) == sum(1000 + i for i in range(FILES))
    return log.read_text()


def _counted(env: ShimEnv, files: list[str]) -> list[int | None]:
    counted = {c.file_id: c.bytes_read for c in env.counters.harvest(0).chunks}
    return [counted.get(env.file_id(Path(f))) for f in files]


def _calls(trace: str, name: str) -> int:
    return len(re.findall(rf"^\d+\s+{name}\(", trace, re.M))


def test_a_program_that_stats_its_files_pays_no_system_call_of_the_shims(
        shim_env: ShimEnv, tmp_path: Path, programs: dict[str, Path]) -> None:
    files = _files(tmp_path)
    shim_env.table.publish(1, 65536, 4096, [])
    env = {k: v for k, v in shim_env.env.items() if k != "LD_PRELOAD"}
    bare = _trace(programs, env, tmp_path / "bare", "--stat", *files)
    shimmed = _trace(programs, shim_env.env, tmp_path / "shim", "--stat", *files)
    # the program's own 40 stats, the same with the shim as without it (the dynamic
    # loader's besides); the shim's opens are its table's and counters' only
    assert _calls(shimmed, "newfstatat") - _calls(bare, "newfstatat") <= 3
    assert _calls(shimmed, "fstat") == 0
    assert "/proc/self/status" not in shimmed
    assert _counted(shim_env, files) == [1000 + i for i in range(FILES)]


def test_a_program_that_never_stats_a_file_gets_one_classic_fstat_at_its_close(
        shim_env: ShimEnv, tmp_path: Path, programs: dict[str, Path]) -> None:
    files = _files(tmp_path)
    shim_env.table.publish(1, 65536, 4096, [])
    trace = _trace(programs, shim_env.env, tmp_path / "trace", *files)
    assert _calls(trace, "fstat") == FILES
    assert trace.count("/proc/self/status") == 1  # asked once: no filter here
    assert _counted(shim_env, files) == [1000 + i for i in range(FILES)]


@pytest.mark.parametrize("stat_first", [True, False], ids=["stats", "never-stats"])
def test_a_filter_that_kills_on_the_classic_fstat_is_never_tripped(
        shim_env: ShimEnv, tmp_path: Path, programs: dict[str, Path], stat_first: bool) -> None:
    files = _files(tmp_path)
    shim_env.table.publish(1, 65536, 4096, [])
    args = ["--stat", *files] if stat_first else files
    out = subprocess.run([str(programs["no_fstat"]), str(programs["reader"]), *args],
                         env=shim_env.env, capture_output=True, text=True)
    assert out.returncode == 0, f"killed or failed: {out.returncode} {out.stderr}"
    assert int(out.stdout) == sum(1000 + i for i in range(FILES))
    harvest = shim_env.counters.harvest(0)
    counted = {c.file_id: c.bytes_read for c in harvest.chunks}
    got = [counted.get(shim_env.file_id(Path(f))) for f in files]
    if stat_first:  # the program's stats told the shim every file
        assert got == [1000 + i for i in range(FILES)]
    else:  # under a filter the shim asks nothing: what it could not name is said dropped
        assert got == [None] * FILES
        assert harvest.dropped == FILES


def test_the_control_the_filter_does_kill_the_classic_fstat(
        tmp_path: Path, programs: dict[str, Path]) -> None:
    """The harness can fail: a program that makes the classic call under the filter dies."""
    probe = tmp_path / "probe.c"
    probe.write_text("#include <sys/stat.h>\n#include <sys/syscall.h>\n#include <unistd.h>\n"
                     "int main(void) { struct stat st; syscall(SYS_fstat, 0, &st); "
                     "return 0; }\n")
    subprocess.run(["gcc", "-O2", "-o", str(tmp_path / "probe"), str(probe)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([str(programs["no_fstat"]), str(tmp_path / "probe")], env=env,
                         capture_output=True)
    assert out.returncode == -31  # SIGSYS
