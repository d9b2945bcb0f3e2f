#!/usr/bin/env bash
# Installs what Nest's build and local host cluster need on a Debian machine:
# runc, the CNI plugins, iptables, nftables, iproute2, busybox-static,
# Debian's Chromium, which the dashboard's browser test drives, and curl, dig and
# nc, which the conformance suite's agnhost image carries (internal/images),
# and gcc, make, libc6-dev and bzip2, which build upstream busybox for its
# busybox images (hack/build-busybox.sh).
# containerd is not among them: `make build` builds containerd 2 from its Go
# module (k8s/containerd), as Debian 12's 1.6 lacks image volumes.
# Go itself must already be installed (go.mod says which version).
set -euo pipefail

packages=(runc containernetworking-plugins iptables nftables iproute2 busybox-static util-linux procps kmod chromium curl bind9-dnsutils netcat-openbsd gcc make libc6-dev bzip2)
# Each package with a file that proves it is installed.
declare -A probe=(
  [runc]=/usr/sbin/runc [containernetworking-plugins]=/usr/lib/cni/bridge
  [iptables]=/usr/sbin/iptables [nftables]=/usr/sbin/nft [iproute2]=/usr/sbin/ip [busybox-static]=/bin/busybox
  [util-linux]=/usr/bin/nsenter [procps]=/usr/sbin/sysctl [kmod]=/usr/sbin/modprobe [chromium]=/usr/bin/chromium
  [curl]=/usr/bin/curl [bind9-dnsutils]=/usr/bin/dig [netcat-openbsd]=/usr/bin/nc.openbsd
  [gcc]=/usr/bin/gcc [make]=/usr/bin/make [libc6-dev]=/usr/include/stdio.h [bzip2]=/usr/bin/bzip2
)

missing=()
for p in "${packages[@]}"; do
  [[ -e ${probe[$p]} ]] || missing+=("$p")
done
if ! command -v go >/dev/null; then
  echo "install-deps: go is not on PATH; install Go $(sed -n 's/^go //p' "$(dirname "$0")/../go.mod") first" >&2
  exit 1
fi
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root (sudo make deps)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
