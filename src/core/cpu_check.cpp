// Compiled WITHOUT -mavx2/-mfma/-mf16c so that it can run on any x86-64 CPU and
// refuse to continue, with a clear message, before any AVX2 code is reached.
#include <cstdio>
#include <cstdlib>

namespace {
__attribute__((constructor(101))) void parspec_require_cpu_features() {
  __builtin_cpu_init();
  const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("f16c");
  if (!ok) {
    std::fputs(
        "parspec: this CPU lacks AVX2/FMA/F16C, which this build requires "
        "(x86-64-v3). Rebuild on a newer CPU.\n",
        stderr);
    std::exit(1);
  }
}
}  // namespace
