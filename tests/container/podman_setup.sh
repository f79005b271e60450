#!/usr/bin/env bash
# Installs podman and what the container checks use (Debian 12, as root)
# and writes the podman settings that work on these machines, where none
# are there yet: runc rather than crun (crun fails on their cgroup layout),
# vfs storage, cgroupfs, no default ulimits (the default RLIMIT_NOFILE is
# refused) and no pids limit. An existing /etc/containers/containers.conf or
# storage.conf is left as it is.
set -euo pipefail
# dnsname: container names resolve on compose networks (CNI, as podman 4.3
# on Debian 12 uses).
packages=(podman runc debootstrap podman-compose curl python3-venv iptables
  golang-github-containernetworking-plugin-dnsname)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi
mkdir -p /etc/containers
if [[ ! -e /etc/containers/containers.conf ]]; then
  cat >/etc/containers/containers.conf <<'CONF'
# Written by the matmul project's tests/container/podman_setup.sh.
[containers]
default_ulimits = []
pids_limit = 0
cgroups = "enabled"

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
CONF
fi
if [[ ! -e /etc/containers/storage.conf ]]; then
  cat >/etc/containers/storage.conf <<'CONF'
# Written by the matmul project's tests/container/podman_setup.sh.
[storage]
driver = "vfs"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
CONF
fi
podman --version
