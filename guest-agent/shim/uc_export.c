/* SPDX-License-Identifier: MIT */
/*
 * uc_export.c - what the library shows besides the interposed calls: the caps marker the
 * agent finds in the file, and helpers for tests and the bench.
 */
#include "uc_shim.h"

/* Read by the agent (it looks for this string in the library to announce its caps). */
__attribute__((used)) static const char uc_caps_marker[] = "unicache-shim-caps=colors,replicas";

/* The opaque file id the shim computes for (dev, ino) with the given salt. */
UC_EXPORT uint64_t uc_file_id(uint64_t salt, uint64_t dev, uint64_t ino)
{
	return uc_file_id_of(salt, dev, ino);
}

/*
 * Average cost in ns of one table lookup over `iters` lookups of `nkeys` keys
 * (file_id, chunk k * chunk_size for k < nkeys). Returns a negative errno without a
 * table. The keys cycle, so the figure is the warm, hit-in-L1/L2 cost.
 */
UC_EXPORT double uc_bench_lookup(uint64_t file_id, uint64_t nkeys, uint64_t iters, uint64_t *hits)
{
	struct timespec a, b;
	struct uc_hit h;
	uint64_t i, found = 0, cs;

	if (!uc_ready() || !nkeys || !iters)
		return -ENOENT;
	if (!uc_lookup(file_id, 0, &h))
		return -ENODATA;
	cs = h.chunk_size;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (i = 0; i < iters; i++) {
		if (uc_lookup(file_id, (i % nkeys) * cs, &h) && h.found)
			found++;
		__asm__ volatile("" ::: "memory");
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (hits)
		*hits = found;
	return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) /
	       (double)iters;
}

/* The node the shim reads for a CPU (tests); -1 unknown. */
UC_EXPORT int uc_cpu_to_node(int cpu)
{
	return uc_node_of(cpu);
}

/* 1 when the shim has mapped a table and counters. */
UC_EXPORT int uc_active(void)
{
	return uc_ready();
}
