/* SPDX-License-Identifier: MIT */
/*
 * uc_map.c - mapping the agent's files: the placement table (read-only) and this
 * user's counters file, each validated before use, and let go when the agent replaces them.
 */
#include "uc_shim.h"

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
	if (uc_real_fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(struct uc_table_hdr) ||
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
	h.slot_size = uc_slot_size(th->ctr_max_vcpus);
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
	       have.slot_size == want->slot_size && have.reserved == want->reserved &&
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
	size_t need = (size_t)uc_ctr_len(th->ctr_nslots, th->ctr_max_vcpus, th->ctr_ngens);
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
		if (uc_real_fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != uid ||
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
int uc_try_map(void)
{
	struct uc_views {
		struct uc_tbl_view t;
		struct uc_ctr_view c;
	};
	/* the first mapping's views: a process's only one unless the agent changes its layout
	 * (no page of their own, no system call); a later mapping's are mapped for it, never
	 * freed, as a reader may still hold the old (one caller at a time: uc.mapping) */
	static struct uc_views first_views;
	static int first_used;
	struct uc_table_hdr thc;
	const struct uc_table_hdr *th = &thc;
	struct uc_ctr_hdr *c = NULL;
	struct uc_views *views = &first_views;
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
	    !uc_ctr_len(th->ctr_nslots, th->ctr_max_vcpus, th->ctr_ngens)) {
		uc_warn("bad table header in", uc.table_path);
		goto fail;
	}
	need = UC_TABLE_BUFS_OFF + 2 * uc_buf_len(th->nbuckets);
	if (tlen < need) {
		uc_warn("short table file", uc.table_path);
		goto fail;
	}
	/* without counters (not ours, or none) the table is still followed, uncounted */
	c = uc_map_counters(th, &clen);
	if (first_used)
		views = mmap(NULL, sizeof(*views), PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (views == MAP_FAILED) {
		ret = -ENOMEM;
		goto fail;
	}
	first_used = 1;
	views->t = (struct uc_tbl_view){t, (const void *)((const unsigned char *)t + sizeof(*th)),
					th->nbuckets};
	if (c) {
		views->c = (struct uc_ctr_view){c, th->ctr_nslots, uc_slot_size(th->ctr_max_vcpus),
						th->ctr_max_vcpus,
						uc_region_len(th->ctr_nslots, th->ctr_max_vcpus)};
		uc.ngens = th->ctr_ngens;
		__atomic_store_n(&uc.gens,
				 (struct uc_gen_hdr *)(void *)((unsigned char *)c + UC_CTR_REGIONS_OFF +
							       2 * views->c.region_len),
				 __ATOMIC_RELEASE);
	}
	/* another salt (a new boot's table): every file id is computed again */
	if (atomic_load(&uc.salt) && atomic_load(&uc.salt) != th->salt)
		uc_fd_forget_ids();
	atomic_store(&uc.salt, th->salt);
	__atomic_store_n(&uc.table, &views->t, __ATOMIC_RELEASE);
	__atomic_store_n(&uc.ctr, c ? &views->c : NULL, __ATOMIC_RELEASE);
	atomic_fetch_add(&uc.epoch, 1);
	__atomic_store_n(&uc.thdr, (const struct uc_table_hdr *)t, __ATOMIC_RELEASE);
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

/*
 * The agent replaced the table or counters file (new layout): it zeroed the old magic and
 * unlinked the file. Map the new files on a later call. The old mappings are left in place
 * (another thread may be reading them); this leaks one mapping per agent reconfiguration.
 */
void uc_retire(void)
{
	atomic_store_explicit(&uc.mapped, 0, memory_order_release);
	atomic_store_explicit(&uc.next_try_ns, 0, memory_order_relaxed);
	uc_t.gen = 0; /* this thread's parameters are the old table's */
}
