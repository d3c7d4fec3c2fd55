/* SPDX-License-Identifier: MIT */
/*
 * uc_scope.c - is this process in the operator's scope? Asked once, when the process first
 * opens a file (uc_state.c uc_activate): before that the shim does nothing in it.
 *
 * Never: a setuid or otherwise secure-mode program (AT_SECURE), PID 1, and every process
 * when the kernel command line says unicache.shim=off (no userland needed) or shim.conf
 * says `off`. Otherwise a process whose LD_PRELOAD names the shim is in scope (a unit's
 * drop-in put it there: `unicache-agent scope add unit:NAME`; children inherit it), and a
 * process that got the shim only from /etc/ld.so.preload is in scope when shim.conf says
 * `everywhere`, names its cgroup (or a parent of it) or its executable. shim.conf is
 * written by `unicache-agent scope` (docs/agent.md "Scopes"); one that is not root's, or
 * that others may write, is not trusted: the shim stays off where only it could say yes.
 */
#include "uc_shim.h"

#include <sys/auxv.h>

/* shim.conf is read up to this many bytes (scope lines beyond it are not seen) */
#define UC_CONF_MAX 65536

/* Open a small file read-only; with `trusted`, only a regular file of root's that no one
 * else may write (its size then in *size). The descriptor, or -1. */
static int uc_open_small(const char *path, int trusted, size_t *size)
{
	struct stat st;
	int fd = UC_REAL(open)(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0 || !trusted)
		return fd;
	if (uc_real_fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 ||
	    (st.st_mode & 022)) {
		UC_REAL(close)(fd);
		return -1;
	}
	*size = (size_t)st.st_size;
	return fd;
}

/*
 * Read fd into buf (NUL-terminated) and close it; its length. A read that returns less than
 * it asked for ends it: a regular file's and a seq_file's (/proc/cmdline, /proc/self/cgroup)
 * content comes whole to a read with room for it, so the read that would find the end is
 * a system call of every process's start that tells nothing.
 */
static ssize_t uc_read_close(int fd, char *buf, size_t n)
{
	size_t got = 0, want;
	ssize_t r;

	while (got < n - 1) {
		want = n - 1 - got;
		r = UC_REAL(read)(fd, buf + got, want);
		if (r <= 0)
			break;
		got += (size_t)r;
		if ((size_t)r < want)
			break;
	}
	UC_REAL(close)(fd);
	buf[got] = 0;
	return (ssize_t)got;
}

/* Read a small untrusted file (procfs) whole into buf; its length, or -1. */
static ssize_t uc_slurp(const char *path, char *buf, size_t n)
{
	int fd = uc_open_small(path, 0, NULL);

	return fd < 0 ? -1 : uc_read_close(fd, buf, n);
}

/* Is `word` one of the whitespace-separated words of s (the kernel command line)? */
static int uc_has_word(const char *s, const char *word)
{
	size_t k = strlen(word);
	const char *p = s;

	while ((p = strstr(p, word))) {
		if ((p == s || p[-1] == ' ' || p[-1] == '\n' || p[-1] == '\t') &&
		    (p[k] == 0 || p[k] == ' ' || p[k] == '\n' || p[k] == '\t'))
			return 1;
		p += k;
	}
	return 0;
}

/* What shim.conf says for this process. */
struct uc_conf {
	int off;        /* an `off` line */
	int everywhere; /* an `everywhere` line */
	int names_me;   /* a `cgroup` or `exe` line names this process */
};

/* Is `path` the same as, or below, the cgroup `scope`? */
static int uc_under(const char *path, const char *scope)
{
	size_t k = strlen(scope);

	if (k && scope[k - 1] == '/')
		k--;
	return strncmp(path, scope, k) == 0 && (path[k] == 0 || path[k] == '/' || k == 0);
}

/* This process's cgroup v2 path ("0::/system.slice/x.service") into cg ("" unknown). */
static void uc_my_cgroup(char *cg, size_t n)
{
	char *p;

	if (uc_slurp("/proc/self/cgroup", cg, n) > 0 && (p = strstr(cg, "0::"))) {
		memmove(cg, p + 3, strlen(p + 3) + 1);
		cg[strcspn(cg, "\n")] = 0;
	} else {
		cg[0] = 0;
	}
}

/* The value after a directive's keyword (`kw` and then blanks), or NULL. */
static const char *uc_after(const char *line, const char *kw)
{
	size_t k = strlen(kw);

	if (strncmp(line, kw, k) || (line[k] != ' ' && line[k] != '\t'))
		return NULL;
	line += k;
	while (*line == ' ' || *line == '\t')
		line++;
	return *line ? line : NULL;
}

/* Parse shim.conf (modified in place): one directive a line, `#` starts a comment. The
 * process's cgroup and executable are read only when a line asks about them and `names`
 * says the answer matters. */
static void uc_conf_parse(char *text, struct uc_conf *c, int names)
{
	/* written only when a line asks (no initialiser: a stack page never touched costs no
	 * fault) */
	char cg[4096], exe[PATH_MAX], *line, *save = NULL, *p;
	const char *v;
	int have_cg = 0, have_exe = 0;
	ssize_t k;

	memset(c, 0, sizeof(*c));
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		line[strcspn(line, "#")] = 0;
		while (*line == ' ' || *line == '\t')
			line++;
		for (p = line + strlen(line); p > line && (p[-1] == ' ' || p[-1] == '\t'); p--)
			p[-1] = 0;
		if (!strcmp(line, "off")) {
			c->off = 1;
		} else if (!strcmp(line, "everywhere")) {
			c->everywhere = 1;
		} else if (!names) {
			continue;
		} else if ((v = uc_after(line, "cgroup"))) {
			if (!have_cg++)
				uc_my_cgroup(cg, sizeof(cg));
			c->names_me |= cg[0] && uc_under(cg, v);
		} else if ((v = uc_after(line, "exe"))) {
			if (!have_exe++) {
				k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
				exe[k > 0 ? k : 0] = 0;
			}
			c->names_me |= exe[0] && !strcmp(exe, v);
		}
	}
}

/* What shim.conf says for this process, into c: read into buf when it fits there, else
 * into pages mapped for it (up to UC_CONF_MAX bytes). */
static void uc_conf_read(char *buf, size_t n, struct uc_conf *c, int names)
{
	size_t size = 0, len;
	char *text = buf;
	int fd = uc_open_small(uc.conf_path, 1, &size);

	memset(c, 0, sizeof(*c));
	if (fd < 0)
		return;
	len = size < UC_CONF_MAX ? size + 1 : UC_CONF_MAX;
	if (len > n) {
		text = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (text == MAP_FAILED) {
			UC_REAL(close)(fd);
			return; /* as if there were none: only LD_PRELOAD puts the process in scope */
		}
	} else {
		len = n;
	}
	if (uc_read_close(fd, text, len) > 0)
		uc_conf_parse(text, c, names);
	if (text != buf)
		munmap(text, len);
}

int uc_in_scope(pid_t pid)
{
	char buf[4096]; /* the kernel command line (at most 2,048 bytes on x86), then shim.conf */
	struct uc_conf c;

	if (getauxval(AT_SECURE) || pid == 1)
		return 0;
	if (uc_slurp("/proc/cmdline", buf, sizeof(buf)) > 0 &&
	    uc_has_word(buf, "unicache.shim=off"))
		return 0;
	uc_conf_read(buf, sizeof(buf), &c, !uc.preload_names_shim);
	return !c.off && (uc.preload_names_shim || c.everywhere || c.names_me);
}
