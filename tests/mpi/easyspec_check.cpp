// Exactness of `easyspec` with its drafter slots on MPI ranks, run by ctest as
//   mpirun --oversubscribe -np 2 dist_easyspec_check SOURCE_DIR [--sampling]
// Rank 0 holds the zoo target (models/target.gguf) and the deep zoo drafter
// (models/draft-deep.gguf, 8 layers); rank 1 runs slot 1 of every fuzzy layer
// group (mpi/group_ranks.h). Greedy: for several prompts and group/
// calibration settings, the tokens equal local `ar`, and tokens and accepted
// drafts equal `easyspec` on threads with the same groups (the same fuzzy
// arithmetic). With --sampling: the two-sample chi-square of
// tests/strategies/test_strategies.cpp against `ar` over seeded runs. Exit code 0
// when everything matches.
#include <cstdio>
#include <map>
#include <string>

#include "core/error.h"
#include "decode/registry.h"
#include "mpi/group_ranks.h"
#include "mpi/pipeline.h"
#include "sampling_check.h"
#include "strategies/easyspec/layer_parallel.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::chi_square_rejections;
using testing_support::PositionHistograms;
using testing_support::sampled_histograms;
using testing_support::untruncated_sampling;

struct Setting {
  std::string label;
  std::map<std::string, OptionValue> options;
  int draft_max = 4, tree_depth = 3, tree_width = 3;
};

std::vector<Setting> settings() {
  return {
      {"--lp-size 2 --calibrate every", {{"lp_size", 2}, {"calibrate", std::string("every")}}},
      {"--lp-groups 0/1-3/4-6/7 --calibrate never",
       {{"lp_groups", std::string("0/1-3/4-6/7")}, {"calibrate", std::string("never")}}},
      {"--lp-size 3 --calibrate mismatch",
       {{"lp_size", 3}, {"calibrate", std::string("mismatch")}},
       3},
      {"--lp-groups 0/1-6/7 --calibrate every --lp-tree",
       {{"lp_groups", std::string("0/1-6/7")}, {"lp_tree", true}}},
  };
}

StrategyConfig config_of(const Setting& s, const StrategyConfig& base) {
  StrategyConfig c = base;
  c.name = "easyspec";
  c.options = s.options;
  c.draft_max = s.draft_max;
  c.tree_depth = s.tree_depth;
  c.tree_width = s.tree_width;
  return c;
}

PositionHistograms histograms(Strategy& strategy, int runs, const SamplingParams& params) {
  return sampled_histograms(strategy, runs, params, {1, 450, 1123, 263});
}

// Whether the strategy's groups ran on the slots (its note names the ranks).
bool on_slots(const Strategy& s) {
  for (const std::string& note : s.notes())
    if (note.find("MPI ranks 0-1") != std::string::npos) return true;
  return false;
}

int run(const std::string& source, bool sampling) {
  Worker worker(1);
  StrategyConfig base;
  base.target = Model::load(source + "/models/target.gguf");
  base.draft = Model::load(source + "/models/draft-deep.gguf");
  base.target_worker = &worker;
  base.draft_worker = &worker;
  base.ctx_size = 256;
  mpi::SlotOptions options;
  const auto slots = mpi::draft_slot_executors(options);
  check(slots != nullptr, "run me under mpirun with at least 2 ranks");
  const int n_vocab = base.target->config().n_vocab;

  base.name = "ar";
  auto ar = make_strategy(base);
  int failures = 0;
  int64_t accepted = 0, drafted = 0;
  for (const Setting& s : settings()) {
    StrategyConfig local = config_of(s, base);
    StrategyConfig mpi = local;
    mpi.make_group_executor = slots;
    auto threads = make_strategy(local);
    auto ranks = make_strategy(mpi);
    if (!on_slots(*ranks)) {
      std::fprintf(stderr, "FAIL: %s did not run on the MPI slots\n", s.label.c_str());
      ++failures;
    }
    for (int p = 0; p < 4; ++p) {
      GenerationRequest req;
      req.prompt = {1};
      for (int j = 0; j <= 2 + p; ++j) req.prompt.push_back((p * 311 + j * 173 + 29) % n_vocab);
      req.n_predict = 40;
      req.sampling.temp = 0;
      const std::vector<int32_t> expected = ar->generate(req).tokens;
      const GenerationResult a = threads->generate(req), b = ranks->generate(req);
      accepted += b.stats.accepted;
      drafted += b.stats.drafted;
      if (b.tokens != expected) {
        std::fprintf(stderr, "FAIL greedy: %s on prompt %d differs from ar\n", s.label.c_str(), p);
        ++failures;
      }
      if (b.tokens != a.tokens || b.stats.accepted != a.stats.accepted) {
        std::fprintf(stderr, "FAIL: %s on prompt %d: %lld accepted on 2 ranks, %lld on threads\n",
                     s.label.c_str(), p, static_cast<long long>(b.stats.accepted),
                     static_cast<long long>(a.stats.accepted));
        ++failures;
      }
    }
  }
  if (accepted == 0 || accepted == drafted) {
    std::fprintf(stderr, "FAIL: %lld of %lld drafts accepted: not a meaningful test\n",
                 static_cast<long long>(accepted), static_cast<long long>(drafted));
    ++failures;
  }
  std::fprintf(stderr, "greedy: %d failures (%lld of %lld drafts accepted)\n", failures,
               static_cast<long long>(accepted), static_cast<long long>(drafted));

  if (sampling) {
    const SamplingParams params = untruncated_sampling(1.5f);
    constexpr int kRuns = 1500;
    const auto reference = histograms(*ar, kRuns, params);
    for (const Setting& s : {settings()[0], settings()[1]}) {
      StrategyConfig c = config_of(s, base);
      c.make_group_executor = slots;
      auto strategy = make_strategy(c);
      const auto got = histograms(*strategy, kRuns, params);
      failures += chi_square_rejections(got, reference, s.label);
    }
  }
  std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace parspec

int main(int argc, char** argv) {
  if (parspec::mpi::start_session(&argc, &argv) && parspec::mpi::session_rank() > 0)
    return parspec::mpi::serve_stage();
  int code = 1;
  try {
    if (argc < 2) parspec::fail("usage: dist_easyspec_check SOURCE_DIR [--sampling]");
    code = parspec::run(argv[1], argc > 2 && std::string(argv[2]) == "--sampling");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
  }
  parspec::mpi::end_session(code);
  return code;
}
