/* SPDX-License-Identifier: MIT */
/*
 * uc_nodes.c - guest NUMA nodes: each CPU's node, read from sysfs once per process,
 * and the node of a page-cache page.
 */
#include "uc_shim.h"

signed char uc_cpu_node[UC_MAX_VCPUS]; /* node of each CPU (0 when sysfs says nothing) */
_Atomic uint32_t uc_node_mask;         /* guest nodes 0..31 that exist */
_Atomic int uc_nodes_state;            /* 0 unread, 1 being read, 2 ready */

/* Read a small sysfs file into buf (NUL-terminated); returns its length or -1. */
static ssize_t uc_read_small(const char *path, char *buf, size_t n)
{
	int fd = UC_REAL(open)(path, O_RDONLY | O_CLOEXEC);
	ssize_t r;

	if (fd < 0)
		return -1;
	r = UC_REAL(read)(fd, buf, n - 1);
	UC_REAL(close)(fd);
	if (r < 0)
		return -1;
	buf[r] = 0;
	return r;
}

/* Parse a cpulist ("0-3,8") of ids below `limit`: with `node` < 0 return the mask of its
 * ids below 32 (the online nodes), else set uc_cpu_node[cpu] = node for each CPU in it. */
static uint32_t uc_parse_list(const char *s, unsigned limit, int node)
{
	uint32_t mask = 0;
	char *end;

	while (*s) {
		unsigned long a = strtoul(s, &end, 10), b, i;

		if (end == s)
			break;
		b = a;
		s = end;
		if (*s == '-') {
			b = strtoul(s + 1, &end, 10);
			s = end;
		}
		for (i = a; i <= b && i < limit; i++) {
			if (node < 0 && i < 32)
				mask |= 1u << i;
			else if (node >= 0)
				uc_cpu_node[i] = (signed char)node;
		}
		while (*s == ',' || *s == '\n' || *s == ' ')
			s++;
	}
	return mask;
}

/* The CPU -> node map, from /sys/devices/system/node (once per process, on first need). */
void uc_nodes_init(void)
{
	char buf[1024], path[80];
	uint32_t mask;
	int expect = 0, n;

	if (!atomic_compare_exchange_strong(&uc_nodes_state, &expect, 1))
		return;
	mask = uc_read_small("/sys/devices/system/node/online", buf, sizeof(buf)) > 0
		       ? uc_parse_list(buf, UC_MAX_NODES, -1)
		       : 0;
	for (n = 0; n < (int)UC_MAX_NODES; n++) {
		if (!(mask >> n & 1u))
			continue;
		snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", n);
		if (uc_read_small(path, buf, sizeof(buf)) >= 0)
			(void)uc_parse_list(buf, UC_MAX_VCPUS, n);
	}
	atomic_store(&uc_node_mask, mask ? mask : 1u);
	atomic_store(&uc_nodes_state, 2);
}

/*
 * Guest node of the page-cache page at `off` of fd, without I/O: mincore says whether it
 * is resident, MADV_POPULATE_READ maps it (an error, never a signal, if it went away) and
 * move_pages with no target nodes names its node. -1 when unknown.
 */
int uc_page_node(int fd, uint64_t off)
{
	unsigned char vec = 0;
	void *m, *pages[1];
	int status = -1, node = -1;

	m = mmap(NULL, (size_t)uc.pagesz, PROT_READ, MAP_SHARED, fd, (off_t)off);
	if (m == MAP_FAILED)
		return -1;
	if (mincore(m, (size_t)uc.pagesz, &vec) == 0 && (vec & 1u) &&
	    madvise(m, (size_t)uc.pagesz, 22 /* MADV_POPULATE_READ */) == 0) {
		pages[0] = m;
		if (syscall(SYS_move_pages, 0, 1ul, pages, NULL, &status, 0) == 0 && status >= 0)
			node = status;
	}
	munmap(m, (size_t)uc.pagesz);
	return node;
}
