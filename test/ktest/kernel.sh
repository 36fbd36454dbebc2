#!/usr/bin/env bash
# kernel.sh — prints the directory holding the kernel of the test VM:
#   <dir>/vmlinux                 uncompressed kernel qemu boots directly (PVH)
#   <dir>/lib/modules/<version>/  its modules
#
# The kernel is Debian's cloud kernel, pinned to one package version so every
# run tests against the same kernel, and cached under $PLINTH_CACHE keyed by
# that version. It is never installed on the host (that would run
# update-initramfs and grub): the .deb is only downloaded and unpacked.
set -euo pipefail

KVER=6.1.0-56-cloud-amd64
PKG=linux-image-$KVER
PKGVER=6.1.192-2

cache=${PLINTH_CACHE:-$HOME/.cache/plinth}/ktest-kernel-$KVER-$PKGVER
if [ -f "$cache/.complete" ]; then
	echo "$cache"
	exit 0
fi
"$(dirname "$0")/../../build/scripts/apt-install.sh" lz4 >&2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
download() { (cd "$tmp" && apt-get -o APT::Sandbox::User=root -qq download "$PKG=$PKGVER") >&2; }
if ! download; then
	# The package lists may be older than the pin; refresh once.
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get -o DPkg::Lock::Timeout=600 update -qq >&2 || true
	if ! download; then
		echo "ktest: cannot download $PKG=$PKGVER from Debian." >&2
		echo "ktest: Debian may have replaced it; see 'apt-cache policy linux-image-cloud-amd64'" >&2
		echo "ktest: and update KVER/PKGVER in test/ktest/kernel.sh." >&2
		exit 1
	fi
fi
dpkg-deb -x "$tmp"/"$PKG"_*.deb "$tmp/root"

# The cloud kernel's bzImage carries an LZ4 (legacy frame) payload: the
# uncompressed vmlinux, which qemu's microvm boots directly through PVH
# without running the decompressor.
bz="$tmp/root/boot/vmlinuz-$KVER"
off=$(grep -abo $'\x02\x21\x4c\x18' "$bz" | head -1 | cut -d: -f1)
if [ -z "$off" ]; then
	echo "ktest: no LZ4 payload in $bz (did the kernel's compression change?)" >&2
	exit 1
fi
mkdir -p "$tmp/out/lib/modules"
# lz4 complains about the bytes after the payload; the ELF check below is
# what decides.
tail -c +$((off + 1)) "$bz" | lz4 -dc >"$tmp/out/vmlinux" 2>/dev/null || true
if [ "$(head -c 4 "$tmp/out/vmlinux" | od -An -c | tr -d ' ')" != '177ELF' ]; then
	echo "ktest: unpacking vmlinux from $bz failed" >&2
	exit 1
fi
mv "$tmp/root/lib/modules/$KVER" "$tmp/out/lib/modules/"
touch "$tmp/out/.complete"
mkdir -p "$(dirname "$cache")"
rm -rf "$cache"
mv "$tmp/out" "$cache"
echo "$cache"
