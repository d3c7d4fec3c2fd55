#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds a unicache demo/test guest: Debian 12 minbase + python3, an ext4 disk, the Debian
# cloud kernel and a busybox initramfs, in one of two variants:
#
#   images/build-image.sh [OUT_DIR] [VARIANT]
#
#   init     (default; `make image`, build/images/debian12): the guest agent and shim
#            copied in, started by a small init of its own (no systemd, no udev)
#   systemd  (`make image-systemd`, build/images/debian12-systemd): systemd as PID 1 and
#            udev, no agent (the tests install the unicache-agent package, as a user would);
#            the command runner is a systemd service; cloud-init and curl, and
#            systemd-networkd with DHCP on a virtio NIC (QEMU user networking), so that
#            cloud-init can install the package at first boot from a NoCloud seed over HTTP
#
# Cached in three layers under build/images/cache (each keyed by a hash of what it is made of):
#   base-HASH/      debootstrap rootfs           (suite, mirror, package list)    ~1 min
#   kernel-PKG/     the extracted cloud kernel   (the package apt resolves)       ~5 s
#   OUT_DIR/        image.json, rootfs.ext4, vmlinuz, initrd.img (everything)      ~10 s
# OUT_DIR/image.json records the hash of all inputs; an unchanged hash skips the build.
# Needs root (debootstrap, chroot, file ownership in the image) and, when missing, installs
# its host packages with apt-get.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VARIANT=${2:-init}
case "$VARIANT" in
    init) NAME=debian12 ;;
    systemd) NAME=debian12-systemd ;;
    *) echo "image: error: unknown variant $VARIANT (init or systemd)" >&2; exit 2 ;;
