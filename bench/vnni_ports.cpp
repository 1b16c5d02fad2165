// Which instructions share the execution pipes of 512-bit vpdpbusd on this
// core: loops of 24 independent vpdpbusd (12 accumulators), alone and with a
// few other instructions mixed in, timed and converted to cycles with a clock
// estimated from a chain of dependent integer adds. An instruction that adds
// about (its count / 2) cycles per loop shares the vpdpbusd pipes; one that adds
// nothing runs beside them. Needs AVX-512 VNNI. Build and run:
//   cmake --build build --target vnni_ports && build/vnni_ports
#include <chrono>
#include <cstdio>

namespace {

constexpr long kLoops = 100'000'000;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Cycles per second: 4 dependent adds (one cycle each) per loop.
double clock_hz() {
  long x = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < kLoops; ++i)
    asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
  return 4.0 * kLoops / seconds_since(t0);
}

#define DP12                                                                   \
  "vpdpbusd %%zmm20, %%zmm21, %%zmm0\n\tvpdpbusd %%zmm20, %%zmm21, %%zmm1\n\t" \
  "vpdpbusd %%zmm20, %%zmm21, %%zmm2\n\tvpdpbusd %%zmm20, %%zmm21, %%zmm3\n\t" \
  "vpdpbusd %%zmm20, %%zmm21, %%zmm4\n\tvpdpbusd %%zmm20, %%zmm21, %%zmm5\n\t" \
  "vpdpbusd %%zmm20, %%zmm21, %%zmm6\n\tvpdpbusd %%zmm20, %%zmm21, %%zmm7\n\t" \
  "vpdpbusd %%zmm20, %%zmm21, %%zmm8\n\tvpdpbusd %%zmm20, %%zmm21, %%zmm9\n\t" \
  "vpdpbusd %%zmm20, %%zmm21, %%zmm10\n\tvpdpbusd %%zmm20, %%zmm21, %%zmm11\n\t"
#define DP12_YMM                                                               \
  "vpdpbusd %%ymm20, %%ymm21, %%ymm0\n\tvpdpbusd %%ymm20, %%ymm21, %%ymm1\n\t" \
  "vpdpbusd %%ymm20, %%ymm21, %%ymm2\n\tvpdpbusd %%ymm20, %%ymm21, %%ymm3\n\t" \
  "vpdpbusd %%ymm20, %%ymm21, %%ymm4\n\tvpdpbusd %%ymm20, %%ymm21, %%ymm5\n\t" \
  "vpdpbusd %%ymm20, %%ymm21, %%ymm6\n\tvpdpbusd %%ymm20, %%ymm21, %%ymm7\n\t" \
  "vpdpbusd %%ymm20, %%ymm21, %%ymm8\n\tvpdpbusd %%ymm20, %%ymm21, %%ymm9\n\t" \
  "vpdpbusd %%ymm20, %%ymm21, %%ymm10\n\tvpdpbusd %%ymm20, %%ymm21, %%ymm11\n\t"
#define CLOBBERS                                                                           \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm24", "xmm25", "xmm26", "xmm27"
// One timed loop: 24 vpdpbusd with EXTRA (instructions writing zmm24-27) between the halves.
#define MEASURE(NAME, EXTRA)                                                                   \
  do {                                                                                         \
    const auto t0 = std::chrono::steady_clock::now();                                          \
    for (long i = 0; i < kLoops; ++i) asm volatile(DP12 EXTRA DP12 ::"r"(scratch) : CLOBBERS); \
    std::printf("| %s | %.1f |\n", NAME, seconds_since(t0) / kLoops * hz);                     \
  } while (0)

}  // namespace

