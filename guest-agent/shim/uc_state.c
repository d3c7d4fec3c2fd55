/* SPDX-License-Identifier: MIT */
/*
 * uc_state.c - the process's settings, start and end: UNICACHE_* read once from the
 * environment, whether the process is in scope (uc_scope.c), the constructor, mapping the
 * agent's files when the process first has a file and retrying that later, and the
 * destructor that sends the last counts.
 *
 * Until the process's first open has decided (uc_activate), and for good when it is out of
 * scope or the shim is switched off, `uc.on` is not UC_ON, no descriptor is classified,
 * and every interposed call goes straight to libc.
 */
#include "uc_shim.h"

#include <sys/auxv.h>

struct uc_state uc;

/* glibc's rseq area (2.35 and later): the kernel keeps the thread's CPU in it */
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));


/* the value of `name` (which ends in '=') when entry `e` of the environment sets it */
static const char *uc_env_is(const char *e, const char *name)
{
	while (*name && *e == *name)
		e++, name++;
	return *name ? NULL : e;
}

/* a path setting: its value, unless empty or too long for dst (then the default) */
static void uc_env_path(char *dst, size_t n, const char *v, const char *def)
{
	if (!v || !*v || strlen(v) >= n)
		v = def;
	strcpy(dst, v);
}

/* a millisecond setting in ns (the default when unset or empty) */
static long long uc_env_ms(const char *v, long long def_ms)
{
	return (v && *v ? (long long)strtoul(v, NULL, 10) : def_ms) * 1000000ll;
}

/*
 * The process's UNICACHE_* settings, and whether its LD_PRELOAD names the shim, in one pass
 * over the environment it started with: secure_getenv would scan the whole environment once
 * per name, some 10 k instructions of every process's start. Only called where secure_getenv
 * would answer (not AT_SECURE). 0 when UNICACHE_DISABLE=1 switches the shim off.
 */
static int uc_env_read(void)
{
	const char *table = NULL, *ctr = NULL, *rep = NULL, *conf = NULL, *wait = NULL,
		   *margin = NULL, *e, *v;

	for (char **ep = environ; ep && (e = *ep); ep++) {
		if (e[0] == 'L' && (v = uc_env_is(e, "LD_PRELOAD="))) {
			uc.preload_names_shim = strstr(v, "libunicache") != NULL;
			continue;
		}
		if (e[0] != 'U' || !(e = uc_env_is(e, "UNICACHE_")))
			continue;
		if ((v = uc_env_is(e, "DISABLE=")) && *v == '1')
			return 0;
		if ((v = uc_env_is(e, "NT_READ=")))
			uc.nt_read = *v == '1';
		else if ((v = uc_env_is(e, "NT=")))
			uc.nt_off = *v == '0';
		else if ((v = uc_env_is(e, "REPLICA=")))
			uc.rep_off = *v == '0';
		else if ((v = uc_env_is(e, "COLOR=")))
			uc.color_off = *v == '0';
		else if ((v = uc_env_is(e, "SECCOMP=")))
			uc.act_seccomp = !strcmp(v, "act");
		else if ((v = uc_env_is(e, "REPLICA_WAIT_MS=")))
			wait = v;
		else if ((v = uc_env_is(e, "REPLICA_MARGIN_MS=")))
			margin = v;
		else if ((v = uc_env_is(e, "TABLE=")))
			table = v;
		else if ((v = uc_env_is(e, "COUNTERS=")))
			ctr = v;
		else if ((v = uc_env_is(e, "REPLICAS=")))
			rep = v;
		else if ((v = uc_env_is(e, "SHIM_CONF=")))
			conf = v;
	}
	uc.rep_wait_ns = uc_env_ms(wait, UC_REPLICA_WAIT_MS);
	uc.rep_margin_ns = uc_env_ms(margin, UC_REPLICA_MARGIN_MS);
	if (uc.rep_margin_ns < 10000000ll) /* never below 10 ms: more than a jiffy at HZ=100 */
		uc.rep_margin_ns = 10000000ll;
	uc_env_path(uc.table_path, sizeof(uc.table_path), table, UC_DEFAULT_TABLE);
	uc_env_path(uc.ctr_dir, sizeof(uc.ctr_dir), ctr, UC_DEFAULT_COUNTERS);
	uc_env_path(uc.rep_sock, sizeof(uc.rep_sock) - 8, rep, UC_DEFAULT_REPLICAS);
	strcat(uc.rep_sock, "/socket");
	uc_env_path(uc.conf_path, sizeof(uc.conf_path), conf, UC_DEFAULT_CONF);
	return 1;
}

/* this thread's calls until it next looks at the clock for a table (uc_retry_map) */
static UC_TLS unsigned uc_retry_left;

/* No table yet: try to map it at most once a second; a read looks at the clock only once
 * every UC_RETRY_CALLS calls of a thread (uc_ready). 1 when it is mapped now. */
