// The layer-parallel (EasySpec) drafter: layer groups, fuzzy forwards that
// equal the exact drafter bit for bit when every group has one layer, and
// bonus calibration that restores exactly the KV a layer-sequential drafter
// writes. Losslessness of the `easyspec` strategy is in test_strategies.cpp.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "decode/local_model.h"
#include "decode/strategy.h"
#include "strategies/easyspec/layer_parallel.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::bitwise_equal;
using testing_support::make_model_pair;
using testing_support::TempDir;
using testing_support::write_model;

std::shared_ptr<const Model> four_layer_model(const TempDir& dir) {
  RandomModelSpec spec;
  spec.n_layer = 4;
  spec.n_vocab = 300;
  spec.seed = 11;
  return Model::load(write_model(dir, "deep.gguf", spec));
}

std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> out = {256};
  for (int i = 1; i < n; ++i) out.push_back((i * 37 + salt * 11 + 5) % 256);
  return out;
}

// KvCache's row accessors are non-const; the tests only read.
const float* k_row(const KvCache& kv, int layer, int32_t pos) {
  return const_cast<KvCache&>(kv).committed_k(layer, pos);
}
const float* v_row(const KvCache& kv, int layer, int32_t pos) {
  return const_cast<KvCache&>(kv).committed_v(layer, pos);
}

// The KV a layer-sequential drafter holds after seeing `seq`.
KvCache exact_cache(const Model& model, Worker& worker, std::span<const int32_t> seq) {
  KvCache kv(model.config(), 256);
  model.forward(worker, Batch::chain(kv, seq, false), kv);
  std::vector<int32_t> path(seq.size());
  std::iota(path.begin(), path.end(), 0);
  kv.commit(path);
  return kv;
}

bool same_committed_rows(const KvCache& a, const KvCache& b, int n_layer, int32_t n) {
  const size_t d = static_cast<size_t>(a.kv_dim());
  for (int l = 0; l < n_layer; ++l)
    for (int32_t p = 0; p < n; ++p)
      if (!bitwise_equal(k_row(a, l, p), k_row(b, l, p), d) ||
          !bitwise_equal(v_row(a, l, p), v_row(b, l, p), d))
        return false;
  return true;
}

TEST(LayerGroups, FromLpSizeKeepsFirstAndLastLayerAlone) {
  EXPECT_EQ(format_lp_groups(groups_from_lp_size(8, 1)), "0/1/2/3/4/5/6/7");
  EXPECT_EQ(format_lp_groups(groups_from_lp_size(8, 2)), "0/1-2/3-4/5-6/7");
  EXPECT_EQ(format_lp_groups(groups_from_lp_size(8, 3)), "0/1-3/4-6/7");
  EXPECT_EQ(format_lp_groups(groups_from_lp_size(8, 4)), "0/1-4/5-6/7");
  EXPECT_EQ(format_lp_groups(groups_from_lp_size(8, 9)), "0/1-6/7");
  EXPECT_EQ(format_lp_groups(groups_from_lp_size(2, 4)), "0/1");
  EXPECT_EQ(format_lp_groups(groups_from_lp_size(1, 2)), "0");
  EXPECT_EQ(widest_group(groups_from_lp_size(8, 4)), 4);
  EXPECT_THROW(groups_from_lp_size(8, 0), Error);
}

TEST(LayerGroups, ParsesExplicitGroupsAndRejectsBadOnes) {
  const std::vector<LayerGroup> g = parse_lp_groups("0/1-3/4-6/7", 8);
  ASSERT_EQ(g.size(), 4u);
  EXPECT_EQ(g[1], (LayerGroup{1, 4}));
  EXPECT_EQ(format_lp_groups(g), "0/1-3/4-6/7");
  EXPECT_EQ(format_lp_groups(parse_lp_groups("0-1", 2)), "0-1");
  for (const char* bad :
       {"", "0/2-7", "0/1-3/3-7", "0/1-8", "0/1-3", "0//1-7", "0/x-7", "0/3-1/4-7", "0/1-7/"})
    EXPECT_THROW(parse_lp_groups(bad, 8), Error) << bad;
  EXPECT_EQ(parse_calibration("mismatch"), Calibration::kMismatch);
  EXPECT_THROW(parse_calibration("sometimes"), Error);
}