int main() {
  if (!__builtin_cpu_supports("avx512vnni")) {
    std::printf("this CPU has no AVX-512 VNNI\n");
    return 0;
  }
  alignas(64) static long scratch[8] = {};
  asm volatile(
      "vpternlogd $0xff, %%zmm20, %%zmm20, %%zmm20\n\t"
      "vpternlogd $0xff, %%zmm21, %%zmm21, %%zmm21" ::
          : "xmm20", "xmm21");
  const double hz = clock_hz();
  std::printf(
      "clock ~%.2f GHz (dependent adds); cycles per loop of 24 vpdpbusd (12 if 2/cycle)\n\n",
      hz / 1e9);
  std::printf("| added to the 24 vpdpbusd | cycles |\n|---|---|\n");
  MEASURE("nothing", "");
  MEASURE("4 vmulps",
          "vmulps %%zmm20, %%zmm21, %%zmm24\n\tvmulps %%zmm20, %%zmm21, %%zmm25\n\t"
          "vmulps %%zmm20, %%zmm21, %%zmm26\n\tvmulps %%zmm20, %%zmm21, %%zmm27\n\t");
  MEASURE("4 vfmadd231ps",
          "vfmadd231ps %%zmm20, %%zmm21, %%zmm24\n\t"
          "vfmadd231ps %%zmm20, %%zmm21, %%zmm25\n\t"
          "vfmadd231ps %%zmm20, %%zmm21, %%zmm26\n\t"
          "vfmadd231ps %%zmm20, %%zmm21, %%zmm27\n\t");
  MEASURE("4 vcvtdq2ps",
          "vcvtdq2ps %%zmm20, %%zmm24\n\tvcvtdq2ps %%zmm20, %%zmm25\n\t"
          "vcvtdq2ps %%zmm21, %%zmm26\n\tvcvtdq2ps %%zmm21, %%zmm27\n\t");
  MEASURE("4 vpunpck*dq",
          "vpunpckldq %%zmm20, %%zmm20, %%zmm24\n\t"
          "vpunpckhdq %%zmm20, %%zmm20, %%zmm25\n\t"
          "vpunpckldq %%zmm21, %%zmm21, %%zmm26\n\t"
          "vpunpckhdq %%zmm21, %%zmm21, %%zmm27\n\t");
  MEASURE("4 vpaddd",
          "vpaddd %%zmm20, %%zmm21, %%zmm24\n\tvpaddd %%zmm20, %%zmm21, %%zmm25\n\t"
          "vpaddd %%zmm20, %%zmm21, %%zmm26\n\tvpaddd %%zmm20, %%zmm21, %%zmm27\n\t");
  MEASURE("4 vpandd + 4 vpsrlw",
          "vpandd %%zmm20, %%zmm21, %%zmm24\n\tvpsrlw $4, %%zmm20, %%zmm25\n\t"
          "vpandd %%zmm20, %%zmm21, %%zmm26\n\tvpsrlw $4, %%zmm21, %%zmm27\n\t"
          "vpandd %%zmm20, %%zmm21, %%zmm24\n\tvpsrlw $4, %%zmm20, %%zmm25\n\t"
          "vpandd %%zmm20, %%zmm21, %%zmm26\n\tvpsrlw $4, %%zmm21, %%zmm27\n\t");
  MEASURE("4 vpbroadcastq loads",
          "vpbroadcastq (%0), %%zmm24\n\tvpbroadcastq 8(%0), %%zmm25\n\t"
          "vpbroadcastq 16(%0), %%zmm26\n\tvpbroadcastq 24(%0), %%zmm27\n\t");
  // The other int8/int16 multiplies: a different pipe would let a kernel mix them in.
  MEASURE("4 vpmaddubsw",
          "vpmaddubsw %%zmm20, %%zmm21, %%zmm24\n\tvpmaddubsw %%zmm20, %%zmm21, %%zmm25\n\t"
          "vpmaddubsw %%zmm20, %%zmm21, %%zmm26\n\tvpmaddubsw %%zmm20, %%zmm21, %%zmm27\n\t");
  MEASURE("4 vpmaddwd",
          "vpmaddwd %%zmm20, %%zmm21, %%zmm24\n\tvpmaddwd %%zmm20, %%zmm21, %%zmm25\n\t"
          "vpmaddwd %%zmm20, %%zmm21, %%zmm26\n\tvpmaddwd %%zmm20, %%zmm21, %%zmm27\n\t");
  // 256-bit vpdpbusd in place of the 512-bit ones: the same count per cycle
  // would mean half the multiply-adds.
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < kLoops; ++i) asm volatile(DP12_YMM DP12_YMM ::: CLOBBERS);
  std::printf("| (24 256-bit vpdpbusd instead) | %.1f |\n", seconds_since(t0) / kLoops * hz);
  return 0;
}