int uc_retry_map(int from_open)
{
	long long now;
	int saved;

	if (atomic_load_explicit(&uc.on, memory_order_relaxed) != UC_ON)
		return 0;
	if (!from_open && uc_retry_left--)
		return 0;
	uc_retry_left = UC_RETRY_CALLS;
	now = uc_now_ns();
	if (now < atomic_load_explicit(&uc.next_try_ns, memory_order_relaxed))
		return 0;
	if (atomic_flag_test_and_set(&uc.mapping))
		return 0;
	atomic_store_explicit(&uc.next_try_ns, now + UC_RETRY_NS, memory_order_relaxed);
	saved = errno; /* a read's caller sees only its call's errno */
	(void)uc_try_map();
	errno = saved;
	atomic_flag_clear(&uc.mapping);
	return atomic_load_explicit(&uc.mapped, memory_order_acquire);
}

static void uc_atfork_child(void)
{
	uc_fd_reseed(); /* the child's draws part from its parent's */
	if (atomic_load_explicit(&uc.on, memory_order_relaxed) != UC_ON)
		return; /* nothing done yet: nothing to undo (and no system call in the child) */
	uc_rep_atfork_child();
	uc_tid_atfork_child();
	uc_run_atfork_child();
	uc_pend_atfork_child();
}

static atomic_flag uc_activating = ATOMIC_FLAG_INIT;

/*
 * The process's first open (or the first stat of fds 0-2 that names a file): is the shim
 * on here? The scope and the kill switch (uc_scope.c: /proc/cmdline, shim.conf), then
 * what only a working shim needs (the CPUs the process may use, the main thread's id).
 * Decided once; a process that never opens a file pays none of it, not even the system
 * calls. A thread that comes while another decides is not counted this once. 1 when on.
 */
int uc_activate(void)
{
	int on = atomic_load_explicit(&uc.on, memory_order_acquire), saved;
	unsigned i;
	pid_t pid;

	if (on != UC_UNDECIDED)
		return on == UC_ON;
	if (atomic_flag_test_and_set(&uc_activating))
		return 0;
	saved = errno;
	pid = getpid();
	if (!uc_in_scope(pid)) {
		atomic_store_explicit(&uc.on, UC_OFF, memory_order_release);
		errno = saved;
		return 0;
	}
	/* what only a working shim needs: the run's calls' libc functions, the thread-exit
	 * hook that sends a thread's last run, the fork hook, and the open sample's draws,
	 * which differ between processes (they start from the clock at this point) */
	uc.real_read = UC_REAL(read);
	uc.real_pread64 = UC_REAL(pread64);
	uc_run_init();
	(void)pthread_atfork(NULL, NULL, uc_atfork_child);
	uc_fd_reseed();
	uc.orig.valid = sched_getaffinity(0, sizeof(uc.orig.mask), &uc.orig.mask) == 0;
	for (i = 0; uc.orig.valid && i < UC_MAX_VCPUS; i++)
		if (CPU_ISSET(i, &uc.orig.mask))
			uc.orig.words[i / 64] |= 1ull << (i % 64);
	uc_tid_set(pid);
	atomic_store_explicit(&uc.on, UC_ON, memory_order_release);
	errno = saved;
	return 1;
}

__attribute__((constructor)) static void uc_init(void)
{
	uc.pagesz = sysconf(_SC_PAGESIZE);
	if (uc.pagesz <= 0)
		uc.pagesz = 4096;
	if (getauxval(AT_SECURE))
		return; /* setuid and the like: never (uc_scope.c says why) */
	if (!uc_env_read())
		return; /* UNICACHE_DISABLE=1 */
	/* struct rseq: cpu_id_start, then cpu_id (linux/rseq.h) */
	if (&__rseq_size && &__rseq_offset && __rseq_size >= 8)
		uc.rseq_cpu = __rseq_offset + 4;
	/* what a run's calls use without the GOT or uc_real (uc_me, uc_interpose_read.c) */
	uc.tls_off = (char *)&uc_t - (char *)__builtin_thread_pointer();
	/*
	 * Whether the shim works here (scope, kill switch) is decided, and the rest of its
	 * setting up done, when the process first opens a file (uc_interpose_fd.c) or stats
	 * one of fds 0-2 that is one (a shell's `< file`): uc_activate. A process that reads no
	 * file pays no system call of the shim's, none of their page faults (a few
	 * microseconds each in a VM), and no lookup of a libc function it would not call.
	 */
	atomic_store_explicit(&uc.on, UC_UNDECIDED, memory_order_release);
}

/* exit(): the main thread's last run of counts (other threads' went when they ended), and
 * the runs still waiting for their file */
__attribute__((destructor)) static void uc_fini(void)
{
	if (atomic_load_explicit(&uc.on, memory_order_relaxed) == UC_ON) {
		uc_run_flush(1);
		uc_pend_fini();
	}
}
