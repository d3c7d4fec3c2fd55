/* SPDX-License-Identifier: MIT */
/*
 * unicache_shim.c - libunicache.so, the LD_PRELOAD half of MFC in a guest.
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
 *   6. for chunks replicated on the calling thread's node (NCC), serves pread from a
 *      node-local replica, checked against the file's fstat and a shared generation on
 *      every serve (docs/replicas.md "Coherence").
 *
 * It never changes what the call returns: every path either is the real call or
 * produces exactly its bytes, return value, errno and file offset. Without the table
 * (no agent) every call is the plain call.
 *
 * See docs/agent.md for the layout, the limits and the non-temporal path.
 */
#define _GNU_SOURCE
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

#define UC_EXPORT __attribute__((visibility("default")))
#define UC_TLS __thread __attribute__((tls_model("initial-exec")))

#define UC_DEFAULT_TABLE "/dev/shm/unicache-table"
#define UC_DEFAULT_COUNTERS "/dev/shm/unicache-counters"
#define UC_FD_CACHE 65536          /* fds below this get a cached file id */
#define UC_MAX_SPLIT 16            /* a read is counted over at most this many chunks */
#define UC_PROBES 32               /* counter slots probed before a read is dropped */
#define UC_RETRY_NS 1000000000ll   /* retry mapping the table once a second */
#define UC_SEQ_RETRIES 64          /* table reads retried before giving up */
#define UC_REPLICA_SLOTS 64        /* replica buffers per process */
#define UC_REPLICA_MB 64           /* default UNICACHE_REPLICA_MB: replica memory per process */
#define UC_REPLICA_MARGIN_MS 20    /* default UNICACHE_REPLICA_MARGIN_MS (> a jiffy) */
#define UC_COARSE_FS_MARGIN_NS 2000000000ll /* ctime with zero nanoseconds: a coarse fs */
#define UC_POLICY_BITS 1024        /* nodemask bits for get/set_mempolicy */
#define UC_HOME_BUSY 0xffffull     /* home field: being looked up, or not resident */

/* mempolicy ABI (linux/mempolicy.h), raw system calls: no libnuma */
#define UC_MPOL_PREFERRED 1
#define UC_MPOL_BIND 2
#define UC_MPOL_MF_STRICT 1
#define UC_MPOL_MF_MOVE 2

/* Read by the agent (it looks for this string in the library to announce its caps). */
__attribute__((used)) static const char uc_caps_marker[] = "unicache-shim-caps=colors,replicas";

/* --- real functions ------------------------------------------------------------- */

typedef ssize_t (*uc_read_t)(int, void *, size_t);
typedef ssize_t (*uc_pread_t)(int, void *, size_t, off_t);
typedef ssize_t (*uc_pread64_t)(int, void *, size_t, off64_t);
typedef ssize_t (*uc_readv_t)(int, const struct iovec *, int);
typedef ssize_t (*uc_preadv_t)(int, const struct iovec *, int, off_t);
typedef ssize_t (*uc_preadv64_t)(int, const struct iovec *, int, off64_t);
typedef ssize_t (*uc_preadv2_t)(int, const struct iovec *, int, off_t, int);
typedef ssize_t (*uc_preadv64v2_t)(int, const struct iovec *, int, off64_t, int);
typedef ssize_t (*uc_write_t)(int, const void *, size_t);
typedef ssize_t (*uc_pwrite_t)(int, const void *, size_t, off_t);
typedef ssize_t (*uc_pwrite64_t)(int, const void *, size_t, off64_t);
typedef off_t (*uc_lseek_t)(int, off_t, int);
typedef off64_t (*uc_lseek64_t)(int, off64_t, int);
typedef int (*uc_close_t)(int);
typedef int (*uc_dup_t)(int);
typedef int (*uc_dup2_t)(int, int);
typedef int (*uc_dup3_t)(int, int, int);
typedef int (*uc_open_t)(const char *, int, ...);
typedef int (*uc_openat_t)(int, const char *, int, ...);
typedef int (*uc_open2_t)(const char *, int);
typedef int (*uc_creat_t)(const char *, mode_t);
typedef int (*uc_pipe_t)(int[2]);
typedef int (*uc_pipe2_t)(int[2], int);
typedef int (*uc_socket_t)(int, int, int);
typedef int (*uc_socketpair_t)(int, int, int, int[2]);
typedef int (*uc_accept_t)(int, struct sockaddr *, socklen_t *);
typedef int (*uc_accept4_t)(int, struct sockaddr *, socklen_t *, int);
typedef ssize_t (*uc_sendfile_t)(int, int, off_t *, size_t);
typedef ssize_t (*uc_sendfile64_t)(int, int, off64_t *, size_t);
typedef ssize_t (*uc_read_chk_t)(int, void *, size_t, size_t);
typedef ssize_t (*uc_pread_chk_t)(int, void *, size_t, off_t, size_t);
typedef ssize_t (*uc_pread64_chk_t)(int, void *, size_t, off64_t, size_t);
typedef ssize_t (*uc_writev_t)(int, const struct iovec *, int);
typedef ssize_t (*uc_pwritev_t)(int, const struct iovec *, int, off_t);
typedef ssize_t (*uc_pwritev64_t)(int, const struct iovec *, int, off64_t);
typedef ssize_t (*uc_pwritev2_t)(int, const struct iovec *, int, off_t, int);
typedef ssize_t (*uc_pwritev64v2_t)(int, const struct iovec *, int, off64_t, int);
typedef int (*uc_ftruncate_t)(int, off_t);
typedef int (*uc_ftruncate64_t)(int, off64_t);

static struct {
	uc_read_t read;
	uc_pread_t pread;
	uc_pread64_t pread64;
	uc_readv_t readv;
	uc_preadv_t preadv;
	uc_preadv64_t preadv64;
	uc_preadv2_t preadv2;
	uc_preadv64v2_t preadv64v2;
	uc_write_t write;
	uc_pwrite_t pwrite;
	uc_pwrite64_t pwrite64;
	uc_lseek_t lseek;
	uc_lseek64_t lseek64;
	uc_close_t close;
	uc_dup_t dup;
	uc_dup2_t dup2;
	uc_dup3_t dup3;
	uc_open_t open;
	uc_open_t open64;
	uc_openat_t openat;
	uc_openat_t openat64;
	uc_open2_t open_2;
	uc_open2_t open64_2;
	uc_creat_t creat;
	uc_creat_t creat64;
	uc_pipe_t pipe;
	uc_pipe2_t pipe2;
	uc_socket_t socket;
	uc_socketpair_t socketpair;
	uc_accept_t accept;
	uc_accept4_t accept4;
	uc_sendfile_t sendfile;
	uc_sendfile64_t sendfile64;
	uc_read_chk_t read_chk;
	uc_pread_chk_t pread_chk;
	uc_pread64_chk_t pread64_chk;
	uc_writev_t writev;
	uc_pwritev_t pwritev;
	uc_pwritev64_t pwritev64;
	uc_pwritev2_t pwritev2;
	uc_pwritev64v2_t pwritev64v2;
	uc_ftruncate_t ftruncate;
	uc_ftruncate64_t ftruncate64;
} uc_real;

