/* SPDX-License-Identifier: MIT */
/*
 * uc_floor.c - libuc_floor.so, the shim benchmark's floor: the least any preload that
 * counts a guest's reads must do. Its read and write load libc's function (one line, before
 * the call) and add the bytes to their descriptor's counter (one line, after it), and
 * nothing else: no file, no table, no thread state. `unicache bench shim` runs the budgets'
 * cells under it beside the shim and the control (libuc_null.so): a budget below the
 * floor's own cost on a machine cannot be met there by any shim that counts, and the gap
 * between the shim and the floor is what its design adds.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <sys/types.h>

#define UC_FLOOR_FDS 1024

static ssize_t (*floor_read)(int, void *, size_t);
static ssize_t (*floor_write)(int, const void *, size_t);

/* a line per descriptor, as the shim's descriptor entries are */
static struct {
	uint64_t bytes;
} __attribute__((aligned(64))) floor_count[UC_FLOOR_FDS];

__attribute__((constructor)) static void floor_init(void)
{
	floor_read = (ssize_t(*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
	floor_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
}

static inline void floor_add(int fd, ssize_t r)
{
	if (r > 0 && (unsigned)fd < UC_FLOOR_FDS)
		floor_count[fd].bytes += (uint64_t)r;
}

__attribute__((visibility("default"))) ssize_t read(int fd, void *buf, size_t n)
{
	ssize_t r = floor_read(fd, buf, n);

	floor_add(fd, r);
	return r;
}

__attribute__((visibility("default"))) ssize_t write(int fd, const void *buf, size_t n)
{
	ssize_t r = floor_write(fd, buf, n);

	floor_add(fd, r);
	return r;
}
