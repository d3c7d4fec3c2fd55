/* SPDX-License-Identifier: MIT */
/*
 * uc_shim.h - what the files of libunicache.so share: the settings, the process's state,
 * the real functions, and the functions and small inline helpers used across files.
 *
 * libunicache.so is the LD_PRELOAD half of MFC in a guest. It is preloaded only into what
 * the operator scoped (a unit's drop-in, or /etc/ld.so.preload with a cgroup, an
 * executable or "everywhere" in shim.conf: uc_scope.c), and is off in setuid programs, in
 * PID 1 and everywhere when the kernel command line says unicache.shim=off.
 *
 * The guest's programs come first, so the read path is built in two layers:
 *   - every call on a regular file costs a few loads: the descriptor's cache line (its file
 *     id, offset and the decision of the current table generation: does the table name the
 *     file at all?), the table header's generation, and this thread's open run of counts.
 *     No system call but the call's own, no lookup, no atomic: counts gather per thread and
 *     go to the shared counters once per chunk run (uc_counters.c), exactly;
 *   - only a file the table names (a file entry, uc_layout.h) pays for the chunk lookup and
 *     the mechanisms, and only a process where they may act makes their system calls
 *     (uc_sandbox.c: never under a seccomp filter unless told).
 *
 * For read, pread, readv, preadv, preadv2 (and their *64 and fortified variants) and
 * sendfile on regular files of a named file it:
 *   1. looks the chunk (file id, offset / chunk_size) up in the placement table the
 *      agent publishes in shared memory (lock-free, seqlock over a double buffer; the last
 *      entry is kept per thread, so a sequential reader looks up once per chunk);
 *   2. when the chunk's home vCPUs do not include the current CPU, the read's span (its
 *      size, or for a sequential reader the rest of the chunk: uc_read_span) is at least
 *      min_read_size and the chunk's migration budget for this interval is not spent,
 *      moves the thread to one of them, the one the rule of uc_decide.h picks (the chunk's
 *      own vCPU, or the next one no other reader claims), with sched_setaffinity to that
 *      single CPU (MFC section 4.2, 4.5);
 *   3. for chunks marked non-caching, serves pread through an mmap of the file copied
 *      with prefetchnta loads (MFC section 4.3, 5), falling back to the plain call on
 *      anything unusual;
 *   4. for chunks with a color node (SRM-buffer), makes the real call under a preferred
 *      memory policy for that node, so the page cache it brings in lands there;
 *   5. for chunks replicated on the calling thread's node (NCC), serves read, pread and
 *      sendfile from the agent's guest-wide replica on that node, mapped read-only, checked
 *      against the file's fstat and generations on every serve (docs/replicas.md).
 * Every call on a regular file, named or not, is counted: bytes and runs per chunk and
 * vCPU, and in guests where NCC runs, once per chunk and interval the guest node of its
 * first page-cache page.
 *
 * It never changes what the call returns: every path either is the real call or
 * produces exactly its bytes, return value, errno and file offset. It never reads memory
 * the caller points to before the call (the iovec array of readv is not read; sendfile's
 * offset only for a named file, under the fault guard), so a bad pointer gets the
 * kernel's EFAULT. Without the
 * table (no agent) every call is the plain call.
 *
 * See docs/agent.md for the layout, the limits and the non-temporal path.
 *
 * One concern per file, in the order a read meets them:
 *   uc_interpose_read.c   read, pread, readv, preadv*, sendfile (and *64, fortified)
 *   uc_call.c             the per-call logic: uc_pre before the real call, uc_post after
 *   uc_fdcache.c          descriptors: opened, their file once known, its decision
 *   uc_pending.c          counts waiting for their descriptor's file
 *   uc_table.c            the table's parameters and a chunk's or a file's entry
 *   uc_migrate.c          moving the thread to the chunk's vCPU (rule: uc_decide.c)
 *   uc_ntpath.c           pread through an mmap copied with prefetchnta (copy: uc_nt.c)
 *   uc_colors.c           a preferred memory policy around the call (SRM-buffer)
 *   uc_replicas.c         serving from the agent's node-local replicas (NCC)
 *   uc_repclient.c        asking the agent for a replica (its socket)
 *   uc_guard.c            the fault guard of the copies from mappings
 *   uc_counters.c         this thread's run of counts and the shared per-chunk counters
 *   uc_nodes.c            guest NUMA nodes (from the table) and a page's node
 * and around them:
 *   uc_interpose_write.c  write, pwrite*, writev, ftruncate*: counts and generations
 *   uc_interpose_fd.c     lseek, close, dup*, open*, fopen*, pipe*, socket*, accept*
 *   uc_interpose_stat.c   fstat*, fstatat*, statx of a descriptor: its file, for free
 *   uc_state.c            settings, the constructor and the destructor
 *   uc_scope.c            whether this process is in the operator's scope (shim.conf)
 *   uc_sandbox.c          whether the mechanisms may make their system calls (seccomp)
 *   uc_map.c              mapping the agent's table and this user's counters file
 *   uc_real.c, uc_real.h  the real functions (dlsym RTLD_NEXT)
 *   uc_export.c           the caps marker and the helpers for tests and the bench
 * The shared-memory layout is uc_layout.h; this header declares the state, the table and
 * the nodes, and includes uc_fd.h (counts, descriptors) and uc_call.h (the mechanisms,
 * the per-call logic).
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
#include <sys/sysmacros.h>
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
#define UC_DEFAULT_CONF "/etc/unicache-agent/shim.conf"
#define UC_FD_CACHE 65536          /* fds below this are classified; others pass through */
#define UC_MAX_SPLIT 16            /* a read is counted over at most this many chunks */
#define UC_PROBES 32               /* counter slots probed before a read is dropped */
#define UC_PEND_SLOTS 256          /* descriptors whose runs may wait for their file at once */
#define UC_PEND_RUNS 4             /* runs one of them keeps waiting (uc_pending.c) */
#define UC_RETRY_NS 1000000000ll   /* retry mapping the table once a second */
#define UC_RETRY_CALLS 1024        /* ... checked on every this many calls without a table */
#define UC_SEQ_RETRIES 64          /* table reads retried before giving up */
#define UC_RUN_CALLS 64            /* a run of counts goes to the counters after this many calls */
#define UC_RUN_CHUNKS 16           /* ... or when a sequential reader spans this many chunks */
#define UC_RUN_SEALED 0xffu        /* uc_thread.run_ff: a run no call joins on the fast path */
#define UC_NO_HOME 0xffffu         /* uc_thread.run_home: no vCPU to stay on */
#define UC_REPLICA_SLOTS 64        /* replica mappings per process */
#define UC_DEFAULT_REPLICAS "/run/unicache/replicas"
#define UC_REPLICA_MARGIN_MS 20    /* default UNICACHE_REPLICA_MARGIN_MS (> a jiffy) */
#define UC_REPLICA_WAIT_MS 5       /* default UNICACHE_REPLICA_WAIT_MS: longest wait for the agent */
#define UC_REP_RETRY_NS 1000000000ll /* a replica the agent refused: asked again after this */
#define UC_COARSE_FS_MARGIN_NS 2000000000ll /* ctime with zero nanoseconds: a coarse fs */
#define UC_POLICY_BITS 1024        /* nodemask bits for get/set_mempolicy */

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
	const struct uc_table_cpus *cpus;
	uint32_t nbuckets;
};