#define UC_REAL(name)                                                              \
	(__extension__({                                                           \
		if (!uc_real.name)                                                 \
			uc_real.name = (__typeof__(uc_real.name))dlsym(RTLD_NEXT, #name); \
		uc_real.name;                                                      \
	}))
#define UC_REAL_SYM(field, sym)                                                    \
	(__extension__({                                                           \
		if (!uc_real.field)                                                \
			uc_real.field = (__typeof__(uc_real.field))dlsym(RTLD_NEXT, sym); \
		uc_real.field;                                                     \
	}))

/* --- shared state ---------------------------------------------------------------- */

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

static struct {
	int disabled;                      /* UNICACHE_DISABLE=1 */
	int nt_read;                       /* UNICACHE_NT_READ=1: non-temporal read() too */
	int nt_off;                        /* UNICACHE_NT=0: never use the mmap path */
	int rep_read;                      /* UNICACHE_REPLICA_READ=1: read() from replicas too */
	int rep_off;                       /* UNICACHE_REPLICA=0: never serve replicas */
	int color_off;                     /* UNICACHE_COLOR=0: never set a memory policy */
	size_t rep_bytes;                  /* UNICACHE_REPLICA_MB */
	long long rep_margin_ns;           /* UNICACHE_REPLICA_MARGIN_MS */
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
} uc;

struct uc_fd {
	_Atomic uint64_t file_id;
	_Atomic int64_t pos;   /* predicted file offset for read/readv */
	_Atomic uint32_t state;
};

enum { UC_FD_UNKNOWN = 0, UC_FD_FILE = 1, UC_FD_PASS = 2 };

static struct uc_fd uc_fds[UC_FD_CACHE];

static UC_TLS int uc_in_copy;
static UC_TLS sigjmp_buf uc_jb;
/* the CPUs the process could use when the shim loaded: migrations stay inside them */
static cpu_set_t uc_orig_mask;
static int uc_orig_valid;
/* the same, as the rule's vCPU bit mask (empty when unknown: then no migration) */
static uint64_t uc_orig_words[UC_MASK_WORDS];
/* this thread's id for the vCPU claims, 0 until asked (reset in a fork child) */
static UC_TLS uint32_t uc_tid_cached;
/* the shim moved this thread: it is pinned to one vCPU (a fork child inherits both) */
static UC_TLS int uc_pinned;
/* where this thread's last read of a file ended: uc_read_span's prev_end (sequential reads) */
static UC_TLS uint64_t uc_seq_file;
static UC_TLS uint64_t uc_seq_end = UINT64_MAX;
/* the size of file uc_size_file when this thread's stream of it began (uc_span) */
static UC_TLS uint64_t uc_size_file;
static UC_TLS uint64_t uc_size = UINT64_MAX;

static void uc_tid_atfork_child(void)
{
	uc_tid_cached = 0; /* the child's thread has a tid of its own */
}

static struct sigaction uc_old_bus, uc_old_segv;
static _Atomic int uc_guard_state; /* 0 none, 1 installed, -1 failed */

static long long uc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* The vCPU claims' clock: precise, because a claim lasts only UC_CLAIM_LEASE_NS. */
static uint64_t uc_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void uc_warn(const char *what, const char *path)
{
	char buf[512];
	int n;

	if (uc.warned)
		return;
	uc.warned = 1;
	n = snprintf(buf, sizeof(buf), "libunicache[%d]: %s %s, running as the plain calls\n",
		     (int)getpid(), what, path);
	if (n > 0 && UC_REAL(write))
		(void)uc_real.write(2, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/*
 * Map the table read-only; returns the mapping or NULL. Only a regular file of root or of
 * this process's user that nobody else may write is used: a file another user could
 * shrink under the mapping would make us fault.
 */
static void *uc_map_table(const char *path, size_t *len)
{
	struct stat st;
	void *p;
	int fd;

	fd = UC_REAL(open)(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(struct uc_table_hdr) ||
	    !S_ISREG(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid()) ||
	    (st.st_mode & 022)) {
		UC_REAL(close)(fd);
		return NULL;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	UC_REAL(close)(fd);
	if (p == MAP_FAILED)
		return NULL;
	*len = (size_t)st.st_size;
	return p;
}

/* The header a counters file of the table's layout starts with. */
static struct uc_ctr_hdr uc_ctr_hdr_of(const struct uc_table_hdr *th)
{
	struct uc_ctr_hdr h;

	memset(&h, 0, sizeof(h));
	h.magic = UC_CTR_MAGIC;
	h.layout = UC_LAYOUT_VERSION;
	h.nslots = th->ctr_nslots;
	h.max_vcpus = th->ctr_max_vcpus;
	h.slot_size = uc_slot_size(th->ctr_max_vcpus, th->ctr_nnodes);
	h.nnodes = th->ctr_nnodes;
	h.ngens = th->ctr_ngens;
	return h;
}

/*
 * Create this user's counters file whole: written under a private name, then linked into
 * place, so no process ever maps it half made. EEXIST from link: another process of this
 * user was first, and its file is used.
 */
static void uc_create_counters(const char *path, const struct uc_table_hdr *th, size_t len)
{
	struct uc_ctr_hdr h = uc_ctr_hdr_of(th);
	char tmp[sizeof(uc.ctr_dir) + 48];
	int fd, n;

	n = snprintf(tmp, sizeof(tmp), "%s.%d.new", path, (int)getpid());
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return;
	fd = UC_REAL(open)(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return;
	if (fchmod(fd, 0600) == 0 && UC_REAL(ftruncate)(fd, (off_t)len) == 0 &&
	    UC_REAL(pwrite)(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h))
		(void)link(tmp, path);
	(void)unlink(tmp);
	UC_REAL(close)(fd);
}

/* Is this mapping's header the layout the table names? Compares a copy, read once. */
static int uc_ctr_matches(const void *p, const struct uc_ctr_hdr *want)
{
	struct uc_ctr_hdr have;

	memcpy(&have, p, sizeof(have));
	return have.magic == want->magic && have.layout == want->layout &&
	       have.nslots == want->nslots && have.max_vcpus == want->max_vcpus &&
	       have.slot_size == want->slot_size && have.nnodes == want->nnodes &&
	       have.ngens == want->ngens;
}

/*
 * Our file has an older layout (the agent restarted with other settings): zero its magic,
 * so that our processes still counting into it map the new file, and unlink it if the
 * name still refers to it (another process of ours may have replaced it already).
 */
static void uc_retire_counters(int fd, const char *path, const struct stat *st)
{
	static const uint32_t zero;
	struct stat now;

	if (st->st_size >= (off_t)sizeof(zero))
		(void)UC_REAL(pwrite)(fd, &zero, sizeof(zero), 0);
	if (lstat(path, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino)
		(void)unlink(path);
}

/*
 * Map this user's counters file, UNICACHE_COUNTERS/<euid>, in the layout the table header
 * names: created if missing, replaced if of an older layout. Returns the mapping, or NULL
 * with counting off for this process (one line on stderr). Only a regular file of this
 * user that no other user may read or write is used, so no other user can shrink it under
 * the mapping (SIGBUS) or write into it.
 */
static void *uc_map_counters(const struct uc_table_hdr *th, size_t *len)
{
	char path[sizeof(uc.ctr_dir) + 16];
	uid_t uid = geteuid();
	struct uc_ctr_hdr want = uc_ctr_hdr_of(th);
	size_t need = (size_t)uc_ctr_len(th->ctr_nslots, th->ctr_max_vcpus, th->ctr_nnodes,
					 th->ctr_ngens);
	struct stat st;
	void *p;
	int fd, n, attempt;

	n = snprintf(path, sizeof(path), "%s/%u", uc.ctr_dir, (unsigned)uid);
	if (n < 0 || (size_t)n >= sizeof(path) || need == 0)
		return NULL;
	for (attempt = 0; attempt < 2; attempt++) {
		fd = UC_REAL(open)(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0 && errno == ENOENT) {
			uc_create_counters(path, th, need);
			fd = UC_REAL(open)(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		}
		if (fd < 0)
			break;
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != uid ||
		    (st.st_mode & 077)) {
			UC_REAL(close)(fd);
			uc_warn("counters file not private to this user:", path);
			return NULL;
		}
		p = MAP_FAILED;
		if ((size_t)st.st_size == need)
			p = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p != MAP_FAILED && uc_ctr_matches(p, &want)) {
			UC_REAL(close)(fd);
			*len = need;
			return p;
		}
		if (p != MAP_FAILED)
			munmap(p, need);
		uc_retire_counters(fd, path, &st);
		UC_REAL(close)(fd);
	}
	uc_warn("cannot open the counters file", path);
	return NULL;
}

/* Try to map table and counters; validates every size against the file length. */
static int uc_try_map(void)
{
	struct uc_table_hdr thc;
	const struct uc_table_hdr *th = &thc;
	struct uc_ctr_hdr *c = NULL;
	struct {
		struct uc_tbl_view t;
		struct uc_ctr_view c;
	} *views;
	size_t tlen = 0, clen = 0, need;
	void *t;
	int ret = -ENOENT;

	t = uc_map_table(uc.table_path, &tlen);
	if (!t)
		return -ENOENT;
	/* validate a copy, read once: a header rewritten while we check cannot pass half */
	memcpy(&thc, t, sizeof(thc));
	ret = -EINVAL;
	if (th->magic != UC_TABLE_MAGIC || th->layout != UC_LAYOUT_VERSION ||
	    th->nbuckets == 0 || th->nbuckets > UC_MAX_BUCKETS ||
	    (th->nbuckets & (th->nbuckets - 1)) ||
	    !uc_ctr_len(th->ctr_nslots, th->ctr_max_vcpus, th->ctr_nnodes, th->ctr_ngens)) {
		uc_warn("bad table header in", uc.table_path);
		goto fail;
	}
	need = sizeof(*th) + 2 * (sizeof(struct uc_table_buf) +
				  (size_t)th->nbuckets * sizeof(struct uc_entry));
	if (tlen < need) {
		uc_warn("short table file", uc.table_path);
		goto fail;
	}
	/* without counters (not ours, or none) the table is still followed, uncounted */
	c = uc_map_counters(th, &clen);
	views = mmap(NULL, sizeof(*views), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		     -1, 0);
	if (views == MAP_FAILED) {
		ret = -ENOMEM;
		goto fail;
	}
	views->t = (struct uc_tbl_view){t, th->nbuckets};
	if (c) {
		views->c = (struct uc_ctr_view){c, th->ctr_nslots,
						uc_slot_size(th->ctr_max_vcpus, th->ctr_nnodes),
						th->ctr_max_vcpus, th->ctr_nnodes};
		uc.ngens = th->ctr_ngens;
		__atomic_store_n(&uc.gens,
				 (struct uc_gen_hdr *)(void *)((unsigned char *)c + UC_CTR_REGIONS_OFF +
							       2 * (size_t)views->c.nslots *
								       views->c.slot_size),
				 __ATOMIC_RELEASE);
	}
	__atomic_store_n(&uc.table, &views->t, __ATOMIC_RELEASE);
	__atomic_store_n(&uc.ctr, c ? &views->c : NULL, __ATOMIC_RELEASE);
	uc.salt = th->salt;
	if (c)
		__atomic_fetch_add(&c->clients, 1, __ATOMIC_RELAXED);
	atomic_store_explicit(&uc.mapped, 1, memory_order_release);
	return 0;
fail:
	munmap(t, tlen);
	if (c)
		munmap(c, clen);
	return ret;
}

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

/* secure_getenv: a setuid program (ld.so.preload) ignores the caller's UNICACHE_* */
static void uc_env_path(char *dst, size_t n, const char *env, const char *def)
{
	const char *v = secure_getenv(env);

	if (!v || !*v || strlen(v) >= n)
		v = def;
	strcpy(dst, v);
}

static void uc_rep_atfork_child(void);

__attribute__((constructor)) static void uc_init(void)
{
	const char *v;
	unsigned i;

	uc.pagesz = sysconf(_SC_PAGESIZE);
	if (uc.pagesz <= 0)
		uc.pagesz = 4096;
	v = secure_getenv("UNICACHE_DISABLE");
	uc.disabled = v && *v == '1';
	v = secure_getenv("UNICACHE_NT_READ");
	uc.nt_read = v && *v == '1';
	v = secure_getenv("UNICACHE_NT");
	uc.nt_off = v && *v == '0';
	v = secure_getenv("UNICACHE_REPLICA_READ");
	uc.rep_read = v && *v == '1';
	v = secure_getenv("UNICACHE_REPLICA");
	uc.rep_off = v && *v == '0';
	v = secure_getenv("UNICACHE_COLOR");
	uc.color_off = v && *v == '0';
	v = secure_getenv("UNICACHE_REPLICA_MB");
	uc.rep_bytes = (size_t)(v && *v ? strtoul(v, NULL, 10) : UC_REPLICA_MB) << 20;
	v = secure_getenv("UNICACHE_REPLICA_MARGIN_MS");
	uc.rep_margin_ns = (v && *v ? (long long)strtoul(v, NULL, 10) : UC_REPLICA_MARGIN_MS) *
			   1000000ll;
	if (uc.rep_margin_ns < 10000000ll) /* never below 10 ms: more than a jiffy at HZ=100 */
		uc.rep_margin_ns = 10000000ll;
	uc_env_path(uc.table_path, sizeof(uc.table_path), "UNICACHE_TABLE", UC_DEFAULT_TABLE);
	uc_env_path(uc.ctr_dir, sizeof(uc.ctr_dir), "UNICACHE_COUNTERS", UC_DEFAULT_COUNTERS);
	uc_orig_valid = sched_getaffinity(0, sizeof(uc_orig_mask), &uc_orig_mask) == 0;
	for (i = 0; uc_orig_valid && i < UC_MAX_VCPUS; i++)
		if (CPU_ISSET(i, &uc_orig_mask))
			uc_orig_words[i / 64] |= 1ull << (i % 64);
	(void)pthread_atfork(NULL, NULL, uc_rep_atfork_child);
	(void)pthread_atfork(NULL, NULL, uc_tid_atfork_child);
	if (!uc.disabled)
		(void)uc_try_map();
	atomic_store_explicit(&uc.next_try_ns, uc_now_ns() + UC_RETRY_NS, memory_order_relaxed);
}

/*
 * The agent replaced the table or counters file (new layout): it zeroed the old magic and
 * unlinked the file. Map the new files on a later call. The old mappings are left in place
 * (another thread may be reading them); this leaks one mapping per agent reconfiguration.
 */
static void uc_retire(void)
{
	atomic_store_explicit(&uc.mapped, 0, memory_order_release);
	atomic_store_explicit(&uc.next_try_ns, 0, memory_order_relaxed);
}

/* --- table lookup ------------------------------------------------------------------ */

struct uc_hit {
	uint64_t chunk_size;
	uint64_t min_read_size;
	uint64_t mask[UC_MASK_WORDS];
	uint32_t flags;
	uint32_t budget;
	uint32_t replica_nodes;
	int color_node;
	int found;
};

/*
 * Look (file_id, chunk) up in the active buffer. chunk_size and min_read_size are
 * always filled when the table is valid; returns 0 when no valid table exists.
 * Readers never block: a reader that sees the writer inside its buffer retries.
 */
static int uc_lookup(uint64_t file_id, uint64_t off, struct uc_hit *h)
{
	const struct uc_tbl_view *tv = __atomic_load_n(&uc.table, __ATOMIC_ACQUIRE);
	const struct uc_table_hdr *th = tv->hdr;
	const unsigned char *tbase = (const void *)th;
	const size_t buf_len = sizeof(struct uc_table_buf) + (size_t)tv->nbuckets * 64u;
	const uint64_t bmask = tv->nbuckets - 1;
	int tries;

	if (__builtin_expect(__atomic_load_n(&th->magic, __ATOMIC_ACQUIRE) != UC_TABLE_MAGIC, 0)) {
		uc_retire();
		return 0;
	}
	for (tries = 0; tries < UC_SEQ_RETRIES; tries++) {
		uint32_t active = __atomic_load_n(&th->active, __ATOMIC_ACQUIRE) & 1u;
		const struct uc_table_buf *b =
			(const void *)(tbase + sizeof(*th) + active * buf_len);
		const struct uc_entry *e = (const void *)(b + 1);
		uint64_t s1 = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE), i, slot, chunk, cs;

		if (s1 & 1u)
			continue;
		cs = __atomic_load_n(&b->chunk_size, __ATOMIC_RELAXED);
		if (!(__atomic_load_n(&b->flags, __ATOMIC_RELAXED) & 1u) || cs == 0 ||
		    (cs & (cs - 1)))
			return 0;
		h->chunk_size = cs;
		h->min_read_size = __atomic_load_n(&b->min_read_size, __ATOMIC_RELAXED);
		h->found = 0;
		chunk = off / cs;
		slot = uc_bucket_hash(file_id, chunk) & bmask;
		for (i = 0; i <= bmask; i++, slot = (slot + 1) & bmask) {
			const struct uc_entry *x = &e[slot];
			uint32_t fl = __atomic_load_n(&x->flags, __ATOMIC_RELAXED);
			unsigned w;

			if (!(fl & UC_ENTRY_USED))
				break;
			if (__atomic_load_n(&x->file_id, __ATOMIC_RELAXED) != file_id ||
			    __atomic_load_n(&x->chunk, __ATOMIC_RELAXED) != chunk)
				continue;
			h->flags = fl;
			h->budget = __atomic_load_n(&x->migration_budget, __ATOMIC_RELAXED);
			h->color_node = __atomic_load_n(&x->color_node, __ATOMIC_RELAXED);
			h->replica_nodes = __atomic_load_n(&x->replica_nodes, __ATOMIC_RELAXED);
			for (w = 0; w < UC_MASK_WORDS; w++)
				h->mask[w] = __atomic_load_n(&x->mask[w], __ATOMIC_RELAXED);
			h->found = 1;
			break;
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&b->seq, __ATOMIC_RELAXED) == s1 &&
		    (__atomic_load_n(&th->active, __ATOMIC_RELAXED) & 1u) == active)
			return 1;
	}
	return 0;
}

/* --- guest NUMA nodes ---------------------------------------------------------------- */

static signed char uc_cpu_node[UC_MAX_VCPUS]; /* node of each CPU (0 when sysfs says nothing) */
static _Atomic uint32_t uc_node_mask;         /* guest nodes 0..31 that exist */
static _Atomic int uc_nodes_state;            /* 0 unread, 1 being read, 2 ready */

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
static void uc_nodes_init(void)
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

/*
 * Guest node of the page-cache page at `off` of fd, without I/O: mincore says whether it
 * is resident, MADV_POPULATE_READ maps it (an error, never a signal, if it went away) and
 * move_pages with no target nodes names its node. -1 when unknown.
 */
static int uc_page_node(int fd, uint64_t off)
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

/* --- counters ------------------------------------------------------------------------ */

/* The counters view, loaded once per call so a remap never mixes two layouts. */
static inline const struct uc_ctr_view *uc_ctr(void)
{
	return __atomic_load_n(&uc.ctr, __ATOMIC_ACQUIRE);
}

/* The chunk's slot in the active region; `insert`: take a free one (else count a drop). */
static struct uc_ctr_slot *uc_slot_at(const struct uc_ctr_view *cv, uint64_t file_id,
				      uint64_t chunk, int insert)
{
	struct uc_ctr_hdr *ch;
	uint32_t region, nslots, ssz;
	unsigned char *base;
	uint64_t key, idx;
	unsigned p;

	if (!cv)
		return NULL;
	ch = cv->hdr;
	if (__builtin_expect(__atomic_load_n(&ch->magic, __ATOMIC_ACQUIRE) != UC_CTR_MAGIC, 0)) {
		uc_retire();
		return NULL;
	}
	region = __atomic_load_n(&ch->active, __ATOMIC_ACQUIRE) & 1u;
	nslots = cv->nslots;
	ssz = cv->slot_size;
	base = (unsigned char *)ch + UC_CTR_REGIONS_OFF + (size_t)region * nslots * ssz;
	key = uc_slot_key(file_id, chunk);
	idx = key & (nslots - 1u);

	for (p = 0; p < UC_PROBES && p < nslots; p++, idx = (idx + 1) & (nslots - 1u)) {
		struct uc_ctr_slot *s = (void *)(base + idx * ssz);
		uint64_t k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE), zero = 0;

		if (k == key)
			return s;
		if (k != 0)
			continue;
		if (!insert)
			return NULL;
		if (__atomic_compare_exchange_n(&s->key, &zero, key, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			__atomic_store_n(&s->file_id, file_id, __ATOMIC_RELAXED);
			__atomic_store_n(&s->chunk, chunk, __ATOMIC_RELEASE);
			return s;
		}
		if (zero == key)
			return s;
	}
	if (insert)
		__atomic_fetch_add(&ch->dropped[region], 1, __ATOMIC_RELAXED);
	return NULL;
}

static inline struct uc_ctr_slot *uc_slot(const struct uc_ctr_view *cv, uint64_t file_id,
					  uint64_t chunk)
{
	return uc_slot_at(cv, file_id, chunk, 1);
}

static inline uint64_t *uc_vcpu_bytes(struct uc_ctr_slot *s)
{
	return (uint64_t *)(void *)(s + 1);
}

/*
 * Count one completed call of `n` bytes at `off` (off < 0: offset unknown) on fd, in its
 * chunks (at most UC_MAX_SPLIT). Reads also count per guest node, and the first read of a
 * chunk in an interval records the node of the chunk's first page-cache page (its home,
 * NCC's primary copy).
 *
 * `reads` and the reads per node count runs: a read that continues this thread's previous
 * read of the file inside the same chunk (`cont`, and not at a chunk's start) is part of
 * that run and adds bytes only. So a chunk read in 128 KiB buffers counts as often as one
 * read whole: popularity (MFC's use counts) and the migrations a sequential reader makes
 * (once per chunk, uc_read_span) do not depend on the program's buffer size.
 */
static void uc_count(int fd, uint64_t file_id, int64_t off, uint64_t cs, ssize_t n,
		     int is_write, int nt, int cont)
{
	const struct uc_ctr_view *cv = uc_ctr();
	uint64_t chunk, left, o;
	int cpu, i, node;

	if (off < 0 || cs == 0 || !cv)
		return;
	cpu = sched_getcpu();
	node = is_write ? -1 : uc_node_of(cpu);
	o = (uint64_t)off;
	left = n > 0 ? (uint64_t)n : 0;
	chunk = o / cs;
	for (i = 0; i < UC_MAX_SPLIT; i++, chunk++) {
		uint64_t part = cs - (o % cs);
		struct uc_ctr_slot *s;

		if (part > left || i == UC_MAX_SPLIT - 1)
			part = left;
		s = uc_slot(cv, file_id, chunk);
		if (s) {
			if (is_write) {
				__atomic_fetch_add(&s->writes, 1, __ATOMIC_RELAXED);
			} else {
				int run = !(i == 0 && cont && o % cs != 0);

				__atomic_fetch_add(&s->reads, (uint64_t)run, __ATOMIC_RELAXED);
				__atomic_fetch_add(&s->bytes, part, __ATOMIC_RELAXED);
				if (nt)
					__atomic_fetch_add(&s->nt_reads, 1, __ATOMIC_RELAXED);
				if (cpu >= 0 && (uint32_t)cpu < cv->max_vcpus && part)
					__atomic_fetch_add(&uc_vcpu_bytes(s)[cpu], part,
							   __ATOMIC_RELAXED);
				if (node >= 0 && (uint32_t)node < cv->nnodes)
					__atomic_fetch_add(&uc_vcpu_bytes(s)[cv->max_vcpus + node],
							   (uint64_t)run, __ATOMIC_RELAXED);
				/* one node: the agent knows the home without asking the kernel */
				if (fd >= 0 && n > 0 && cv->nnodes > 1) {
					uint64_t *home = &uc_vcpu_bytes(s)[cv->max_vcpus + cv->nnodes];
					uint64_t zero = 0;

					if (__atomic_load_n(home, __ATOMIC_RELAXED) == 0 &&
					    __atomic_compare_exchange_n(home, &zero, UC_HOME_BUSY, 0,
									__ATOMIC_RELAXED,
									__ATOMIC_RELAXED)) {
						int hn = uc_page_node(fd, chunk * cs);

						if (hn >= 0 && hn < (int)UC_MAX_NODES)
							__atomic_store_n(home, (uint64_t)hn + 1,
									 __ATOMIC_RELAXED);
					}
				}
			}
		}
		left -= part;
		o += part;
		if (!left)
			break;
	}
}

/* Spend one migration of the chunk's budget for this interval (MFC section 4.5). */
static int uc_take_budget(uint64_t file_id, uint64_t chunk, uint32_t budget)
{
	struct uc_ctr_slot *s = uc_slot(uc_ctr(), file_id, chunk);
	uint64_t m;

	if (!s) /* no counters (or the region is full): only an unlimited budget migrates */
		return budget == UC_BUDGET_UNLIMITED;
	m = __atomic_load_n(&s->migrations, __ATOMIC_RELAXED);
	do {
		if (budget != UC_BUDGET_UNLIMITED && m >= budget)
			return 0;
	} while (!__atomic_compare_exchange_n(&s->migrations, &m, m + 1, 1, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return 1;
}

/* --- fd cache -------------------------------------------------------------------------- */

static inline void uc_fd_forget(int fd)
{
	if (fd >= 0 && fd < UC_FD_CACHE)
		atomic_store_explicit(&uc_fds[fd].state, UC_FD_UNKNOWN, memory_order_relaxed);
}

/*
 * Classify fd: returns 1 and the file id for a countable regular file, 0 to pass
 * through (pipes, sockets, O_DIRECT, O_PATH, anything fstat fails on).
 */
static int uc_fd_classify(int fd, uint64_t *file_id, int64_t *pos)
{
	struct stat st;
	int fl;
	struct uc_fd *c = (fd >= 0 && fd < UC_FD_CACHE) ? &uc_fds[fd] : NULL;

	if (c) {
		uint32_t s = atomic_load_explicit(&c->state, memory_order_acquire);

		if (s == UC_FD_FILE) {
			*file_id = atomic_load_explicit(&c->file_id, memory_order_relaxed);
			*pos = atomic_load_explicit(&c->pos, memory_order_relaxed);
			return 1;
		}
		if (s == UC_FD_PASS)
			return 0;
	}
	if (fd < 0 || fstat(fd, &st) < 0)
		return 0;
	fl = fcntl(fd, F_GETFL);
	if (!S_ISREG(st.st_mode) || fl < 0 || (fl & O_DIRECT) || (fl & O_PATH)) {
		if (c)
			atomic_store_explicit(&c->state, UC_FD_PASS, memory_order_release);
		return 0;
	}
	*file_id = uc_file_id_of(uc.salt, (uint64_t)st.st_dev, (uint64_t)st.st_ino);
	*pos = (int64_t)UC_REAL(lseek)(fd, 0, SEEK_CUR);
	if (c) {
		atomic_store_explicit(&c->file_id, *file_id, memory_order_relaxed);
		atomic_store_explicit(&c->pos, *pos, memory_order_relaxed);
		atomic_store_explicit(&c->state, UC_FD_FILE, memory_order_release);
	}
	return 1;
}

static inline void uc_fd_advance(int fd, int64_t pos)
{
	if (fd >= 0 && fd < UC_FD_CACHE)
		atomic_store_explicit(&uc_fds[fd].pos, pos, memory_order_relaxed);
}

/* --- migration ---------------------------------------------------------------------------- */

/* This thread's id (a system call once per thread); 0 if it does not fit a claim word. */
static uint32_t uc_tid(void)
{
	if (__builtin_expect(uc_tid_cached == 0, 0)) {
		long t = syscall(SYS_gettid);

		uc_tid_cached = t > 0 && t <= (long)UC_CLAIM_TID_MAX ? (uint32_t)t : UINT32_MAX;
	}
	return uc_tid_cached == UINT32_MAX ? 0 : uc_tid_cached;
}

/* The vCPU claims of the counters file and how many are used; NULL without counters. */
static uint64_t *uc_claims(const struct uc_ctr_view *cv, uint32_t *nclaims)
{
	if (!cv || __atomic_load_n(&cv->hdr->magic, __ATOMIC_ACQUIRE) != UC_CTR_MAGIC)
		return NULL;
	*nclaims = cv->max_vcpus; /* validated at map time: <= UC_MAX_VCPUS */
	return (uint64_t *)(void *)((unsigned char *)cv->hdr + UC_CTR_CLAIMS_OFF);
}

/*
 * Migrations already spent on a chunk this interval, looked up without taking a slot. Only
 * a limited budget asks; without counters it counts as spent, so that only an unlimited
 * budget migrates uncounted (a full region is caught by uc_take_budget).
 */
static uint64_t uc_spent(uint64_t file_id, uint64_t chunk, uint32_t budget)
{
	const struct uc_ctr_view *cv = uc_ctr();
	struct uc_ctr_slot *s;

	if (budget == UC_BUDGET_UNLIMITED)
		return 0;
	if (!cv)
		return UINT64_MAX;
	s = uc_slot_at(cv, file_id, chunk, 0);
	return s ? __atomic_load_n(&s->migrations, __ATOMIC_RELAXED) : 0;
}

/*
 * The read's span (uc_read_span, uc_decide.h): the rest of the chunk for a sequential
 * reader. The file's size matters only when the rest of the chunk could reach
 * min_read_size, and is asked once per stream (one fstat when a stream starts at offset
 * 0, or continues a file whose size this thread has not asked): a file that grows or
 * shrinks while one thread scans it only moves the estimate, never the bytes read.
 */
static uint64_t uc_span(int fd, uint64_t file_id, uint64_t off, size_t n, const struct uc_hit *h)
{
	uint64_t prev = file_id == uc_seq_file ? uc_seq_end : UINT64_MAX;
	uint64_t span = uc_read_span(n, off, h->chunk_size, UINT64_MAX, prev);
	struct stat st;

	if (n >= h->min_read_size || span < h->min_read_size)
		return n;
	if (off == 0 || uc_size_file != file_id) {
		if (fstat(fd, &st) < 0)
			return n;
		uc_size_file = file_id;
		uc_size = (uint64_t)st.st_size;
	}
	return uc_read_span(n, off, h->chunk_size, uc_size, prev);
}

/*
 * Run the read on the vCPU the rule of uc_decide.h picks: stay, or move the thread to that
 * single CPU, spending one migration of the chunk's budget; then claim that vCPU.
 */
static void uc_maybe_migrate(uint64_t file_id, uint64_t off, uint64_t n, const struct uc_hit *h)
{
	struct uc_read_facts f;
	struct uc_decision d;
	uint64_t *claims;
	uint32_t nclaims = 0;
	cpu_set_t want;

	/* step 1 of the rule, before any clock or counter is read: most reads end here */
	if (n < h->min_read_size)
		return;
	f.n = n;
	f.min_read_size = h->min_read_size;
	memcpy(f.mask, h->mask, sizeof(f.mask));
	memcpy(f.allowed, uc_orig_words, sizeof(f.allowed));
	f.file_id = file_id;
	f.chunk = off / h->chunk_size;
	f.budget = h->budget;
	f.spent = uc_spent(file_id, f.chunk, h->budget);
	f.now_ns = uc_mono_ns();
	f.cur = sched_getcpu();
	f.tid = uc_tid();
	f.pad = 0;
	claims = uc_claims(uc_ctr(), &nclaims);
	d = uc_decide(&f, claims, nclaims);
	if (d.action == UC_ACT_NONE)
		return;
	if (d.action == UC_ACT_MIGRATE) {
		/* MFC section 4.5 competitive rule: spend one; another thread may have been first */
		if (!uc_take_budget(file_id, f.chunk, h->budget))
			return;
		CPU_ZERO(&want);
		CPU_SET(d.vcpu, &want);
		/* not moved (a cpuset forbids it): then it does not hold the vCPU either */
		if (sched_setaffinity(0, sizeof(want), &want) < 0)
			return;
		uc_pinned = 1;
	}
	uc_claims_settle(claims, nclaims, d, f.tid, f.now_ns);
}

/* --- non-temporal path ------------------------------------------------------------------------ */

static void uc_sig_handler(int sig, siginfo_t *si, void *ctx)
{
	struct sigaction *old = sig == SIGBUS ? &uc_old_bus : &uc_old_segv;

	if (uc_in_copy) {
		uc_in_copy = 0;
		siglongjmp(uc_jb, 1);
	}
	if (old->sa_flags & SA_SIGINFO) {
		if (old->sa_sigaction) {
			old->sa_sigaction(sig, si, ctx);
			return;
		}
	} else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
		old->sa_handler(sig);
		return;
	}
	/* default or ignore: restore it and let the fault happen again under it */
	(void)sigaction(sig, old, NULL);
	if (si && si->si_code <= 0)
		(void)raise(sig);
}

static int uc_guard_ready(void)
{
	struct sigaction sa, cur;
	int st = atomic_load(&uc_guard_state);

	if (st == 0) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = uc_sig_handler;
		sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGBUS, &sa, &uc_old_bus) < 0 ||
		    sigaction(SIGSEGV, &sa, &uc_old_segv) < 0) {
			atomic_store(&uc_guard_state, -1);
			return 0;
		}
		atomic_store(&uc_guard_state, 1);
		return 1;
	}
	if (st < 0)
		return 0;
	/* somebody may have replaced our handlers since: then stay off the mmap path */
	if (sigaction(SIGBUS, NULL, &cur) < 0 || cur.sa_sigaction != uc_sig_handler)
		return 0;
	if (sigaction(SIGSEGV, NULL, &cur) < 0 || cur.sa_sigaction != uc_sig_handler)
		return 0;
	return 1;
}

/*
 * Serve pread(fd, buf, n, off) from an mmap of the file with prefetchnta loads.
 * Returns 1 and *ret when it served the call; 0 when the caller must make the real
 * call (anything unusual: not readable, O_DIRECT, offset at or past EOF, mmap
 * failure, a fault during the copy).
 */
static int uc_nt_pread(int fd, void *buf, size_t n, int64_t off, uint64_t file_id, ssize_t *ret)
{
	struct stat st;
	size_t len, maplen;
	int64_t aoff;
	unsigned char *m;
	int fl;

	if (!UC_HAVE_NT || uc.nt_off || n == 0 || n > (size_t)SSIZE_MAX || off < 0)
		return 0;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    uc_file_id_of(uc.salt, (uint64_t)st.st_dev, (uint64_t)st.st_ino) != file_id)
		return 0;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || (fl & (O_DIRECT | O_PATH)))
		return 0;
	if (off >= (int64_t)st.st_size)
		return 0;
	len = (size_t)(st.st_size - off) < n ? (size_t)(st.st_size - off) : n;
	aoff = off & ~((int64_t)uc.pagesz - 1);
	maplen = len + (size_t)(off - aoff);
	if (!uc_guard_ready())
		return 0;
	m = mmap(NULL, maplen, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, (off_t)aoff);
	if (m == MAP_FAILED)
		return 0;
	if (sigsetjmp(uc_jb, 1) == 0) {
		uc_in_copy = 1;
		uc_nt_copy(buf, m + (off - aoff), len);
		uc_in_copy = 0;
		munmap(m, maplen);
		*ret = (ssize_t)len;
		return 1;
	}
	/* a fault in the copy (file truncated, bad buffer): the real call decides */
	uc_in_copy = 0;
	munmap(m, maplen);
	return 0;
}

