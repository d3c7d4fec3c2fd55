/* SPDX-License-Identifier: MIT */
/*
 * uc_shim.h - what the files of libunicache.so share: the settings, the process's state,
 * the real functions, and the functions and small inline helpers used across files.
 *
 * libunicache.so is the LD_PRELOAD half of MFC in a guest.
 *
 * For read, pread, readv, preadv, preadv2 (and their *64 and fortified variants) and
 * sendfile on regular files it:
 *   1. looks the chunk (file id, offset / chunk_size) up in the placement table the
 *      agent publishes in shared memory (lock-free, seqlock over a double buffer);
 *   2. when the chunk's home vCPUs do not include the current CPU, the read's span (its
 *      size, or for a sequential reader the rest of the chunk: uc_read_span) is at least
 *      min_read_size and the chunk's migration budget for this interval is not spent,
 *      moves the thread to one of them, the one the rule of uc_decide.h picks (the chunk's
 *      own vCPU, or the next one no other reader claims), with sched_setaffinity to that
 *      single CPU (MFC section 4.2, 4.5);
 *   3. for chunks marked non-caching, serves pread through an mmap of the file copied
 *      with prefetchnta loads (MFC section 4.3, 5), falling back to the plain call on
 *      anything unusual;
 *   4. counts bytes per chunk per vCPU and reads per guest node in the shared counters,
 *      and once per chunk per interval the guest node of its first page-cache page;
 *   5. for chunks with a color node (SRM-buffer), makes the real call under a preferred
 *      memory policy for that node, so the page cache it brings in lands there;
 *   6. for chunks replicated on the calling thread's node (NCC), serves the call (any of
 *      them) from the agent's guest-wide replica on that node, mapped read-only, checked
 *      against the file's fstat and generations on every serve (docs/replicas.md).
 *
 * It never changes what the call returns: every path either is the real call or
 * produces exactly its bytes, return value, errno and file offset. Without the table
 * (no agent) every call is the plain call.
 *
 * See docs/agent.md for the layout, the limits and the non-temporal path.
 *
 * One concern per file, in the order a read meets them:
 *   uc_interpose_read.c   read, pread, readv, preadv*, sendfile (and *64, fortified)
 *   uc_call.c             the per-call logic: uc_pre before the real call, uc_post after
 *   uc_fdcache.c          which fds are countable regular files, their file id and offset
 *   uc_table.c            a chunk's entry in the agent's placement table
 *   uc_migrate.c          moving the thread to the chunk's vCPU (rule: uc_decide.c)
 *   uc_ntpath.c           pread through an mmap copied with prefetchnta (copy: uc_nt.c)
 *   uc_colors.c           a preferred memory policy around the call (SRM-buffer)
 *   uc_replicas.c         serving from the agent's node-local replicas (NCC)
 *   uc_repclient.c        asking the agent for a replica (its socket)
 *   uc_guard.c            the fault guard of the copies from mappings
 *   uc_counters.c         the shared per-chunk counters
 *   uc_nodes.c            guest NUMA nodes
 * and around them:
 *   uc_interpose_write.c  write, pwrite*, writev, ftruncate*: counts and generations
 *   uc_interpose_fd.c     lseek, close, dup*, open*, pipe*, socket*, accept*: the fd cache
 *   uc_state.c            settings from the environment and the constructor
 *   uc_map.c              mapping the agent's table and this user's counters file
 *   uc_real.c, uc_real.h  the real functions (dlsym RTLD_NEXT)
 *   uc_export.c           the caps marker and the helpers for tests and the bench
 * The shared-memory layout is uc_layout.h.
 *
 * Everything declared here is hidden (the library is built with -fvisibility=hidden and
 * -flto: only UC_EXPORT symbols leave it, and the hot path still inlines across files).
 */
#ifndef UC_SHIM_H
#define UC_SHIM_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stddef.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "uc_decide.h"
#include "uc_layout.h"
#include "uc_nt.h"
#include "uc_real.h"

#define UC_EXPORT __attribute__((visibility("default")))
#define UC_TLS __thread __attribute__((tls_model("initial-exec")))

