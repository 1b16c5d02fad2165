#!/usr/bin/env bash
# Builds parspec and its tests under a sanitizer and runs them:
#   scripts/sanitize.sh address   # ASan + UBSan + LeakSanitizer, into build-asan/
#   scripts/sanitize.sh thread    # TSan, into build-tsan/
# Without more arguments it runs the unit tests, the server tests and the MPI tests; any further
# arguments are given to one ctest run instead (e.g. -R ServeTest). Any sanitizer report fails
# the test that produced it. Suppressions: tests/sanitizers/ (third-party code only).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  address) dir=build-asan ;;
  thread) dir=build-tsan ;;
  *)
    echo "usage: $0 address|thread [CTEST_ARGS...]" >&2
    exit 2
    ;;
esac
kind=$1
shift
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPARSPEC_WERROR=ON \
  -DPARSPEC_SANITIZE="$kind" "${launcher[@]}" > /dev/null
cmake --build "$dir" -j"$(nproc)"
if [ $# -gt 0 ]; then
  exec ctest --test-dir "$dir" --output-on-failure "$@"
fi
status=0
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" -L unit || status=1
# The slow tests of the server (it runs the parspec executable) and of the MPI runtime.
ctest --test-dir "$dir" --output-on-failure -L slow \
  -R '^(ServeTest|ServeCosine|ServeChatModel|ServeLimits|ServeClients|DistributedCli|MpiPipeline|MpiEasySpec)\.' ||
  status=1
exit $status