/* --- colors: page cache on the sequence's node (SRM-buffer) -------------------------------- */

struct uc_policy {
	int mode;
	unsigned long mask[UC_POLICY_BITS / (8 * sizeof(unsigned long))];
	int set;
};

/*
 * Make the thread's page-cache allocations prefer `node` (SRM-buffer section 3.2: the
 * pages of one sequence get one color; here a color is a guest node). Saves the current
 * policy in *old; keeps errno. Returns 1 when a policy was set.
 */
static int uc_color_enter(int node, struct uc_policy *old)
{
	unsigned long want[UC_POLICY_BITS / (8 * sizeof(unsigned long))];
	int saved = errno;

	old->set = 0;
	if (uc.color_off || node < 0 || node >= (int)UC_MAX_NODES)
		return 0;
	(void)uc_node_of(-1);
	if (!(atomic_load(&uc_node_mask) >> node & 1u))
		return 0;
	memset(old->mask, 0, sizeof(old->mask));
	if (syscall(SYS_get_mempolicy, &old->mode, old->mask, (unsigned long)UC_POLICY_BITS,
		    NULL, 0ul) != 0) {
		errno = saved;
		return 0;
	}
	memset(want, 0, sizeof(want));
	want[node / (8 * sizeof(unsigned long))] = 1ul << (node % (8 * sizeof(unsigned long)));
	old->set = syscall(SYS_set_mempolicy, UC_MPOL_PREFERRED, want,
			   (unsigned long)UC_POLICY_BITS) == 0;
	if (old->set) {
		struct uc_gen_hdr *g = __atomic_load_n(&uc.gens, __ATOMIC_ACQUIRE);

		if (g)
			__atomic_fetch_add(&g->color_reads, 1, __ATOMIC_RELAXED);
	}
	errno = saved;
	return old->set;
}

