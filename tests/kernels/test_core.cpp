// Worker pool, huge-page buffers, KV cache bookkeeping, row-wise ops and
// attention kernels.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/huge_buffer.h"
#include "core/worker.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "model/kv_cache.h"
#include "model/model_config.h"

namespace parspec {
namespace {

TEST(Worker, RunsEveryThreadOncePerJob) {
  Worker w(3);
  for (int rep = 0; rep < 200; ++rep) {
    std::atomic<int> mask{0};
    w.run([&](int i, int n) {
      EXPECT_EQ(n, 3);
      mask.fetch_or(1 << i);
    });
    ASSERT_EQ(mask.load(), 7);
  }
}

TEST(Worker, ParallelForCoversTheRangeExactlyOnce) {
  Worker w(2);
  for (int64_t n : {0, 1, 2, 3, 17, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    w.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(Worker, TwoWorkersRunConcurrently) {
  Worker a(1), b(1);
  std::atomic<int> inside{0}, max_inside{0};
  // Each job waits (up to 10 s, so a loaded machine cannot make it flaky) until
  // the other is inside too: that happens only if the two workers run at once.
  auto job = [&](int, int) {
    int now = ++inside;
    int prev = max_inside.load();
    while (now > prev && !max_inside.compare_exchange_weak(prev, now)) {
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (max_inside.load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    --inside;
  };
  std::thread t([&] { a.run(job); });
  b.run(job);
  t.join();
  EXPECT_EQ(max_inside.load(), 2);
}

TEST(Worker, RejectsBadThreadCount) {
  EXPECT_THROW(Worker(0), Error);
}

ModelConfig small_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_head_kv = 1;
  c.head_dim = 4;
  return c;
}

TEST(HugePageBuffer, IsAlignedToAHugePageAndHoldsItsBytes) {
  // Not a multiple of 2 MiB: the allocation is rounded up, the size is not.
  const size_t bytes = (size_t{3} << 20) + 5;
  HugePageBuffer buffer(bytes);
  ASSERT_FALSE(buffer.empty());
  EXPECT_EQ(buffer.size(), bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % (size_t{2} << 20), 0u);
  for (size_t i = 0; i < bytes; ++i) buffer.data()[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < bytes; i += 4099) ASSERT_EQ(buffer.data()[i], static_cast<uint8_t>(i * 7));
  EXPECT_EQ(buffer.data()[bytes - 1], static_cast<uint8_t>((bytes - 1) * 7));
  EXPECT_TRUE(HugePageBuffer().empty());
}

TEST(KvCache, CapacityIsEnforcedWithAClearError) {
  KvCache kv(small_config(), 3);
  const int32_t pos[] = {0, 1, 2, 3}, par[] = {-1, 0, 1, 2};
  try {
    kv.add_cells(pos, par);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context size exceeded"), std::string::npos);
  }
  EXPECT_EQ(kv.n_spec(), 0);
}

TEST(KvCache, CommitMovesRowsAndValidatesPaths) {
  KvCache kv(small_config(), 8);
  const int32_t pos[] = {0, 1, 1}, par[] = {-1, 0, 0};
  kv.add_cells(pos, par);
  for (int layer = 0; layer < 2; ++layer)
    for (int c = 0; c < 3; ++c) kv.spec_k(layer, c)[0] = 100.0f * layer + c;
  const int32_t bad_path[] = {1};
  EXPECT_THROW(kv.commit(bad_path), Error);  // does not start at the prefix
  const int32_t path[] = {0, 2};
  kv.commit(path);
  EXPECT_EQ(kv.n_committed(), 2);
  EXPECT_EQ(kv.n_spec(), 0);
  EXPECT_EQ(kv.committed_k(1, 0)[0], 100.0f);
  EXPECT_EQ(kv.committed_k(1, 1)[0], 102.0f);
  std::vector<int32_t> anc;
  const int32_t pos2[] = {2, 3, 4}, par2[] = {-1, 0, 1};
  kv.add_cells(pos2, par2);
  kv.ancestors(2, anc);
  EXPECT_EQ(anc, (std::vector<int32_t>{0, 1}));
  EXPECT_THROW(kv.truncate(5), Error);
  kv.truncate(1);
  EXPECT_EQ(kv.n_committed(), 1);
  EXPECT_EQ(kv.n_spec(), 0);
}

TEST(KvCache, FullCacheCommitDoesNotClobberRows) {
  // Committed rows grow into slots that held speculative rows: a full cache
  // is where that overlap happens.
  KvCache kv(small_config(), 4);
  const int32_t pos[] = {0, 1, 2, 3}, par[] = {-1, 0, 1, 2};
  kv.add_cells(pos, par);
  for (int c = 0; c < 4; ++c) kv.spec_v(0, c)[3] = static_cast<float>(c + 1);
  const int32_t path[] = {0, 1, 2, 3};
  kv.commit(path);
  for (int p = 0; p < 4; ++p) EXPECT_EQ(kv.committed_v(0, p)[3], p + 1.0f);
}

TEST(Ops, RmsNormMatchesDefinition) {
  const float x[4] = {1, -2, 3, -4}, w[4] = {1, 0.5f, 2, 1};
  float out[4];
  rmsnorm(x, w, 4, 1e-5f, out);
  const double inv = 1.0 / std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-5);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], x[i] * inv * w[i], 1e-6);
}

// The 8-lane body and the scalar tail together: lengths around multiples of
// 8, against the definition in double precision.
TEST(Ops, RmsNormMatchesDefinitionAtEveryLength) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int n : {1, 7, 8, 9, 15, 16, 17, 64, 2051}) {
    std::vector<float> x(n), w(n), out(n);
    for (int i = 0; i < n; ++i) {
      x[i] = nd(rng);
      w[i] = nd(rng);
    }
    rmsnorm(x.data(), w.data(), n, 1e-6f, out.data());
    double sum_sq = 0;
    for (float v : x) sum_sq += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(sum_sq / n + 1e-6);
    for (int i = 0; i < n; ++i) {
      const double want = x[i] * inv * w[i];
      EXPECT_NEAR(out[i], want, 1e-6 * std::abs(want) + 1e-30) << "n " << n << " i " << i;
    }
  }
}

TEST(Ops, RopeStylesRotateTheRightPairs) {
  const float inv_freq[2] = {1.0f, 0.5f};
  float adj[4] = {1, 0, 1, 0}, neox[4] = {1, 1, 0, 0};
  rope(adj, 1, 4, 4, 1, inv_freq, RopeStyle::kAdjacent);
  rope(neox, 1, 4, 4, 1, inv_freq, RopeStyle::kNeox);
  EXPECT_NEAR(adj[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(adj[1], std::sin(1.0), 1e-6);
  EXPECT_NEAR(adj[2], std::cos(0.5), 1e-6);
  EXPECT_NEAR(adj[3], std::sin(0.5), 1e-6);
  // NeoX pairs are (0, 2) and (1, 3).
  EXPECT_NEAR(neox[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(neox[2], std::sin(1.0), 1e-6);
  EXPECT_NEAR(neox[1], std::cos(0.5), 1e-6);
  EXPECT_NEAR(neox[3], std::sin(0.5), 1e-6);
  // Position 0 is the identity.
  float same[4] = {1, 2, 3, 4};
  rope(same, 1, 4, 4, 0, inv_freq, RopeStyle::kAdjacent);
  EXPECT_EQ(same[1], 2.0f);
}

TEST(Ops, SwigluMatchesDefinition) {
  const float g[3] = {-1, 0, 2}, u[3] = {3, 4, 5};
  float out[3];
  swiglu(g, u, 3, out);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(out[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-6);
}

// Within a few ulp of silu(g)·u in double precision over the whole range,
// large |g| included (no overflow of e^−g for very negative g), and each
// element's result is the same in an 8-lane block as in a tail, alone or
// among others: a row's activations never depend on how rows are grouped.
TEST(Ops, SwigluIsAccurateAndPositionIndependent) {
  std::vector<float> g, u;
  for (float v : {-200.0f, -88.0f, -30.0f, -5.5f, -1.0f, -1e-3f, -0.0f, 0.0f, 1e-3f, 0.7f, 3.0f,
                  17.0f, 90.0f, 1e4f}) {
    g.push_back(v);
    u.push_back(1.5f - static_cast<float>(g.size()) * 0.25f);
  }
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  while (g.size() < 37) {
    g.push_back(nd(rng));
    u.push_back(nd(rng));
  }
  const int n = static_cast<int>(g.size());
  std::vector<float> out(n);
  swiglu(g.data(), u.data(), n, out.data());
  for (int i = 0; i < n; ++i) {
    const double want = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
    EXPECT_NEAR(out[i], want, 4e-7 * std::abs(want) + 1e-30) << "g = " << g[i];
    float alone;
    swiglu(&g[i], &u[i], 1, &alone);
    EXPECT_EQ(alone, out[i]) << "g = " << g[i];
  }
  std::vector<float> shifted(n - 3);
  swiglu(g.data() + 3, u.data() + 3, n - 3, shifted.data());
  for (int i = 3; i < n; ++i) EXPECT_EQ(shifted[i - 3], out[i]);
}

TEST(Attention, MatchesReferenceForManyShapes) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int head_dim : {4, 8, 13, 64, 128}) {
    for (int n_keys : {1, 2, 7, 100}) {
      std::vector<float> q(head_dim), kd(n_keys * head_dim), vd(n_keys * head_dim), out(head_dim),
          ref(head_dim);
      for (auto* v : {&q, &kd, &vd})
        for (float& x : *v) x = nd(rng);
      std::vector<const float*> keys, values;
      for (int j = 0; j < n_keys; ++j) {
        keys.push_back(&kd[j * head_dim]);
        values.push_back(&vd[j * head_dim]);
      }
      AttentionScratch scratch;
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      attend(q.data(), keys.data(), values.data(), n_keys, head_dim, scale, scratch, out.data());
      attend_reference(q.data(), keys.data(), values.data(), n_keys, head_dim, scale, ref.data());
      for (int d = 0; d < head_dim; ++d)
        ASSERT_NEAR(out[d], ref[d], 1e-5) << head_dim << " " << n_keys;
    }
  }
}

}  // namespace
}  // namespace parspec
