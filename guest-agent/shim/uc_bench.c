/* SPDX-License-Identifier: MIT */
/*
 * uc_bench.c - the entry point of uc_bench, `unicache bench shim`'s driver: what a call
 * pays under the preload this process runs with (uc_bench.h: the method).
 *
 *   uc_bench cell --kind K --size N [--pattern seq|reread] [--file F] [--seconds S]
 *                 [--cpu C] [--blocks]
 *       K: read, pread, readv, fread (on F, a page-cached regular file) or pipe, socket
 *       (a write of N bytes and its read back); pinned to C (default: the highest CPU
 *       allowed), S seconds of alternating blocks after a warm-up. Prints one JSON object:
 *       the added ns per call (median of the paired differences, its 95 % interval), each
 *       path's median, the ratio without / with, whether K is interposed at all, "blocks"
 *       the number of samples (of four blocks each) and with --blocks each sample's ns per
 *       call on each path (with_blocks, without_blocks: for a caller that pools runs).
 *   uc_bench spawn ...      process starts under two preloads (uc_bench_spawn.c)
 *   uc_bench budget ...     the shim's budgets, met or not (uc_bench_budget.c)
 *
 * Exit status 0 = measured; 1 = (budget) a budget not met; 2 = usage or setup error.
 */
#define _GNU_SOURCE
#include "uc_bench.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

/* the cell kinds, in the order of enum ucb_kind then enum ucb_chan_kind */
static const char *const kinds[] = {"read", "pread", "readv", "fread", "pipe", "socket"};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

static int index_of(const char *name, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(name, names[i]) == 0)
			return (int)i;
	return -1;
}

/* one cell's JSON line */
static void print_cell(const char *kind, size_t size, const char *pattern, int cpu,
		       const struct ucb_pair *pair, const struct ucb_samples *samples,
		       const struct ucb_summary *sum, int blocks)
{
	/* pipe and socket cells are interposed through their read (and write) */
	const char *fn = strcmp(kind, "pipe") == 0 || strcmp(kind, "socket") == 0 ? "read" : kind;

	printf("{\"cmd\":\"cell\",\"kind\":\"%s\",\"size\":%zu,\"pattern\":\"%s\",\"cpu\":%d,"
	       "\"calls_per_block\":%d,\"interposed\":%s,",
	       kind, size, pattern, cpu, pair->calls, ucb_interposed(fn) ? "true" : "false");
	ucb_print_summary(stdout, sum, "ns");
	if (blocks) {
		putchar(',');
		ucb_print_blocks(stdout, samples);
	}
	printf("}\n");
}

static int cmd_cell(int argc, char **argv)
{
	static const struct option opts[] = {
		{"kind", required_argument, NULL, 'k'}, {"size", required_argument, NULL, 'n'},
		{"pattern", required_argument, NULL, 'p'}, {"file", required_argument, NULL, 'f'},
		{"seconds", required_argument, NULL, 's'}, {"cpu", required_argument, NULL, 'c'},
		{"blocks", no_argument, NULL, 'b'}, {NULL, 0, NULL, 0}};
	const char *file = NULL;
	int kind = -1, pattern = UCB_SEQ, cpu = -1, blocks = 0, opt, rc = 2;
	long size = 0;
	double seconds = 1.0;
	struct ucb_file_cell fc;
	struct ucb_chan_cell cc;
	const struct ucb_pair *pair;
	struct ucb_samples samples = {0};
	struct ucb_summary sum;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'k': kind = index_of(optarg, kinds, NKINDS); break;
		case 'n': size = strtol(optarg, NULL, 10); break;
		case 'p': pattern = index_of(optarg, ucb_pattern_names, 2); break;
		case 'f': file = optarg; break;
		case 's': seconds = strtod(optarg, NULL); break;
		case 'c': cpu = (int)strtol(optarg, NULL, 10); break;
		case 'b': blocks = 1; break;
		default: return 2;
		}
	}
	if (kind < 0 || pattern < 0 || size < 1 || size > (1 << 24) || !(seconds > 0) ||
	    seconds > 3600 || (kind <= UCB_FREAD && !file) || optind != argc) {
		fprintf(stderr, "uc_bench cell: --kind read|pread|readv|fread|pipe|socket --size N "
				"(1..16 MiB) [--pattern seq|reread] [--file F: for file kinds] "
				"[--seconds S (0..3600)] [--cpu C] [--blocks]\n");
		return 2;
	}
	if ((cpu = ucb_pin(cpu)) < 0 || ucb_libc_init() != 0) {
		fprintf(stderr, "uc_bench cell: cannot pin to a CPU or find libc's functions\n");
		return 2;
	}
	if (kind <= UCB_FREAD) {
		if (ucb_file_open(&fc, file, (enum ucb_kind)kind, (enum ucb_pattern)pattern,
				  (size_t)size) != 0) {
			fprintf(stderr, "uc_bench cell: cannot open and read %s (at least 1 MiB, "
					"and one block, of readable file)\n", file);
			return 2;
		}
		pair = &fc.pair;
	} else {
		if (ucb_chan_open(&cc, (enum ucb_chan_kind)(kind - UCB_FREAD - 1),
				  (size_t)size) != 0) {
			fprintf(stderr, "uc_bench cell: cannot make a %s of %ld-byte calls (at "
					"most 64 KiB)\n", kinds[kind], size);
			return 2;
		}
		pair = &cc.pair;
	}
	if (ucb_alternate(pair, seconds, &samples) != 0 || ucb_summarize(&samples, &sum) != 0)
		fprintf(stderr, "uc_bench cell: a %s call failed or returned short\n", kinds[kind]);
	else {
		print_cell(kinds[kind], (size_t)size, kind <= UCB_FREAD ? ucb_pattern_names[pattern]
									: "-",
			   cpu, pair, &samples, &sum, blocks);
		rc = 0;
	}
	ucb_samples_free(&samples);
	if (kind <= UCB_FREAD)
		ucb_file_close(&fc);
	else
		ucb_chan_close(&cc);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "cell") == 0)
		return cmd_cell(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "spawn") == 0)
		return ucb_cmd_spawn(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "budget") == 0)
		return ucb_cmd_budget(argc - 1, argv + 1);
	fprintf(stderr, "usage: uc_bench cell --kind K --size N [--pattern P] [--file F] ... | "
			"spawn --count N --with SO --without SO -- PROGRAM [ARG...] | "
			"budget --file F [--seconds S] [--table-state placed|unplaced|none]\n");
	return 2;
}
