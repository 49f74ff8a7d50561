#!/usr/bin/env bash
# The README's test command. On a fresh Debian 12 machine with only Rust
# and gcc it installs what the tests need (when run as root; otherwise it
# names exactly what is missing and how to install it), then builds the
# workspace and runs every test. `.ci/run` calls this same script.
set -euo pipefail
cd "$(dirname "$0")/.."

# Words first: seconds, and no build needed (see docs/development.md).
scripts/check-words.sh

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

scripts/test-viewers.sh  # speedscope app, Perfetto protos: the export tests open them
# Every package above is installed now: a test that finds its outside
# tool missing fails instead of skipping (lockscope_test_support::
# tool_or_skip; a plain `cargo test` elsewhere skips with a message).
export LOCKSCOPE_REQUIRE_TOOLS=1
cargo build --release --workspace
cargo test --release --workspace "$@"

# Memory checking of the unsafe-heavy crates' tests under valgrind's
# memcheck: the stable substitute for Miri, which needs a nightly
# toolchain that this machine and CI cannot install (see
# docs/development.md). Invalid reads and writes, use of uninitialised
# memory and definite leaks fail the run; the leak that the design
# intends (lockscope-locks' queue nodes are never freed) is suppressed in
# scripts/valgrind.supp. The test binaries are the release ones built
# above (cargo runs them through valgrind as the target's runner); about
# a minute in all.
host=$(rustc -vV | sed -n 's/^host: //p')
runner_var="CARGO_TARGET_$(echo "$host" | tr 'a-z-' 'A-Z_')_RUNNER"
memcheck="valgrind -q --tool=memcheck --error-exitcode=1 --fair-sched=yes --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite --suppressions=$PWD/scripts/valgrind.supp"
env "$runner_var=$memcheck" cargo test --release --lib \
  -p lockscope-ring -p lockscope-capture -p lockscope-swap -p lockscope-preload -p lockscope-tsan -p lockscope-format
# The lock algorithms' integration tests too (not `loom`, which is a
# model-checking build of its own, run by .ci/run).
env "$runner_var=$memcheck" cargo test --release -p lockscope-locks \
  --lib --test differential --test fifo --test hmcs_properties --test stress
# The injected library inside a real program: the mutex fixture recorded
# with memcheck between the recorder and the program (valgrind passes
# LD_PRELOAD on, so liblockscope_preload.so runs under memcheck: its
# hooks, rings and stack walks on every lock call). The fixture exits
# with 3 by design; memcheck's errors would make it 99.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -g -pthread -o "$tmp/mutex" tests/programs/mutex.c
st=0
target/release/lockscope record -o "$tmp/memcheck.lstrace" -- \
  valgrind -q --error-exitcode=99 --fair-sched=yes "$tmp/mutex" >/dev/null 2>"$tmp/memcheck.err" || st=$?
if [ "$st" != 3 ]; then
  cat "$tmp/memcheck.err" >&2
  echo "scripts/test.sh: tests/programs/mutex.c recorded under memcheck exited with $st (3 expected; 99: memcheck found errors in the program or the preload library)" >&2
  exit 1
fi
