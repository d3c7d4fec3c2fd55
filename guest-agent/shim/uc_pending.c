/* SPDX-License-Identifier: MIT */
/*
 * uc_pending.c - counts waiting for their file. A descriptor open* made is OPENED: the
 * shim did not ask what file it is (no system call at the open), so its reads count under
 * a stand-in id (uc_fdcache.c). Most programs stat a file right after they open it (cat,
 * grep, tar, python's open, sqlite, a JVM's streams), and that stat tells the shim the file
 * for free (uc_interpose_stat.c); a run of counts that ends after it goes to the counters
 * under the real id. A run that ends before, on the read path, waits here (up to
 * UC_PEND_RUNS per descriptor) until the file is known; and a descriptor whose program
 * never stats it is asked by the shim once, where a system call costs nothing extra to
 * the call it rides on and no filter can object: at its close, a dup, or the process's
 * end, and only where the shim may make its own calls (uc_may_act). What cannot wait (more
 * runs than fit, another descriptor's runs in the slot) or whose file is never known is
 * dropped and said: the counters' `dropped`.
 */
#include "uc_shim.h"

/* One slot per descriptor number modulo UC_PEND_SLOTS: the runs waiting for its file. */
struct uc_pend {
	atomic_flag lock;  /* held while the slot is read or written: a busy slot drops */
	int fd;
	uint32_t n;        /* runs waiting */
	uint64_t opened;   /* the stand-in id they wait under */
	struct uc_run runs[UC_PEND_RUNS];
};

static struct uc_pend uc_pends[UC_PEND_SLOTS];
static _Atomic unsigned uc_pend_waiting; /* slots with runs, for the process's end */

static inline struct uc_pend *uc_pend_slot(int fd)
{
	return &uc_pends[(unsigned)fd % UC_PEND_SLOTS];
}

/* Empty slot p, sending its runs as file_id's (0: its descriptor is no file: dropped
 * quietly; UINT64_MAX: its file was never known: dropped and said). Locked by the caller. */
static void uc_pend_empty(struct uc_pend *p, uint64_t file_id)
{
	uint32_t i;

	for (i = 0; i < p->n; i++) {
		if (file_id == UINT64_MAX)
			uc_count_drop();
		else if (file_id && p->runs[i].cv == uc_ctr()) {
			p->runs[i].file_id = file_id;
			uc_run_send(&p->runs[i]);
		}
	}
	if (p->n)
		atomic_fetch_sub_explicit(&uc_pend_waiting, 1, memory_order_relaxed);
	p->n = 0;
}

/* A run under a stand-in id ends on the read path: it waits in its descriptor's slot. */
static void uc_pend_stash(const struct uc_run *r)
{
	struct uc_pend *p = uc_pend_slot(r->fd);
	const struct uc_fd *e;

	if (atomic_flag_test_and_set_explicit(&p->lock, memory_order_acquire)) {
		uc_count_drop();
		return;
	}
	if (p->n && (p->fd != r->fd || p->opened != r->file_id)) {
		/* another open's runs: kept while that open still waits, else they are lost */
		e = &uc_fds[p->fd];
		if (atomic_load_explicit(&e->state, memory_order_acquire) == UC_FD_OPENED &&
		    atomic_load_explicit(&e->opened_id, memory_order_relaxed) == p->opened) {
			atomic_flag_clear_explicit(&p->lock, memory_order_release);
			uc_count_drop();
			return;
		}
		uc_pend_empty(p, UINT64_MAX);
	}
	if (p->n >= UC_PEND_RUNS) {
		uc_count_drop();
	} else {
		if (!p->n)
			atomic_fetch_add_explicit(&uc_pend_waiting, 1, memory_order_relaxed);
		p->fd = r->fd;
		p->opened = r->file_id;
		p->runs[p->n++] = *r;
	}
	atomic_flag_clear_explicit(&p->lock, memory_order_release);
}

/*
 * A thread's run ends under a stand-in id. Its descriptor's file known since (the same
 * open): it goes to the counters under the file's id. Not known yet: `may_identify` (a
 * close, a thread's or the process's end, never a read) asks it now; else it waits. Its
 * descriptor gone (closed, reused, no file): dropped.
 */
