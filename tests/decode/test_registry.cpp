// The strategy registry (names, options, factories, bench variants), the
// accounting call every strategy uses, and the local Target and Drafter
// against the model they wrap.
#include <gtest/gtest.h>

#include <set>

#include "bench/runner.h"
#include "core/error.h"
#include "decode/local_model.h"
#include "decode/registry.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::bitwise_equal;
using testing_support::make_model_pair;
using testing_support::ModelPair;
using testing_support::TempDir;

TEST(StrategyRegistry, ListsTheStrategiesInBenchmarkOrder) {
  EXPECT_EQ(strategy_names(),
            (std::vector<std::string>{"ar", "sd", "tree", "dyntree", "pearl", "easyspec", "auto",
                                      "ppd", "pp", "stpp", "pipedec", "specinfer", "cosine"}));
  EXPECT_EQ(strategy_list(),
            "ar, sd, tree, dyntree, pearl, easyspec, auto, ppd, pp, stpp, pipedec, specinfer, "
            "cosine");
  for (const StrategyInfo& info : strategy_registry()) {
    // auto without a draft model is ar; ppd's guesses come from the target
    // itself; pp is ar on a pipeline.
    EXPECT_EQ(info.needs_draft,
              info.name != "ar" && info.name != "auto" && info.name != "ppd" && info.name != "pp")
        << info.name;
    EXPECT_FALSE(info.summary.empty()) << info.name;
    EXPECT_TRUE(info.make != nullptr) << info.name;
  }
  try {
    strategy_info("medusa");
    FAIL() << "an unknown name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown strategy 'medusa' (known: ar, sd"),
              std::string::npos)
        << e.what();
  }
}

TEST(StrategyRegistry, AFlagSharedByStrategiesMeansTheSameOption) {
  std::map<std::string, const StrategyOption*> by_flag;
  std::set<std::string> keys;
  const StrategyConfig defaults;
  for (const StrategyInfo& info : strategy_registry()) {
    bool variant_found = info.variant_key.empty();
    for (const StrategyOption& o : info.options) {
      ASSERT_EQ(o.flag.rfind("--", 0), 0u) << o.flag;
      variant_found |= o.json_key == info.variant_key;
      auto [it, fresh] = by_flag.emplace(o.flag, &o);
      if (!fresh) {
        EXPECT_EQ(it->second->json_key, o.json_key) << o.flag;
        EXPECT_EQ(it->second->value_name, o.value_name) << o.flag;
        EXPECT_EQ(it->second->get(defaults), o.get(defaults)) << o.flag;
      } else {
        EXPECT_TRUE(keys.insert(o.json_key).second) << "two flags with JSON key " << o.json_key;
      }
      // A flag without value is a bool; one with a value is not.
      EXPECT_EQ(o.value_name.empty(), std::holds_alternative<bool>(o.get(defaults))) << o.flag;
    }
    EXPECT_TRUE(variant_found) << info.name << " names a variant option it does not have";
  }
  EXPECT_TRUE(by_flag.count("--pearl-window"));
  EXPECT_TRUE(by_flag.count("--draft-max"));
}

TEST(StrategyRegistry, OptionsWriteTheConfigTheStrategyReads) {
  const auto& pearl = strategy_info("pearl").options;
  StrategyConfig c;
  for (const StrategyOption& o : pearl) {
    if (o.flag == "--pearl-window") o.set(c, 5);
    if (o.flag == "--no-post-verify") o.set(c, true);
  }
  EXPECT_EQ(c.pearl_window, 5);
  EXPECT_FALSE(c.post_verify);
  EXPECT_TRUE(c.pre_verify);
  EXPECT_EQ(c.draft_max, StrategyConfig().draft_max);  // --draft-max is sd's alone

  // A later strategy's own option lives in StrategyConfig::options.
  const StrategyOption groups = option_entry("--layer-groups", "layer_groups", "G", "groups", 2);
  StrategyConfig d;
  EXPECT_EQ(option_value<int>(d, groups), 2);
  groups.set(d, 3);
  EXPECT_EQ(option_value<int>(d, groups), 3);
  EXPECT_EQ(std::get<int>(d.options.at("layer_groups")), 3);
}

TEST(StrategyRegistry, BenchEntriesTakeVariantsOnlyWhereAStrategyNamesOne) {
  EXPECT_EQ(parse_strategy_entry("sd:3"), (std::pair<std::string, int>("sd", 3)));
  EXPECT_EQ(parse_strategy_entry("pearl:2"), (std::pair<std::string, int>("pearl", 2)));
  EXPECT_EQ(parse_strategy_entry("tree"), (std::pair<std::string, int>("tree", 0)));
  for (const char* bad : {"tree:2", "sd:0", "sd:x", "sd:", "ar:1"})
    EXPECT_THROW(parse_strategy_entry(bad), Error) << bad;
  EXPECT_THROW(parse_strategy_entry("medusa"), Error);
  // Tree shapes: letters for the depth, branching and width options a strategy has.
  EXPECT_EQ(parse_strategy_entry("dyntree:d3c2w4"), (std::pair<std::string, int>("dyntree", 0)));
  for (const char* bad :
       {"tree:w2", "tree:d0", "tree:d2d3", "tree:dc2", "sd:d2", "tree:d2x", "dyntree:d1234"})
    EXPECT_THROW(parse_strategy_entry(bad), Error) << bad;
}

