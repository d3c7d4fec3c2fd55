// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * test_colormem — checks of the colormem library that need no QEMU.
 *
 * usage: test_colormem N_COLORS COLORS PAGES
 *   e.g. test_colormem 64 0,5-6 300
 * Runs the unit checks (color set parsing, argument errors), then allocates PAGES colored
 * pages and checks through /proc/self/pagemap that every page of the region has a color
 * in COLORS, that the region is contiguous and usable, and that frames are distinct.
 * Prints one line "ok pages=... pool_pages=... colors=..." and exits 0, or names the
 * failed check on stderr and exits 1. Exits 77 (skip) when PFNs are hidden (not root).
 */
#include "colormem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int failures;

#define CHECK(cond, ...)                                          \
	do {                                                      \
		if (!(cond)) {                                    \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);             \
			fputc('\n', stderr);                      \
			failures++;                               \
		}                                                 \
	} while (0)

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Colors of an ordinary (uncolored) allocation of the same size, for comparison. */
static int plain_colors(size_t pages, unsigned int n_colors)
{
	size_t ps = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char seen[UC_MAX_COLORS] = { 0 };
	uint64_t *pfns = calloc(pages, sizeof(*pfns));
	char *p = mmap(NULL, pages * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	int used = -1;

	if (p == MAP_FAILED || !pfns)
		goto out;
	(void)madvise(p, pages * ps, MADV_NOHUGEPAGE);
	for (size_t i = 0; i < pages; i++)
		p[i * ps] = 1;
	if (uc_pfns(p, pages, pfns) < 0)
		goto out;
	used = 0;
	for (size_t i = 0; i < pages; i++) {
		unsigned int c = uc_pfn_color(pfns[i], n_colors);

		used += !seen[c];
		seen[c] = 1;
	}
out:
	if (p != MAP_FAILED)
		munmap(p, pages * ps);
	free(pfns);
	return used;
}

static void unit_checks(void)
{
	struct uc_colorset s;
	struct uc_colormem m;
	int ret;

	CHECK(uc_colorset_parse(&s, "0,2-4,7", 8) == 0, "parse valid list");
	CHECK(uc_colorset_has(&s, 0) && !uc_colorset_has(&s, 1) && uc_colorset_has(&s, 3) &&
		      uc_colorset_has(&s, 4) && !uc_colorset_has(&s, 5) && uc_colorset_has(&s, 7),
	      "parsed set members");
	CHECK(uc_colorset_parse(&s, "8", 8) == -EINVAL, "color out of range refused");
	CHECK(uc_colorset_parse(&s, "3-1", 8) == -EINVAL, "reversed range refused");
	CHECK(uc_colorset_parse(&s, "1,,2", 8) == -EINVAL, "empty item refused");
	CHECK(uc_colorset_parse(&s, "", 8) == -EINVAL, "empty list refused");
	CHECK(uc_colorset_parse(&s, "1-", 8) == -EINVAL, "open range refused");
	CHECK(uc_pfn_color(130, 64) == 2, "pfn 130 has color 2 of 64");

	uc_colorset_clear(&s);
	CHECK(uc_colormem_alloc(4, 8, &s, 0, &m) == -EINVAL, "empty wanted set refused");
	uc_colorset_add(&s, 1);
	CHECK(uc_colormem_alloc(0, 8, &s, 0, &m) == -EINVAL, "zero pages refused");
	CHECK(uc_colormem_alloc(4, 0, &s, 0, &m) == -EINVAL, "zero colors refused");
	CHECK(m.addr == NULL, "failed alloc leaves an empty result");
	/* 512 pool pages can never yield 600: the search gives up (colors themselves are not
	 * predictable: the allocator hands back recently freed frames first) */
	uc_colorset_clear(&s);
	uc_colorset_add(&s, 0);
	ret = uc_colormem_alloc(600, 64, &s, 512, &m);
	CHECK(ret == -ENOMEM || ret == -EPERM, "too small a pool: -ENOMEM, got %d", ret);
	CHECK(m.addr == NULL, "failed search leaves an empty result");
	uc_colormem_free(&m); /* safe on an empty result */
}

int main(int argc, char **argv)
{
	struct uc_colorset wanted;
	struct uc_colormem mem;
	unsigned int n_colors;
	size_t pages, pool_pages;
	uint64_t *pfns;
	int ret, used = 0, plain;
	unsigned char seen[UC_MAX_COLORS] = { 0 };

	if (argc != 4) {
		fprintf(stderr, "usage: %s N_COLORS COLORS PAGES\n", argv[0]);
		return 2;
	}
	n_colors = (unsigned int)strtoul(argv[1], NULL, 10);
	pages = strtoul(argv[3], NULL, 10);
	if (uc_colorset_parse(&wanted, argv[2], n_colors) < 0) {
		fprintf(stderr, "bad color list %s for %u colors\n", argv[2], n_colors);
		return 2;
	}
	unit_checks();
	plain = plain_colors(pages, n_colors); /* before: freed colored frames get reused */

	ret = uc_colormem_alloc(pages, n_colors, &wanted, 0, &mem);
	if (ret == -EPERM) {
		fprintf(stderr, "skip: /proc/self/pagemap hides PFNs (needs root)\n");
		return 77;
	}
	CHECK(ret == 0, "uc_colormem_alloc: %s", strerror(-ret));
	if (ret != 0)
		return 1;
	CHECK(mem.pages == pages && mem.len == pages * mem.page_size, "region size");

	/* usable and contiguous: write a pattern over the whole range, read it back */
	for (size_t i = 0; i < mem.len; i++)
		((unsigned char *)mem.addr)[i] = (unsigned char)(i * 7 + i / mem.page_size);
	for (size_t i = 0; i < mem.len; i++)
		if (((unsigned char *)mem.addr)[i] != (unsigned char)(i * 7 + i / mem.page_size)) {
			CHECK(0, "byte %zu reads back wrong", i);
			break;
		}

	/* the pagemap check: every page has an allowed color */
	pfns = calloc(pages, sizeof(*pfns));
	ret = pfns ? uc_pfns(mem.addr, pages, pfns) : -ENOMEM;
	CHECK(ret == 0, "uc_pfns on the region: %s", strerror(-ret));
	if (ret == 0) {
		for (size_t i = 0; i < pages; i++) {
			unsigned int c = uc_pfn_color(pfns[i], n_colors);

			CHECK(uc_colorset_has(&wanted, c), "page %zu pfn %#llx has color %u", i,
			      (unsigned long long)pfns[i], c);
			used += !seen[c];
			seen[c] = 1;
		}
		qsort(pfns, pages, sizeof(*pfns), cmp_u64);
		for (size_t i = 1; i < pages; i++)
			CHECK(pfns[i] != pfns[i - 1], "frame %#llx mapped twice",
			      (unsigned long long)pfns[i]);
	}
	free(pfns);
	pool_pages = mem.pool_pages;
	uc_colormem_free(&mem);
	CHECK(mem.addr == NULL, "free clears the result");
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("ok pages=%zu pool_pages=%zu colors_used=%d plain_colors=%d n_colors=%u "
	       "probed_colors=%d\n",
	       pages, pool_pages, used, plain, n_colors, uc_probe_colors());
	return 0;
}
