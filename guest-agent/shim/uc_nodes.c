/* SPDX-License-Identifier: MIT */
/*
 * uc_nodes.c - guest NUMA nodes: each CPU's node and the online nodes come from the table
 * (the agent reads sysfs once for every process: uc_shim.h, uc_node_of), and the node of a
 * page-cache page, which NCC's home needs (uc_counters.c).
 */
#include "uc_shim.h"

/*
 * Guest node of the page-cache page at `off` of fd, without I/O: mincore says whether it
 * is resident, MADV_POPULATE_READ maps it (an error, never a signal, if it went away) and
 * move_pages with no target nodes names its node. -1 when unknown. Its system calls are a
 * mechanism's (the caller checks uc_may_act).
 */
int uc_page_node(int fd, uint64_t off)
{
	unsigned char vec = 0;
	void *m, *pages[1];
	int status = -1, node = -1, saved = errno;

	m = mmap(NULL, (size_t)uc.pagesz, PROT_READ, MAP_SHARED, fd, (off_t)off);
	if (m == MAP_FAILED) {
		errno = saved;
		return -1;
	}
	if (mincore(m, (size_t)uc.pagesz, &vec) == 0 && (vec & 1u) &&
	    madvise(m, (size_t)uc.pagesz, 22 /* MADV_POPULATE_READ */) == 0) {
		pages[0] = m;
		if (syscall(SYS_move_pages, 0, 1ul, pages, NULL, &status, 0) == 0 && status >= 0)
			node = status;
	}
	munmap(m, (size_t)uc.pagesz);
	errno = saved;
	return node;
}
