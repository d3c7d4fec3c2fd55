/* SPDX-License-Identifier: MIT */
/*
 * uc_selftest_bench.c - read() throughput over a cached file (lseek 0 + read SIZE):
 *   `uc_selftest bench FILE SIZE SECONDS`    one path, in MB/s;
 *   `uc_selftest abbench FILE SIZE SECONDS`  in one process under LD_PRELOAD, blocks of 8
 *                                            calls through the shim's read() alternating
 *                                            with blocks through libc's own read().
 */
#include "uc_selftest.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int cmd_bench(char **argv)
{
	size_t n = (size_t)atol(argv[3]);
	double secs = atof(argv[4]), el;
	int fd = open_stat(argv[2], O_RDONLY);
	struct timespec a, b;
	unsigned long long bytes = 0;
	long it = 0;

	if (fd < 0 || n > MAXBUF)
		return 2;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do {
		for (int j = 0; j < 64; j++) {
			ssize_t r;

			lseek(fd, 0, SEEK_SET);
			r = read(fd, bufA, n);
			if (r < 0)
				return 2;
			bytes += (unsigned long long)r;
			it++;
		}
		clock_gettime(CLOCK_MONOTONIC, &b);
		el = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
	} while (el < secs);
	printf("mbps=%.1f reads=%ld seconds=%.3f\n", (double)bytes / el / 1e6, it, el);
	return 0;
}

typedef ssize_t (*read_fn)(int, void *, size_t);
typedef off_t (*lseek_fn)(int, off_t, int);

static double block(int fd, size_t n, read_fn rd, lseek_fn sk, unsigned long long *bytes)
{
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int j = 0; j < 8; j++) {
		ssize_t r;

		sk(fd, 0, SEEK_SET);
		r = rd(fd, bufA, n);
		if (r > 0)
			*bytes += (unsigned long long)r;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
}

/*
 * Blocks of 8 calls alternate between the two paths; each block's time is kept and the
 * figures use the median block, so a block that lost the CPU to another process (the
 * machine is shared) does not count against either path.
 */
int cmd_abbench(char **argv)
{
	size_t n = (size_t)atol(argv[3]), cap, k = 0;
	double secs = atof(argv[4]), total = 0, *tw, *to;
	int fd = open_stat(argv[2], O_RDONLY);
	unsigned long long bw = 0, bo = 0;
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	read_fn plain_read;
	lseek_fn plain_lseek;

	if (fd < 0 || n > MAXBUF || !libc || secs <= 0 || secs > 600)
		return 2;
	plain_read = (read_fn)dlsym(libc, "read");
	plain_lseek = (lseek_fn)dlsym(libc, "lseek");
	if (!plain_read || !plain_lseek || plain_read == read)
		return 2; /* not under the shim: nothing to compare */
	cap = (size_t)(secs * 2e5) + 16;
	tw = calloc(cap, sizeof(double));
	to = calloc(cap, sizeof(double));
	if (!tw || !to)
		return 2;
	while (total < secs && k < cap) {
		/* alternate which goes first so drift hits both alike */
		if (k & 1) {
			tw[k] = block(fd, n, read, lseek, &bw);
			to[k] = block(fd, n, plain_read, plain_lseek, &bo);
		} else {
			to[k] = block(fd, n, plain_read, plain_lseek, &bo);
			tw[k] = block(fd, n, read, lseek, &bw);
		}
		total += tw[k] + to[k];
		k++;
	}
	qsort(tw, k, sizeof(double), cmp_double);
	qsort(to, k, sizeof(double), cmp_double);
	printf("with_mbps=%.1f without_mbps=%.1f blocks=%zu mean_with_mbps=%.1f "
	       "mean_without_mbps=%.1f\n",
	       8.0 * (double)n / tw[k / 2] / 1e6, 8.0 * (double)n / to[k / 2] / 1e6, k,
	       (double)bw / (total / 2) / 1e6, (double)bo / (total / 2) / 1e6);
	free(tw);
	free(to);
	return 0;
}