struct uc_ctr_view {
	struct uc_ctr_hdr *hdr;
	uint32_t nslots, slot_size, max_vcpus;
	uint64_t region_len; /* uc_region_len */
};

/* uc.on: whether the shim works in this process (uc_state.c uc_activate) */
enum { UC_OFF = 0, UC_ON = 1, UC_UNDECIDED = 2 };

/* the mechanisms' permission to make their system calls (uc_sandbox.c) */
enum { UC_ACT_UNKNOWN = 0, UC_ACT_YES = 1, UC_ACT_NO = 2 };

/* the CPUs the process could use when the shim loaded, as the rule's vCPU bit mask (empty
 * when unknown: then no migration), and as the set uc_unpin gives back */
struct uc_allowed {
	uint64_t words[UC_MASK_WORDS];
	cpu_set_t mask;
	int valid;
};

struct uc_state {
	/* what a call reads: the first cache line */
	_Atomic int mapped;                /* table (and maybe counters) usable */
	_Atomic int act;                   /* UC_ACT_*: may the mechanisms make system calls */
	const struct uc_table_hdr *thdr;   /* the mapped table's header (NULL before) */
	_Atomic uint64_t epoch;            /* mappings made: a generation is (epoch, gen) */
	const struct uc_ctr_view *ctr;     /* NULL without counters */
	ptrdiff_t rseq_cpu;                /* the rseq area's cpu_id from the thread pointer;
					    * 0: no rseq (uc_cpu asks sched_getcpu) */
	ptrdiff_t tls_off;                 /* uc_t from the thread pointer (uc_me) */
	uc_read_t real_read;               /* libc's read and pread64, for a run's calls */
	uc_pread64_t real_pread64;
	/* the rest */
	_Atomic uint64_t salt;
	_Atomic int on;                    /* UC_ON: in scope and not switched off, decided
					    * at the process's first open (uc_state.c) */
	int nt_read;                       /* UNICACHE_NT_READ=1: non-temporal read() too */
	int nt_off;                        /* UNICACHE_NT=0: never use the mmap path */
	int rep_off;                       /* UNICACHE_REPLICA=0: never serve replicas */
	int color_off;                     /* UNICACHE_COLOR=0: never set a memory policy */
	int act_seccomp;                   /* UNICACHE_SECCOMP=act: act under a filter too */
	_Atomic int unfiltered;            /* UC_ACT_*: YES when no seccomp filter at all */
	long long rep_margin_ns;           /* UNICACHE_REPLICA_MARGIN_MS */
	long long rep_wait_ns;             /* UNICACHE_REPLICA_WAIT_MS */
	char rep_sock[256];                /* UNICACHE_REPLICAS/socket: the agent's replicas */
	_Atomic long long next_try_ns;
	atomic_flag mapping;
	const struct uc_tbl_view *table;
	struct uc_gen_hdr *gens;           /* statistics + generations; NULL without counters */
	uint32_t ngens;
	long pagesz;
	char table_path[256];
	char ctr_dir[256];                 /* UNICACHE_COUNTERS: one file per user inside */
	char conf_path[256];               /* UNICACHE_SHIM_CONF: the scopes (uc_scope.c) */
	int preload_names_shim;            /* the LD_PRELOAD it started with names the shim */
	int warned;
	struct uc_allowed orig;            /* migrations stay inside these CPUs */
} __attribute__((aligned(64)));
extern struct uc_state uc;


