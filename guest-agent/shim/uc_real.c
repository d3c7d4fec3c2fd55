/* SPDX-License-Identifier: MIT */
/*
 * uc_real.c - the table of real functions (uc_real.h), each filled on its first use.
 */
#include "uc_shim.h"

struct uc_real_fns uc_real;

void *uc_real_resolve(void **slot, const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);

	*slot = f;
	return f;
}
