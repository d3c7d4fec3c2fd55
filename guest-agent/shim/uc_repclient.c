/* SPDX-License-Identifier: MIT */
/*
 * uc_repclient.c - talking to the agent about replicas: one SOCK_SEQPACKET connection per
 * process to UNICACHE_REPLICAS/socket; a request carries the source file's descriptor (the
 * proof that this process may read it), its answer a read-only descriptor of the replica.
 *
 * Requests and answers are decoupled: a request is sent without waiting, and answers are
 * collected whenever the shim looks for one (uc_replicas.c), each naming its request by id.
 * So a process never waits on the agent longer than UNICACHE_REPLICA_WAIT_MS, whatever the
 * agent is doing. The connection is one thread's at a time (a try-lock: a busy connection
 * means the real call); no agent means no attempt for a second.
 */
#include "uc_shim.h"

#include <poll.h>
#include <sys/un.h>

#define UC_RC_BACKOFF_NS 1000000000ll

static int uc_rc_fd = -1;
static dev_t uc_rc_dev; /* the socket's identity: the program may close or reuse the fd */
static ino_t uc_rc_ino;
static atomic_flag uc_rc_busy = ATOMIC_FLAG_INIT;
static long long uc_rc_backoff_until;
/* answers the agent still owes this process (a hint: a lost answer leaves it high) */
static _Atomic int uc_rc_owed;

/* A fork child shares the parent's connection: answers would go to either. Its own. */
void uc_rc_atfork_child(void)
{
	if (uc_rc_fd >= 0)
		UC_REAL(close)(uc_rc_fd);
	uc_rc_fd = -1;
	atomic_store(&uc_rc_owed, 0);
	atomic_flag_clear(&uc_rc_busy);
}

static int uc_rc_connect(void)
{
	struct sockaddr_un sa;
	struct stat st;
	int s;

	if (uc_rc_fd >= 0) {
		/* a program that closes every fd (closefrom, close_range) may have closed ours,
		 * and the number may be one of its files now: never use or close that */
		if (uc_real_fstat(uc_rc_fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == uc_rc_dev &&
		    st.st_ino == uc_rc_ino)
			return 1;
		uc_rc_fd = -1;
	}
	if (!uc.rep_sock[0] || strlen(uc.rep_sock) >= sizeof(sa.sun_path))
		return 0;
	s = (int)syscall(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	strcpy(sa.sun_path, uc.rep_sock);
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || uc_real_fstat(s, &st) < 0) {
		UC_REAL(close)(s);
		return 0;
	}
	uc_rc_dev = st.st_dev;
	uc_rc_ino = st.st_ino;
	uc_rc_fd = s;
	return 1;
}

static void uc_rc_drop(void)
{
	UC_REAL(close)(uc_rc_fd);
	uc_rc_fd = -1;
	atomic_store(&uc_rc_owed, 0);
}

/* Send the request with `fd` attached; 1 when sent whole. */
static int uc_rc_send_msg(const struct uc_rep_req *q, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {(void *)(uintptr_t)q, sizeof(*q)};
	struct msghdr m;
	struct cmsghdr *cm;

	memset(&m, 0, sizeof(m));
	memset(&ctl, 0, sizeof(ctl));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = ctl.buf;
	m.msg_controllen = sizeof(ctl.buf);
	cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(uc_rc_fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(*q);
}

/*
 * Receive one answer: its status and attached descriptor (-1 none). Returns 1 when an
 * answer came, 0 on timeout, -1 when the connection is broken.
 */
static int uc_rc_recv_msg(struct uc_rep_rsp *a, int *rfd, int wait_ms)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {a, sizeof(*a)};
	struct pollfd p = {uc_rc_fd, POLLIN, 0};
	struct msghdr m;
	struct cmsghdr *cm;
	ssize_t k;
	int r;

	*rfd = -1;
	do
		r = poll(&p, 1, wait_ms);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return 0;
	if (r < 0 || !(p.revents & POLLIN))
		return -1;
	memset(&m, 0, sizeof(m));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = ctl.buf;
	m.msg_controllen = sizeof(ctl.buf);
	k = recvmsg(uc_rc_fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (k <= 0)
		return k < 0 && errno == EAGAIN ? 0 : -1;
	for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(int))) {
			size_t i, nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (i = 0; i < nfd; i++) { /* one is expected: any other is closed */
				int x;

				memcpy(&x, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				if (*rfd < 0)
					*rfd = x;
				else
					UC_REAL(close)(x);
			}
		}
	}
	if (k != (ssize_t)sizeof(*a) || a->magic != UC_RSP_MAGIC || (m.msg_flags & MSG_CTRUNC)) {
		if (*rfd >= 0)
			UC_REAL(close)(*rfd);
		*rfd = -1;
		return -1;
	}
	return 1;
}

/*
 * Send a request with `fd` attached, without waiting. Returns 1 when sent; 0 when the agent
 * cannot be asked now (another thread is talking to it, no agent: then not again for a
 * second, a full socket).
 */
int uc_rc_send(int fd, const struct uc_rep_req *q)
{
	int ok = 0;

	if (atomic_flag_test_and_set(&uc_rc_busy))
		return 0;
	if (uc_now_ns() < uc_rc_backoff_until)
		goto out;
	if (!uc_rc_connect()) {
		uc_rc_backoff_until = uc_now_ns() + UC_RC_BACKOFF_NS;
		goto out;
	}
	ok = uc_rc_send_msg(q, fd);
	if (ok)
		atomic_fetch_add(&uc_rc_owed, 1);
	else if (errno != EAGAIN)
		uc_rc_drop();
out:
	atomic_flag_clear(&uc_rc_busy);
	return ok;
}

/*
 * Receive one answer the agent owes, waiting at most wait_ms. Returns 1 with *a and *rfd
 * (the attached descriptor, -1 none: the caller closes it), 0 when none came.
 */
int uc_rc_recv(struct uc_rep_rsp *a, int *rfd, int wait_ms)
{
	int got = 0;

	*rfd = -1;
	if (atomic_load(&uc_rc_owed) <= 0 || atomic_flag_test_and_set(&uc_rc_busy))
		return 0;
	if (uc_rc_fd >= 0) {
		got = uc_rc_recv_msg(a, rfd, wait_ms);
		if (got < 0) {
			uc_rc_drop();
			got = 0;
		} else if (got > 0) {
			atomic_fetch_sub(&uc_rc_owed, 1);
		}
	}
	atomic_flag_clear(&uc_rc_busy);
	return got;
}
