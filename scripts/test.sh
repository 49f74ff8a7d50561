#!/usr/bin/env bash
# The README's test command. On a fresh Debian 12 machine with only Rust
# and gcc it installs what the tests need (when run as root; otherwise it
# names exactly what is missing and how to install it), then builds the
# workspace and runs every test. `.ci/run` calls this same script.
set -euo pipefail
cd "$(dirname "$0")/.."

# Package names: the first word of each non-comment line.
mapfile -t pkgs < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' scripts/test-packages.txt | awk '{print $1}')
missing=()
for p in "${pkgs[@]}"; do
  # dpkg-query says "install ok installed" only for a package that is there.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "scripts/test.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "scripts/test.sh: the tests need these Debian packages, which are missing: ${missing[*]}" >&2
    echo "  install them with: sudo apt-get install ${missing[*]}" >&2
    echo "  (or run this script as root, and it installs them)" >&2
    exit 2
  fi
fi

scripts/test-viewers.sh  # speedscope app, Perfetto protos: the export tests open them (issue 11)
cargo build --release --workspace
cargo test --release --workspace "$@"
