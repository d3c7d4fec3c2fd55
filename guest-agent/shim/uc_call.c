/* SPDX-License-Identifier: MIT */
/*
 * uc_call.c - the per-call logic: what the shim does before a wrapped call (uc_pre:
 * classify the fd, look the chunk up, migrate, pick the path) and after it (uc_post: the
 * fd's offset, the counters, the thread's sequential stream).
 */
#include "uc_shim.h"

/* where this thread's last read of a file ended: uc_read_span's prev_end (sequential reads) */
UC_TLS uint64_t uc_seq_file;
UC_TLS uint64_t uc_seq_end = UINT64_MAX;

/*
 * Everything before the real call. Returns 0 when the call passes straight through.
 * `off` < 0 means "current position" (read, readv, preadv2 with -1).
 */
int uc_pre(int fd, int64_t off, size_t n, struct uc_call *c)
{
	struct uc_hit h;
	int64_t pos;
	uint64_t span;

	if (!uc_ready())
		return 0;
	if (!uc_fd_classify(fd, &c->file_id, &pos))
		return 0;
	c->off = off >= 0 ? off : pos;
	c->nt = 0;
	c->chunk_size = 0;
	c->color = -1;
	c->rep_node = -1;
	if (c->off < 0 || !uc_lookup(c->file_id, (uint64_t)c->off, &h))
		return 1;
	c->chunk_size = h.chunk_size;
	/*
	 * a table that sends no chunk to a vCPU (SCU left the VM alone, or withdrew its
	 * placement; colors and replicas may stay): a thread the shim pinned gets its own CPUs
	 * back, for the guest's scheduler to balance; otherwise it could stay piled on a
	 * chunk's home vCPU for good
	 */
	if (__builtin_expect(uc_pinned, 0) && !h.homes)
		uc_unpin();
	if (!h.found) {
		/* a pinned thread leaves a vCPU another reader holds (uc_decide.h, unplaced) */
		if (__builtin_expect(uc_pinned, 0)) {
			memcpy(h.mask, uc_orig_words, sizeof(h.mask));
			h.budget = UC_BUDGET_UNLIMITED;
			h.min_read_size = 0; /* a move for CPU, not for data: any read size */
			uc_maybe_migrate(c->file_id, (uint64_t)c->off, n, &h);
		}
		return 1;
	}
	/* MFC Figure 2 lines 3-4: reads below min_read_size always use caching loads */
	span = uc_span(fd, c->file_id, (uint64_t)c->off, n, &h);
	c->nt = !(h.flags & UC_ENTRY_CACHING) && span >= h.min_read_size;
	uc_maybe_migrate(c->file_id, (uint64_t)c->off, span, &h);
	if (__builtin_expect(h.flags & (UC_ENTRY_COLOR | UC_ENTRY_REPLICA), 0)) {
		if (h.flags & UC_ENTRY_COLOR)
			c->color = h.color_node;
		if (h.flags & UC_ENTRY_REPLICA) {
			/* NCC: threads on a node that keeps a replica read it (after migrating) */
			int node = uc_node_of(sched_getcpu());

			if (node >= 0 && node < (int)UC_MAX_NODES && (h.replica_nodes >> node & 1u))
				c->rep_node = node;
		}
	}
	return 1;
}

/* Everything after the real call; preserves errno. `cur` = call used the file offset. */
void uc_post(int fd, const struct uc_call *c, ssize_t r, int cur, int is_write, int nt)
{
	int saved = errno;

	if (cur && r > 0 && c->off >= 0)
		uc_fd_advance(fd, c->off + r);
	if (c->chunk_size && r >= 0)
		uc_count(is_write ? -1 : fd, c->file_id, c->off, c->chunk_size, r, is_write, nt,
			 c->off >= 0 && c->file_id == uc_seq_file && (uint64_t)c->off == uc_seq_end);
	if (!is_write && r > 0 && c->off >= 0) {
		uc_seq_file = c->file_id;
		uc_seq_end = (uint64_t)c->off + (uint64_t)r;
	}
	errno = saved;
}
