#!/usr/bin/env bash
# Runs the README's two set-up commands, exactly as written, as root on a
# fresh Debian 12 (bookworm) system built with debootstrap in a folder:
# the check that "a fresh Debian 12 machine with Rust and gcc" is all the
# README's commands need. Not run by CI (it downloads a Debian system,
# the crates and the test packages: ~2 GB, 30-60 minutes on 2 cores).
#
#   sudo scripts/fresh-check.sh [DIR] [COMMIT]
#
# DIR (default /var/tmp/lockscope-fresh) holds the chroot, kept between
# runs (debootstrap runs only when DIR/root has no Debian yet; delete DIR
# for a clean start). COMMIT (default HEAD) is cloned from this
# repository into /root/lockscope inside it. The log of the two commands
# is DIR/run.log; the script's exit status is theirs.
#
# What "fresh" means here:
# - debootstrap's default package set for bookworm (required + important
#   priorities, what a minimal Debian install has), plus gcc, libc6-dev
#   (gcc's recommended C library headers), ca-certificates and curl (what
#   installing Rust with rustup needs) and git (to clone the repository).
#   Nothing else: the test packages come from the README's second
#   command (scripts/test.sh installs them with apt-get).
# - Rust: Debian 12's own rustc is 1.63, older than the workspace's
#   rust-version, so the machine has Rust the way rustup installs it:
#   ~/.cargo/bin (the rustup proxies), ~/.cargo/env sourced by ~/.profile,
#   ~/.rustup/settings.toml and the default stable toolchain. rustup cannot
#   download a toolchain in every environment this runs in, so the
#   invoking user's default toolchain is copied in (without other
#   toolchains, and with an empty crate registry: cargo downloads the
#   crates from crates.io as on a new machine).
# - /proc, /sys, /dev, /dev/pts and /dev/shm (a tmpfs) are mounted as on
#   a booted machine; they are unmounted when the script exits.
# - The commands run in a login shell of root with a clean environment
#   (HOME=/root, no variables from the invoking shell).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/var/tmp/lockscope-fresh}
commit=${2:-HEAD}
root=$dir/root
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

[ "$(id -u)" = 0 ] || { echo "fresh-check: run as root (debootstrap, chroot and mounts need it)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "fresh-check: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }

mkdir -p "$dir"
if [ ! -f "$root/etc/debian_version" ]; then
  debootstrap --include=ca-certificates,curl,git,gcc,libc6-dev \
    bookworm "$root" "$mirror"
fi

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount -l "${mounted[$i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT
mnt() { # mnt TARGET MOUNT-ARGS...
  local t=$root$1
  shift
  mkdir -p "$t"
  mountpoint -q "$t" || { mount "$@" "$t" && mounted+=("$t"); }
}
mnt /proc -t proc proc
mnt /sys -t sysfs sysfs
mnt /dev --bind /dev
mnt /dev/pts --bind /dev/pts
mnt /dev/shm -t tmpfs -o mode=1777,nosuid,nodev tmpfs
# The network as the host sees it: name resolution, and the host's trusted
# certificates (a network whose HTTPS goes through a proxy with its own
# certificate authority needs it for cargo to reach crates.io; that is a
# property of the network, not of the project). Also kept under
# /usr/local/share so that a later update-ca-certificates keeps it.
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/usr/local/share/ca-certificates/host-trust.crt"
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
fi

# Rust as rustup installs it for root (see the header).
src_home=${RUSTUP_HOME:-$HOME/.rustup}
src_cargo=${CARGO_HOME:-$HOME/.cargo}
toolchain=$(rustup default | awk '{print $1}')
if [ ! -x "$root/root/.rustup/toolchains/$toolchain/bin/rustc" ]; then
  mkdir -p "$root/root/.rustup/toolchains" "$root/root/.cargo/bin"
  cp -a "$src_home/settings.toml" "$root/root/.rustup/"
  cp -a "$(readlink -f "$src_home/toolchains/$toolchain")" "$root/root/.rustup/toolchains/$toolchain"
  cp -a "$src_cargo/bin/." "$root/root/.cargo/bin/"
  cat >"$root/root/.cargo/env" <<'EOF'
#!/bin/sh
case ":${PATH}:" in
  *:"$HOME/.cargo/bin":*) ;;
  *) export PATH="$HOME/.cargo/bin:$PATH" ;;
esac
EOF
  grep -q cargo/env "$root/root/.profile" 2>/dev/null ||
    echo '. "$HOME/.cargo/env"' >>"$root/root/.profile"
fi

# The repository at COMMIT, cloned as a user would (a fresh clone: no
# target/, no untracked files).
sha=$(git -C "$repo" rev-parse "$commit")
rm -rf "$root/root/lockscope"
git clone -q --no-checkout "$repo" "$root/root/lockscope"
git -C "$root/root/lockscope" checkout -q "$sha"

# The README's two commands, word for word (from its "Set-up" section).
readme_cmds=$(sed -n '/^## Set-up/,/^## /p' "$repo/README.md" |
  awk '/^```sh/{f=1; next} /^```/{f=0} f && !/^#/ && NF')
echo "fresh-check: running in $root as root, at $sha:" >&2
echo "$readme_cmds" | sed 's/^/  /' >&2
# Each command in its own login shell, as when pasted one after the
# other; both run even when the first fails, and each status is reported.
status=0
n=0
: >"$dir/run.log"
while IFS= read -r cmd; do
  n=$((n + 1))
  echo "fresh-check: command $n: $cmd" | tee -a "$dir/run.log" >&2
  st=0
  chroot "$root" env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -lc "cd /root/lockscope && $cmd" </dev/null 2>&1 | tee -a "$dir/run.log" || st=$?
  echo "fresh-check: command $n exited with status $st" | tee -a "$dir/run.log" >&2
  [ "$st" = 0 ] || status=$st
done <<<"$readme_cmds"
echo "fresh-check: done, status $status (log: $dir/run.log)" >&2
exit "$status"