/* Restore the policy uc_color_enter saved; keeps errno. */
static void uc_color_leave(const struct uc_policy *old)
{
	int saved = errno;

	if (old->set)
		(void)syscall(SYS_set_mempolicy, old->mode, old->mask, (unsigned long)UC_POLICY_BITS);
	errno = saved;
}

/* --- replicas: node-local copies of chunks (NCC) ------------------------------------------ */

/*
 * One replica buffer of this process. `lock`: >0 readers serving from it, -1 the one thread
 * filling it, 0 free. Every lock is a try: a busy replica means the real call, never a wait.
 */
struct uc_replica {
	_Atomic int lock;
	int valid;
	int node;
	uint64_t file_id;
	uint64_t chunk;
	uint64_t cs;         /* chunk size of the table it was filled under */
	uint64_t gen;        /* file generation the fill started under */
	unsigned char *buf;  /* mmap'd, mbind'ed to `node` */
	size_t cap;
	size_t len;          /* bytes of the chunk held (short at EOF) */
	dev_t dev;           /* fstat snapshot of the file at the fill */
	ino_t ino;
	off_t size;
	struct timespec mtim;
	struct timespec ctim;
	long long filled_ns; /* when it was filled (victim choice) */
};

static struct uc_replica uc_reps[UC_REPLICA_SLOTS];

