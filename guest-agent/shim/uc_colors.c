/* SPDX-License-Identifier: MIT */
/*
 * uc_colors.c - colors: the page cache a call brings in lands on the chunk's guest node,
 * through a preferred memory policy around the call (SRM-buffer).
 */
#include "uc_shim.h"

/*
 * Make the thread's page-cache allocations prefer `node` (SRM-buffer section 3.2: the
 * pages of one sequence get one color; here a color is a guest node). Saves the current
 * policy in *old; keeps errno. Returns 1 when a policy was set.
 */
int uc_color_enter(int node, struct uc_policy *old)
{
	unsigned long want[UC_POLICY_BITS / (8 * sizeof(unsigned long))];
	int saved = errno;

	old->set = 0;
	if (uc.color_off || !uc_node_exists(node))
		return 0;
	memset(old->mask, 0, sizeof(old->mask));
	if (syscall(SYS_get_mempolicy, &old->mode, old->mask, (unsigned long)UC_POLICY_BITS,
		    NULL, 0ul) != 0) {
		errno = saved;
		return 0;
	}
	memset(want, 0, sizeof(want));
	want[node / (8 * sizeof(unsigned long))] = 1ul << (node % (8 * sizeof(unsigned long)));
	old->set = syscall(SYS_set_mempolicy, UC_MPOL_PREFERRED, want,
			   (unsigned long)UC_POLICY_BITS) == 0;
	if (old->set) {
		struct uc_gen_hdr *g = __atomic_load_n(&uc.gens, __ATOMIC_ACQUIRE);

		if (g)
			__atomic_fetch_add(&g->color_reads, 1, __ATOMIC_RELAXED);
	}
	errno = saved;
	return old->set;
}

/* Restore the policy uc_color_enter saved; keeps errno. */
void uc_color_leave(const struct uc_policy *old)
{
	int saved = errno;

	if (old->set)
		(void)syscall(SYS_set_mempolicy, old->mode, old->mask, (unsigned long)UC_POLICY_BITS);
	errno = saved;
}