#define UC_DEFAULT_TABLE "/dev/shm/unicache-table"
#define UC_DEFAULT_COUNTERS "/dev/shm/unicache-counters"
#define UC_FD_CACHE 65536          /* fds below this get a cached file id */
#define UC_MAX_SPLIT 16            /* a read is counted over at most this many chunks */
#define UC_PROBES 32               /* counter slots probed before a read is dropped */
#define UC_RETRY_NS 1000000000ll   /* retry mapping the table once a second */
#define UC_SEQ_RETRIES 64          /* table reads retried before giving up */
#define UC_REPLICA_SLOTS 64        /* replica mappings per process */
#define UC_DEFAULT_REPLICAS "/run/unicache/replicas"
#define UC_REPLICA_MARGIN_MS 20    /* default UNICACHE_REPLICA_MARGIN_MS (> a jiffy) */
#define UC_REPLICA_WAIT_MS 5       /* default UNICACHE_REPLICA_WAIT_MS: longest wait for the agent */
#define UC_REP_RETRY_NS 1000000000ll /* a replica the agent refused: asked again after this */
#define UC_COARSE_FS_MARGIN_NS 2000000000ll /* ctime with zero nanoseconds: a coarse fs */
#define UC_POLICY_BITS 1024        /* nodemask bits for get/set_mempolicy */
#define UC_HOME_BUSY 0xffffull     /* home field: being looked up, or not resident */

/* mempolicy ABI (linux/mempolicy.h), raw system calls: no libnuma */
#define UC_MPOL_PREFERRED 1
#define UC_MPOL_BIND 2
#define UC_MPOL_MF_STRICT 1
#define UC_MPOL_MF_MOVE 2

/* hidden: direct (not GOT) access to the shared variables, no PLT for the functions */
#pragma GCC visibility push(hidden)

/* --- state (uc_state.c, uc_map.c) ----------------------------------------------------- */

/*
 * A mapping with the sizes validated when it was mapped (uc_try_map). Another process of
 * this user may rewrite a mapped counters header at any moment, and the agent may replace
 * a file with another layout while threads still read the old mapping:
 * a call takes the view once and sizes and indexes that mapping only with its copies.
 * Views, like the mappings, are never freed.
 */
struct uc_tbl_view {
	const struct uc_table_hdr *hdr;
	uint32_t nbuckets;
};

struct uc_ctr_view {
	struct uc_ctr_hdr *hdr;
	uint32_t nslots, slot_size, max_vcpus, nnodes;
};

struct uc_state {
	int disabled;                      /* UNICACHE_DISABLE=1 */
	int nt_read;                       /* UNICACHE_NT_READ=1: non-temporal read() too */
	int nt_off;                        /* UNICACHE_NT=0: never use the mmap path */
	int rep_off;                       /* UNICACHE_REPLICA=0: never serve replicas */
	int color_off;                     /* UNICACHE_COLOR=0: never set a memory policy */
	long long rep_margin_ns;           /* UNICACHE_REPLICA_MARGIN_MS */
	long long rep_wait_ns;             /* UNICACHE_REPLICA_WAIT_MS */
	char rep_sock[256];                /* UNICACHE_REPLICAS/socket: the agent's replicas */
	_Atomic int mapped;                /* table and counters usable */
	_Atomic long long next_try_ns;
	atomic_flag mapping;
	const struct uc_tbl_view *table;
	const struct uc_ctr_view *ctr;     /* NULL without counters */
	struct uc_gen_hdr *gens;           /* statistics + generations; NULL without counters */
	uint32_t ngens;
	uint64_t salt;
	long pagesz;
	char table_path[256];
	char ctr_dir[256];                 /* UNICACHE_COUNTERS: one file per user inside */
	int warned;
};
extern struct uc_state uc;

/* the CPUs the process could use when the shim loaded, as the rule's vCPU bit mask (empty
 * when unknown: then no migration) */
extern uint64_t uc_orig_words[UC_MASK_WORDS];
/* the same CPUs as a set, and whether sched_getaffinity gave them (uc_unpin) */
extern cpu_set_t uc_orig_mask;
extern int uc_orig_valid;

static inline long long uc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int uc_try_map(void);
void uc_retire(void);

/* Is the table usable? Retries mapping at most once a second. */
static inline int uc_ready(void)
{
	long long now;

	if (__builtin_expect(atomic_load_explicit(&uc.mapped, memory_order_acquire), 1))
		return 1;
	if (uc.disabled)
		return 0;
	now = uc_now_ns();
	if (now < atomic_load_explicit(&uc.next_try_ns, memory_order_relaxed))
		return 0;
	if (atomic_flag_test_and_set(&uc.mapping))
		return 0;
	atomic_store_explicit(&uc.next_try_ns, now + UC_RETRY_NS, memory_order_relaxed);
	(void)uc_try_map();
	atomic_flag_clear(&uc.mapping);
	return atomic_load_explicit(&uc.mapped, memory_order_acquire);
}