void uc_run_unknown(struct uc_run *r, int may_identify)
{
	struct uc_fd *e;
	uint32_t state;

	if ((unsigned)r->fd >= UC_FD_CACHE)
		return;
	e = &uc_fds[r->fd];
	state = atomic_load_explicit(&e->state, memory_order_acquire);
	if (state == UC_FD_OPENED &&
	    atomic_load_explicit(&e->file_id, memory_order_relaxed) == r->file_id) {
		if (!may_identify || !uc_fd_identify(r->fd)) {
			if (may_identify)
				uc_count_drop(); /* its file cannot be asked here: lost, and said */
			else
				uc_pend_stash(r);
			return;
		}
		state = atomic_load_explicit(&e->state, memory_order_acquire);
	}
	if (state == UC_FD_FILE &&
	    atomic_load_explicit(&e->opened_id, memory_order_relaxed) == r->file_id) {
		r->file_id = uc_fd_id(e);
		uc_run_send(r);
	} else if (state != UC_FD_PASS) {
		uc_count_drop();
	}
}

/* fd's file is known now (file_id; 0: it is no file): the runs that waited under its
 * stand-in id `opened` go to the counters. */
void uc_pend_known(int fd, uint64_t opened, uint64_t file_id)
{
	struct uc_pend *p = uc_pend_slot(fd);

	if (!opened || !atomic_load_explicit(&uc_pend_waiting, memory_order_relaxed))
		return;
	if (atomic_flag_test_and_set_explicit(&p->lock, memory_order_acquire))
		return; /* another thread empties or fills it: its runs stay for the close */
	if (p->n && p->fd == fd && p->opened == opened)
		uc_pend_empty(p, file_id);
	atomic_flag_clear_explicit(&p->lock, memory_order_release);
}

/* fd is being closed (or the process ends): runs waiting for its file are sent once the
 * shim asks it, or dropped and said. */
static void uc_pend_close_slot(struct uc_pend *p)
{
	int fd;
	uint64_t opened;

	if (atomic_flag_test_and_set_explicit(&p->lock, memory_order_acquire))
		return;
	fd = p->fd;
	opened = p->opened;
	if (!p->n) {
		atomic_flag_clear_explicit(&p->lock, memory_order_release);
		return;
	}
	atomic_flag_clear_explicit(&p->lock, memory_order_release);
	(void)uc_fd_identify(fd); /* known: uc_fd_known sends them (uc_pend_known) */
	if (atomic_flag_test_and_set_explicit(&p->lock, memory_order_acquire))
		return;
	if (p->n && p->fd == fd && p->opened == opened)
		uc_pend_empty(p, UINT64_MAX);
	atomic_flag_clear_explicit(&p->lock, memory_order_release);
}

void uc_pend_close(int fd)
{
	if (atomic_load_explicit(&uc_pend_waiting, memory_order_relaxed) &&
	    (unsigned)fd < UC_FD_CACHE && uc_pend_slot(fd)->n && uc_pend_slot(fd)->fd == fd)
		uc_pend_close_slot(uc_pend_slot(fd));
}

/* The process ends: every descriptor's waiting runs, as at its close. */
void uc_pend_fini(void)
{
	unsigned i;

	if (!atomic_load_explicit(&uc_pend_waiting, memory_order_relaxed))
		return;
	for (i = 0; i < UC_PEND_SLOTS; i++)
		if (uc_pends[i].n)
			uc_pend_close_slot(&uc_pends[i]);
}

/* A fork child: its parent sends what waits (the child has its copy of the descriptors,
 * not of the reads). */
void uc_pend_atfork_child(void)
{
	unsigned i;

	if (!atomic_load_explicit(&uc_pend_waiting, memory_order_relaxed))
		return;
	for (i = 0; i < UC_PEND_SLOTS; i++) {
		atomic_flag_clear(&uc_pends[i].lock);
		uc_pends[i].n = 0;
	}
	atomic_store(&uc_pend_waiting, 0);
}
