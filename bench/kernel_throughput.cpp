// Instruction-throughput bound of the matmul kernels: one thread, by default a
// weight matrix small enough to stay in cache (so memory bandwidth is not the limit),
// fastest of many repetitions (robust on a shared machine: a run the OS
// disturbed is only ever slower). Prints weight GB/s consumed per ISA, weight
// type and batch size M. Build and run:
//   cmake --build build --target kernel_throughput && build/kernel_throughput [n_in n_out [types]]
// (types: a comma-separated list such as q4_K,q6_K; default all). A matrix
// larger than the caches (e.g. 2048 65536) measures streaming from memory instead.
// Then the activation quantization every Q8_0/Q4_0 matmul starts with, per ISA.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/huge_buffer.h"
#include "core/worker.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/q8_tiles.h"
#include "kernels/repack.h"

using namespace parspec;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const int64_t n_in = argc > 2 ? std::atoll(argv[1]) : 2048;
  const int64_t n_out = argc > 2 ? std::atoll(argv[2]) : 512;
  Worker worker(1);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t max_m = 64;
  std::vector<float> x(max_m * n_in), y(max_m * n_out), row(n_in);
  for (float& v : x) v = dist(rng);
  std::printf("one thread, %lld x %lld weights; weight GB/s consumed (fastest of 15)\n\n",
              static_cast<long long>(n_out), static_cast<long long>(n_in));
  const int64_t ms[] = {1, 2, 3, 4, 5, 8, 16, 64};
  std::printf("| type | ISA |");
  for (int64_t m : ms) std::printf(" M=%lld |", static_cast<long long>(m));
  std::printf("\n|---|---|");
  for (size_t i = 0; i < std::size(ms); ++i) std::printf("---|");
  std::printf("\n");
  std::string only;  // ",q4_K,q6_K," or empty for every type
  if (argc > 3) only = std::string(",").append(argv[3]).append(",");
  for (DType type : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    const std::string name(type_info(type).name);
    if (!only.empty() && only.find(std::string(",").append(name).append(",")) == std::string::npos)
      continue;
    const size_t stride = row_bytes(type, n_in);
    std::vector<uint8_t> bytes(stride * n_out);
    for (int64_t o = 0; o < n_out; ++o) {
      for (float& v : row) v = 0.1f * dist(rng);
      quantize_row(type, row.data(), bytes.data() + o * stride, n_in);
    }
    // Q4_0 also repacked (kernels/repack.h), as models load it.
    // Line-aligned, as the tensors of a model's copy are (GGUF aligns them to
    // 32 bytes, the repacked layout makes up the rest): a vector's 16-byte
    // alignment would split every 64-byte load of the repacked tiles.
    HugePageBuffer packed;
    if (repack::repackable(type)) {
      packed = HugePageBuffer(bytes.size());
      std::copy(bytes.begin(), bytes.end(), packed.data());
      repack::repack_in_place(worker, type, n_in, n_out, packed.data());
    }
    for (bool repacked : {false, true}) {
      if (repacked && packed.empty()) continue;
      const WeightMatrix w{type, n_in, n_out, repacked ? packed.data() : bytes.data(), repacked};
      for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
        if (!set_active_isa(isa)) continue;
        std::printf("| %s%s | %s |", name.c_str(), repacked ? " repacked" : "", isa_name(isa));
        for (int64_t m : ms) {
          double best = 1e30;
          for (int rep = 0; rep < 15; ++rep) {
            const auto t0 = Clock::now();
            matmul(worker, w, x.data(), m, y.data());
            best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
          }
          std::printf(" %.1f |", static_cast<double>(bytes.size()) / best / 1e9);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  // What every Q8_0/Q4_0 matmul does first: its activation rows quantized to
  // Q8_0 (with the AVX-512 tiles' pair layout where they use it), per ISA.
  std::printf("\nactivations quantized to Q8_0 (%lld per row), ns per element (fastest of 200)\n\n",
              static_cast<long long>(n_in));
  std::printf("| ISA | M=1 | M=8 (pairs under avx512) |\n|---|---|---|\n");
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
    if (!set_active_isa(isa)) continue;
    std::printf("| %s |", isa_name(isa));
    for (int64_t m : {1, 8}) {
      q8tiles::Q8Activations act;
      double best = 1e30;
      for (int rep = 0; rep < 200; ++rep) {
        const auto t0 = Clock::now();
        q8tiles::quantize_activations(worker, x.data(), m, n_in, m == 8 && isa == Isa::kAvx512,
                                      act);
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
      }
      std::printf(" %.3f |", best * 1e9 / static_cast<double>(m * n_in));
    }
    std::printf("\n");
  }
  return 0;
}
