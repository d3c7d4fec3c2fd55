/* SPDX-License-Identifier: MIT */
/*
 * uc_nt.h - the non-temporal copy used for chunks the host marks non-caching.
 *
 * On x86-64 the copy prefetches the source with prefetchnta (MFC section 5:
 * "copy_to_user functions that use prefetchnta"); elsewhere UC_HAVE_NT is 0 and
 * uc_nt_copy is a plain memcpy stub, so callers need no #ifdefs.
 */
#ifndef UC_NT_H
#define UC_NT_H

#include <stddef.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#define UC_HAVE_NT 1
void uc_nt_copy(void *dst, const void *src, size_t len);
#else
#define UC_HAVE_NT 0
static inline void uc_nt_copy(void *dst, const void *src, size_t len)
{
	memcpy(dst, src, len);
}
#endif

#endif /* UC_NT_H */