static inline long long uc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int uc_try_map(void);
int uc_activate(void);
void uc_retire(void);
int uc_retry_map(int from_open);

/*
 * Is the table usable? Without one (a process started before the agent), the shim maps
 * it at most once a second: from an open, which makes system calls anyway, and from a
 * read only where the mechanisms are known to be allowed theirs (uc_may_act), looking at
 * the clock once every UC_RETRY_CALLS calls of a thread. So a read under a seccomp filter
 * never opens the table.
 */
static inline int uc_ready(void)
{
	if (__builtin_expect(atomic_load_explicit(&uc.mapped, memory_order_acquire), 1))
		return 1;
	return atomic_load_explicit(&uc.act, memory_order_relaxed) == UC_ACT_YES &&
	       uc_retry_map(0);
}

/* scope (uc_scope.c) and sandbox (uc_sandbox.c) */
int uc_in_scope(pid_t pid);
int uc_may_act_slow(void);
int uc_fstat(int fd, struct stat *st);
int uc_real_fstat(int fd, struct stat *st);

/* May a mechanism (migration, colors, replicas, the mmap path, a page's node) make its
 * system calls in this process? Not under a seccomp filter (unless UNICACHE_SECCOMP=act). */
static inline int uc_may_act(void)
{
	int a = atomic_load_explicit(&uc.act, memory_order_relaxed);

	if (__builtin_expect(a == UC_ACT_YES, 1))
		return 1;
	return a == UC_ACT_NO ? 0 : uc_may_act_slow();
}

