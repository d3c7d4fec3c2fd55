/* SPDX-License-Identifier: MIT */
/*
 * uc_selftest_migrate.c - `uc_selftest migrate FILE SIZE CPU`: from CPU, one read() of SIZE
 * bytes; prints "ret=N cpu=N mask=a,b,..." (where the thread ended up, and its affinity).
 */
#include "uc_selftest.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int cmd_migrate(char **argv)
{
	size_t n = (size_t)atol(argv[3]);
	int fd = open_stat(argv[2], O_RDONLY), i, first = 1;
	cpu_set_t m;
	ssize_t r;

	if (fd < 0 || n > MAXBUF)
		return 2;
	/* start on the given CPU (after the shim loaded, so it may still move us) */
	CPU_ZERO(&m);
	CPU_SET(atoi(argv[4]), &m);
	if (sched_setaffinity(0, sizeof(m), &m) < 0)
		return 2;
	sched_yield();
	r = read(fd, bufA, n);
	printf("ret=%zd cpu=%d mask=", r, sched_getcpu());
	if (sched_getaffinity(0, sizeof(m), &m) == 0)
		for (i = 0; i < CPU_SETSIZE; i++)
			if (CPU_ISSET(i, &m)) {
				printf(first ? "%d" : ",%d", i);
				first = 0;
			}
	printf("\n");
	return 0;
}