/* --- table lookup (uc_table.c) -------------------------------------------------------- */

struct uc_hit {
	uint64_t chunk_size;
	uint64_t min_read_size;
	uint64_t mask[UC_MASK_WORDS];
	uint32_t flags;
	uint32_t budget;
	uint32_t replica_nodes;
	int color_node;
	int found;
	int homes; /* some entry of the table has home vCPUs (UC_TABLE_HOMES) */
};

int uc_lookup(uint64_t file_id, uint64_t off, struct uc_hit *h);

/* --- guest NUMA nodes (uc_nodes.c) ---------------------------------------------------- */

extern signed char uc_cpu_node[UC_MAX_VCPUS]; /* node of each CPU (0 when sysfs says nothing) */
extern _Atomic uint32_t uc_node_mask;         /* guest nodes 0..31 that exist */
extern _Atomic int uc_nodes_state;            /* 0 unread, 1 being read, 2 ready */

void uc_nodes_init(void);
int uc_page_node(int fd, uint64_t off);

/* Guest node of a CPU; -1 while the map is being read by another thread. */
static inline int uc_node_of(int cpu)
{
	if (__builtin_expect(atomic_load_explicit(&uc_nodes_state, memory_order_acquire) != 2, 0)) {
		uc_nodes_init();
		if (atomic_load_explicit(&uc_nodes_state, memory_order_acquire) != 2)
			return -1;
	}
	return cpu >= 0 && cpu < (int)UC_MAX_VCPUS ? uc_cpu_node[cpu] : -1;
}

/* --- counters (uc_counters.c) --------------------------------------------------------- */

/* The counters view, loaded once per call so a remap never mixes two layouts. */
static inline const struct uc_ctr_view *uc_ctr(void)
{
	return __atomic_load_n(&uc.ctr, __ATOMIC_ACQUIRE);
}

struct uc_ctr_slot *uc_slot_at(const struct uc_ctr_view *cv, uint64_t file_id,
			       uint64_t chunk, int insert);
void uc_count(int fd, uint64_t file_id, int64_t off, uint64_t cs, ssize_t n, int is_write,
	      int nt, int cont);
int uc_take_budget(uint64_t file_id, uint64_t chunk, uint32_t budget);

/* --- fd cache (uc_fdcache.c) ---------------------------------------------------------- */

struct uc_fd {
	_Atomic uint64_t file_id;
	_Atomic int64_t pos;   /* predicted file offset for read/readv */
	_Atomic uint32_t state;
};

enum { UC_FD_UNKNOWN = 0, UC_FD_FILE = 1, UC_FD_PASS = 2 };

extern struct uc_fd uc_fds[UC_FD_CACHE];

int uc_fd_classify(int fd, uint64_t *file_id, int64_t *pos);

static inline void uc_fd_forget(int fd)
{
	if (fd >= 0 && fd < UC_FD_CACHE)
		atomic_store_explicit(&uc_fds[fd].state, UC_FD_UNKNOWN, memory_order_relaxed);
}

static inline void uc_fd_advance(int fd, int64_t pos)
{
	if (fd >= 0 && fd < UC_FD_CACHE)
		atomic_store_explicit(&uc_fds[fd].pos, pos, memory_order_relaxed);
}

/* --- migration (uc_migrate.c) --------------------------------------------------------- */

/* the shim moved this thread: it is pinned to one vCPU (a fork child inherits both) */
extern UC_TLS int uc_pinned;

void uc_tid_atfork_child(void);
uint64_t uc_span(int fd, uint64_t file_id, uint64_t off, size_t n, const struct uc_hit *h);
void uc_maybe_migrate(uint64_t file_id, uint64_t off, uint64_t n, const struct uc_hit *h);
void uc_unpin(void);

/* --- fault guard (uc_guard.c) --------------------------------------------------------- */

/* set around a copy from a mapping: a fault in it jumps to uc_jb */
extern UC_TLS int uc_in_copy;
extern UC_TLS sigjmp_buf uc_jb;

int uc_guard_ready(void);

/* --- non-temporal path (uc_ntpath.c) -------------------------------------------------- */

