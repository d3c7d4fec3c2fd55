/* SPDX-License-Identifier: MIT */
/*
 * uc_selftest.h - what the files of uc_selftest share: the read buffers and one entry
 * point per subcommand (the CLI is described in uc_selftest.c).
 *
 *   uc_selftest.c          main: buffers, dispatch, usage
 *   uc_selftest_check.c    check: random reads and error cases against raw syscalls
 *   uc_selftest_threads.c  threads: 4 threads of random reads against raw syscalls
 *   uc_selftest_migrate.c  migrate: where one read() left the thread
 *   uc_selftest_bench.c    bench, abbench: read() throughput
 *   uc_selftest_seccomp.c  seccomp: no system call of the shim's on the read path
 *   uc_selftest_calls.c    calls: the system calls the shim chooses between, timed
 */
#ifndef UC_SELFTEST_H
#define UC_SELFTEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAXBUF (1u << 21)

/* open, then fstat, as most programs do: the shim learns a descriptor's file from the
 * program's own stat (uc_interpose_stat.c), and only a known file's reads may move the
 * thread or be served from a replica */
static inline int open_stat(const char *path, int flags)
{
	struct stat st;
	int fd = open(path, flags);

	if (fd >= 0 && fstat(fd, &st) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* two 4 KiB-aligned buffers of MAXBUF bytes each (main allocates them) */
extern unsigned char *bufA, *bufB;

/* each returns the exit status: 0 all identical (or done), 1 a mismatch, 2 usage or setup */
int cmd_check(int argc, char **argv);
int cmd_threads(char **argv);
int cmd_migrate(char **argv);
int cmd_bench(char **argv);
int cmd_abbench(char **argv);
int cmd_seccomp(char **argv);
int cmd_calls(char **argv);

/* qsort's order of doubles, ascending (the subcommands' medians) */
static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

#endif /* UC_SELFTEST_H */
