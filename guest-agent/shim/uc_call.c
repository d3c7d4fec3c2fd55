/* SPDX-License-Identifier: MIT */
/*
 * uc_call.c - the per-call logic: what the shim does before a wrapped call (uc_pre:
 * the descriptor's file and its decision for this table generation; for a file the table
 * names, the chunk's entry, migration and the path) and after it (uc_post: the fd's offset,
 * this thread's run of counts, its sequential stream).
 */
#include "uc_shim.h"

/* this thread's state between calls (uc_shim.h) */
UC_TLS struct uc_thread uc_t = {.seq_end = UINT64_MAX};

/*
 * A file the table names, or a thread the shim pinned: the chunk's entry and what the
 * mechanisms do with it (MFC Figure 2, colors, replicas), in c; only where the mechanisms
 * may make their system calls (uc_may_act), and keeping errno across them.
 */
/* The call left the thread holding a claim it stays on: its run may skip the rule. */
static void uc_run_may_skip(struct uc_call *c, struct uc_stay stay)
{
	if (stay.vcpu < 0 || stay.vcpu >= (int)UC_NO_HOME)
		return;
	c->run_ff = (uint8_t)c->fflags;
	c->run_home = (uint16_t)stay.vcpu;
	/* UC_NO_HOME means "no claim": a claim fresh until that very tick ends a tick sooner */
	c->run_fresh = (uint16_t)stay.fresh_ms == UC_NO_HOME ? UC_NO_HOME - 1
							       : (uint16_t)stay.fresh_ms;
}

static void uc_pre_acting(struct uc_fd *e, uint64_t gen, size_t n, struct uc_call *c)
{
	struct uc_hit h;
	struct uc_stay stay;
	uint64_t span;

	if (!uc_lookup_cached(gen, c->file_id, (uint64_t)c->off, &h))
		return;
	/*
	 * a table that sends no chunk to a vCPU (SCU left the VM alone, or withdrew its
	 * placement; colors and replicas may stay): a thread the shim pinned gets its own CPUs
	 * back, for the guest's scheduler to balance; otherwise it could stay piled on a
	 * chunk's home vCPU for good
	 */
	if (__builtin_expect(uc_t.pinned, 0) && !h.homes)
		uc_unpin();
	if (!h.found) {
		/* a pinned thread leaves a vCPU another reader holds (uc_decide.h, unplaced) */
		if (__builtin_expect(uc_t.pinned, 0)) {
			memcpy(h.mask, uc.orig.words, sizeof(h.mask));
			h.budget = UC_BUDGET_UNLIMITED;
			h.min_read_size = 0; /* a move for CPU, not for data: any read size */
			uc_run_may_skip(c, uc_maybe_migrate(c->file_id, (uint64_t)c->off, n, &h));
		} else {
			/* nothing of the rule's in this chunk for an unpinned thread */
			c->run_ff = (uint8_t)c->fflags;
		}
		return;
	}
	/* MFC Figure 2 lines 3-4: reads below min_read_size always use caching loads */
	span = uc_span(e, c->file_id, (uint64_t)c->off, n, &h);
	c->nt = !(h.flags & UC_ENTRY_CACHING) && span >= h.min_read_size;
	stay = uc_maybe_migrate(c->file_id, (uint64_t)c->off, span, &h);
	/* a plain chunk (caching, no color, no replica) the thread stays on: the next calls in
	 * it keep the same answer while the claim is fresh (uc_in_run) */
	if ((h.flags & (UC_ENTRY_CACHING | UC_ENTRY_COLOR | UC_ENTRY_REPLICA)) == UC_ENTRY_CACHING)
		uc_run_may_skip(c, stay);
	if (__builtin_expect(h.flags & (UC_ENTRY_COLOR | UC_ENTRY_REPLICA), 0)) {
		if (h.flags & UC_ENTRY_COLOR)
			c->color = h.color_node;
		if (h.flags & UC_ENTRY_REPLICA) {
			/* NCC: threads on a node that keeps a replica read it (after migrating) */
			int node = uc_node_of(sched_getcpu());

			if (node >= 0 && (h.replica_nodes >> node & 1u))
				c->rep_node = node;
		}
	}
}

void uc_pre_named(struct uc_fd *e, uint64_t gen, size_t n, struct uc_call *c)
{
	int e0 = errno;

	if (uc_may_act())
		uc_pre_acting(e, gen, n, c);
	errno = e0;
}