/* A child forked while another thread held a replica lock would never get it back. */
static void uc_rep_atfork_child(void)
{
	int i;

	for (i = 0; i < (int)UC_REPLICA_SLOTS; i++) {
		if (atomic_load_explicit(&uc_reps[i].lock, memory_order_relaxed) < 0)
			uc_reps[i].valid = 0; /* a fill was under way: its buffer is partial */
		atomic_store_explicit(&uc_reps[i].lock, 0, memory_order_relaxed);
	}
}

static inline int uc_rd_try(_Atomic int *l)
{
	int v = atomic_load_explicit(l, memory_order_relaxed);

	while (v >= 0)
		if (atomic_compare_exchange_weak_explicit(l, &v, v + 1, memory_order_acquire,
							  memory_order_relaxed))
			return 1;
	return 0;
}

static inline void uc_rd_done(_Atomic int *l)
{
	atomic_fetch_sub_explicit(l, 1, memory_order_release);
}

static inline int uc_wr_try(_Atomic int *l)
{
	int zero = 0;

	return atomic_compare_exchange_strong_explicit(l, &zero, -1, memory_order_acquire,
						       memory_order_relaxed);
}

static inline void uc_wr_done(_Atomic int *l)
{
	atomic_store_explicit(l, 0, memory_order_release);
}

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

