/* SPDX-License-Identifier: MIT */
/*
 * uc_state.c - the process's settings and start: UNICACHE_* read once from the
 * environment, the CPUs the process may use, and the constructor that maps the agent's
 * files at load.
 */
#include "uc_shim.h"

struct uc_state uc;

/* the CPUs the process could use when the shim loaded: migrations stay inside them */
cpu_set_t uc_orig_mask;
int uc_orig_valid;
/* the same, as the rule's vCPU bit mask (empty when unknown: then no migration) */
uint64_t uc_orig_words[UC_MASK_WORDS];

/* secure_getenv: a setuid program (ld.so.preload) ignores the caller's UNICACHE_* */
static void uc_env_path(char *dst, size_t n, const char *env, const char *def)
{
	const char *v = secure_getenv(env);

	if (!v || !*v || strlen(v) >= n)
		v = def;
	strcpy(dst, v);
}

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
	v = secure_getenv("UNICACHE_REPLICA");
	uc.rep_off = v && *v == '0';
	v = secure_getenv("UNICACHE_COLOR");
	uc.color_off = v && *v == '0';
	v = secure_getenv("UNICACHE_REPLICA_WAIT_MS");
	uc.rep_wait_ns = (v && *v ? (long long)strtoul(v, NULL, 10) : UC_REPLICA_WAIT_MS) * 1000000ll;
	v = secure_getenv("UNICACHE_REPLICA_MARGIN_MS");
	uc.rep_margin_ns = (v && *v ? (long long)strtoul(v, NULL, 10) : UC_REPLICA_MARGIN_MS) *
			   1000000ll;
	if (uc.rep_margin_ns < 10000000ll) /* never below 10 ms: more than a jiffy at HZ=100 */
		uc.rep_margin_ns = 10000000ll;
	uc_env_path(uc.table_path, sizeof(uc.table_path), "UNICACHE_TABLE", UC_DEFAULT_TABLE);
	uc_env_path(uc.ctr_dir, sizeof(uc.ctr_dir), "UNICACHE_COUNTERS", UC_DEFAULT_COUNTERS);
	uc_env_path(uc.rep_sock, sizeof(uc.rep_sock) - 8, "UNICACHE_REPLICAS", UC_DEFAULT_REPLICAS);
	strcat(uc.rep_sock, "/socket");
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

