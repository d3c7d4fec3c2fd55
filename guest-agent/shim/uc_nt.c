/* SPDX-License-Identifier: MIT */
/*
 * uc_nt.c - copy with prefetchnta loads, so the source lines go to the cache with the
 * non-temporal hint (minimal pollution of the shared LLC) instead of a normal fill.
 * The destination (the caller's buffer) is written with ordinary stores: the caller is
 * about to use it.
 */
#include "uc_nt.h"

#if UC_HAVE_NT
#include <emmintrin.h>
#include <stdint.h>
#include <xmmintrin.h>

/* how far ahead of the copy the prefetches run, in bytes */
#define UC_NT_AHEAD 512

void uc_nt_copy(void *dst, const void *src, size_t len)
{
	unsigned char *d = dst;
	const unsigned char *s = src;
	size_t i;

	for (i = 0; i < len && i < UC_NT_AHEAD; i += 64)
		_mm_prefetch((const char *)s + i, _MM_HINT_NTA);
	while (len >= 64) {
		__m128i a, b, c, e;

		if (len >= 64 + UC_NT_AHEAD)
			_mm_prefetch((const char *)s + UC_NT_AHEAD, _MM_HINT_NTA);
		a = _mm_loadu_si128((const __m128i *)(const void *)s);
		b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
		c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
		e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
		_mm_storeu_si128((__m128i *)(void *)d, a);
		_mm_storeu_si128((__m128i *)(void *)(d + 16), b);
		_mm_storeu_si128((__m128i *)(void *)(d + 32), c);
		_mm_storeu_si128((__m128i *)(void *)(d + 48), e);
		s += 64;
		d += 64;
		len -= 64;
	}
	if (len)
		memcpy(d, s, len);
}
#endif
