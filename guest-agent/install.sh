#!/bin/sh
# Install unicache-agent and libunicache.so into a guest, or into a mounted guest image,
# without a package manager (the unicache-agent .deb/.rpm of `make packages` is the usual
# way: docs/agent.md "Packages").
#
#   guest-agent/install.sh [--root DIR] [--scope TARGET]... [--force] [--no-systemd]
#
# --root DIR       install into an image mounted at DIR (default /: the running guest)
# --scope TARGET   run the shim in these processes (repeatable; `unicache-agent scope add
#                  TARGET`, on DIR): unit:NAME.service, exe:/ABS/PATH, cgroup:/PATH or
#                  everywhere. Without it the shim runs in no process. exe:, cgroup: and
#                  everywhere put it into DIR/etc/ld.so.preload, only after it loaded in a
#                  test process, by a new file renamed over the old one
# --force          with --scope everywhere: skip the budget check (uc_bench budget)
# --no-preload     the default now (nothing is preloaded unless a --scope asks); accepted
#                  for the callers of earlier versions
# --no-systemd     do not install the systemd unit and the udev rule that starts it when
#                  the host attaches the port
#
# Needs: python3 in the guest (and here, for --scope). The agent is written and type-checked
# as Python 3.9 code (ruff py39, mypy python_version 3.9) and tested on 3.11 only; no 3.9
# interpreter has run it. The shim is built here with gcc (or copied if built).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=/
systemd=1
force=
scopes=
usage() { echo "install.sh: $1 (see the comment at the top of guest-agent/install.sh)" >&2; exit 2; }
while [ $# -gt 0 ]; do
	case "$1" in
	--root) [ $# -ge 2 ] || usage "--root needs a directory"; root=$2; shift 2 ;;
	--scope)
		[ $# -ge 2 ] || usage "--scope needs a target"
		case "$2" in *[[:space:]]*) usage "--scope $2: a target holds no blank" ;; esac
		scopes="$scopes $2"; shift 2 ;;
	--force) force=--force; shift ;;
	--no-preload) shift ;;
	--no-systemd) systemd=0; shift ;;
	*) usage "unknown option $1" ;;
	esac
done
[ -d "$root" ] || usage "$root is not a directory"
root=$(cd "$root" && pwd)

# make rebuilds the library when any shim source is newer; without make, a library built
# elsewhere is installed as it is
if command -v make >/dev/null 2>&1 || [ ! -f "$here/shim/libunicache.so" ]; then
	make -s -C "$here/shim" libunicache.so
fi

lib="$root/usr/lib/unicache-agent"
install -d "$lib/unicache_agent" "$root/usr/bin" "$root/usr/share/doc/unicache-agent" \
	"$root/etc/unicache-agent"
install -m 0644 "$here"/unicache_agent/*.py "$lib/unicache_agent/"
install -m 0755 "$here/shim/libunicache.so" "$lib/libunicache.so"
# the load check of `scope add` (and the package's), and what it runs when built
install -m 0755 "$here/packaging/preload" "$lib/preload"
for tool in uc_selftest uc_bench; do
	if [ -x "$here/shim/$tool" ]; then install -m 0755 "$here/shim/$tool" "$lib/$tool"; fi
done
# the scopes: only comments (the shim runs nowhere); an existing one is the admin's
[ -f "$root/etc/unicache-agent/shim.conf" ] ||
	install -m 0644 "$here/packaging/shim.conf" "$root/etc/unicache-agent/shim.conf"
cat > "$root/usr/bin/unicache-agent" <<'SH'
#!/bin/sh
PYTHONPATH=/usr/lib/unicache-agent exec python3 -m unicache_agent "$@"
SH
chmod 0755 "$root/usr/bin/unicache-agent"
[ -f "$here/../docs/agent.md" ] && install -m 0644 "$here/../docs/agent.md" "$root/usr/share/doc/unicache-agent/"

if [ "$systemd" = 1 ]; then
	# started by udev when the port appears (as the package does), not at every boot
	install -d "$root/etc/systemd/system" "$root/etc/udev/rules.d"
	install -m 0644 "$here/unicache-agent.service" "$root/etc/systemd/system/unicache-agent.service"
	install -m 0644 "$here/packaging/60-unicache-agent.rules" "$root/etc/udev/rules.d/"
fi

if [ -n "$scopes" ]; then
	# the same code as `unicache-agent scope add`, run here on the root: the drop-ins, the
	# load check and the atomic write of DIR/etc/ld.so.preload are the CLI's
	if [ "$root" = / ]; then
		# shellcheck disable=SC2086 # one word per target (checked above)
		PYTHONPATH=$here python3 -m unicache_agent scope add $force $scopes
	else
		# shellcheck disable=SC2086
		UNICACHE_SCOPE_ROOT=$root PYTHONPATH=$here python3 -m unicache_agent scope add $force $scopes
	fi
fi
echo "unicache-agent installed into $root"
