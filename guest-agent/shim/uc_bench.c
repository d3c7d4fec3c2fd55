/* SPDX-License-Identifier: MIT */
/*
 * uc_bench.c - the entry point of uc_bench, `unicache bench shim`'s driver: what a call
 * pays under the preload this process runs with (uc_bench.h: the method).
 *
 *   uc_bench cell --kind K --size N [--pattern seq|reread] [--file F] [--dir D]
 *                 [--seconds S] [--cpu C] [--blocks]
 *       K: read, pread, readv, fread (on F, a page-cached regular file) or pipe, socket
 *       (a write of N bytes and its read back) or files (file after file of directory D,
 *       each opened, fstat'ed, read to EOF and closed: D holds 1 to 4096 regular files of
 *       exactly N bytes; the figures are per file); pinned to C (default: the highest CPU
 *       allowed), S seconds of alternating blocks after a warm-up. Prints one JSON object:
 *       the added ns per call (median of the paired differences, its 95 % interval), each
 *       path's median, the ratio without / with, whether K is interposed at all (files:
 *       open and read), "blocks" the number of samples (of four blocks each) and with
 *       --blocks each sample's ns per call on each path (with_blocks, without_blocks: for
 *       a caller that pools runs).
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

/* the cell kinds, in the order of enum ucb_kind then enum ucb_chan_kind, then files */
static const char *const kinds[] = {"read", "pread", "readv", "fread", "pipe", "socket",
				    "files"};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))
enum { KIND_PIPE = UCB_FREAD + 1, KIND_FILES = KIND_PIPE + 2 };

static int index_of(const char *name, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(name, names[i]) == 0)
			return (int)i;
	return -1;
}

/* whether the cell's calls are the preload's: pipe and socket cells go through read (and
 * write), the files cell through open and read (and fstat, close) */
static int cell_interposed(int kind)
{
	if (kind == KIND_FILES)
		return ucb_interposed("open") && ucb_interposed("read");
	return ucb_interposed(kind >= KIND_PIPE ? "read" : kinds[kind]);
}

/* one cell's JSON line */
static void print_cell(int kind, size_t size, const char *pattern, int cpu,
		       const struct ucb_pair *pair, const struct ucb_samples *samples,
		       const struct ucb_summary *sum, int blocks)
{
	printf("{\"cmd\":\"cell\",\"kind\":\"%s\",\"size\":%zu,\"pattern\":\"%s\",\"cpu\":%d,"
	       "\"calls_per_block\":%d,\"interposed\":%s,",
	       kinds[kind], size, pattern, cpu, pair->calls,
	       cell_interposed(kind) ? "true" : "false");
	ucb_print_summary(stdout, sum, "ns");
	if (blocks) {
		putchar(',');
		ucb_print_blocks(stdout, samples);
	}
	printf("}\n");
}

/* what a cell of any kind holds while it runs */
struct any_cell {
	int kind;
	struct ucb_file_cell file;
	struct ucb_chan_cell chan;
	struct ucb_files_cell files;
};

/* the cell set up, its pair; NULL (the error line printed) when it cannot be */
static const struct ucb_pair *open_cell(struct any_cell *c, int pattern, const char *file,
					const char *dir, size_t size)
{
	if (c->kind <= UCB_FREAD) {
		if (ucb_file_open(&c->file, file, (enum ucb_kind)c->kind,
				  (enum ucb_pattern)pattern, size) == 0)
			return &c->file.pair;
		fprintf(stderr, "uc_bench cell: cannot open and read %s (at least 1 MiB, and one "
				"block, of readable file)\n", file);
	} else if (c->kind == KIND_FILES) {
		if (ucb_files_open(&c->files, dir, size) == 0)
			return &c->files.pair;
		fprintf(stderr, "uc_bench cell: cannot read the files of %s (1 to %d readable "
				"regular files of exactly %zu bytes)\n", dir, UCB_FILES_MAX, size);
	} else {
		if (ucb_chan_open(&c->chan, (enum ucb_chan_kind)(c->kind - KIND_PIPE), size) == 0)
			return &c->chan.pair;
		fprintf(stderr, "uc_bench cell: cannot make a %s of %zu-byte calls (at most "
				"64 KiB)\n", kinds[c->kind], size);
	}
	return NULL;
}