// Fuzzy drafting with groups of one layer is the exact drafter: same logits
// and same KV rows, bit for bit, for a prefill, a chain and a tree level.
TEST(LayerParallelDrafter, SingleLayerGroupsEqualTheExactDrafter) {
  TempDir dir;
  const auto model = four_layer_model(dir);
  Worker worker(1);
  ModelDrafter exact(model, worker);
  // never: every forward takes the fuzzy path (fuzzy_forward with groups of one).
  LayerParallelDrafter fuzzy(model, worker, groups_from_lp_size(4, 1), Calibration::kNever);
  exact.begin(128);
  fuzzy.begin(128);
  const std::vector<int32_t> prompt = tokens(9, 1);
  auto same = [&](const Batch& b) {
    const std::vector<float> a = exact.propose(b), f = fuzzy.propose(b);
    return a.size() == f.size() && bitwise_equal(a.data(), f.data(), a.size());
  };
  EXPECT_TRUE(same(chain_batch(0, prompt, true)));
  exact.accept_chain(9);
  fuzzy.accept_chain(9);
  Batch next;
  next.add(17, 9, -1, true);
  next.add(18, 10, 0, true);
  next.add(19, 10, 0, true);  // a sibling: a tree level
  EXPECT_TRUE(same(next));
  EXPECT_FALSE(fuzzy.spec_fuzzy(0));  // groups of one layer: exact rows
  const std::vector<int32_t> path = {0, 2};
  exact.accept(path, {});
  fuzzy.accept(path, {});
  EXPECT_EQ(fuzzy.n_seen(), 11);  // never: nothing dropped
  std::vector<int32_t> full = prompt;
  full.push_back(17);
  full.push_back(19);
  EXPECT_TRUE(same_committed_rows(fuzzy.kv(), exact_cache(*model, worker, full), 4, 11));
}

// Calibration (every): after a verification the fuzzy rows are dropped, the
// next catch-up rewrites them layer-sequentially, and the drafter's KV is
// then the layer-sequential drafter's, bit for bit. Without calibration the
// fuzzy rows differ (so the comparison can fail).
TEST(LayerParallelDrafter, CalibrationRestoresExactKv) {
  TempDir dir;
  const auto model = four_layer_model(dir);
  Worker worker(1);
  const std::vector<LayerGroup> groups = parse_lp_groups("0/1-2/3", 4);
  LayerParallelDrafter every(model, worker, groups, Calibration::kEvery);
  LayerParallelDrafter never(model, worker, groups, Calibration::kNever);
  std::vector<int32_t> seq = tokens(12, 2);
  for (LayerParallelDrafter* d : {&every, &never}) {
    d->begin(128);
    d->propose(chain_batch(0, std::span<const int32_t>(seq).first(11), false));
    d->accept_chain(11);
  }
  // Prefill is exact under calibration (and fuzzy without it).
  EXPECT_FALSE(every.committed_fuzzy(10));
  EXPECT_TRUE(never.committed_fuzzy(10));
  // A round: catch-up of the last token, then three fuzzy drafts; the target
  // accepts two of them and adds a bonus token.
  const std::vector<int32_t> drafts = {40, 41, 42};
  for (LayerParallelDrafter* d : {&every, &never}) {
    int32_t n_tail = 0;
    d->catch_up(seq, &n_tail);
    ASSERT_EQ(n_tail, 1);
    for (int i = 0; i < 3; ++i) {
      Batch b;
      b.add(drafts[i], 12 + i, i, true);
      d->propose(b);
    }
    d->note_mismatch(true);
    d->accept_chain(3);  // the caught-up token and two drafts
  }
  seq.push_back(40);
  seq.push_back(41);
  // every: the two fuzzy rows were dropped; never: they stay, and differ.
  EXPECT_EQ(every.n_seen(), 12);
  EXPECT_EQ(never.n_seen(), 14);
  EXPECT_TRUE(never.committed_fuzzy(12));
  const KvCache reference = exact_cache(*model, worker, seq);
  EXPECT_FALSE(same_committed_rows(never.kv(), reference, 4, 14));
  // The next round's first forward: accepted drafts + the bonus token, exact.
  seq.push_back(7);  // the bonus token
  int32_t n_tail = 0;
  every.catch_up(seq, &n_tail);
  EXPECT_EQ(n_tail, 3);
  every.accept_chain(2);  // the two accepted drafts, now exact (the bonus stays cur)
  EXPECT_EQ(every.n_seen(), 14);
  EXPECT_FALSE(every.committed_fuzzy(12));
  EXPECT_FALSE(every.committed_fuzzy(13));
  EXPECT_TRUE(same_committed_rows(every.kv(), reference, 4, 14));
  const LayerParallelCounts counts = every.take_counts();
  EXPECT_EQ(counts.calibrations, 1);
  EXPECT_EQ(counts.dropped_rows, 2);
}

