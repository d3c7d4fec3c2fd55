/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * colormem — build a virtually contiguous region from anonymous pages whose physical
 * frames have wanted page colors (pfn % n_colors), for colored guest RAM (docs/coloring.md).
 *
 * Every function returns 0 (or a non-negative count) on success and a negative errno on
 * failure. Reading frame numbers from /proc/self/pagemap needs CAP_SYS_ADMIN (root):
 * without it the kernel reports PFN 0 and uc_colormem_alloc() returns -EPERM.
 */
#ifndef UC_COLORMEM_H
#define UC_COLORMEM_H

#include <stddef.h>
#include <stdint.h>

/* The largest number of colors a color set can hold. */
#define UC_MAX_COLORS 4096

/* A set of page colors (bitmap). */
struct uc_colorset {
	uint64_t bits[UC_MAX_COLORS / 64];
};

/* A colored region: pages contiguous pages starting at addr. */
struct uc_colormem {
	void *addr;
	size_t len;
	size_t pages;
	size_t page_size;
	/* pages allocated in total to find them (the rest were released) */
	size_t pool_pages;
};

#ifndef UC_NO_COLORMEM

/* Empty a color set. */
void uc_colorset_clear(struct uc_colorset *set);
/* Add one color; -EINVAL if out of range. */
int uc_colorset_add(struct uc_colorset *set, unsigned int color);
/* Whether a color is in a set. */
int uc_colorset_has(const struct uc_colorset *set, unsigned int color);
/*
 * Parse "0,2-6,15" (the project's one list syntax: list := range (',' range)*,
 * range := N | N '-' M) into a set; -EINVAL on syntax errors or colors >= n_colors.
 */
int uc_colorset_parse(struct uc_colorset *set, const char *text, unsigned int n_colors);

/* The color of a frame: pfn % n_colors. */
static inline unsigned int uc_pfn_color(uint64_t pfn, unsigned int n_colors)
{
	return (unsigned int)(pfn % n_colors);
}

/*
 * Platform probe: colors of the LLC of cpu0 from sysfs (size / ways / page size).
 * Returns the number of colors or a negative errno.
 */
int uc_probe_colors(void);

/*
 * Frame numbers of n pages starting at addr (which must be mapped and present), from
 * /proc/self/pagemap. -EPERM when the kernel hides PFNs, -EFAULT for a page not present.
 */
int uc_pfns(const void *addr, size_t n, uint64_t *pfns);

/*
 * Allocate pages pages whose frames' colors are all in wanted, mremap them in order into
 * one contiguous region and release every other page. At most max_pool_pages pages are
 * allocated while searching (0 = four times the expected need, pages * n_colors / wanted
 * colors, plus 8192). -ENOMEM when they do not suffice.
 */
int uc_colormem_alloc(size_t pages, unsigned int n_colors, const struct uc_colorset *wanted,
		      size_t max_pool_pages, struct uc_colormem *out);

/* Unmap a region made by uc_colormem_alloc (safe on a zeroed struct). */
void uc_colormem_free(struct uc_colormem *mem);

#else /* UC_NO_COLORMEM: feature compiled out, every call reports -ENOSYS */

#include <errno.h>
static inline void uc_colorset_clear(struct uc_colorset *set) { (void)set; }
static inline int uc_colorset_add(struct uc_colorset *s, unsigned int c) { (void)s; (void)c; return -ENOSYS; }
static inline int uc_colorset_has(const struct uc_colorset *s, unsigned int c) { (void)s; (void)c; return 0; }
static inline int uc_colorset_parse(struct uc_colorset *s, const char *t, unsigned int n) { (void)s; (void)t; (void)n; return -ENOSYS; }
static inline unsigned int uc_pfn_color(uint64_t pfn, unsigned int n) { return (unsigned int)(pfn % n); }
static inline int uc_probe_colors(void) { return -ENOSYS; }
static inline int uc_pfns(const void *a, size_t n, uint64_t *p) { (void)a; (void)n; (void)p; return -ENOSYS; }
static inline int uc_colormem_alloc(size_t p, unsigned int n, const struct uc_colorset *w, size_t m, struct uc_colormem *o) { (void)p; (void)n; (void)w; (void)m; (void)o; return -ENOSYS; }
static inline void uc_colormem_free(struct uc_colormem *m) { (void)m; }

#endif /* UC_NO_COLORMEM */
#endif /* UC_COLORMEM_H */
