/* SPDX-License-Identifier: MIT */
/*
 * uc_selftest_seccomp.c - `uc_selftest seccomp PLACED UNPLACED`: the shim's read path makes
 * no system call but the call's own.
 *
 * Each case runs in a child of its own under a seccomp filter that allows exactly the
 * system calls of the call it makes (and exit_group); any other kills the child with SIGSYS.
 * The filter is installed through libc's own prctl and syscall, which the shim does not
 * see: so what is checked is the read path itself, not the shim noticing a sandbox
 * (uc_sandbox.c). PLACED is a file the table places on every CPU (the shim looks it up,
 * counts, stays: no migration); UNPLACED is a file the table does not name. Each child
 * makes its case's calls once before the filter, so that what a process or a thread does
 * once (learning whether its mechanisms may act, moving once to a vCPU no other reader
 * holds and claiming it, a sendfile loop's first call) is behind it, then again under it.
 * Prints one line per case, "case=NAME ok" or "case=NAME killed by signal N" /
 * "case=NAME failed"; exit status 0 when every case passed.
 */
#include "uc_selftest.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define CALLS 24   /* calls per run: more than a 64 KiB chunk's worth at 4 KiB */
#define SENDS 6    /* sendfile calls per run: two runs of 4 KiB fit a pipe */
#define STREAM 12  /* 4 KiB reads of a pipe or socket the parent filled */

typedef long (*syscall_fn)(long, ...);
typedef int (*prctl_fn)(int, ...);

struct sc_case {
	const char *name;
	int nr;        /* the one system call allowed besides exit_group (and nr2) */
	int nr2;       /* -1: none */
	int (*run)(int fd, size_t n);
	int placed;    /* 1: PLACED, 0: UNPLACED, -1: a pipe or socket made by the case */
	size_t n;
	int warm;      /* run once before the filter too */
};

static int sc_pipe[2], sc_sock[2];

static int run_read(int fd, size_t n)
{
	for (int i = 0; i < CALLS; i++)
		if (read(fd, bufA, n) != (ssize_t)n)
			return 1;
	return 0;
}

static int run_pread(int fd, size_t n)
{
	for (int i = 0; i < CALLS; i++)
		if (pread(fd, bufA, n, (off_t)(i * n)) != (ssize_t)n)
			return 1;
	return 0;
}

static int run_readv(int fd, size_t n)
{
	struct iovec v[2] = {{bufA, n / 2}, {bufB, n - n / 2}};

	for (int i = 0; i < CALLS; i++)
		if (readv(fd, v, 2) != (ssize_t)n)
			return 1;
	return 0;
}

static int run_preadv(int fd, size_t n)
{
	struct iovec v = {bufA, n};

	for (int i = 0; i < CALLS; i++)
		if (preadv(fd, &v, 1, (off_t)(i * n)) != (ssize_t)n)
			return 1;
	return 0;
}

static int run_preadv2(int fd, size_t n)
{
	struct iovec v = {bufA, n};

	for (int i = 0; i < CALLS; i++)
		if (preadv2(fd, &v, 1, -1, 0) != (ssize_t)n)
			return 1;
	return 0;
}

/* into a pipe the parent drains after the case */
static int run_sendfile_at(int fd, size_t n)
{
	off_t off = 0;

	for (int i = 0; i < SENDS; i++)
		if (sendfile(sc_pipe[1], fd, &off, n) != (ssize_t)n || off != (off_t)((i + 1) * n))
			return 1;
	return 0;
}

static int run_sendfile_pos(int fd, size_t n)
{
	for (int i = 0; i < SENDS; i++)
		if (sendfile(sc_pipe[1], fd, NULL, n) != (ssize_t)n)
			return 1;
	return 0;
}

static int run_lseek(int fd, size_t n)
{
	for (int i = 0; i < CALLS; i++)
		if (lseek(fd, (off_t)(i * n), SEEK_SET) != (off_t)(i * n))
			return 1;
	return 0;
}

/* the parent filled the pipe and the socket with STREAM x n bytes: read them back */
static int run_pipe_read(int fd, size_t n)
{
	(void)fd;
	for (int i = 0; i < STREAM; i++)
		if (read(sc_pipe[0], bufA, n) != (ssize_t)n)
			return 1;
	return 0;
}

static int run_sock_read(int fd, size_t n)
{
	(void)fd;
	for (int i = 0; i < STREAM; i++)
		if (read(sc_sock[0], bufA, n) != (ssize_t)n)
			return 1;
	return 0;
}

static int run_sock_write(int fd, size_t n)
{
	(void)fd;
	for (int i = 0; i < STREAM; i++)
		if (write(sc_sock[1], bufA, n) != (ssize_t)n)
			return 1;
	return 0;
}

