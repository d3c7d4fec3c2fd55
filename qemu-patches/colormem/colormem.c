// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * colormem — colored anonymous memory: allocate a pool, read its frames from
 * /proc/self/pagemap, keep the pages of wanted colors and mremap them in order into one
 * contiguous region; release the rest. See colormem.h and docs/coloring.md.
 */
#ifndef _GNU_SOURCE /* QEMU passes -D_GNU_SOURCE */
#define _GNU_SOURCE
#endif
#include "colormem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define UC_PAGEMAP "/proc/self/pagemap"
#define UC_PM_PRESENT (1ULL << 63)
#define UC_PM_PFN_MASK ((1ULL << 55) - 1)
/* pages allocated per pool while searching */
#define UC_BATCH 512

static void uc_log(const char *what, int err)
{
	fprintf(stderr, "colormem[%d]: %s: %s\n", (int)getpid(), what, strerror(-err));
}

void uc_colorset_clear(struct uc_colorset *set)
{
	memset(set, 0, sizeof(*set));
}

int uc_colorset_add(struct uc_colorset *set, unsigned int color)
{
	if (color >= UC_MAX_COLORS)
		return -EINVAL;
	set->bits[color / 64] |= 1ULL << (color % 64);
	return 0;
}

int uc_colorset_has(const struct uc_colorset *set, unsigned int color)
{
	if (color >= UC_MAX_COLORS)
		return 0;
	return (set->bits[color / 64] >> (color % 64)) & 1;
}

int uc_colorset_parse(struct uc_colorset *set, const char *text, unsigned int n_colors)
{
	const char *p = text;
	char *end;

	uc_colorset_clear(set);
	if (n_colors == 0 || n_colors > UC_MAX_COLORS || !*p)
		return -EINVAL;
	for (;;) {
		unsigned long lo, hi;

		if (*p < '0' || *p > '9')
			return -EINVAL;
		lo = strtoul(p, &end, 10);
		hi = lo;
		p = end;
		if (*p == '-') {
			p++;
			if (*p < '0' || *p > '9')
				return -EINVAL;
			hi = strtoul(p, &end, 10);
			p = end;
		}
		if (lo > hi || hi >= n_colors)
			return -EINVAL;
		for (unsigned long c = lo; c <= hi; c++)
			set->bits[c / 64] |= 1ULL << (c % 64);
		if (!*p)
			return 0;
		if (*p++ != ',')
			return -EINVAL;
	}
}

static long uc_read_long(const char *path, int kib)
{
	char buf[64] = "";
	FILE *f = fopen(path, "r");
	char *end;
	long v;

	if (!f)
		return -errno;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	v = strtol(buf, &end, 10);
	if (end == buf || v <= 0)
		return -EINVAL;
	if (kib && *end == 'K')
		v *= 1024;
	else if (kib && *end == 'M')
		v *= 1024 * 1024;
	return v;
}

int uc_probe_colors(void)
{
	char path[128];
	long size = -ENOENT, ways = -ENOENT, level, best = 0;
	long page = sysconf(_SC_PAGESIZE);

	/* the LLC is the highest-level data or unified cache of cpu0 */
	for (int i = 0; i < 8; i++) {
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
		level = uc_read_long(path, 0);
		if (level < 0)
			break;
		if (level < best)
			continue;
		best = level;
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
		size = uc_read_long(path, 1);
		snprintf(path, sizeof(path),
			 "/sys/devices/system/cpu/cpu0/cache/index%d/ways_of_associativity", i);
		ways = uc_read_long(path, 0);
	}
	if (size < 0)
		return (int)size;
	if (ways < 0)
		return (int)ways;
	if (size / ways / page < 1)
		return 1;
	return (int)(size / ways / page);
}

