#!/usr/bin/env bash
# Builds upstream busybox, statically, into $1 (a file path), for the
# conformance suite's busybox-based test images (internal/images).
#
# Why not Debian's busybox-static: Debian patches ash to drop environment
# variables whose names are not shell names ("data-1", "1-x"; its patch
# revert-9c143ce52da11ec3d21a3491c3749841d3dc10f0), and conformance specs
# expect `sh -c env` to print them, as upstream's busybox image (1.37.0,
# test/images/busybox/BASEIMAGE in k8s.io/kubernetes) does. The source is
# upstream's release tarball as Debian's archive carries it (the orig tarball
# of Debian's 1.37.0 package), checked against its pinned SHA-256.
#
# A second run with the same version is a no-op.
set -euo pipefail

version=1.37.0
sha256=3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4
url=http://deb.debian.org/debian/pool/main/b/busybox/busybox_${version}.orig.tar.bz2

out=$(realpath -m "${1:?usage: build-busybox.sh OUTPUT}")
if [[ -x $out && $("$out" --help 2>&1 | head -1 || true) == "BusyBox v${version} "* ]]; then
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -sSfL --retry 3 -o "$work/src.tar.bz2" "$url"
echo "$sha256  $work/src.tar.bz2" | sha256sum -c --quiet -
tar -xjf "$work/src.tar.bz2" -C "$work"
cd "$work/busybox-${version}"
make -s defconfig >/dev/null
# Static; without tc, whose CBQ code does not build against the kernel
# headers of Linux 6.8 and later (Debian 12 has 6.1).
sed -i -e 's/^# CONFIG_STATIC is not set$/CONFIG_STATIC=y/' -e 's/^CONFIG_TC=y$/# CONFIG_TC is not set/' .config
grep -qx 'CONFIG_STATIC=y' .config
# Only the busybox binary: its build warns about glibc's static NSS, which
# the images do not need (they carry /etc/passwd and /etc/group).
make -s -j"$(nproc)" busybox >/dev/null 2>"$work/build.log" || { cat "$work/build.log" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
install -m 0755 busybox "$out"
echo "build-busybox: BusyBox ${version} in $out"
