// Attention kernels: queries batched over a shared key list (attend_many) give
// each query exactly attend()'s bits on every ISA path, and both stay close to
// the double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/isa.h"

namespace parspec {
namespace {

struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_active_isa(saved); }
};

struct KeyList {
  std::vector<float> k, v;
  std::vector<const float*> keys, values;
  KeyList(int n, int head_dim, std::mt19937& rng) : k(n * head_dim), v(n * head_dim) {
    std::normal_distribution<float> nd;
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    for (int j = 0; j < n; ++j) {
      keys.push_back(&k[j * head_dim]);
      values.push_back(&v[j * head_dim]);
    }
  }
};

// Query i of `count` sees all keys but the last (count - 1 - i) / heads: rows
// of a prompt chain, `heads` queries per row, as the model batches them.
std::vector<int> chain_counts(int count, int heads, int n_keys) {
  std::vector<int> nk(count);
  const int rows = (count + heads - 1) / heads;
  for (int i = 0; i < count; ++i) nk[i] = n_keys - (rows - 1 - i / heads);
  return nk;
}

// n random queries (times `amplitude`) and the rows their outputs go to.
struct QueryRows {
  std::vector<float> q, out;
  std::vector<const float*> qs;
  std::vector<float*> outs;
  QueryRows(int n, int head_dim, std::mt19937& rng, float amplitude = 1.0f)
      : q(n * head_dim), out(n * head_dim) {
    std::normal_distribution<float> nd;
    for (float& x : q) x = nd(rng) * amplitude;
    for (int i = 0; i < n; ++i) {
      qs.push_back(&q[i * head_dim]);
      outs.push_back(&out[i * head_dim]);
    }
  }
};

// attend_many under `isa` gives every query exactly attend()'s bits under
// AVX2 over its own keys.
void expect_each_equals_attend_alone(Isa isa, const KeyList& kl, QueryRows& rows,
                                     const std::vector<int>& nk, int head_dim, float scale,
                                     const std::string& context) {
  const int n_queries = static_cast<int>(nk.size());
  AttentionScratch scratch;
  attend_many(n_queries, rows.qs.data(), nk.data(), kl.keys.data(), kl.values.data(), head_dim,
              scale, scratch, rows.outs.data());
  std::vector<float> want(head_dim);
  for (int i = 0; i < n_queries; ++i) {
    ASSERT_TRUE(set_active_isa(Isa::kAvx2));
    attend(rows.qs[i], kl.keys.data(), kl.values.data(), nk[i], head_dim, scale, scratch,
           want.data());
    ASSERT_TRUE(set_active_isa(isa));
    ASSERT_EQ(std::memcmp(want.data(), rows.outs[i], sizeof(float) * head_dim), 0)
        << isa_name(isa) << " head_dim " << head_dim << " " << context << " query " << i << " with "
        << nk[i] << " keys";
  }
}

TEST(AttentionMany, EachQueryEqualsAttendAloneOnEveryPath) {
  IsaGuard guard;
  std::mt19937 rng(11);
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
    if (!set_active_isa(isa)) {
      std::printf("skipped %s: this CPU lacks it\n", isa_name(isa));
      continue;
    }
    for (int head_dim : {4, 13, 64, 128}) {
      for (int n_queries : {1, 3, 4, 5, 8, 9, 17, 33, 64}) {
        for (int heads : {1, 4}) {
          const int n_keys = 40 + n_queries / heads;
          const KeyList kl(n_keys, head_dim, rng);
          const std::vector<int> nk = chain_counts(n_queries, heads, n_keys);
          // Large scores too: the exponential's clamp and the masked lanes.
          QueryRows rows(n_queries, head_dim, rng, n_queries % 2 ? 1.0f : 8.0f);
          const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
          ASSERT_NO_FATAL_FAILURE(expect_each_equals_attend_alone(
              isa, kl, rows, nk, head_dim, scale,
              "queries " + std::to_string(n_queries) + " heads " + std::to_string(heads)));
        }
      }
    }
  }
}

// The keys-in-lanes kernel (a decode step's heads, tree nodes) with queries
// whose key counts differ and end on and off its 8- and 16-key blocks: each
// query must stop at its own last key, whatever the others see.
TEST(AttentionMany, FewQueriesWithUnequalKeyCountsEqualAttendAlone) {
  IsaGuard guard;
  std::mt19937 rng(23);
  const std::vector<std::vector<int>> count_sets = {
      {48, 64, 40, 56}, {64, 17, 33}, {16, 32}, {8}, {80, 79, 81, 95}};
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
    if (!set_active_isa(isa)) {
      std::printf("skipped %s: this CPU lacks it\n", isa_name(isa));
      continue;
    }
    for (int head_dim : {13, 64, 128}) {
      for (const std::vector<int>& nk : count_sets) {
        const KeyList kl(96, head_dim, rng);
        QueryRows rows(static_cast<int>(nk.size()), head_dim, rng);
        ASSERT_NO_FATAL_FAILURE(expect_each_equals_attend_alone(
            isa, kl, rows, nk, head_dim, 0.125f, std::to_string(nk.size()) + " queries"));
      }
    }
  }
}

TEST(AttentionMany, BatchedQueriesMatchTheReference) {
  std::mt19937 rng(5);
  const int head_dim = 64, n_queries = 24, n_keys = 300;
  const KeyList kl(n_keys, head_dim, rng);
  const std::vector<int> nk = chain_counts(n_queries, 1, n_keys);
  QueryRows rows(n_queries, head_dim, rng);
  std::vector<float> ref(head_dim);
  const float scale = 0.125f;
  AttentionScratch scratch;
  attend_many(n_queries, rows.qs.data(), nk.data(), kl.keys.data(), kl.values.data(), head_dim,
              scale, scratch, rows.outs.data());
  for (int i = 0; i < n_queries; ++i) {
    attend_reference(rows.qs[i], kl.keys.data(), kl.values.data(), nk[i], head_dim, scale,
                     ref.data());
    for (int d = 0; d < head_dim; ++d) ASSERT_NEAR(rows.outs[i][d], ref[d], 1e-5) << i << " " << d;
  }
}

}  // namespace
}  // namespace parspec