static void close_cell(struct any_cell *c)
{
	if (c->kind <= UCB_FREAD)
		ucb_file_close(&c->file);
	else if (c->kind == KIND_FILES)
		ucb_files_close(&c->files);
	else
		ucb_chan_close(&c->chan);
}

static int cmd_cell(int argc, char **argv)
{
	static const struct option opts[] = {
		{"kind", required_argument, NULL, 'k'}, {"size", required_argument, NULL, 'n'},
		{"pattern", required_argument, NULL, 'p'}, {"file", required_argument, NULL, 'f'},
		{"dir", required_argument, NULL, 'd'}, {"seconds", required_argument, NULL, 's'},
		{"cpu", required_argument, NULL, 'c'}, {"blocks", no_argument, NULL, 'b'},
		{NULL, 0, NULL, 0}};
	const char *file = NULL, *dir = NULL;
	int pattern = UCB_SEQ, cpu = -1, blocks = 0, opt, rc = 2;
	long size = 0;
	double seconds = 1.0;
	struct any_cell cell = {.kind = -1};
	const struct ucb_pair *pair;
	struct ucb_samples samples = {0};
	struct ucb_summary sum;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'k': cell.kind = index_of(optarg, kinds, NKINDS); break;
		case 'n': size = strtol(optarg, NULL, 10); break;
		case 'p': pattern = index_of(optarg, ucb_pattern_names, 2); break;
		case 'f': file = optarg; break;
		case 'd': dir = optarg; break;
		case 's': seconds = strtod(optarg, NULL); break;
		case 'c': cpu = (int)strtol(optarg, NULL, 10); break;
		case 'b': blocks = 1; break;
		default: return 2;
		}
	}
	if (cell.kind < 0 || pattern < 0 || size < 1 || size > (1 << 24) || !(seconds > 0) ||
	    seconds > 3600 || (cell.kind <= UCB_FREAD && !file) ||
	    (cell.kind == KIND_FILES && !dir) || optind != argc) {
		fprintf(stderr, "uc_bench cell: --kind read|pread|readv|fread|pipe|socket|files "
				"--size N (1..16 MiB) [--pattern seq|reread] [--file F: for read, "
				"pread, readv, fread] [--dir D: for files] [--seconds S (0..3600)] "
				"[--cpu C] [--blocks]\n");
		return 2;
	}
	if ((cpu = ucb_pin(cpu)) < 0 || ucb_libc_init() != 0) {
		fprintf(stderr, "uc_bench cell: cannot pin to a CPU or find libc's functions\n");
		return 2;
	}
	if (!(pair = open_cell(&cell, pattern, file, dir, (size_t)size)))
		return 2;
	if (ucb_alternate(pair, seconds, &samples) != 0 || ucb_summarize(&samples, &sum) != 0)
		fprintf(stderr, "uc_bench cell: a %s call failed or returned short\n",
			kinds[cell.kind]);
	else {
		print_cell(cell.kind, (size_t)size,
			   cell.kind <= UCB_FREAD ? ucb_pattern_names[pattern] : "-", cpu, pair,
			   &samples, &sum, blocks);
		rc = 0;
	}
	ucb_samples_free(&samples);
	close_cell(&cell);
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
	fprintf(stderr, "usage: uc_bench cell --kind K --size N [--pattern P] [--file F] "
			"[--dir D] ... | "
			"spawn --count N --with SO --without SO -- PROGRAM [ARG...] | "
			"budget --file F [--seconds S] [--table-state placed|unplaced|none]\n");
	return 2;
}