int uc_nt_pread(int fd, void *buf, size_t n, int64_t off, uint64_t file_id, ssize_t *ret);

/* --- colors (uc_colors.c) ------------------------------------------------------------- */

struct uc_policy {
	int mode;
	unsigned long mask[UC_POLICY_BITS / (8 * sizeof(unsigned long))];
	int set;
};

int uc_color_enter(int node, struct uc_policy *old);
void uc_color_leave(const struct uc_policy *old);

/* --- replicas and file generations (uc_replicas.c, uc_repclient.c) ------------------- */

struct uc_rmap;

/* Bytes a replica can hand out for one call: held (locked) until uc_rep_put. */
struct uc_rep_span {
	struct uc_rmap *slot;
	const unsigned char *map;  /* the replica file's mapping (its header first) */
	const unsigned char *src;  /* the first byte the call asked for */
	size_t len;                /* bytes from src: the call's answer */
};

struct uc_call;

void uc_rep_atfork_child(void);
void uc_rc_atfork_child(void);
int uc_rc_send(int fd, const struct uc_rep_req *q);
int uc_rc_recv(struct uc_rep_rsp *a, int *rfd, int wait_ms);
int uc_rep_copyv(const struct iovec *iov, int cnt, const unsigned char *map,
		 const unsigned char *src, size_t n);
int uc_rep_get(int fd, const struct uc_call *c, int64_t off, size_t n, struct uc_rep_span *s);
void uc_rep_put(struct uc_rep_span *s, int bad);
/* serving each kind of call (uc_repserve.c); 1 and *ret when served, 0: the real call */
int uc_rep_at(int fd, const struct iovec *iov, int cnt, size_t n, int64_t off,
	      const struct uc_call *c, ssize_t *ret);
int uc_rep_at_pos(int fd, const struct iovec *iov, int cnt, size_t n, struct uc_call *c,
		  ssize_t *ret);
int uc_rep_sendfile(int out, int in, void *offp, int is64, size_t count, struct uc_call *c,
		    ssize_t *ret);

/* One more of a statistic in the generations header (uc_gen_hdr); none without counters. */
static inline void uc_stat_add(size_t field_off)
{
	struct uc_gen_hdr *g = __atomic_load_n(&uc.gens, __ATOMIC_ACQUIRE);

	if (g)
		__atomic_fetch_add((uint64_t *)(void *)((unsigned char *)g + field_off), 1,
				   __ATOMIC_RELAXED);
}
#define UC_STAT(field) uc_stat_add(offsetof(struct uc_gen_hdr, field))

/* The shared generation of a file id (0 without counters). */
static inline uint64_t *uc_gen_slot(uint64_t file_id)
{
	struct uc_gen_hdr *g = __atomic_load_n(&uc.gens, __ATOMIC_ACQUIRE);

	if (!g)
		return NULL;
	return (uint64_t *)(void *)(g + 1) + (uc_gen_hash(file_id) & (uc.ngens - 1u));
}

static inline uint64_t uc_gen_of(uint64_t file_id)
{
	uint64_t *p = uc_gen_slot(file_id);

	return p ? __atomic_load_n(p, __ATOMIC_ACQUIRE) : 0;
}

/* A write the shim sees: every replica of the file (in every process) is stale now. */
static inline void uc_gen_bump(uint64_t file_id)
{
	uint64_t *p = uc_gen_slot(file_id);

	if (p) {
		__atomic_fetch_add(p, 1, __ATOMIC_ACQ_REL);
		UC_STAT(gen_bumps);
	}
}

/* --- the per-call logic (uc_call.c) --------------------------------------------------- */

struct uc_call {
	uint64_t file_id;
	int64_t off;        /* offset the call reads at; -1 unknown */
	uint64_t chunk_size;
	int nt;             /* chunk is non-caching */
	int color;          /* guest node for the page cache this call brings in; -1 none */
	int rep_node;       /* serve from the replica on this node; -1 none */
};

/* where this thread's last read of a file ended: uc_read_span's prev_end (sequential reads) */
extern UC_TLS uint64_t uc_seq_file;
extern UC_TLS uint64_t uc_seq_end;

int uc_pre(int fd, int64_t off, size_t n, struct uc_call *c);
void uc_post(int fd, const struct uc_call *c, ssize_t r, int cur, int is_write, int nt);

#pragma GCC visibility pop

#endif /* UC_SHIM_H */
