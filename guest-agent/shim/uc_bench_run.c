/* SPDX-License-Identifier: MIT */
/*
 * uc_bench_run.c - alternating blocks of the two paths, the clock, pinning, the
 * statistics of a cell and its JSON.
 *
 * The machine is shared: another process may take the CPU in the middle of any block.
 * The two paths run in adjacent blocks (ucb_alternate: in which order), so slow spells and
 * drift hit both alike; each sample of blocks gives one paired difference, and the figure
 * is the median of those (a block that lost the CPU counts for neither side), with a 95 %
 * interval from order statistics that assumes nothing about their distribution.
 */
#define _GNU_SOURCE
#include "uc_bench.h"

#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t ucb_now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int ucb_pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0) {
		if (sched_getaffinity(0, sizeof(set), &set) != 0)
			return -1;
		for (int c = CPU_SETSIZE - 1; c >= 0; c--)
			if (CPU_ISSET(c, &set)) {
				cpu = c;
				break;
			}
	}
	if (cpu < 0 || cpu >= CPU_SETSIZE)
		return -1;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) == 0 ? cpu : -1;
}

int ucb_add_sample(struct ucb_samples *s, double with_ns, double without_ns)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 4096;
		double *w = realloc(s->ns[UCB_WITH], cap * sizeof(double));

		if (!w)
			return -1;
		s->ns[UCB_WITH] = w;
		w = realloc(s->ns[UCB_WITHOUT], cap * sizeof(double));
		if (!w)
			return -1;
		s->ns[UCB_WITHOUT] = w;
		s->cap = cap;
	}
	s->ns[UCB_WITH][s->n] = with_ns;
	s->ns[UCB_WITHOUT][s->n] = without_ns;
	s->n++;
	return 0;
}

void ucb_samples_free(struct ucb_samples *s)
{
	free(s->ns[UCB_WITH]);
	free(s->ns[UCB_WITHOUT]);
	memset(s, 0, sizeof(*s));
}

/*
 * One sample is four blocks, W O O W or O W W O (W: through the PLT, O: libc's). Each path
 * then runs once first and once second: the order effect cancels within the sample (seq:
 * the second block to read a region finds it in the CPU's caches, the first brings it from
 * further out; at 4 KiB that alone is half the call), and so does any drift linear in time.
 * Which of the two a sample is, is drawn at random, not alternated: seq reads go round the
 * file in a fixed number of samples, and a strict alternation would have the same path
 * read the same regions first every time round, so that regions slower to bring in (their
 * pages' placement) would count against one path only (about +0.7 % of a seq call, seen).
 */
int ucb_alternate(const struct ucb_pair *pair, double seconds, struct ucb_samples *out)
{
	static const int order[2][4] = {{UCB_WITH, UCB_WITHOUT, UCB_WITHOUT, UCB_WITH},
					{UCB_WITHOUT, UCB_WITH, UCB_WITH, UCB_WITHOUT}};
	uint64_t budget = (uint64_t)(seconds * 1e9), spent = 0;
	uint64_t coin = ucb_now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15u;

	/* untimed blocks first: the code, the buffers and the shim's own state warm */
	for (int k = 0; k < 4; k++)
		if (pair->block[k & 1](pair->ctx[k & 1], pair->calls) < 0)
			return -1;
	for (size_t k = 0; spent < budget || k < 2; k++) {
		double ns[2] = {0, 0};
		int which;

		coin ^= coin << 13; /* xorshift64 */
		coin ^= coin >> 7;
		coin ^= coin << 17;
		which = (int)(coin >> 63);
		for (int i = 0; i < 4; i++) {
			int path = order[which][i];
			double t = pair->block[path](pair->ctx[path], pair->calls);

			if (t < 0)
				return -1;
			ns[path] += t / (2.0 * pair->calls);
			spent += (uint64_t)t;
		}
		if (ucb_add_sample(out, ns[UCB_WITH], ns[UCB_WITHOUT]) != 0)
			return -1;
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median_sorted(const double *v, size_t n)
{
	return n & 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * The 95 % interval of a median from order statistics: [x(k), x(n+1-k)] with k the
 * largest rank whose binomial(n, 1/2) tail P(B <= k-1) stays within 2.5 % (for large n
 * about n/2 - 1.96 sqrt(n)/2; exact here, so that few blocks are not over-trusted, and
 * hypervisor/unicache/bench/shim_stats.py computes the same ranks). Below n = 6 no rank reaches 95 %:
 * the interval is then the whole range.
 */
static size_t ci_rank(size_t n)
{
	double lbase = lgamma((double)n + 1) - (double)n * log(2.0), cdf = 0;
	size_t k = 1;

	for (size_t j = 0; j < n / 2; j++) {
		cdf += exp(lbase - lgamma((double)j + 1) - lgamma((double)(n - j) + 1));
		if (cdf > 0.025)
			break;
		k = j + 1;
	}
	return k;
}

int ucb_summarize(const struct ucb_samples *s, struct ucb_summary *out)
{
	size_t n = s->n, k;
	double *d = malloc((n ? n : 1) * sizeof(double));
	double *w = malloc((n ? n : 1) * sizeof(double));
	double *o = malloc((n ? n : 1) * sizeof(double));

	if (!d || !w || !o || n == 0) {
		free(d);
		free(w);
		free(o);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		w[i] = s->ns[UCB_WITH][i];
		o[i] = s->ns[UCB_WITHOUT][i];
		d[i] = w[i] - o[i];
	}
	qsort(d, n, sizeof(double), cmp_double);
	qsort(w, n, sizeof(double), cmp_double);
	qsort(o, n, sizeof(double), cmp_double);
	k = ci_rank(n);
	out->added = median_sorted(d, n);
	out->ci_low = d[k - 1];
	out->ci_high = d[n - k];
	out->with_ns = median_sorted(w, n);
	out->without_ns = median_sorted(o, n);
	out->ratio = out->with_ns > 0 ? out->without_ns / out->with_ns : 0;
	out->blocks = n;
	free(d);
	free(w);
	free(o);
	return 0;
}

/* the summary's JSON members (no braces): `unit` is "ns" or "us" */
void ucb_print_summary(FILE *out, const struct ucb_summary *sum, const char *unit)
{
	fprintf(out, "\"added_%s\":%.3f,\"ci_low_%s\":%.3f,\"ci_high_%s\":%.3f,"
		"\"with_%s\":%.3f,\"without_%s\":%.3f,\"ratio\":%.5f,\"blocks\":%zu",
		unit, sum->added, unit, sum->ci_low, unit, sum->ci_high, unit, sum->with_ns,
		unit, sum->without_ns, sum->ratio, sum->blocks);
}

static void print_array(FILE *out, const char *name, const double *v, size_t n)
{
	fprintf(out, "\"%s\":[", name);
	for (size_t i = 0; i < n; i++)
		fprintf(out, i ? ",%.3f" : "%.3f", v[i]);
	fputc(']', out);
}

/* each sample's figures (JSON members), for a caller that pools several runs */
void ucb_print_blocks(FILE *out, const struct ucb_samples *s)
{
	print_array(out, "with_blocks", s->ns[UCB_WITH], s->n);
	fputc(',', out);
	print_array(out, "without_blocks", s->ns[UCB_WITHOUT], s->n);
}