int uc_pfns(const void *addr, size_t n, uint64_t *pfns)
{
	size_t ps = (size_t)sysconf(_SC_PAGESIZE);
	off_t off = (off_t)((uintptr_t)addr / ps * sizeof(uint64_t));
	size_t want = n * sizeof(uint64_t);
	ssize_t got;
	int fd, ret = 0;

	fd = open(UC_PAGEMAP, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	got = pread(fd, pfns, want, off);
	if (got < 0) {
		ret = -errno;
		goto out;
	}
	if ((size_t)got != want) {
		ret = -EIO;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (!(pfns[i] & UC_PM_PRESENT)) {
			ret = -EFAULT;
			goto out;
		}
		pfns[i] &= UC_PM_PFN_MASK;
		if (pfns[i] == 0) {
			ret = -EPERM; /* PFNs hidden: not CAP_SYS_ADMIN */
			goto out;
		}
	}
out:
	close(fd);
	return ret;
}

int uc_colormem_alloc(size_t pages, unsigned int n_colors, const struct uc_colorset *wanted,
		      size_t max_pool_pages, struct uc_colormem *out)
{
	size_t ps = (size_t)sysconf(_SC_PAGESIZE);
	void **pools = NULL;
	size_t n_pools = 0, pool_pages = 0, got = 0;
	uint64_t *pfns = NULL;
	char *dst = MAP_FAILED;
	const char *what = "bad arguments";
	int ret = 0, n_wanted = 0;

	memset(out, 0, sizeof(*out));
	if (pages == 0 || n_colors == 0 || n_colors > UC_MAX_COLORS || !wanted) {
		ret = -EINVAL;
		goto out;
	}
	for (unsigned int c = 0; c < n_colors; c++)
		n_wanted += uc_colorset_has(wanted, c);
	if (!n_wanted) {
		ret = -EINVAL;
		what = "no wanted color below n_colors";
		goto out;
	}
	if (max_pool_pages == 0)
		/* four times the expected need (frame colors are far from uniform) */
		max_pool_pages = pages * n_colors / (size_t)n_wanted * 4 + 16 * UC_BATCH;

	/* 1. reserve the destination range so nothing else lands there */
	what = "reserve region";
	dst = mmap(NULL, pages * ps, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		   -1, 0);
	if (dst == MAP_FAILED) {
		ret = -errno;
		goto out;
	}
	pfns = calloc(UC_BATCH, sizeof(*pfns));
	pools = calloc(max_pool_pages / UC_BATCH + 1, sizeof(*pools));
	if (!pfns || !pools) {
		ret = -ENOMEM;
		what = "bookkeeping";
		goto out;
	}

	while (got < pages) {
		char *pool;

		/* 2. a new pool; earlier pools stay mapped so their frames are not reused */
		what = "pool exhausted before enough pages of the wanted colors";
		if (pool_pages + UC_BATCH > max_pool_pages) {
			ret = -ENOMEM;
			goto out;
		}
		what = "allocate pool";
		pool = mmap(NULL, UC_BATCH * ps, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (pool == MAP_FAILED) {
			ret = -errno;
			goto out;
		}
		pools[n_pools++] = pool;
		pool_pages += UC_BATCH;
		/* base pages only: a transparent huge page would give 512 consecutive colors */
		(void)madvise(pool, UC_BATCH * ps, MADV_NOHUGEPAGE);
		for (size_t i = 0; i < UC_BATCH; i++)
			pool[i * ps] = 1; /* fault in a private frame */

		/* 3. read the frames */
		what = "read " UC_PAGEMAP;
		ret = uc_pfns(pool, UC_BATCH, pfns);
		if (ret < 0)
			goto out;

		/* 4. move the wanted pages, in order, to the next free slot of the region */
		what = "mremap";
		for (size_t i = 0; i < UC_BATCH && got < pages; i++) {
			if (!uc_colorset_has(wanted, uc_pfn_color(pfns[i], n_colors)))
				continue;
			if (mremap(pool + i * ps, ps, ps, MREMAP_MAYMOVE | MREMAP_FIXED,
				   dst + got * ps) == MAP_FAILED) {
				ret = -errno;
				goto out;
			}
			got++;
		}
	}
	out->addr = dst;
	out->len = pages * ps;
	out->pages = pages;
	out->page_size = ps;
	out->pool_pages = pool_pages;
	dst = MAP_FAILED; /* owned by out now */
	ret = 0;

out:
	/* 5. single cleanup path: release every pool (the moved pages left holes in them) */
	for (size_t i = 0; i < n_pools; i++)
		munmap(pools[i], UC_BATCH * ps);
	if (dst != MAP_FAILED)
		munmap(dst, pages * ps);
	free(pools);
	free(pfns);
	if (ret < 0)
		uc_log(what, ret);
	return ret;
}

void uc_colormem_free(struct uc_colormem *mem)
{
	if (mem->addr)
		munmap(mem->addr, mem->len);
	memset(mem, 0, sizeof(*mem));
}
