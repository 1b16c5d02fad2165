// Throughput of attention over a prompt's queries (attend_many): one thread,
// the queries of a prompt's rows (4 heads per row, as in a KV group of Llama
// 3) over one shared key list, fastest of 25 repetitions. Prints
// GFLOP/s (4 flops per query, key and dimension: the scores' and the weighted
// values' fmas) per ISA, for the queries passed 16 at a time (one vector of
// AVX-512 lanes per call) and all at once (the kernel may take two vectors
// per key load). Build and run:
//   cmake --build build --target attention_throughput && build/attention_throughput [keys queries]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/isa.h"

using namespace parspec;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const int n_keys = argc > 1 ? std::atoi(argv[1]) : 2048;
  const int n_queries = argc > 2 ? std::atoi(argv[2]) : 64;
  const int head_dim = 64, heads = 4, reps = 25;
  if (n_keys < n_queries / heads || n_queries < 1) {
    std::fprintf(stderr, "usage: %s [keys queries], keys >= queries / %d\n", argv[0], heads);
    return 1;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> k(static_cast<size_t>(n_keys) * head_dim), v(k.size()),
      q(static_cast<size_t>(n_queries) * head_dim), out(q.size());
  for (std::vector<float>* values_of : {&k, &v, &q})
    for (float& e : *values_of) e = nd(rng);
  std::vector<const float*> keys(n_keys), values(n_keys), queries(n_queries);
  std::vector<float*> outs(n_queries);
  std::vector<int> counts(n_queries);
  const int rows = (n_queries + heads - 1) / heads;
  for (int j = 0; j < n_keys; ++j) {
    keys[j] = &k[static_cast<size_t>(j) * head_dim];
    values[j] = &v[static_cast<size_t>(j) * head_dim];
  }
  double flops = 0;
  for (int i = 0; i < n_queries; ++i) {
    queries[i] = &q[static_cast<size_t>(i) * head_dim];
    outs[i] = &out[static_cast<size_t>(i) * head_dim];
    counts[i] = n_keys - (rows - 1 - i / heads);  // the causal mask of a prompt chain
    flops += 4.0 * counts[i] * head_dim;
  }
  const float scale = 0.125f;
  AttentionScratch scratch;
  std::printf("one thread, %d queries (%d heads per row) over %d keys, head_dim %d; GFLOP/s\n\n",
              n_queries, heads, n_keys, head_dim);
  std::printf("| ISA | 16 queries per call | all %d in one call |\n|---|---|---|\n", n_queries);
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
    if (!set_active_isa(isa)) continue;
    double best[2] = {0, 0};
    for (int rep = 0; rep < reps; ++rep) {
      for (int mode = 0; mode < 2; ++mode) {
        const int step = mode == 0 ? 16 : n_queries;
        const auto t0 = Clock::now();
        for (int i = 0; i < n_queries; i += step)
          attend_many(std::min(step, n_queries - i), queries.data() + i, counts.data() + i,
                      keys.data(), values.data(), head_dim, scale, scratch, outs.data() + i);
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        best[mode] = std::max(best[mode], flops / s / 1e9);
      }
    }
    std::printf("| %s | %.1f | %.1f |\n", isa_name(isa), best[0], best[1]);
  }
  return 0;
}