/* Chunk index and offset in the chunk: chunk sizes are powers of two (the table's are
 * checked when read), so no division on the read path. */
static inline uint64_t uc_chunk_of(uint64_t off, uint64_t cs)
{
	return off >> __builtin_ctzll(cs);
}

static inline uint64_t uc_in_chunk(uint64_t off, uint64_t cs)
{
	return off & (cs - 1);
}

/* --- table (uc_table.c) --------------------------------------------------------------- */

/* A table buffer's parameters, per thread, as of the table generation uc_t.gen. */
struct uc_params {
	uint64_t chunk_size;     /* bytes, a power of two; 0: no valid table */
	uint64_t min_read_size;
	uint32_t flags;          /* UC_TABLE_* */
	uint32_t sample_bytes;   /* the open sample (uc_table_buf): files up to this size */
	uint8_t sample_shift;    /* are counted in one open of 2^sample_shift (0: all) */
	uint8_t names_files;     /* the buffer has entries: its file filter may hold a file */
};

/*
 * A run of counts as it goes to the counters (uc_counters.c): a thread's reads of one file
 * on one vCPU, in chunk lo and, for a sequential reader, in the chunks after it that it
 * entered at their start, up to chunk hi. A chunk between lo and hi was read whole in one
 * run (chunk_size bytes, one run); lo's and hi's own counts are kept.
 */
struct uc_run {
	const struct uc_ctr_view *cv;
	uint64_t file_id, chunk_size;
	uint64_t lo, hi;
	uint64_t lo_bytes;            /* chunk lo's, when hi > lo */
	uint64_t cur_bytes;           /* chunk hi's */
	uint32_t lo_runs, cur_runs;
	uint32_t calls, writes, nt;   /* writes and nt_reads: of a one-chunk run only */
	int fd, cpu;
	uint8_t scale;                /* its runs and bytes go out multiplied by 2^scale (a
				       * sampled open's, uc_fd_known) */
};

/*
 * What a thread keeps between its calls, in one block of its static TLS: the table's
 * parameters at the generation it last saw, where its last read of a file ended
 * (uc_read_span's prev_end), whether the shim pinned it, and its open run of counts. The
 * first cache line holds all that a read inside the open run reads and writes (uc_in_run,
 * uc_run_add): after a large copy has evicted the caches, that call misses this one line,
 * the descriptor's and the hot line of uc.
 */
struct uc_thread {
	uint64_t gen;            /* the table generation tp is of (0: none read yet) */
	uint64_t seq_file;       /* the file of this thread's last read */
	uint64_t seq_end;        /* where it ended (UINT64_MAX: none) */
	uint64_t run_file;       /* the open run's file */
	uint64_t run_hi;         /* the chunk it reads now */
	uint64_t run_bytes;      /* chunk run_hi's bytes */
	uint16_t run_chunks;     /* run_hi - its lo + 1; 0: no run open */
	uint16_t run_harvest;    /* the table's harvests (low 16 bits) when the run opened */
	uint16_t run_calls;
	uint16_t run_runs;       /* chunk run_hi's runs */
	uint8_t run_shift;       /* log2 of the run's chunk size */
	uint8_t run_ff;          /* the file decision (UC_FF_*) its calls may have, or
				  * UC_RUN_SEALED: no call joins it without uc_pre */
	uint8_t pinned;          /* the shim moved this thread: it is pinned to one vCPU */
	uint8_t busy;            /* counting: a signal handler's call inside ours counts nothing */
	uint16_t run_cpu;        /* the vCPU its reads are counted on */
	uint16_t run_fresh;      /* a placed chunk's: until when (coarse ms, low 16 bits) the
				  * claim on run_cpu that keeps the thread there needs no renewal;
				  * UC_NO_HOME: the rule has nothing to say in this chunk */
	/* the rest: read when a run opens or goes, or a call takes the named path */
	struct uc_params tp;
	const struct uc_ctr_view *run_cv;
	uint64_t run_lo_bytes;   /* chunk lo's, once run_chunks > 1 */
	uint32_t run_lo_runs;
	uint32_t run_writes, run_nt;
	int run_fd;
	int registered;          /* the thread-exit flush of its run is set up */
	uint8_t run_pend;        /* run_file is a stand-in: its descriptor's file is not known */
	uint8_t run_scale;       /* log2 its counts are multiplied by when sent (uc_run.scale) */
} __attribute__((aligned(64)));