static inline int uc_ts_eq(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/* The file is still what the replica was filled from (no change since the fill's fstat). */
static inline int uc_same_file(const struct uc_replica *r, const struct stat *st)
{
	return r->dev == st->st_dev && r->ino == st->st_ino && r->size == st->st_size &&
	       uc_ts_eq(&r->ctim, &st->st_ctim) && uc_ts_eq(&r->mtim, &st->st_mtim);
}

static inline long long uc_ts_ns(const struct timespec *t)
{
	return (long long)t->tv_sec * 1000000000ll + t->tv_nsec;
}

static size_t uc_rep_nslots(uint64_t cs)
{
	size_t n = cs ? uc.rep_bytes / cs : 0;

	return n > UC_REPLICA_SLOTS ? UC_REPLICA_SLOTS : n;
}

/* tests only: a build with -DUC_MUTANT_NO_SERVE_CHECK must fail the coherence test */
#ifdef UC_MUTANT_NO_SERVE_CHECK
#define UC_MUTANT_SERVE_CHECK(x) ((void)(x), 1)
#else
#define UC_MUTANT_SERVE_CHECK(x) (x)
#endif

/* The file changed too recently for a fill to be safe (see uc_rep_fill step 3). */
static int uc_rep_too_fresh(const struct stat *st)
{
	struct timespec now;
	long long margin = uc.rep_margin_ns;

	if (st->st_ctim.tv_nsec == 0) /* a file system with coarse (second) timestamps */
		margin += UC_COARSE_FS_MARGIN_NS;
	clock_gettime(CLOCK_REALTIME, &now);
	return uc_ts_ns(&now) - uc_ts_ns(&st->st_ctim) <= margin;
}

/* A buffer of cap bytes whose pages come from `node` only (mbind MPOL_BIND). */
static int uc_rep_buffer(struct uc_replica *r, int node, size_t cap)
{
	unsigned long mask[UC_POLICY_BITS / (8 * sizeof(unsigned long))];
	void *p;

	if (r->buf && r->cap == cap && r->node == node)
		return 1;
	if (r->buf)
		munmap(r->buf, r->cap);
	r->buf = NULL;
	r->cap = 0;
	p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 0;
	memset(mask, 0, sizeof(mask));
	mask[node / (8 * sizeof(unsigned long))] = 1ul << (node % (8 * sizeof(unsigned long)));
	if (syscall(SYS_mbind, p, cap, UC_MPOL_BIND, mask, (unsigned long)UC_POLICY_BITS,
		    (unsigned long)(UC_MPOL_MF_STRICT | UC_MPOL_MF_MOVE)) != 0) {
		munmap(p, cap);
		return 0;
	}
	r->buf = p;
	r->cap = cap;
	r->node = node;
	return 1;
}

/*
 * Fill replica r (write-locked by the caller) with chunk `chunk` of fd's file. Coherence
 * (docs/replicas.md "Coherence"), in this order:
 *   1. g0 = the file's generation, t0 = the real-time clock;
 *   2. on a descriptor of our own: lseek(SEEK_DATA) takes the inode lock shared (ext4,
 *      tmpfs), so a buffered write in flight (it holds the lock exclusively from its
 *      ctime update to the end of its copy) has finished before we go on;
 *   3. fstat: the file's ctime must be older than t0 - margin (margin > the kernel's
 *      timestamp granularity), so any write after this point sets another ctime;
 *   4. read the chunk; fstat again and the generation again: both unchanged, or no fill.
 */
static int uc_rep_fill(struct uc_replica *r, int fd, uint64_t file_id, uint64_t chunk,
		       uint64_t cs, int node)
{
	struct stat s1, s2;
	struct timespec t0;
	char path[64];
	uint64_t g0, start = chunk * cs;
	size_t len, got = 0;
	long long margin = uc.rep_margin_ns;
	int fd2, ok = 0;

	r->valid = 0;
	g0 = uc_gen_of(file_id);
	clock_gettime(CLOCK_REALTIME, &t0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	fd2 = UC_REAL(open)(path, O_RDONLY | O_CLOEXEC);
	if (fd2 < 0)
		return 0;
	(void)UC_REAL(lseek)(fd2, 0, SEEK_DATA);
	if (fstat(fd2, &s1) < 0 || !S_ISREG(s1.st_mode) ||
	    uc_file_id_of(uc.salt, (uint64_t)s1.st_dev, (uint64_t)s1.st_ino) != file_id ||
	    s1.st_size <= (off_t)start)
		goto out;
	if (s1.st_ctim.tv_nsec == 0) /* a file system with coarse (second) timestamps */
		margin += UC_COARSE_FS_MARGIN_NS;
	/* t0 was read before the barrier and this fstat: the margin counts from then */
	if (uc_ts_ns(&t0) - uc_ts_ns(&s1.st_ctim) <= margin)
		goto abort;
	len = (uint64_t)s1.st_size - start < cs ? (size_t)((uint64_t)s1.st_size - start)
						 : (size_t)cs;
	if (!uc_rep_buffer(r, node, (size_t)cs))
		goto out;
	while (got < len) {
		ssize_t k = UC_REAL(pread64)(fd2, r->buf + got, len - got, (off64_t)(start + got));

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			goto abort;
		got += (size_t)k;
	}
	if (fstat(fd2, &s2) < 0 || s2.st_size != s1.st_size ||
	    !uc_ts_eq(&s2.st_ctim, &s1.st_ctim) || !uc_ts_eq(&s2.st_mtim, &s1.st_mtim) ||
	    uc_gen_of(file_id) != g0)
		goto abort;
	r->file_id = file_id;
	r->chunk = chunk;
	r->cs = cs;
	r->gen = g0;
	r->len = len;
	r->dev = s1.st_dev;
	r->ino = s1.st_ino;
	r->size = s1.st_size;
	r->mtim = s1.st_mtim;
	r->ctim = s1.st_ctim;
	r->filled_ns = uc_ts_ns(&t0);
	r->valid = 1;
	ok = 1;
	UC_STAT(replica_fills);
	goto out;
abort:
	UC_STAT(fill_aborts);
out:
	UC_REAL(close)(fd2);
	return ok;
}

/* Copy from a replica into the caller's buffer under the fault guard; 1 when done. */
static int uc_rep_copy(void *dst, const unsigned char *src, size_t n)
{
	if (!uc_guard_ready())
		return 0;
	if (sigsetjmp(uc_jb, 1) == 0) {
		/* volatile: the stores around a builtin memcpy must not be optimised away */
		*(volatile int *)&uc_in_copy = 1;
		__asm__ volatile("" ::: "memory");
		memcpy(dst, src, n);
		__asm__ volatile("" ::: "memory");
		*(volatile int *)&uc_in_copy = 0;
		return 1;
	}
	uc_in_copy = 0; /* a bad caller buffer: the real call says EFAULT */
	return 0;
}

/*
 * Serve pread(fd, buf, n, off) from this process's replica of the chunk on `node`, filling
 * it first when needed. Every serve checks, after the caller's call began: the file's
 * generation and its fstat (size, ctime, mtime, inode) against the fill's snapshot. Returns
 * 1 and *ret when served; 0 when the caller must make the real call (range past the
 * chunk, at or past EOF, not readable, O_DIRECT, a busy or unfillable replica).
 */
static int uc_rep_pread(int fd, void *buf, size_t n, int64_t off, uint64_t file_id,
			uint64_t cs, int node, ssize_t *ret)
{
	struct uc_replica *r;
	struct stat st;
	uint64_t chunk, start, end;
	struct uc_replica *hit = NULL;
	size_t nslots = uc_rep_nslots(cs), len, set, ways, w;
	int fl, served = 0, saved = errno;

	if (uc.rep_off || n == 0 || n > (size_t)SSIZE_MAX || off < 0 || !nslots)
		return 0;
	chunk = (uint64_t)off / cs;
	start = chunk * cs;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || off >= st.st_size)
		goto out;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || (fl & (O_DIRECT | O_PATH)))
		goto out;
	end = (uint64_t)off + n < (uint64_t)st.st_size ? (uint64_t)off + n : (uint64_t)st.st_size;
	if (end > start + cs)
		goto out; /* spans chunks: the real call */
	len = (size_t)(end - (uint64_t)off);
	/* two ways per set: two hot chunks that hash alike do not evict each other */
	ways = nslots >= 2 ? 2 : 1;
	set = (size_t)(uc_mix64(uc_bucket_hash(file_id, chunk) + (uint64_t)node) %
		       (nslots / ways)) * ways;
	for (w = 0; w < ways; w++) {
		r = &uc_reps[set + w];
		if (!uc_rd_try(&r->lock))
			continue;
		if (r->valid && r->file_id == file_id && r->chunk == chunk && r->cs == cs &&
		    r->node == node) {
			if (UC_MUTANT_SERVE_CHECK(uc_same_file(r, &st) && uc_gen_of(file_id) == r->gen) &&
			    end - start <= r->len) {
				served = uc_rep_copy(buf, r->buf + (off - (int64_t)start), len);
				if (served)
					UC_STAT(replica_serves);
				uc_rd_done(&r->lock);
				goto out;
			}
			UC_STAT(replica_rejects);
			hit = r;
		}
		uc_rd_done(&r->lock);
		if (hit)
			break;
	}
	if (!hit) { /* the way to fill: an empty one, else the one filled longest ago */
		hit = &uc_reps[set];
		if (ways == 2 && hit->valid &&
		    (!uc_reps[set + 1].valid || uc_reps[set + 1].filled_ns < hit->filled_ns))
			hit = &uc_reps[set + 1];
	}
	r = hit;
	if (!uc_wr_try(&r->lock))
		goto out;
	if (r->file_id == file_id && r->chunk == chunk && r->cs == cs && r->node == node)
		r->valid = 0; /* not servable (checked above): dropped now, not rejected again */
	if (uc_rep_too_fresh(&st)) {
		UC_STAT(fill_aborts); /* cheaply: no descriptor opened while the file is written */
		uc_wr_done(&r->lock);
		goto out;
	}
	/* fill, then serve under the same lock with the same checks */
	if (uc_rep_fill(r, fd, file_id, chunk, cs, node) && fstat(fd, &st) == 0 &&
	    uc_same_file(r, &st) && uc_gen_of(file_id) == r->gen && end - start <= r->len) {
		served = uc_rep_copy(buf, r->buf + (off - (int64_t)start), len);
		if (served)
			UC_STAT(replica_serves);
	}
	uc_wr_done(&r->lock);
out:
	errno = saved;
	if (served)
		*ret = (ssize_t)len;
	return served;
}

/* --- the per-call logic ------------------------------------------------------------------------ */

struct uc_call {
	uint64_t file_id;
	int64_t off;        /* offset the call reads at; -1 unknown */
	uint64_t chunk_size;
	int nt;             /* chunk is non-caching */
	int color;          /* guest node for the page cache this call brings in; -1 none */
	int rep_node;       /* serve from the replica on this node; -1 none */
};

/*
 * Everything before the real call. Returns 0 when the call passes straight through.
 * `off` < 0 means "current position" (read, readv, preadv2 with -1).
 */
static int uc_pre(int fd, int64_t off, size_t n, struct uc_call *c)
{
	struct uc_hit h;
	int64_t pos;
	uint64_t span;

	if (!uc_ready())
		return 0;
	if (!uc_fd_classify(fd, &c->file_id, &pos))
		return 0;
	c->off = off >= 0 ? off : pos;
	c->nt = 0;
	c->chunk_size = 0;
	c->color = -1;
	c->rep_node = -1;
	if (c->off < 0 || !uc_lookup(c->file_id, (uint64_t)c->off, &h))
		return 1;
	c->chunk_size = h.chunk_size;
	if (!h.found) {
		/* a pinned thread leaves a vCPU another reader holds (uc_decide.h, unplaced) */
		if (__builtin_expect(uc_pinned, 0)) {
			memcpy(h.mask, uc_orig_words, sizeof(h.mask));
			h.budget = UC_BUDGET_UNLIMITED;
			h.min_read_size = 0; /* a move for CPU, not for data: any read size */
			uc_maybe_migrate(c->file_id, (uint64_t)c->off, n, &h);
		}
		return 1;
	}
	/* MFC Figure 2 lines 3-4: reads below min_read_size always use caching loads */
	span = uc_span(fd, c->file_id, (uint64_t)c->off, n, &h);
	c->nt = !(h.flags & UC_ENTRY_CACHING) && span >= h.min_read_size;
	uc_maybe_migrate(c->file_id, (uint64_t)c->off, span, &h);
	if (__builtin_expect(h.flags & (UC_ENTRY_COLOR | UC_ENTRY_REPLICA), 0)) {
		if (h.flags & UC_ENTRY_COLOR)
			c->color = h.color_node;
		if (h.flags & UC_ENTRY_REPLICA) {
			/* NCC: threads on a node that keeps a replica read it (after migrating) */
			int node = uc_node_of(sched_getcpu());

			if (node >= 0 && node < (int)UC_MAX_NODES && (h.replica_nodes >> node & 1u))
				c->rep_node = node;
		}
	}
	return 1;
}

