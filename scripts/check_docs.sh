#!/usr/bin/env bash
# Checks that the documentation stays reference text: no doc and no code comment
# refers to the project's work history (numbered sessions, issues, tickets or
# rounds of work, diary timestamps, who did what on which branch), and
# docs/performance.md keeps to its reference size. Prints every offending line;
# exit status 1 if there is one.
# Usage: bash scripts/check_docs.sh [SOURCE_DIR]   (default: the repository root)
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

# Precise on purpose: "rounds" of the server's batcher, "round to nearest", an MPI
# "session", a forward's "ticket" or a CSS colour do not match.
patterns=(
  '[Ss]essions? [0-9]'                                   # session 7
  '[Ii]ssues? #?[0-9]'                                   # issue 10
  '\([Ii]ssues?:'                                        # (issue: tokenizers)
  '[Tt]ickets? #?[0-9]'                                  # ticket 12
  '(^|\(|[Pp][Rr] |[Ff]ix(e[sd])? |[Cc]loses? |[Ss]ee |[Ii]n )#[0-9]+\b'  # (#12), fixed in #12
  '[Rr]ounds? [0-9]+ of (the )?work'                     # round 3 of work
  '[0-9]{1,2}:[0-9]{2}([–-][0-9]{1,2}:[0-9]{2})? UTC'    # 16:50–16:57 UTC
  '\(lead[,)]'                                           # (lead, ...)
  '\bthis branch\b'
  '[Mm]erged (in|into) main'
  '\b([Oo]ther|[Aa]nother|[Tt]wo|[Tt]hree) engineers?\b'
)
regex=$(IFS='|'; echo "${patterns[*]}")

hits=$(mktemp)
trap 'rm -f "$hits"' EXIT

# Docs: every line.
docs=(README.md bench/README.md models/README.md tests/reference/README.md)
while IFS= read -r -d '' f; do docs+=("$f"); done < <(find docs -name '*.md' -print0)
for f in "${docs[@]}"; do
  [[ -f $f ]] || continue
  grep -nHE -- "$regex" "$f" >> "$hits" || true
done

# Code: comment text only (after // in C++ and JavaScript, after # in shell,
# Python and CMake), so that string literals and identifiers are not checked.
self=scripts/check_docs.sh
while IFS= read -r -d '' f; do
  [[ $f == "$self" ]] && continue
  case $f in
    *.cpp | *.h | *.cjs) marker='//' ;;
    *) marker='#' ;;
  esac
  awk -v marker="$marker" -v file="$f" '
    {
      at = index($0, marker)
      if (marker == "#" && at > 1 && substr($0, at - 1, 1) !~ /[[:space:]]/) next
      if (at > 0) print file ":" NR ":" substr($0, at)
    }' "$f" | grep -E -- "$regex" >> "$hits" || true
done < <(find src tests bench scripts CMakeLists.txt \
  \( -path tests/data -o -path tests/fuzz/corpus -o -path bench/prompts \) -prune -o \
  -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cjs' -o -name '*.sh' -o -name '*.py' \
  -o -name 'CMakeLists.txt' \) -print0)

failed=0
if [[ -s $hits ]]; then
  sed 's/^/check_docs: work history: /' "$hits"
  failed=1
fi

# docs/performance.md holds the current reference figures, not a notebook.
limit=300
lines=$(wc -l < docs/performance.md)
if ((lines > limit)); then
  echo "check_docs: docs/performance.md has $lines lines, more than $limit: keep the newest figure of each kind"
  failed=1
fi

if ((failed)); then
  echo "check_docs: FAILED"
  exit 1
fi
echo "check_docs: OK"
