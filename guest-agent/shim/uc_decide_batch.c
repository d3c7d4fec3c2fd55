/* SPDX-License-Identifier: MIT */
/*
 * uc_decide_batch.c - libuc_decide.so's entry points for the differential test
 * (tests/shim/test_decide_differential.py): the rule of uc_decide.c run over many steps in
 * one call, so that 100,000 cases cost milliseconds here and the time goes to the Python
 * mirror. Not part of libunicache.so.
 */
#include <stddef.h>

#include "uc_decide.h"

#define UC_TEST_EXPORT __attribute__((visibility("default")))
#define UC_TEST_MAX_CLAIMS 4096u

/* One read of a test run; the layout is mirrored by a struct.Struct in the test. */
struct uc_test_step {
	struct uc_read_facts facts;
	uint32_t nclaims; /* claim words, <= UC_TEST_MAX_CLAIMS; 0: no table (no counters) */
	uint32_t reset;   /* 1: a fresh table from this step's initial words; 0: the previous one */
	uint64_t init_at; /* first (vcpu, word) pair of the initial words in `init` */
	uint64_t ninit;   /* number of initial pairs */
};

static uint64_t uc_test_table[UC_TEST_MAX_CLAIMS];

/*
 * Decide and settle every step in order. After each step, out[i] is its decision and
 * out_counts[i] the number of nonzero claim words, appended to out_pairs as (vcpu, word)
 * pairs in ascending vCPU order. Returns the pairs written, -1 when out_cap (pairs) is too
 * small, -2 on a bad step (too many claims, an initial vCPU outside the table).
 */
UC_TEST_EXPORT int64_t uc_test_run_steps(const struct uc_test_step *steps, uint64_t nsteps,
					 const uint64_t *init, struct uc_decision *out,
					 uint32_t *out_counts, uint64_t *out_pairs, uint64_t out_cap)
{
	uint64_t i, j, used = 0;
	uint32_t v;

	for (i = 0; i < nsteps; i++) {
		const struct uc_test_step *s = &steps[i];
		uint64_t *table = s->nclaims ? uc_test_table : NULL;
		uint32_t nz = 0;

		if (s->nclaims > UC_TEST_MAX_CLAIMS)
			return -2;
		if (s->reset) {
			for (v = 0; v < s->nclaims; v++)
				uc_test_table[v] = 0;
			for (j = 0; j < s->ninit; j++) {
				uint64_t vcpu = init[2 * (s->init_at + j)];

				if (vcpu >= s->nclaims)
					return -2;
				uc_test_table[vcpu] = init[2 * (s->init_at + j) + 1];
			}
		}
		out[i] = uc_decide(&s->facts, table, s->nclaims);
		uc_claims_settle(table, s->nclaims, out[i], s->facts.tid, s->facts.now_ns);
		for (v = 0; v < s->nclaims; v++) {
			if (!uc_test_table[v])
				continue;
			if (used >= out_cap)
				return -1;
			out_pairs[2 * used] = v;
			out_pairs[2 * used + 1] = uc_test_table[v];
			used++;
			nz++;
		}
		out_counts[i] = nz;
	}
	return (int64_t)used;
}

/*
 * uc_read_span over n cases: in[5 * i ...] = (n, off, chunk_size, file_size, prev_end),
 * out[i] = its span.
 */
UC_TEST_EXPORT void uc_test_read_spans(const uint64_t *in, uint64_t n, uint64_t *out)
{
	uint64_t i;

	for (i = 0; i < n; i++)
		out[i] = uc_read_span(in[5 * i], in[5 * i + 1], in[5 * i + 2], in[5 * i + 3],
				      in[5 * i + 4]);
}

/*
 * The constants both sides must agree on, in this order: claim lease (ns), home hash
 * multiplier, layout version, tid bits, expiry bits, unlimited budget, vCPU mask bits,
 * offset of the claims and of the regions in the counters file, sizeof(struct
 * uc_read_facts), sizeof(struct uc_test_step). Returns how many it wrote.
 */
UC_TEST_EXPORT uint32_t uc_test_constants(uint64_t *out, uint32_t cap)
{
	const uint64_t c[] = {UC_CLAIM_LEASE_NS,
			      UC_HOME_HASH_MUL,
			      UC_LAYOUT_VERSION,
			      UC_CLAIM_TID_BITS,
			      UC_CLAIM_EXPIRY_BITS,
			      UC_BUDGET_UNLIMITED,
			      UC_MAX_VCPUS,
			      UC_CTR_CLAIMS_OFF,
			      UC_CTR_REGIONS_OFF,
			      sizeof(struct uc_read_facts),
			      sizeof(struct uc_test_step)};
	uint32_t i;

	for (i = 0; i < cap && i < sizeof(c) / sizeof(c[0]); i++)
		out[i] = c[i];
	return i;
}