/* Everything after the real call; preserves errno. `cur` = call used the file offset. */
static void uc_post(int fd, const struct uc_call *c, ssize_t r, int cur, int is_write, int nt)
{
	int saved = errno;

	if (cur && r > 0 && c->off >= 0)
		uc_fd_advance(fd, c->off + r);
	if (c->chunk_size && r >= 0)
		uc_count(is_write ? -1 : fd, c->file_id, c->off, c->chunk_size, r, is_write, nt,
			 c->off >= 0 && c->file_id == uc_seq_file && (uint64_t)c->off == uc_seq_end);
	if (!is_write && r > 0 && c->off >= 0) {
		uc_seq_file = c->file_id;
		uc_seq_end = (uint64_t)c->off + (uint64_t)r;
	}
	errno = saved;
}

/* Sum of iov lengths, read without trusting the caller's pointer (the kernel would say
 * EFAULT, we must not crash). Returns 0 and passes through when it cannot tell. */
static int uc_iov_total(const struct iovec *iov, int cnt, size_t *total)
{
	struct iovec local[64], self, remote;
	size_t sum = 0;
	int i;

	if (cnt <= 0 || cnt > 64 || !iov)
		return 0;
	self.iov_base = local;
	self.iov_len = sizeof(struct iovec) * (size_t)cnt;
	remote.iov_base = (void *)(uintptr_t)iov;
	remote.iov_len = self.iov_len;
	if (process_vm_readv(getpid(), &self, 1, &remote, 1, 0) != (ssize_t)self.iov_len)
		return 0;
	for (i = 0; i < cnt; i++) {
		if (local[i].iov_len > (size_t)SSIZE_MAX - sum)
			return 0;
		sum += local[i].iov_len;
	}
	*total = sum;
	return 1;
}

/* Read a small object of the caller's without trusting the pointer (0: cannot). */
static int uc_peek(const void *p, void *dst, size_t n)
{
	struct iovec self = {dst, n}, remote = {(void *)(uintptr_t)p, n};

	return p && process_vm_readv(getpid(), &self, 1, &remote, 1, 0) == (ssize_t)n;
}

/*
 * sendfile from a regular file (a web server serving static files, MFC section 4.1):
 * migration and counting as for read, then the real call.
 */
static ssize_t uc_do_sendfile(int out, int in, void *offp, size_t count, int is64)
{
	struct uc_call c;
	int64_t off = -1;
	ssize_t r;
	int saved, active, e0 = errno;
	off_t o32 = 0;
	off64_t o64 = 0;

	if (offp && (is64 ? uc_peek(offp, &o64, sizeof(o64)) : uc_peek(offp, &o32, sizeof(o32))))
		off = is64 ? (int64_t)o64 : (int64_t)o32;
	struct uc_policy pol;

	pol.set = 0;

	active = in >= 0 && uc_ready() && uc_fd_classify(in, &c.file_id, &c.off) &&
		 (!offp || off >= 0) && uc_pre(in, offp ? off : -1, count, &c);
	if (active && c.color >= 0)
		uc_color_enter(c.color, &pol);
	errno = e0;
	if (is64)
		r = UC_REAL(sendfile64)(out, in, offp, count);
	else
		r = UC_REAL(sendfile)(out, in, offp, count);
	uc_color_leave(&pol);
	if (active) {
		saved = errno;
		uc_post(in, &c, r, !offp, 0, 0);
		errno = saved;
	}
	return r;
}

/* --- interposed functions ------------------------------------------------------------------------ */

/*
 * Every wrapper keeps the caller's errno (e0) across its own work: what the caller sees is
 * exactly the real call's errno, or the unchanged value after a call served here.
 */
/* The non-temporal read under the chunk's color: its page faults bring the page cache in
 * under the thread's memory policy, like a read() would (SRM-buffer). */
static int uc_nt_pread_colored(int fd, void *buf, size_t n, int64_t off, const struct uc_call *c,
			       ssize_t *r)
{
	struct uc_policy pol;
	int served;

	pol.set = 0;
	if (c->color >= 0)
		uc_color_enter(c->color, &pol);
	served = uc_nt_pread(fd, buf, n, off, c->file_id, r);
	uc_color_leave(&pol);
	return served;
}

static ssize_t uc_do_read(int fd, void *buf, size_t n)
{
	struct uc_call c;
	ssize_t r;
	int saved, e0 = errno;

	if (!uc_pre(fd, -1, n, &c)) {
		errno = e0;
		return UC_REAL(read)(fd, buf, n);
	}
	if (c.rep_node >= 0 && uc.rep_read) {
		/* opt-in, as the non-temporal read(): lseek around a replica pread */
		off_t cur = UC_REAL(lseek)(fd, 0, SEEK_CUR);

		if (cur >= 0 && uc_rep_pread(fd, buf, n, cur, c.file_id, c.chunk_size, c.rep_node,
					     &r) &&
		    UC_REAL(lseek)(fd, cur + r, SEEK_SET) == cur + r) {
			c.off = cur;
			uc_post(fd, &c, r, 1, 0, 0);
			errno = e0;
			return r;
		}
		if (cur >= 0)
			(void)UC_REAL(lseek)(fd, cur, SEEK_SET);
	}
	if (c.nt && uc.nt_read) {
		/* opt-in: read() through the mmap path; see docs/agent.md for the limit */
		off_t cur = UC_REAL(lseek)(fd, 0, SEEK_CUR);

		if (cur >= 0 && uc_nt_pread_colored(fd, buf, n, cur, &c, &r) &&
		    UC_REAL(lseek)(fd, cur + r, SEEK_SET) == cur + r) {
			c.off = cur;
			uc_post(fd, &c, r, 1, 0, 1);
			errno = e0;
			return r;
		}
		if (cur >= 0)
			(void)UC_REAL(lseek)(fd, cur, SEEK_SET);
	}
	if (__builtin_expect(c.color >= 0, 0)) {
		struct uc_policy pol;

		uc_color_enter(c.color, &pol);
		errno = e0;
		r = UC_REAL(read)(fd, buf, n);
		uc_color_leave(&pol);
	} else {
		errno = e0;
		r = UC_REAL(read)(fd, buf, n);
	}
	saved = errno;
	uc_post(fd, &c, r, 1, 0, 0);
	errno = saved;
	return r;
}

static ssize_t uc_do_pread(int fd, void *buf, size_t n, int64_t off)
{
	struct uc_call c;
	ssize_t r;
	int saved, e0 = errno;

	if (off < 0 || !uc_pre(fd, off, n, &c)) {
		errno = e0;
		return UC_REAL(pread64)(fd, buf, n, (off64_t)off);
	}
	if (c.rep_node >= 0 &&
	    uc_rep_pread(fd, buf, n, off, c.file_id, c.chunk_size, c.rep_node, &r)) {
		uc_post(fd, &c, r, 0, 0, 0);
		errno = e0;
		return r;
	}
	if (c.nt && uc_nt_pread_colored(fd, buf, n, off, &c, &r)) {
		uc_post(fd, &c, r, 0, 0, 1);
		errno = e0;
		return r;
	}
	if (__builtin_expect(c.color >= 0, 0)) {
		struct uc_policy pol;

		uc_color_enter(c.color, &pol);
		errno = e0;
		r = UC_REAL(pread64)(fd, buf, n, (off64_t)off);
		uc_color_leave(&pol);
	} else {
		errno = e0;
		r = UC_REAL(pread64)(fd, buf, n, (off64_t)off);
	}
	saved = errno;
	uc_post(fd, &c, r, 0, 0, 0);
	errno = saved;
	return r;
}

/* vectored reads: migration and counting, never the mmap path */
static ssize_t uc_do_preadv(int fd, const struct iovec *iov, int cnt, int64_t off, int flags,
			    int which)
{
	struct uc_call c;
	size_t total = 0;
	ssize_t r;
	int saved, active, e0 = errno;

	/* classify first: pipes and sockets never pay for reading the iovec array */
	struct uc_policy pol;

	pol.set = 0;

	active = (fd >= 0 && uc_ready() && uc_fd_classify(fd, &c.file_id, &c.off) &&
		  uc_iov_total(iov, cnt, &total) && uc_pre(fd, off, total, &c));
	if (active && c.color >= 0)
		uc_color_enter(c.color, &pol);
	errno = e0;
	switch (which) {
	case 0:
		r = UC_REAL(readv)(fd, iov, cnt);
		break;
	case 1:
		r = UC_REAL(preadv64)(fd, iov, cnt, (off64_t)off);
		break;
	default:
		r = UC_REAL(preadv64v2)(fd, iov, cnt, (off64_t)off, flags);
		break;
	}
	uc_color_leave(&pol);
	if (active) {
		saved = errno;
		uc_post(fd, &c, r, off < 0, 0, 0);
		errno = saved;
	}
	return r;
}