TEST(LayerParallelDrafter, MismatchPolicyCalibratesOnlyAfterARejection) {
  TempDir dir;
  const auto model = four_layer_model(dir);
  Worker worker(1);
  LayerParallelDrafter d(model, worker, parse_lp_groups("0-3", 4), Calibration::kMismatch);
  d.begin(128);
  const std::vector<int32_t> seq = tokens(6, 3);
  d.propose(chain_batch(0, std::span<const int32_t>(seq).first(5), false));
  d.accept_chain(5);
  Batch b;
  b.add(seq[5], 5, -1, true);
  b.add(9, 6, 0, true);
  d.propose(b);  // extends the prefix while it is exact: runs exactly
  EXPECT_FALSE(d.spec_fuzzy(0));
  Batch c;
  c.add(10, 7, 1, true);
  d.propose(c);
  EXPECT_TRUE(d.spec_fuzzy(2));
  d.note_mismatch(false);
  d.accept_chain(3);
  EXPECT_EQ(d.n_seen(), 8);  // all accepted: the fuzzy row stays
  EXPECT_TRUE(d.committed_fuzzy(7));
  Batch e;
  e.add(11, 8, -1, true);
  d.propose(e);  // the prefix holds a fuzzy row: no exact forward
  EXPECT_TRUE(d.spec_fuzzy(0));
  d.note_mismatch(true);
  d.accept_chain(1);
  EXPECT_EQ(d.n_seen(), 7);  // rolled back to the first fuzzy row
}

// Bad options are errors that name the flag when the strategy is made.
TEST(EasySpecStrategy, RejectsBadOptionsWithClearErrors) {
  TempDir dir;
  const auto pair = make_model_pair(dir, "llama", DType::F32, DType::F32, 300, 2);
  Worker worker(1);
  auto message = [&](const char* key, OptionValue value) {
    StrategyConfig c;
    c.name = "easyspec";
    c.target = pair.target;
    c.draft = pair.draft;
    c.target_worker = &worker;
    c.options[key] = value;
    try {
      make_strategy(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("calibrate", std::string("often")).find("--calibrate"), std::string::npos);
  EXPECT_NE(message("lp_groups", std::string("0/2")).find("--lp-groups"), std::string::npos);
  EXPECT_NE(message("lp_size", 0).find("--lp-size"), std::string::npos);
  EXPECT_EQ(message("lp_groups", std::string("0-1")), "no error");
}

}  // namespace
}  // namespace parspec