esac
OUT=${1:-$REPO/build/images/$NAME}
CACHE=${UNICACHE_IMAGE_CACHE:-$REPO/build/images/cache}
SUITE=bookworm
MIRROR=${UNICACHE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# minbase already has coreutils, grep, util-linux (mount), dash; the demo needs python3, procps.
# The systemd variant adds systemd as init, udev (it starts the agent's unit), dbus
# (systemd-logind, which turns the ACPI power button into a clean power-off), cloud-init
# and curl (docs/agent.md's cloud-init recipe, run at first boot); python3-cffi-backend
# provides the virtual package cloud-init's python3-cryptography needs, which debootstrap
# does not resolve by itself.
GUEST_PACKAGES=python3,procps
# the init variant's sqlite3 CLI: one of the ordinary programs `unicache bench programs` times
# with and without the shim (hypervisor/unicache/bench/guest_programs.py)
[ "$VARIANT" = init ] && GUEST_PACKAGES=$GUEST_PACKAGES,sqlite3
[ "$VARIANT" = systemd ] \
    && GUEST_PACKAGES=$GUEST_PACKAGES,systemd-sysv,udev,dbus,cloud-init,curl,python3-cffi-backend
DISK_SIZE=${UNICACHE_IMAGE_SIZE:-1G}
HOST_PACKAGES="debootstrap qemu-system-x86 busybox-static e2fsprogs cpio kmod"
# modules the initramfs loads (with their dependencies, in order): disk, virtio-serial, and
# the ACPI power button + evdev so QMP system_powerdown reaches the guest init; the systemd
# variant's network (the image has no /lib/modules: the NIC's driver comes this way too)
MODULES="virtio_pci virtio_blk virtio_console button evdev"
[ "$VARIANT" = systemd ] && MODULES="$MODULES virtio_net"

T0=$(date +%s)
step() { printf '[image %3ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { printf 'image: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "building the guest image needs root (debootstrap, chroot)"
[ "$(uname -m)" = x86_64 ] || die "only x86_64 hosts are supported (this is $(uname -m))"

# -- 0. inputs hash: skip everything when nothing changed --------------------------------
inputs_hash() {
    (
        cd "$REPO"
        echo "variant=$VARIANT suite=$SUITE mirror=$MIRROR packages=$GUEST_PACKAGES size=$DISK_SIZE mods=$MODULES"
        find images/build-image.sh images/guest images/initramfs guest-agent/unicache_agent \
            -type f \( -name '*.py' -o -name '*.sh' -o -name 'init' -o -name '*.service' \
               -o -name '*.network' -o -name '*.cfg' \) \
            2>/dev/null | LC_ALL=C sort
        [ -f guest-agent/install.sh ] && echo guest-agent/install.sh
        echo guest-agent/shim/libunicache.so
        echo guest-agent/shim/uc_selftest
        echo guest-agent/shim/libuc_null.so
    ) | while read -r f; do
        if [ -f "$REPO/$f" ]; then echo "$f $(sha256sum < "$REPO/$f" | cut -c1-16)"; else echo "$f"; fi
    done | sha256sum | cut -c1-16
}

# one build at a time (the demo and the tests may both ask for the image)
mkdir -p "$CACHE"
exec 9> "$CACHE/.lock"
if ! flock -n 9; then
    step "another build of the image is running: waiting for it"
    flock 9
fi

[ -f "$REPO/guest-agent/shim/libunicache.so" ] \
    || die "guest-agent/shim/libunicache.so is missing: run 'make shim-build' first"
HASH=$(inputs_hash)
if [ -f "$OUT/image.json" ] && grep -q "\"inputs_hash\": \"$HASH\"" "$OUT/image.json" \
   && [ -f "$OUT/rootfs.ext4" ] && [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initrd.img" ]; then
    step "up to date ($OUT, inputs $HASH)"
    touch "$OUT/image.json"
    exit 0
fi
step "building guest image into $OUT (inputs $HASH)"

# -- 1. host tools ------------------------------------------------------------------------
missing=""
for p in $HOST_PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    step "installing host packages:$missing"
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

mkdir -p "$CACHE" "$OUT"

# -- 2. base rootfs (debootstrap), cached by suite/mirror/packages ------------------------
BASE_KEY=$(echo "v2 $SUITE $MIRROR $GUEST_PACKAGES" | sha256sum | cut -c1-12)
BASE=$CACHE/base-$BASE_KEY
if [ ! -f "$BASE/.complete" ]; then
    rm -rf "$BASE" "$BASE.tmp"
    step "debootstrap --variant=minbase $SUITE (+$GUEST_PACKAGES) from $MIRROR (about 1-2 min)"
    debootstrap --variant=minbase --include="$GUEST_PACKAGES" "$SUITE" "$BASE.tmp" "$MIRROR" \
        > "$CACHE/debootstrap.log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        sleep 10
        kill -0 "$pid" 2>/dev/null && step "  debootstrap: $(tail -n1 "$CACHE/debootstrap.log" | cut -c1-90)"
    done
    wait "$pid" || { tail -n 20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
    # trim what a test guest never reads
    rm -rf "$BASE.tmp"/usr/share/doc/* "$BASE.tmp"/usr/share/man/* "$BASE.tmp"/usr/share/info/* \
        "$BASE.tmp"/var/cache/apt/archives/*.deb "$BASE.tmp"/var/lib/apt/lists/*
    find "$BASE.tmp/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'locale.alias' \
        -exec rm -rf {} + 2>/dev/null || true
    touch "$BASE.tmp/.complete"
    mv "$BASE.tmp" "$BASE"
    step "base rootfs ready ($(du -sh "$BASE" | cut -f1))"
else
    step "base rootfs cached ($BASE)"
fi

# -- 3. kernel (Debian cloud kernel, resolved through the host's apt index) ---------------
KPKG=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
if [ -z "$KPKG" ]; then
    apt-get update -qq
    KPKG=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
fi
[ -n "$KPKG" ] || die "apt cannot resolve linux-image-cloud-amd64 (is the Debian bookworm mirror in sources.list?)"
KDIR=$CACHE/kernel-$KPKG
if [ ! -f "$KDIR/.complete" ]; then
    step "downloading and extracting $KPKG"
    rm -rf "$KDIR" && mkdir -p "$KDIR/deb"
    (cd "$KDIR/deb" && apt-get download -q "$KPKG" >/dev/null 2>&1) || die "apt-get download $KPKG failed"
    dpkg -x "$KDIR"/deb/*.deb "$KDIR/root"
    rm -rf "$KDIR/deb"
    touch "$KDIR/.complete"
fi
KVER=$(ls "$KDIR/root/lib/modules")
step "kernel $KVER"
depmod -b "$KDIR/root" "$KVER"

# -- 4. initramfs: busybox + virtio modules, switch_root to /dev/vda -------------------------
STAGE=$(mktemp -d "$CACHE/stage.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
IRD=$STAGE/initramfs
mkdir -p "$IRD"/{bin,dev,proc,sys,newroot,modules}
cp /bin/busybox "$IRD/bin/busybox"
cp "$REPO/images/initramfs/init" "$IRD/init"
chmod 755 "$IRD/init"
: > "$IRD/modules/order"
for m in $MODULES; do
    modprobe -d "$KDIR/root" -S "$KVER" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
done | awk '!seen[$0]++' | while read -r ko; do
    cp "$ko" "$IRD/modules/"
    basename "$ko" >> "$IRD/modules/order"
done
step "initramfs: busybox + $(wc -l < "$IRD/modules/order") modules ($(tr '\n' ' ' < "$IRD/modules/order"))"
(cd "$IRD" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -9) > "$STAGE/initrd.img"

# -- 5. rootfs: base + init + agent + shim + demo command runner --------------------------
ROOT=$STAGE/rootfs
step "assembling rootfs ($VARIANT variant)"
cp -a "$BASE" "$ROOT"
rm -f "$ROOT/.complete"
# demo/test only: runs commands the host sends on org.unicache.control.0 (docs/images.md)
install -D -m 755 "$REPO/images/guest/unicache-runner.py" "$ROOT/usr/local/lib/unicache-demo/runner.py"
# demo/test only: the shim's test driver (read benchmark), built on the host like the shim
if [ -x "$REPO/guest-agent/shim/uc_selftest" ]; then
    install -m 755 "$REPO/guest-agent/shim/uc_selftest" "$ROOT/usr/local/lib/unicache-demo/uc_selftest"
fi
# demo/test only: a preload that does nothing, the control of what loading the shim costs
# (unicache bench programs)
if [ -f "$REPO/guest-agent/shim/libuc_null.so" ]; then
    install -m 644 "$REPO/guest-agent/shim/libuc_null.so" "$ROOT/usr/local/lib/unicache-demo/libuc_null.so"
fi
echo unicache-guest > "$ROOT/etc/hostname"
printf '127.0.0.1 localhost unicache-guest\n' > "$ROOT/etc/hosts"
AGENT_LIB=/usr/lib/unicache-agent
if [ "$VARIANT" = systemd ]; then
    INIT=/lib/systemd/systemd  # not /sbin/init: an absolute link the initramfs cannot follow
    AGENT=""
    SHIM=""
    # the runner starts as a service; what a test guest never needs does not (timers that
    # run apt or fstrim under TCG, gettys on a console nobody logs into)
    install -m 644 "$REPO/images/guest/unicache-runner.service" "$ROOT/etc/systemd/system/"
    mkdir -p "$ROOT/etc/systemd/system/multi-user.target.wants"
    ln -sf ../unicache-runner.service "$ROOT/etc/systemd/system/multi-user.target.wants/"
    for unit in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
                e2scrub_reap.service fstrim.timer serial-getty@ttyS0.service getty@tty1.service \
                systemd-timesyncd.service; do
        ln -sf /dev/null "$ROOT/etc/systemd/system/$unit"
    done
    # the network: DHCP on the virtio NIC by systemd-networkd (QEMU user networking; a VM
    # started without a NIC has no link to wait for). cloud-init's own network stage is off
    # and its module lists are cut to what a test boot under TCG needs (the file says why).
    install -m 644 "$REPO/images/guest/80-unicache-test-dhcp.network" "$ROOT/etc/systemd/network/"
    chroot "$ROOT" systemctl enable -q systemd-networkd.service systemd-networkd-wait-online.service
    install -m 644 "$REPO/images/guest/90-unicache-test.cfg" "$ROOT/etc/cloud/cloud.cfg.d/"
    [ -x "$ROOT/usr/bin/cloud-init" ] && [ -x "$ROOT/usr/bin/curl" ] \
        || die "no cloud-init or curl in the systemd variant's rootfs"
    # one machine id for every boot of the image: an empty one would make each boot of a
    # throw-away disk a "first boot" (systemctl preset-all)
    od -An -tx1 -N16 /dev/urandom | tr -d ' \n' > "$ROOT/etc/machine-id"
    echo >> "$ROOT/etc/machine-id"
    [ -x "$ROOT/lib/systemd/systemd" ] || die "no systemd in the systemd variant's rootfs"
else
    INIT=/sbin/unicache-init
    AGENT=/usr/bin/unicache-agent
    SHIM=$AGENT_LIB/libunicache.so
    install -m 755 "$REPO/images/guest/unicache-init.py" "$ROOT/sbin/unicache-init"
    # the agent and the shim (the shim is not preloaded globally: the demo and the tests set
    # LD_PRELOAD=/usr/lib/unicache-agent/libunicache.so per command, to compare on and off)
    step "installing agent + shim with guest-agent/install.sh --root (no systemd, no global preload)"
    "$REPO/guest-agent/install.sh" --root "$ROOT" --no-systemd --no-preload > "$STAGE/install.log" 2>&1 \
        || { cat "$STAGE/install.log" >&2; die "guest-agent/install.sh --root failed"; }
    [ -f "$ROOT$AGENT_LIB/libunicache.so" ] || die "the shim is not in the image at $AGENT_LIB/libunicache.so"
    [ -x "$ROOT/usr/bin/unicache-agent" ] || die "no /usr/bin/unicache-agent in the image"
    chroot "$ROOT" python3 -m compileall -q "$AGENT_LIB" >/dev/null
    chroot "$ROOT" /usr/bin/unicache-agent --version >/dev/null \
        || die "the agent does not start in the guest rootfs (chroot $ROOT unicache-agent --version)"
fi
chroot "$ROOT" python3 -m compileall -q /usr/local/lib/unicache-demo >/dev/null
cat > "$ROOT/etc/unicache-image" <<EOF
inputs_hash=$HASH
kernel=$KVER
built=$(date -u +%Y-%m-%dT%H:%M:%SZ)
EOF
step "mkfs.ext4 -d ($DISK_SIZE, $(du -sh "$ROOT" | cut -f1) of files)"
rm -f "$STAGE/rootfs.ext4"
mkfs.ext4 -q -F -L unicache-root -d "$ROOT" "$STAGE/rootfs.ext4" "$DISK_SIZE" >/dev/null

# -- 6. publish atomically-ish: files first, image.json (the make target) last --------------
rm -f "$OUT/image.json"
cp "$KDIR/root/boot/vmlinuz-$KVER" "$OUT/vmlinuz.tmp" && mv "$OUT/vmlinuz.tmp" "$OUT/vmlinuz"
mv "$STAGE/initrd.img" "$OUT/initrd.img"
mv "$STAGE/rootfs.ext4" "$OUT/rootfs.ext4"
PYVER=$(chroot "$ROOT" python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
cat > "$OUT/image.json.tmp" <<EOF
{
  "name": "$NAME",
  "variant": "$VARIANT",
  "inputs_hash": "$HASH",
  "kernel_version": "$KVER",
  "kernel_package": "$KPKG",
  "python": "$PYVER",
  "kernel": "vmlinuz",
  "initrd": "initrd.img",
  "disk": "rootfs.ext4",
  "disk_format": "raw",
  "root_device": "/dev/vda",
  "init": "$INIT",
  "agent": "$AGENT",
  "shim": "$SHIM",
  "agent_port": "org.unicache.agent.0",
  "control_port": "org.unicache.control.0",
  "base_rootfs": "$BASE",
  "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}
EOF
mv "$OUT/image.json.tmp" "$OUT/image.json"
step "done: $OUT (kernel $KVER, python $PYVER, disk $(du -h --apparent-size "$OUT/rootfs.ext4" | cut -f1) sparse, $(du -h "$OUT/rootfs.ext4" | cut -f1) used)"
