/* SPDX-License-Identifier: MIT */
/*
 * uc_selftest_threads.c - `uc_selftest threads SEED ITERS FILE`: 4 threads of random
 * pread/read on one file, each compared with raw syscalls (run while the table is
 * republished and harvested).
 */
#include "uc_selftest.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct thr {
	const char *path;
	uint64_t seed;
	long iters;
	long bad;
};

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	uint64_t st = t->seed;
	unsigned char *a = malloc(1 << 20), *b = malloc(1 << 20);
	int fa = open(t->path, O_RDONLY), fb = (int)syscall(SYS_openat, AT_FDCWD, t->path,
							      O_RDONLY, 0);
	struct stat sb;
	long k;

	if (!a || !b || fa < 0 || fb < 0 || fstat(fa, &sb) < 0) {
		t->bad = -1;
		return NULL;
	}
	for (k = 0; k < t->iters; k++) {
		uint64_t x = (st += 0x9e3779b97f4a7c15ull);
		size_t n;
		long off, ra, rb;

		x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
		n = (size_t)(x % (1 << 20));
		off = (long)((x >> 20) % ((uint64_t)sb.st_size + 1));
		memset(a, 1, n);
		memset(b, 1, n);
		if (k & 1) {
			ra = pread(fa, a, n, off);
			rb = syscall(SYS_pread64, fb, b, n, off);
		} else {
			lseek(fa, off, SEEK_SET);
			syscall(SYS_lseek, fb, off, SEEK_SET);
			ra = read(fa, a, n);
			rb = syscall(SYS_read, fb, b, n);
		}
		if (ra != rb || memcmp(a, b, n) != 0)
			t->bad++;
	}
	free(a);
	free(b);
	close(fa);
	close(fb);
	return NULL;
}

int cmd_threads(char **argv)
{
	pthread_t th[4];
	struct thr t[4];
	long bad = 0;
	int i;

	for (i = 0; i < 4; i++) {
		t[i].path = argv[4];
		t[i].seed = strtoull(argv[2], NULL, 0) + (uint64_t)i;
		t[i].iters = atol(argv[3]);
		t[i].bad = 0;
		if (pthread_create(&th[i], NULL, thr_main, &t[i]) != 0)
			return 2;
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		if (t[i].bad < 0)
			return 2;
		bad += t[i].bad;
	}
	printf("ops=%ld mismatches=%ld\n", 4 * atol(argv[3]), bad);
	return bad ? 1 : 0;
}