TEST(StrategyRegistry, SpecsSetTheirOptions) {
  StrategyConfig c;
  apply_strategy_spec(parse_strategy_spec("dyntree:d3c2w5"), c);
  EXPECT_EQ(c.name, "dyntree");
  EXPECT_EQ(c.tree_depth, 3);
  EXPECT_EQ(c.tree_branch, 2);
  EXPECT_EQ(c.tree_width, 5);
  apply_strategy_spec(parse_strategy_spec("sd:3"), c);
  EXPECT_EQ(c.name, "sd");
  EXPECT_EQ(c.draft_max, 3);
  apply_strategy_spec(parse_strategy_spec("tree:c3d1"), c);
  EXPECT_EQ(c.name, "tree");
  EXPECT_EQ(c.tree_depth, 1);
  EXPECT_EQ(c.tree_branch, 3);
}

TEST(Accounting, ObserveStepCountsProposalsAndPositions) {
  GenerationStats st;
  st.observe_step(4, 2);     // a chain: positions 0..3 tried, 0 and 1 accepted
  st.observe_step(7, 1, 2);  // a tree: 7 checked nodes, depth 1 accepted, rejected below
  st.observe_step(3, 3, 3);  // a tree path accepted to its end, nothing below it checked
  EXPECT_EQ(st.drafted, 14);
  EXPECT_EQ(st.accepted, 6);
  EXPECT_EQ(st.per_position.proposed, (std::vector<int64_t>{3, 3, 2, 1}));
  EXPECT_EQ(st.per_position.accepted, (std::vector<int64_t>{3, 2, 1, 0}));
}

// LocalTarget and ModelDrafter give the model's own logits, and commit,
// keep and roll back cells as the cache does.
TEST(LocalSides, FollowTheModelTheyWrap) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::Q8_0, 300, 3);
  Worker worker(1);
  const int n_vocab = pair.target->config().n_vocab;
  const std::vector<int32_t> prompt = {256, 10, 20, 30};

  LocalTarget target(pair.target, worker);
  target.begin(64);
  const std::vector<float> head = target.forward(chain_batch(0, prompt, true));
  target.commit_chain(4);
  EXPECT_EQ(target.n_committed(), 4);
  EXPECT_EQ(target.take_meter().forwards, 1);

  KvCache kv(pair.target->config(), 64);
  const std::vector<float> expected =
      pair.target->forward(worker, Batch::chain(kv, prompt, true), kv);
  ASSERT_EQ(head.size(), expected.size());
  EXPECT_TRUE(bitwise_equal(head.data(), expected.data(), head.size()));

  // Two branches from the committed end; keep the second's cell past a commit
  // of the first, then roll back.
  Batch tree;
  tree.add(40, 4, -1, true);
  tree.add(41, 4, -1, true);
  const int64_t ticket = target.submit(tree);
  const std::vector<float> rows = target.collect(ticket);
  EXPECT_EQ(rows.size(), 2u * n_vocab);
  EXPECT_THROW(target.collect(ticket), Error);
  target.commit(std::vector<int32_t>{0}, {});
  EXPECT_EQ(target.n_committed(), 5);
  EXPECT_EQ(target.n_spec(), 0);
  target.truncate(4);
  EXPECT_EQ(target.n_committed(), 4);

  ModelDrafter drafter(pair.draft, worker);
  drafter.begin(64);
  int32_t n_cells = 0;
  const std::vector<float> after = drafter.catch_up(prompt, &n_cells);
  EXPECT_EQ(n_cells, 4);
  EXPECT_EQ(after.size(), static_cast<size_t>(n_vocab));
  drafter.accept_chain(n_cells);
  EXPECT_EQ(drafter.n_seen(), 4);
  EXPECT_THROW(drafter.catch_up(prompt, &n_cells), Error);  // nothing new to see
  drafter.roll_back(2);
  EXPECT_EQ(drafter.n_seen(), 2);
  drafter.roll_back(3);  // rolling back past what it has seen changes nothing
  EXPECT_EQ(drafter.n_seen(), 2);
  // Catching up again gives the same logits after the prompt.
  const std::vector<float> again = drafter.catch_up(prompt, &n_cells);
  EXPECT_EQ(n_cells, 2);
  EXPECT_TRUE(bitwise_equal(again.data(), after.data(), after.size()));
}

}  // namespace
}  // namespace parspec
