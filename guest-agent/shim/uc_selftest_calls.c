/* SPDX-License-Identifier: MIT */
/*
 * uc_selftest_calls.c - calls: what the system calls the shim chooses between cost, here.
 *
 *   uc_selftest calls N FILE
 *
 * Times N iterations of each of: getppid (a bare system call); open + close of FILE; open +
 * glibc's fstat (newfstatat with an empty path) + close; open + the classic fstat system
 * call + close. Prints one JSON object of nanoseconds per iteration, the median of 5
 * batches of N: on a guest whose clock counts instructions (unicache bench programs
 * --clock instructions) they are instructions. Run without the shim: it is the kernel's
 * cost the shim's choice of call (uc_sandbox.c uc_fstat) rests on.
 */
#include "uc_selftest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>

#define BATCHES 5

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* how = 0: getppid; 1: open + close; 2: + glibc's fstat; 3: + the classic fstat */
static int one(int how, const char *path)
{
	struct stat st;
	int fd;

	if (how == 0)
		return syscall(SYS_getppid) > 0 ? 0 : -1;
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	if (how == 2 && fstat(fd, &st) < 0)
		return -1;
	if (how == 3 && syscall(SYS_fstat, fd, &st) < 0)
		return -1;
	return close(fd);
}

static double per_call(int how, const char *path, long n)
{
	double t[BATCHES];
	int b;
	long i;

	for (b = 0; b < BATCHES; b++) {
		double a = now_ns();

		for (i = 0; i < n; i++)
			if (one(how, path) < 0)
				return -1;
		t[b] = (now_ns() - a) / (double)n;
	}
	qsort(t, BATCHES, sizeof(t[0]), cmp_double);
	return t[BATCHES / 2];
}

int cmd_calls(char **argv)
{
	static const char *names[] = {"getppid", "open_close", "open_fstat_close",
				      "open_classic_fstat_close"};
	long n = atol(argv[2]);
	double v[4];
	int how;

	if (n <= 0 || n > 10000000)
		return 2;
	for (how = 0; how < 4; how++)
		if ((v[how] = per_call(how, argv[3], n)) < 0)
			return 2;
	printf("{");
	for (how = 0; how < 4; how++)
		printf("%s\"%s\": %.1f", how ? ", " : "", names[how], v[how]);
	printf("}\n");
	return 0;
}
