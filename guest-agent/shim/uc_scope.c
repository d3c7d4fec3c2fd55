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

/* Read a small file whole into buf (NUL-terminated); its length, or -1. With `trusted`,
 * only a regular file of root's that no one else may write is read. */
static ssize_t uc_slurp(const char *path, char *buf, size_t n, int trusted)
{
	struct stat st;
	ssize_t got = 0, r;
	int fd = UC_REAL(open)(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0)
		return -1;
	if (trusted && (uc_real_fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 ||
			(st.st_mode & 022))) {
		UC_REAL(close)(fd);
		return -1;
	}
	while ((size_t)got < n - 1 && (r = UC_REAL(read)(fd, buf + got, n - 1 - (size_t)got)) > 0)
		got += r;
	UC_REAL(close)(fd);
	buf[got] = 0;
	return got;
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

	if (uc_slurp("/proc/self/cgroup", cg, n, 0) > 0 && (p = strstr(cg, "0::"))) {
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
	char cg[4096] = "", exe[PATH_MAX] = "", *line, *save = NULL, *p;
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

int uc_in_scope(void)
{
	char text[UC_CONF_MAX], cmdline[4096];
	const char *env, *path;
	struct uc_conf c;
	ssize_t len;
	int explicit;

	if (getauxval(AT_SECURE) || getpid() == 1)
		return 0;
	if (uc_slurp("/proc/cmdline", cmdline, sizeof(cmdline), 0) > 0 &&
	    uc_has_word(cmdline, "unicache.shim=off"))
		return 0;
	env = getenv("LD_PRELOAD");
	explicit = env && strstr(env, "libunicache");
	path = secure_getenv("UNICACHE_SHIM_CONF");
	len = uc_slurp(path && *path ? path : UC_DEFAULT_CONF, text, sizeof(text), 1);
	memset(&c, 0, sizeof(c));
	if (len > 0)
		uc_conf_parse(text, &c, !explicit);
	return !c.off && (explicit || c.everywhere || c.names_me);
}