static const struct sc_case CASES[] = {
	{"read-placed-4k", SYS_read, -1, run_read, 1, 4096, 1},
	{"read-placed-64k", SYS_read, -1, run_read, 1, 65536, 1},
	{"read-unplaced-4k", SYS_read, -1, run_read, 0, 4096, 1},
	{"read-unplaced-64k", SYS_read, -1, run_read, 0, 65536, 1},
	{"read-placed-512", SYS_read, -1, run_read, 1, 512, 1},
	{"pread-placed-4k", SYS_pread64, -1, run_pread, 1, 4096, 1},
	{"pread-unplaced-4k", SYS_pread64, -1, run_pread, 0, 4096, 1},
	{"readv-placed-4k", SYS_readv, -1, run_readv, 1, 4096, 1},
	{"readv-unplaced-4k", SYS_readv, -1, run_readv, 0, 4096, 1},
	{"preadv-placed-4k", SYS_preadv, -1, run_preadv, 1, 4096, 1},
	{"preadv2-unplaced-4k", SYS_preadv2, -1, run_preadv2, 0, 4096, 1},
	{"sendfile-offset-placed-4k", SYS_sendfile, -1, run_sendfile_at, 1, 4096, 1},
	{"sendfile-offset-unplaced-4k", SYS_sendfile, -1, run_sendfile_at, 0, 4096, 1},
	{"sendfile-position-placed-4k", SYS_sendfile, -1, run_sendfile_pos, 1, 4096, 1},
	{"lseek-placed", SYS_lseek, -1, run_lseek, 1, 4096, 1},
	{"pipe-read-4k", SYS_read, -1, run_pipe_read, -1, 4096, 0},
	{"socket-read-4k", SYS_read, -1, run_sock_read, -1, 4096, 0},
	{"socket-write-4k", SYS_write, -1, run_sock_write, -1, 4096, 0},
};

/* Allow nr, nr2 and exit_group on x86-64; kill the process on anything else. */
static int sc_install(int nr, int nr2)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)(nr2 >= 0 ? nr2 : nr), 1, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit_group, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	};
	struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(f[0])), f};
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	prctl_fn libc_prctl = libc ? (prctl_fn)dlsym(libc, "prctl") : NULL;
	syscall_fn libc_syscall = libc ? (syscall_fn)dlsym(libc, "syscall") : NULL;

	if (!libc_prctl || !libc_syscall || libc_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return (int)libc_syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

/* One case in a child of its own: 0 passed, else printed. */
static int sc_run(const struct sc_case *c, const char *placed, const char *unplaced)
{
	int fd = -1, st;
	pid_t pid;

	if (c->placed >= 0) {
		fd = open_stat(c->placed ? placed : unplaced, O_RDONLY);
		if (fd < 0)
			return 2;
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return 2;
	if (pid == 0) {
		if (c->warm && c->run(fd, c->n))
			_exit(4);
		if (sc_install(c->nr, c->nr2) != 0)
			_exit(3);
		_exit(c->run(fd, c->n) ? 1 : 0);
	}
	if (fd >= 0)
		close(fd);
	if (waitpid(pid, &st, 0) != pid)
		return 2;
	if (WIFSIGNALED(st)) {
		printf("case=%s killed by signal %d\n", c->name, WTERMSIG(st));
		return 1;
	}
	if (WEXITSTATUS(st) != 0) { /* 1: under the filter, 3: no filter, 4: before it */
		printf("case=%s failed (status %d)\n", c->name, WEXITSTATUS(st));
		return 1;
	}
	printf("case=%s ok\n", c->name);
	return 0;
}

int cmd_seccomp(char **argv)
{
	int fd, bad = 0;
	size_t i;

	/* the file is read whole once, so that no case waits for the disk */
	fd = open(argv[2], O_RDONLY);
	if (fd < 0 || read(fd, bufA, 65536) != 65536)
		return 2;
	close(fd);
	/* the read ends never block: the parent drains what a case may not have written */
	if (pipe(sc_pipe) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sc_sock) != 0 ||
	    fcntl(sc_pipe[0], F_SETFL, O_NONBLOCK) != 0 || fcntl(sc_sock[0], F_SETFL, O_NONBLOCK) != 0)
		return 2;
	memset(bufA, 'x', 4096);
	for (i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
		const struct sc_case *c = &CASES[i];
		int r;

		/* what the read cases of pipes and sockets read, written by the parent */
		if (c->run == run_pipe_read || c->run == run_sock_read)
			for (int k = 0; k < STREAM; k++)
				if (write(c->run == run_pipe_read ? sc_pipe[1] : sc_sock[1], bufA,
					  c->n) != (ssize_t)c->n)
					return 2;
		r = sc_run(c, argv[2], argv[3]);
		if (r == 2)
			return 2;
		bad |= r;
		/* drain what a sendfile case left in the pipe, and the socket's far end */
		while (read(sc_pipe[0], bufB, 65536) > 0)
			;
		while (read(sc_sock[0], bufB, 65536) > 0)
			;
	}
	return bad;
}
