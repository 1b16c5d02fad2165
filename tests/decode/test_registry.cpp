// The strategy registry (names, options, factories, bench variants), the
// accounting call every strategy uses, and the local Target and Drafter
// against the model they wrap.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

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
  // The built-in strategies in this order; one added later may stand anywhere.
  const std::vector<std::string> built_in = {"ar",       "sd",        "tree",  "dyntree", "pearl",
                                             "easyspec", "auto",      "ppd",   "pp",      "stpp",
                                             "pipedec",  "specinfer", "cosine"};
  std::vector<std::string> listed;
  for (const std::string& name : strategy_names())
    if (std::find(built_in.begin(), built_in.end(), name) != built_in.end()) listed.push_back(name);
  EXPECT_EQ(listed, built_in);
  EXPECT_EQ(std::set<std::string>(strategy_names().begin(), strategy_names().end()).size(),
            strategy_names().size());
  EXPECT_EQ(strategy_list().rfind("ar, sd, tree, dyntree, pearl, easyspec, auto, ppd, pp, ", 0),
            0u);
  for (const StrategyInfo& info : strategy_registry()) {
    EXPECT_FALSE(info.summary.empty()) << info.name;
    EXPECT_TRUE(info.make != nullptr) << info.name;
  }
  // auto without a draft model is ar; ppd's guesses come from the target
  // itself; pp is ar on a pipeline.
  for (const std::string& name : built_in)
    EXPECT_EQ(strategy_info(name).needs_draft,
              name != "ar" && name != "auto" && name != "ppd" && name != "pp")
        << name;
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
  // PEARL's options are its own: kept by JSON key, unset ones at their defaults.
  EXPECT_EQ(std::get<int>(c.options.at("pearl_window")), 5);
  EXPECT_TRUE(std::get<bool>(c.options.at("no_post_verify")));
  EXPECT_EQ(c.options.count("no_pre_verify"), 0u);
  EXPECT_EQ(c.draft_max, StrategyConfig().draft_max);  // --draft-max is not pearl's

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

TEST(StrategyRegistry, EveryRoleBelongsToOneStrategy) {
  for (const StrategyRole role :
       {StrategyRole::reference, StrategyRole::generate_plain, StrategyRole::generate_drafted,
        StrategyRole::generate_pipeline_plain, StrategyRole::generate_pipeline_drafted,
        StrategyRole::serve_plain, StrategyRole::serve_drafted}) {
    int holders = 0;
    for (const StrategyInfo& info : strategy_registry()) holders += info.has_role(role);
    EXPECT_EQ(holders, 1) << static_cast<int>(role);
    // A default without a draft model needs none.
    if (role == StrategyRole::generate_plain || role == StrategyRole::generate_pipeline_plain ||
        role == StrategyRole::serve_plain || role == StrategyRole::reference) {
      EXPECT_FALSE(strategy_for(role).needs_draft) << strategy_for(role).name;
    }
  }
  EXPECT_EQ(reference_strategy_name(), "ar");
  EXPECT_EQ(strategy_for(StrategyRole::generate_drafted).name, "auto");
  EXPECT_EQ(strategy_for(StrategyRole::generate_pipeline_plain).name, "pp");
  EXPECT_EQ(strategy_for(StrategyRole::generate_pipeline_drafted).name, "pipedec");
  EXPECT_EQ(strategy_for(StrategyRole::serve_drafted).name, "sd");
  EXPECT_TRUE(strategy_for(StrategyRole::serve_plain).served);
  EXPECT_TRUE(strategy_for(StrategyRole::serve_drafted).served);
}

