#!/usr/bin/env bash
# Installs the viewers that the export tests open lockscope's
# exports in, into one folder and nowhere else (default target/viewers,
# or $LOCKSCOPE_VIEWERS), from the npm registry and PyPI by package name:
#
#   npm/node_modules/speedscope   speedscope's web app (its built release),
#                                 served to headless Chromium by the tests
#   py/                           the `perfetto` Python package (Perfetto's
#                                 own trace protos, compiled) and `protobuf`,
#                                 which parse `export --format perfetto-proto`;
#                                 `jsonschema`, which checks the speedscope
#                                 export against the schema speedscope ships;
#                                 `duckdb`, which runs docs/fleet.md's
#                                 queries over `export --format parquet`
#
# Idempotent: a viewer already there at the pinned version is kept. Called
# by scripts/test.sh; run it by hand before `cargo test` of crates/cli.
# npm is not in scripts/test-packages.txt on purpose: a machine whose
# nodejs comes from elsewhere (NodeSource's package includes npm) would
# have apt try to install Debian's npm over it; it is installed here only
# when the `npm` command is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

SPEEDSCOPE=1.25.0
PERFETTO=0.59.1
# perfetto_trace_pb2.py of that release checks for protobuf >= 6.31.1.
PROTOBUF='protobuf>=6.31.1,<7'
JSONSCHEMA='jsonschema>=4.18,<5'
DUCKDB=2.0.1

dir=${LOCKSCOPE_VIEWERS:-target/viewers}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

need() { # command, Debian package
  command -v "$1" >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "scripts/test-viewers.sh: installing $2 (for $1)" >&2
    # A fresh machine has no package lists yet.
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
  else
    echo "scripts/test-viewers.sh: \`$1\` is missing; install the Debian package $2" >&2
    exit 2
  fi
}

# speedscope: the package's dist/release is the app that speedscope.app
# serves; --ignore-scripts: nothing of it runs here.
ss="$dir/npm/node_modules/speedscope"
if ! grep -q "\"version\": \"$SPEEDSCOPE\"" "$ss/package.json" 2>/dev/null; then
  need npm npm
  rm -rf "$dir/npm"
  mkdir -p "$dir/npm"
  npm install --prefix "$dir/npm" --no-audit --no-fund --ignore-scripts \
    --no-save "speedscope@$SPEEDSCOPE" >&2
fi
test -f "$ss/dist/release/index.html"

# Perfetto's protos, compiled for Python, and the protobuf runtime.
py="$dir/py"
if ! grep -qx "Version: $PERFETTO" "$py"/perfetto-"$PERFETTO".dist-info/METADATA 2>/dev/null ||
  ! compgen -G "$py/jsonschema-*.dist-info" >/dev/null; then
  need python3 python3
  python3 -m pip --version >/dev/null 2>&1 || need pip3 python3-pip
  rm -rf "$py"
  # --target keeps it in this folder; Debian marks its Python as
  # externally managed, which only concerns installs into it.
  python3 -m pip install --quiet --disable-pip-version-check --no-input \
    --break-system-packages --target "$py" "perfetto==$PERFETTO" "$PROTOBUF" "$JSONSCHEMA" >&2
fi
# DuckDB beside them (its own check: a folder made before it was added
# keeps its protos).
if ! compgen -G "$py/duckdb-$DUCKDB.dist-info" >/dev/null; then
  need python3 python3
  python3 -m pip --version >/dev/null 2>&1 || need pip3 python3-pip
  python3 -m pip install --quiet --disable-pip-version-check --no-input \
    --break-system-packages --target "$py" --upgrade "duckdb==$DUCKDB" >&2
fi
PYTHONPATH="$py" python3 -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2, jsonschema, duckdb'

echo "scripts/test-viewers.sh: viewers ready in $dir" >&2