static ssize_t uc_do_pwrite(int fd, const void *buf, size_t n, int64_t off, int cur)
{
	struct uc_call c;
	ssize_t r;
	int saved, active, e0 = errno;

	active = uc_ready() && uc_fd_classify(fd, &c.file_id, &c.off);
	if (!cur && active)
		c.off = off;
	if (active)
		uc_gen_bump(c.file_id); /* before: a replica fill running now fails */
	errno = e0;
	r = cur ? UC_REAL(write)(fd, buf, n) : UC_REAL(pwrite64)(fd, buf, n, (off64_t)off);
	if (active) {
		struct uc_hit h;

		saved = errno;
		uc_gen_bump(c.file_id); /* after: no replica filled during the write survives */
		c.chunk_size = (c.off >= 0 && uc_lookup(c.file_id, (uint64_t)c.off, &h))
				       ? h.chunk_size
				       : 0;
		c.nt = 0;
		uc_post(fd, &c, r, cur, 1, 0);
		errno = saved;
	}
	return r;
}

UC_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	return uc_do_read(fd, buf, n);
}

UC_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	if (n > buflen)
		return UC_REAL_SYM(read_chk, "__read_chk")(fd, buf, n, buflen);
	return uc_do_read(fd, buf, n);
}

UC_EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	return uc_do_pread(fd, buf, n, (int64_t)off);
}

UC_EXPORT ssize_t pread64(int fd, void *buf, size_t n, off64_t off)
{
	return uc_do_pread(fd, buf, n, (int64_t)off);
}

UC_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
	if (n > buflen)
		return UC_REAL_SYM(pread_chk, "__pread_chk")(fd, buf, n, off, buflen);
	return uc_do_pread(fd, buf, n, (int64_t)off);
}

UC_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen)
{
	if (n > buflen)
		return UC_REAL_SYM(pread64_chk, "__pread64_chk")(fd, buf, n, off, buflen);
	return uc_do_pread(fd, buf, n, (int64_t)off);
}

UC_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	return uc_do_preadv(fd, iov, cnt, -1, 0, 0);
}

UC_EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
	if (off < 0)
		return UC_REAL(preadv)(fd, iov, cnt, off);
	return uc_do_preadv(fd, iov, cnt, (int64_t)off, 0, 1);
}

UC_EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off64_t off)
{
	if (off < 0)
		return UC_REAL(preadv64)(fd, iov, cnt, off);
	return uc_do_preadv(fd, iov, cnt, (int64_t)off, 0, 1);
}

UC_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	if (off < -1)
		return UC_REAL(preadv2)(fd, iov, cnt, off, flags);
	return uc_do_preadv(fd, iov, cnt, (int64_t)off, flags, 2);
}

UC_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags)
{
	if (off < -1)
		return UC_REAL(preadv64v2)(fd, iov, cnt, off, flags);
	return uc_do_preadv(fd, iov, cnt, (int64_t)off, flags, 2);
}

UC_EXPORT ssize_t sendfile(int out, int in, off_t *offset, size_t count)
{
	return uc_do_sendfile(out, in, offset, count, 0);
}

UC_EXPORT ssize_t sendfile64(int out, int in, off64_t *offset, size_t count)
{
	return uc_do_sendfile(out, in, offset, count, 1);
}

UC_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	return uc_do_pwrite(fd, buf, n, -1, 1);
}

UC_EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	return uc_do_pwrite(fd, buf, n, (int64_t)off, 0);
}

UC_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
	return uc_do_pwrite(fd, buf, n, (int64_t)off, 0);
}

/*
 * Other calls that change a file's bytes: they only bump the file's generation (before and
 * after), so replicas in every process drop at once (counting stays with write/pwrite).
 */
static inline void uc_bump_fd(int fd)
{
	uint64_t fid;
	int64_t pos;
	int e0 = errno;

	if (uc_ready() && uc_fd_classify(fd, &fid, &pos))
		uc_gen_bump(fid);
	errno = e0;
}

UC_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	ssize_t r;

	uc_bump_fd(fd);
	r = UC_REAL(writev)(fd, iov, cnt);
	uc_bump_fd(fd);
	return r;
}

UC_EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	ssize_t r;

	uc_bump_fd(fd);
	r = UC_REAL(pwritev)(fd, iov, cnt, off);
	uc_bump_fd(fd);
	return r;
}

UC_EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off)
{
	ssize_t r;

	uc_bump_fd(fd);
	r = UC_REAL(pwritev64)(fd, iov, cnt, off);
	uc_bump_fd(fd);
	return r;
}

UC_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	ssize_t r;

	uc_bump_fd(fd);
	r = UC_REAL(pwritev2)(fd, iov, cnt, off, flags);
	uc_bump_fd(fd);
	return r;
}

UC_EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags)
{
	ssize_t r;

	uc_bump_fd(fd);
	r = UC_REAL(pwritev64v2)(fd, iov, cnt, off, flags);
	uc_bump_fd(fd);
	return r;
}

UC_EXPORT int ftruncate(int fd, off_t len)
{
	int r;

	uc_bump_fd(fd);
	r = UC_REAL(ftruncate)(fd, len);
	uc_bump_fd(fd);
	return r;
}

UC_EXPORT int ftruncate64(int fd, off64_t len)
{
	int r;

	uc_bump_fd(fd);
	r = UC_REAL(ftruncate64)(fd, len);
	uc_bump_fd(fd);
	return r;
}

/* Offset tracking and fd reuse: keep the fd cache honest. */

UC_EXPORT off_t lseek(int fd, off_t off, int whence)
{
	off_t r = UC_REAL(lseek)(fd, off, whence);

	if (r >= 0)
		uc_fd_advance(fd, (int64_t)r);
	return r;
}

UC_EXPORT off64_t lseek64(int fd, off64_t off, int whence)
{
	off64_t r = UC_REAL(lseek64)(fd, off, whence);

	if (r >= 0)
		uc_fd_advance(fd, (int64_t)r);
	return r;
}

UC_EXPORT int close(int fd)
{
	uc_fd_forget(fd);
	return UC_REAL(close)(fd);
}

UC_EXPORT int dup(int fd)
{
	int r = UC_REAL(dup)(fd);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int dup2(int fd, int nfd)
{
	int r = UC_REAL(dup2)(fd, nfd);

	uc_fd_forget(nfd);
	return r;
}

UC_EXPORT int dup3(int fd, int nfd, int flags)
{
	int r = UC_REAL(dup3)(fd, nfd, flags);

	uc_fd_forget(nfd);
	return r;
}

static inline int uc_needs_mode(int flags)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

UC_EXPORT int open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;
	int r;

	if (uc_needs_mode(flags)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	r = UC_REAL(open)(path, flags, mode);
	uc_fd_forget(r);
	return r;
}

UC_EXPORT int open64(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;
	int r;

	if (uc_needs_mode(flags)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	r = UC_REAL(open64)(path, flags, mode);
	uc_fd_forget(r);
	return r;
}

UC_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;
	int r;

	if (uc_needs_mode(flags)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	r = UC_REAL(openat)(dirfd, path, flags, mode);
	uc_fd_forget(r);
	return r;
}

UC_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;
	int r;

	if (uc_needs_mode(flags)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	r = UC_REAL(openat64)(dirfd, path, flags, mode);
	uc_fd_forget(r);
	return r;
}

UC_EXPORT int __open_2(const char *path, int flags)
{
	int r = UC_REAL_SYM(open_2, "__open_2")(path, flags);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int __open64_2(const char *path, int flags)
{
	int r = UC_REAL_SYM(open64_2, "__open64_2")(path, flags);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int creat(const char *path, mode_t mode)
{
	int r = UC_REAL(creat)(path, mode);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int creat64(const char *path, mode_t mode)
{
	int r = UC_REAL(creat64)(path, mode);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int pipe(int fds[2])
{
	int r = UC_REAL(pipe)(fds);

	if (r == 0) {
		uc_fd_forget(fds[0]);
		uc_fd_forget(fds[1]);
	}
	return r;
}

UC_EXPORT int pipe2(int fds[2], int flags)
{
	int r = UC_REAL(pipe2)(fds, flags);

	if (r == 0) {
		uc_fd_forget(fds[0]);
		uc_fd_forget(fds[1]);
	}
	return r;
}

UC_EXPORT int socket(int domain, int type, int proto)
{
	int r = UC_REAL(socket)(domain, type, proto);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int socketpair(int domain, int type, int proto, int fds[2])
{
	int r = UC_REAL(socketpair)(domain, type, proto, fds);

	if (r == 0) {
		uc_fd_forget(fds[0]);
		uc_fd_forget(fds[1]);
	}
	return r;
}

UC_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	int r = UC_REAL(accept)(fd, addr, len);

	uc_fd_forget(r);
	return r;
}

UC_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	int r = UC_REAL(accept4)(fd, addr, len, flags);

	uc_fd_forget(r);
	return r;
}

/* --- helpers exported for tests and the bench --------------------------------------------------- */

/* The opaque file id the shim computes for (dev, ino) with the given salt. */
UC_EXPORT uint64_t uc_file_id(uint64_t salt, uint64_t dev, uint64_t ino)
{
	return uc_file_id_of(salt, dev, ino);
}

/*
 * Average cost in ns of one table lookup over `iters` lookups of `nkeys` keys
 * (file_id, chunk k * chunk_size for k < nkeys). Returns a negative errno without a
 * table. The keys cycle, so the figure is the warm, hit-in-L1/L2 cost.
 */
UC_EXPORT double uc_bench_lookup(uint64_t file_id, uint64_t nkeys, uint64_t iters, uint64_t *hits)
{
	struct timespec a, b;
	struct uc_hit h;
	uint64_t i, found = 0, cs;

	if (!uc_ready() || !nkeys || !iters)
		return -ENOENT;
	if (!uc_lookup(file_id, 0, &h))
		return -ENODATA;
	cs = h.chunk_size;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (i = 0; i < iters; i++) {
		if (uc_lookup(file_id, (i % nkeys) * cs, &h) && h.found)
			found++;
		__asm__ volatile("" ::: "memory");
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (hits)
		*hits = found;
	return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) /
	       (double)iters;
}

/* The node the shim reads for a CPU (tests); -1 unknown. */
UC_EXPORT int uc_cpu_to_node(int cpu)
{
	return uc_node_of(cpu);
}

/* 1 when the shim has mapped a table and counters. */
UC_EXPORT int uc_active(void)
{
	return uc_ready();
}