TEST(StrategyRegistry, FactsTheToolsAndTheRuntimeAsk) {
  const auto with = [](const std::vector<std::string>& names, bool (*fact)(const StrategyInfo&)) {
    for (const char* name : {"ar", "sd", "tree", "dyntree", "pearl", "easyspec", "auto", "ppd",
                             "pp", "stpp", "pipedec", "specinfer", "cosine"}) {
      const bool expected = std::find(names.begin(), names.end(), name) != names.end();
      EXPECT_EQ(fact(strategy_info(name)), expected) << name;
    }
  };
  with({"ar", "sd", "tree", "dyntree", "specinfer", "cosine"},
       [](const StrategyInfo& i) { return i.served; });
  with({"specinfer", "cosine"}, [](const StrategyInfo& i) { return i.takes_drafter_pool; });
  with({"cosine"}, [](const StrategyInfo& i) { return i.uses_request_scheduler; });
  with({"auto"}, [](const StrategyInfo& i) { return !i.mpirun_refusal.empty(); });
  with({"easyspec"}, [](const StrategyInfo& i) { return i.drafts_on_ranks; });
  with({"ar", "sd", "tree", "dyntree", "pearl"},
       [](const StrategyInfo& i) { return i.cost != nullptr; });
  EXPECT_EQ(strategy_names_where([](const StrategyInfo& i) { return i.takes_drafter_pool; }),
            "specinfer and cosine");
  for (const StrategyInfo& info : strategy_registry()) {
    // The request scheduler is the server's: only a served strategy uses it.
    if (info.uses_request_scheduler) {
      EXPECT_TRUE(info.served) << info.name;
    }
    if (info.takes_drafter_pool) {
      EXPECT_TRUE(info.needs_draft) << info.name;
    }
  }
}

// The string literals of C++ source text that equal one of `names`, as
// "LINE: \"literal\"" (comments, character literals and raw strings skipped).
std::vector<std::string> name_literals(const std::string& text,
                                       const std::vector<std::string>& names) {
  std::vector<std::string> found;
  int line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '\n') {
      ++line;
    } else if (text.compare(i, 2, "//") == 0) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (text.compare(i, 2, "/*") == 0) {
      const size_t end = text.find("*/", i + 2);
      const size_t stop = end == std::string::npos ? text.size() : end + 1;
      for (; i < stop; ++i) line += text[i] == '\n';
    } else if (ch == 'R' && text.compare(i + 1, 1, "\"") == 0) {
      const size_t open = text.find('(', i);
      const std::string close = ")" + text.substr(i + 2, open - i - 2) + "\"";
      const size_t end = text.find(close, open);
      const size_t stop = end == std::string::npos ? text.size() : end + close.size() - 1;
      for (; i < stop; ++i) line += text[i] == '\n';
    } else if (ch == '\'' || ch == '"') {
      std::string literal;
      for (++i; i < text.size() && text[i] != ch && text[i] != '\n'; ++i) {
        if (text[i] == '\\') literal += text[i++];
        literal += text[i];
      }
      if (ch == '"' && std::find(names.begin(), names.end(), literal) != names.end())
        found.push_back(std::to_string(line) + ": \"" + literal + "\"");
    }
  }
  return found;
}

TEST(StrategyRegistry, TheLiteralScanFindsNamesInCodeOnly) {
  const std::vector<std::string> names = {"ar", "sd"};
  EXPECT_EQ(
      name_literals("if (name == \"sd\") {}  // not \"ar\"\n/* \"ar\"\n */ x = \"ar\";\n", names),
      (std::vector<std::string>{"1: \"sd\"", "3: \"ar\""}));
  EXPECT_TRUE(name_literals("f(\"sd:3\", 'a', \"--ar\", R\"(\"sd\")\");", names).empty());
  EXPECT_EQ(name_literals("s = \"a\\\"\"; t = \"sd\";", names),
            (std::vector<std::string>{"1: \"sd\""}));
}

// Strategies decide for themselves: the tools, the server, the MPI runtime and
// the cost model ask the registry (its roles, facts and cost families)
// instead of naming a strategy.
TEST(StrategyRegistry, NoStrategyIsNamedOutsideTheStrategies) {
  std::vector<std::string> found;
  size_t files = 0;
  for (const char* folder : {"src/tools", "src/serve", "src/mpi", "src/tuning"}) {
    const std::filesystem::path root = std::filesystem::path(PARSPEC_SOURCE_DIR) / folder;
    ASSERT_TRUE(std::filesystem::is_directory(root)) << root;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
      ++files;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      for (const std::string& hit : name_literals(text.str(), strategy_names()))
        found.push_back(std::filesystem::relative(entry.path(), PARSPEC_SOURCE_DIR).string() + ":" +
                        hit);
    }
  }
  EXPECT_GT(files, 10u);
  std::string report;
  for (const std::string& f : found) report += "\n  " + f;
  EXPECT_TRUE(found.empty()) << "strategy names outside src/strategies:" << report;
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
