#!/usr/bin/env bash
# Builds parspec and its tests under a sanitizer and runs them:
#   scripts/sanitize.sh address [GROUP...]   # ASan + UBSan + LeakSanitizer, in build-asan/
#   scripts/sanitize.sh thread [GROUP...]    # TSan, in build-tsan/
#   scripts/sanitize.sh KIND -- CTEST_ARGS   # any ctest selection instead (e.g. -R ServeTest)
# GROUPs: unit (ctest -L unit), server (the slow server tests, which run the parspec
# executable), mpi (the MPI tests, under mpirun); all three when none is given. Any sanitizer
# report fails the test that produced it. Suppressions: tests/sanitizers/ (third-party only).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() {
  echo "usage: $0 address|thread [unit] [server] [mpi] | $0 address|thread -- CTEST_ARGS..." >&2
  exit 2
}
case "${1:-}" in
  address) dir=build-asan ;;
  thread) dir=build-tsan ;;
  *) usage ;;
esac
kind=$1
shift
groups=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  case "$1" in
    unit | server | mpi) groups+=("$1") ;;
    *) usage ;;
  esac
  shift
done
[ $# -eq 0 ] || shift  # the --
[ ${#groups[@]} -gt 0 ] || [ $# -gt 0 ] || groups=(unit server mpi)

launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPARSPEC_WERROR=ON \
  -DPARSPEC_SANITIZE="$kind" "${launcher[@]}" > /dev/null
cmake --build "$dir" -j"$(nproc)"
if [ $# -gt 0 ]; then
  exec ctest --test-dir "$dir" --output-on-failure "$@"
fi
status=0
for group in "${groups[@]}"; do
  case "$group" in
    # The K-quant kernels equal their scalar reference bit for bit as the release build compiles
    # them (-O3); the sanitizer build's -O1 rounds the scalar reference's sums differently.
    unit) args=(-j"$(nproc)" -L unit -E '^IsaDispatch\.KQuantMatmulsEqualTheScalarReferenceOnEveryPath$') ;;
    server) args=(-L slow -R '^(ServeTest|ServeCosine|ServeChatModel|ServeLimits|ServeLimitsTest|ServeClients)\.') ;;
    mpi) args=(-L slow -R '^(DistributedCli\.|MpiPipeline\.|MpiEasySpec\.)') ;;
  esac
  echo "sanitize: $kind, $group tests"
  ctest --test-dir "$dir" --output-on-failure "${args[@]}" || status=1
done
exit $status