_Static_assert(offsetof(struct uc_thread, tp) == 64, "a run's call reads one line");
_Static_assert(offsetof(struct uc_state, salt) == 64, "a call reads uc's first line only");

extern UC_TLS struct uc_thread uc_t;

/* This thread's block, addressed from the thread pointer with the offset the constructor
 * kept in uc's hot line (the same for every thread: static TLS), not through the GOT. */
static inline struct uc_thread *uc_me(void)
{
	return (struct uc_thread *)(void *)((char *)__builtin_thread_pointer() + uc.tls_off);
}

int uc_params_refresh(uint64_t gen);

/* The generation of the mapped table as the shim names it: the mapping's epoch above the
 * agent's count of publishes, so that a table file replaced by another (which counts from
 * 0 again) never passes for the one before it. Never 0. */
static inline uint64_t uc_gen_of_table(const struct uc_table_hdr *th)
{
	return atomic_load_explicit(&uc.epoch, memory_order_relaxed) << 48 |
	       (__atomic_load_n(&th->gen, __ATOMIC_ACQUIRE) & ((1ull << 48) - 1));
}

/* The agent's harvests of the mapped table (low 16 bits; 0 with no table), in the line of
 * its generation: an open run of counts older than the last harvest goes out. */
static inline uint16_t uc_harvests(void)
{
	const struct uc_table_hdr *th = __atomic_load_n(&uc.thdr, __ATOMIC_RELAXED);

	return th ? (uint16_t)__atomic_load_n(&th->harvests, __ATOMIC_RELAXED) : 0;
}

/* The table's generation now (0 when no table is usable), with this thread's copy of the
 * buffer's parameters brought up to it. The header's magic and generation share a line. */
static inline uint64_t uc_table_gen(void)
{
	const struct uc_table_hdr *th;
	uint64_t g;

	if (!uc_ready())
		return 0;
	th = __atomic_load_n(&uc.thdr, __ATOMIC_ACQUIRE);
	if (__builtin_expect(__atomic_load_n(&th->magic, __ATOMIC_ACQUIRE) != UC_TABLE_MAGIC, 0)) {
		uc_retire();
		return 0;
	}
	g = uc_gen_of_table(th);
	if (__builtin_expect(g != uc_t.gen, 0) && !uc_params_refresh(g))
		return 0;
	return uc_t.tp.chunk_size ? g : 0;
}

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
int uc_lookup_cached(uint64_t gen, uint64_t file_id, uint64_t off, struct uc_hit *h);
uint32_t uc_file_flags(uint64_t file_id);
int uc_file_unnamed(uint64_t file_id);

/* --- guest NUMA nodes (uc_nodes.c) ---------------------------------------------------- */

/* Guest node of a CPU, as the agent published it in the table; -1 unknown. */
static inline int uc_node_of(int cpu)
{
	const struct uc_tbl_view *tv = __atomic_load_n(&uc.table, __ATOMIC_ACQUIRE);
	uint8_t n;

	if (!tv || cpu < 0 || cpu >= (int)UC_MAX_VCPUS)
		return -1;
	n = __atomic_load_n(&tv->cpus->cpu_node[cpu], __ATOMIC_RELAXED);
	return n < UC_MAX_NODES ? (int)n : -1;
}

/* Is guest node `node` online (memory-only nodes too)? */
static inline int uc_node_exists(int node)
{
	const struct uc_table_hdr *th = __atomic_load_n(&uc.thdr, __ATOMIC_ACQUIRE);

	return th && node >= 0 && node < (int)UC_MAX_NODES &&
	       (__atomic_load_n(&th->node_mask, __ATOMIC_RELAXED) >> node & 1u);
}

int uc_page_node(int fd, uint64_t off);

#pragma GCC visibility pop

/* the counts and descriptors, then the mechanisms and the per-call logic */
#include "uc_fd.h"
#include "uc_call.h"

#endif /* UC_SHIM_H */
