#!/bin/sh
# Install unicache-agent and libunicache.so into a guest, or into a mounted guest image,
# without a package manager (the unicache-agent .deb/.rpm of `make packages` is the usual
# way: docs/agent.md "Packages"; it also checks the shim loads before preloading it).
#
#   guest-agent/install.sh [--root DIR] [--no-preload] [--no-systemd]
#
# --root DIR     install into an image mounted at DIR (default /: the running guest)
# --no-preload   do not add libunicache.so to DIR/etc/ld.so.preload
# --no-systemd   do not install the systemd unit and the udev rule that starts it when
#                the host attaches the port
#
# Needs: python3 in the guest. The agent is written and type-checked as Python 3.9 code
# (ruff py39, mypy python_version 3.9) and tested on 3.11 only; no 3.9 interpreter has run
# it. The shim is built here with gcc (or copied if built).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=/
preload=1
systemd=1
while [ $# -gt 0 ]; do
	case "$1" in
	--root) root=$2; shift 2 ;;
	--no-preload) preload=0; shift ;;
	--no-systemd) systemd=0; shift ;;
	*) echo "install.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
[ -d "$root" ] || { echo "install.sh: $root is not a directory" >&2; exit 2; }

# make rebuilds the library when any shim source is newer; without make, a library built
# elsewhere is installed as it is
if command -v make >/dev/null 2>&1 || [ ! -f "$here/shim/libunicache.so" ]; then
	make -s -C "$here/shim" libunicache.so
fi

lib="$root/usr/lib/unicache-agent"
install -d "$lib/unicache_agent" "$root/usr/bin" "$root/usr/share/doc/unicache-agent"
install -m 0644 "$here"/unicache_agent/*.py "$lib/unicache_agent/"
install -m 0755 "$here/shim/libunicache.so" "$lib/libunicache.so"
cat > "$root/usr/bin/unicache-agent" <<'SH'
#!/bin/sh
PYTHONPATH=/usr/lib/unicache-agent exec python3 -m unicache_agent "$@"
SH
chmod 0755 "$root/usr/bin/unicache-agent"
[ -f "$here/../docs/agent.md" ] && install -m 0644 "$here/../docs/agent.md" "$root/usr/share/doc/unicache-agent/"

if [ "$preload" = 1 ]; then
	f="$root/etc/ld.so.preload"
	install -d "$root/etc"
	touch "$f"
	grep -qx "/usr/lib/unicache-agent/libunicache.so" "$f" ||
		echo "/usr/lib/unicache-agent/libunicache.so" >> "$f"
fi

if [ "$systemd" = 1 ]; then
	# started by udev when the port appears (as the package does), not at every boot
	install -d "$root/etc/systemd/system" "$root/etc/udev/rules.d"
	install -m 0644 "$here/unicache-agent.service" "$root/etc/systemd/system/unicache-agent.service"
	install -m 0644 "$here/packaging/60-unicache-agent.rules" "$root/etc/udev/rules.d/"
fi
echo "unicache-agent installed into $root"
