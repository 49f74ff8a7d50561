#!/usr/bin/env bash
# Docs, comments, test names and file names speak of the product, not of
# how the work on it was organised: no "issue N", "session N" or "second
# round" anywhere in the tree. The one form allowed is a one-line comment
# directly above a regression test that links what it guards against:
#   // See issue N
#   // See issue N, item M.
#   // See issue N: <short why>
# Lines listed in scripts/words-allowlist.txt (as `path:line text`, without
# the line number, so that edits elsewhere in the file do not break the
# entry) are ignored: they are known and waiting for a rewrite; the list
# is meant to be empty.
# Needs bash and grep only. Exits 1 and lists path:line for every other
# occurrence; `scripts/test.sh` runs it first.
set -euo pipefail
cd "$(dirname "$0")/.."

# "round" alone stays allowed: a barrier round or a benchmark round is
# part of the product. Only the phrases that number the work are caught.
words='\b(issue|session)s?[ -]?#?[0-9]+|\bround [0-9]+ of the work|\b(first|second|third) round\b'
allowed='^[[:space:]]*// See issue [0-9]+(, item [0-9]+)?(\.|:.*)?$'
allowlist=scripts/words-allowlist.txt

declare -A allow=()
if [ -f "$allowlist" ]; then
  while IFS= read -r entry; do
    case "$entry" in '' | '#'*) continue ;; esac
    allow["$entry"]=1
  done <"$allowlist"
fi

# Build outputs (target/, wherever it is nested), git's own files, binary
# files and the allowlist itself are not searched.
found=0
declare -A used=()
while IFS= read -r hit; do
  path=${hit%%:*}
  rest=${hit#*:}
  text=${rest#*:}
  if printf '%s\n' "$text" | grep -qE "$allowed"; then
    continue
  fi
  if [ -n "${allow["$path:$text"]+x}" ]; then
    used["$path:$text"]=1
    continue
  fi
  if [ "$found" = 0 ]; then
    echo "scripts/check-words.sh: docs, comments and test names name the product, not the work's issues, sessions or rounds (allowed: a one-line '// See issue N' comment above a regression test):" >&2
  fi
  found=1
  echo "$hit" >&2
done < <(grep -rnIiE --exclude-dir=target --exclude-dir=.git \
  --exclude=words-allowlist.txt "$words" . | sed 's|^\./||' | LC_ALL=C sort)

# Entries no longer found (fixed, or their line was edited) are reported
# so that the list shrinks, but do not fail the run.
for entry in "${!allow[@]}"; do
  if [ -z "${used["$entry"]+x}" ]; then
    echo "scripts/check-words.sh: note: no longer found, remove from $allowlist: $entry" >&2
  fi
done

exit "$found"
