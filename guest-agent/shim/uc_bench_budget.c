/* SPDX-License-Identifier: MIT */
/*
 * uc_bench_budget.c - `uc_bench budget`: are the shim's budgets met on this machine?
 *
 *   uc_bench budget --file F [--seconds S] [--table-state placed|unplaced|none] [--cpu C]
 *
 * Run under LD_PRELOAD=libunicache.so, with the table the caller set up (a standalone run
 * cannot publish one: the table is the agent's; --table-state only says which it is, and
 * so which cases apply). Measures, against libc in this process, sequential read()s of F
 * (a page-cached regular file of at least 1 MiB) and pipe and socket round trips, S
 * seconds each (default 0.5), and holds the upper end of each 95 % interval to its limit:
 *   placed-4k     <= 40 ns  (the file placed: looked up and counted, never migrated)
 *   unplaced-4k   <= 15 ns, unplaced-64k <= 15 ns (the file named by no entry; also the
 *                 limits of none-4k, none-64k: no table at all)
 *   pipe, socket  <= 10 ns
 * Prints one JSON line {"table_state":..,"interposed":..,"cases":[{"case","added_ns",
 * "upper_ns","limit_ns","met"}...],"met":..}; exit 0 when all are met, 1 when not.
 */
#define _GNU_SOURCE
#include "uc_bench.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

struct budget_case {
	const char *suffix; /* after the table state ("4k"), or the whole name (pipe) */
	int chan;           /* -1: a file read; else enum ucb_chan_kind */
	size_t size;
	double limit_ns;
};

static const struct budget_case placed_cases[] = {{"4k", -1, 4096, 40}};
static const struct budget_case unplaced_cases[] = {{"4k", -1, 4096, 15}, {"64k", -1, 65536, 15}};
static const struct budget_case chan_cases[] = {{"pipe", UCB_PIPE, 4096, 10},
						{"socket", UCB_SOCKET, 4096, 10}};

/* one case's added ns and its upper bound; 0 on success */
static int measure(const struct budget_case *bc, const char *file, double seconds,
		   struct ucb_summary *sum)
{
	struct ucb_file_cell fc;
	struct ucb_chan_cell cc;
	struct ucb_samples samples = {0};
	int rc;

	if (bc->chan < 0 ? ucb_file_open(&fc, file, UCB_READ, UCB_SEQ, bc->size)
			 : ucb_chan_open(&cc, (enum ucb_chan_kind)bc->chan, bc->size))
		return -1;
	rc = ucb_alternate(bc->chan < 0 ? &fc.pair : &cc.pair, seconds, &samples);
	if (rc == 0)
		rc = ucb_summarize(&samples, sum);
	ucb_samples_free(&samples);
	if (bc->chan < 0)
		ucb_file_close(&fc);
	else
		ucb_chan_close(&cc);
	return rc;
}

/* the cases that apply to a table state, measured first and printed after (a failure
 * leaves no half a line) */
struct budget_result {
	const struct budget_case *bc;
	struct ucb_summary sum;
};

static size_t cases_of(const char *state, const struct budget_case **out)
{
	size_t n = 0;

	if (strcmp(state, "placed") == 0)
		out[n++] = &placed_cases[0];
	else
		for (size_t i = 0; i < 2; i++)
			out[n++] = &unplaced_cases[i];
	for (size_t i = 0; i < 2; i++)
		out[n++] = &chan_cases[i];
	return n;
}

static void print_results(const char *state, const struct budget_result *res, size_t n,
			  int all_met)
{
	printf("{\"table_state\":\"%s\",\"interposed\":%s,\"cases\":[", state,
	       ucb_interposed("read") ? "true" : "false");
	for (size_t i = 0; i < n; i++) {
		const struct budget_case *bc = res[i].bc;

		printf("%s{\"case\":\"%s%s%s\",\"added_ns\":%.3f,\"upper_ns\":%.3f,"
		       "\"limit_ns\":%g,\"met\":%s}",
		       i ? "," : "", bc->chan < 0 ? state : "", bc->chan < 0 ? "-" : "", bc->suffix,
		       res[i].sum.added, res[i].sum.ci_high, bc->limit_ns,
		       res[i].sum.ci_high <= bc->limit_ns ? "true" : "false");
	}
	printf("],\"met\":%s}\n", all_met ? "true" : "false");
}

int ucb_cmd_budget(int argc, char **argv)
{
	static const struct option opts[] = {
		{"file", required_argument, NULL, 'f'}, {"seconds", required_argument, NULL, 's'},
		{"table-state", required_argument, NULL, 't'}, {"cpu", required_argument, NULL, 'c'},
		{NULL, 0, NULL, 0}};
	const char *file = NULL, *state = "unplaced";
	const struct budget_case *cases[4];
	struct budget_result res[4];
	double seconds = 0.5;
	int cpu = -1, opt, all_met = 1;
	size_t n;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'f': file = optarg; break;
		case 's': seconds = strtod(optarg, NULL); break;
		case 't': state = optarg; break;
		case 'c': cpu = (int)strtol(optarg, NULL, 10); break;
		default: return 2;
		}
	}
	if (!file || !(seconds > 0) || seconds > 3600 || optind != argc ||
	    (strcmp(state, "placed") && strcmp(state, "unplaced") && strcmp(state, "none"))) {
		fprintf(stderr, "uc_bench budget: --file F required; [--seconds S (0..3600)] "
				"[--table-state placed|unplaced|none] [--cpu C]\n");
		return 2;
	}
	if (ucb_pin(cpu) < 0 || ucb_libc_init() != 0) {
		fprintf(stderr, "uc_bench budget: cannot pin to a CPU or find libc's functions\n");
		return 2;
	}
	n = cases_of(state, cases);
	for (size_t i = 0; i < n; i++) {
		res[i].bc = cases[i];
		if (measure(cases[i], file, seconds, &res[i].sum) != 0) {
			fprintf(stderr, "uc_bench budget: case %s could not run (is %s a readable "
					"file of at least 1 MiB?)\n", cases[i]->suffix, file);
			return 2;
		}
		all_met &= res[i].sum.ci_high <= cases[i]->limit_ns;
	}
	print_results(state, res, n, all_met);
	return all_met ? 0 : 1;
}
