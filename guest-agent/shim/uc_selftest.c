/* SPDX-License-Identifier: MIT */
/*
 * uc_selftest.c - checks that libunicache.so never changes what a read returns.
 *
 *   uc_selftest check SEED ITERS FILE...   random reads through libc (interposed when
 *                                          run under LD_PRELOAD) against the same reads
 *                                          made with raw syscalls on a second open file
 *                                          description; compares bytes, return value,
 *                                          errno and file offset; also error cases
 *   uc_selftest threads SEED ITERS FILE    4 threads of random pread/read on one file,
 *                                          each compared with raw syscalls (run while
 *                                          the table is republished and harvested)
 *   uc_selftest migrate FILE SIZE CPU      from CPU, one read() of SIZE bytes; prints
 *                                          "cpu=N mask=a,b,..." (where the thread ended)
 *   uc_selftest bench FILE SIZE SECONDS    read() throughput in MB/s (pread-style loop
 *                                          over a cached file: lseek 0 + read SIZE)
 *   uc_selftest seccomp PLACED UNPLACED    each kind of call in a child under a seccomp
 *                                          filter that allows only that call's system
 *                                          call: the shim adds none (uc_selftest_seccomp.c)
 *   uc_selftest abbench FILE SIZE SECONDS  the same, in one process under LD_PRELOAD:
 *                                          blocks of 8 calls through the shim's read()
 *                                          alternate with blocks through libc's own
 *                                          read(); prints both throughputs (median
 *                                          block, and mean)
 *   uc_selftest calls N FILE               getppid, open+close, open+fstat+close with
 *                                          glibc's fstat and the classic one: ns per
 *                                          iteration, JSON (uc_selftest_calls.c)
 *
 * Exit status 0 = all identical; 1 = a mismatch (printed); 2 = usage or setup error.
 *
 * This file is the entry point; each subcommand is in a file of its own (uc_selftest.h).
 */
#include "uc_selftest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned char *bufA, *bufB;

int main(int argc, char **argv)
{
	bufA = aligned_alloc(4096, MAXBUF);
	bufB = aligned_alloc(4096, MAXBUF);
	if (!bufA || !bufB)
		return 2;
	if (argc >= 5 && strcmp(argv[1], "check") == 0)
		return cmd_check(argc, argv);
	if (argc == 5 && strcmp(argv[1], "threads") == 0)
		return cmd_threads(argv);
	if (argc == 5 && strcmp(argv[1], "migrate") == 0)
		return cmd_migrate(argv);
	if (argc == 5 && strcmp(argv[1], "bench") == 0)
		return cmd_bench(argv);
	if (argc == 5 && strcmp(argv[1], "abbench") == 0)
		return cmd_abbench(argv);
	if (argc == 4 && strcmp(argv[1], "seccomp") == 0)
		return cmd_seccomp(argv);
	if (argc == 4 && strcmp(argv[1], "calls") == 0)
		return cmd_calls(argv);
	fprintf(stderr, "usage: uc_selftest check SEED ITERS FILE... | threads SEED ITERS FILE | "
			"migrate FILE SIZE CPU | seccomp PLACED UNPLACED | "
			"bench|abbench FILE SIZE SECONDS | calls N FILE\n");
	return 2;
}
