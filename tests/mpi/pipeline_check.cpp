// Exactness of the strategies on a real MPI pipeline, run by ctest as
//   mpirun --oversubscribe -np N dist_pipeline_check [--sampling]
// Rank 0 writes a random target/draft pair, starts the pipeline on ranks
// 1..N-1 and compares, in this process, every strategy on the pipeline with
// `ar` on a local target: greedy token ids identical over many prompts; with
// --sampling, the same two-sample chi-square as tests/strategies/test_strategies.cpp
// over seeded runs; and a forward cancelled while a stage runs it. Exit code
// 0 when everything matches.
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "core/error.h"
#include "decode/local_model.h"
#include "decode/registry.h"
#include "mpi/pipeline.h"
#include "sampling_check.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::chi_square_rejections;
using testing_support::ModelPair;
using testing_support::PositionHistograms;
using testing_support::sampled_histograms;
using testing_support::TempDir;
using testing_support::untruncated_sampling;

std::vector<StrategyConfig> variants() {
  std::vector<StrategyConfig> v = testing_support::pipeline_strategy_variants();
  StrategyConfig c;
  c.name = "pearl";
  c.options["pearl_window"] = 3;
  v.push_back(c);
  c = StrategyConfig();
  c.name = "sd";
  c.draft_max = 4;
  v.push_back(c);
  // The pool strategies (given two drafters below): the tree of both drafters'
  // chains, and CoSine's routing (one drafter per step after the first) with fusion.
  c = StrategyConfig();
  c.name = "specinfer";
  c.draft_max = 3;
  v.push_back(c);
  c = StrategyConfig();
  c.name = "cosine";
  c.draft_max = 3;
  c.options["route"] = 1;
  v.push_back(c);
  return v;
}

PositionHistograms histograms(Strategy& strategy, int runs, const SamplingParams& params) {
  return sampled_histograms(strategy, runs, params, {256, 84, 104});
}

// A forward cancelled while a stage runs it: the stage stops it between
// layers (abandons it) and every cache stays as the head numbers it, so a
// later forward's logits equal a local target's bit for bit. The cancel goes
// out as soon as the forward queued before it is back, when the first stage
// has just started the long one; a stage not scheduled in time skips it
// instead, hence a few attempts. Returns the number of failures.
int check_cancel_mid_forward(
    const StrategyConfig& base,
    const std::function<std::unique_ptr<Target>(const StrategyConfig&)>& make_target) {
  mpi::Pipeline& pipeline = *mpi::running_pipeline();
  const auto reports = [&] {
    int64_t forwards = 0, abandoned = 0;
    for (const mpi::StageTimes& st : pipeline.stages()) {
      forwards += st.forwards;
      abandoned += st.abandoned;
    }
    return std::pair(forwards, abandoned);
  };
  const auto [forwards_before, abandoned_before] = reports();
  const std::unique_ptr<Target> remote = make_target(base);
  LocalTarget local(base.target, *base.target_worker);
  constexpr int32_t kLong = 2000;  // rows: milliseconds per layer even for this small model
  const std::vector<int32_t> prefix = {256, 10, 20, 30};
  std::vector<int32_t> long_tokens(kLong);
  for (int32_t i = 0; i < kLong; ++i) long_tokens[i] = (i * 7 + 3) % 256;
  const std::vector<int32_t> probe = {50, 60, 70};
  int failures = 0, forwards_sent = 0;
  int64_t abandoned = 0;
  // At least 20 attempts, then more for up to 30 s: on a loaded machine the
  // stage may be descheduled for the whole window again and again.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int attempt = 0;
       abandoned == 0 && (attempt < 20 || std::chrono::steady_clock::now() < give_up); ++attempt) {
    for (Target* t : {remote.get(), static_cast<Target*>(&local)}) {
      t->begin(kLong + 16);
      t->forward(chain_batch(0, prefix, false));
      t->commit_chain(static_cast<int32_t>(prefix.size()));
    }
    // Queued at the first stage in this order: short forward, truncate, long forward.
    const int64_t short_ticket = remote->submit(chain_batch(4, std::vector<int32_t>{40}, false));
    remote->truncate(4);
    const int64_t long_ticket = remote->submit(chain_batch(4, long_tokens, false));
    remote->collect(short_ticket);
    remote->cancel(long_ticket);
    remote->truncate(4);
    const Batch check = chain_batch(4, probe, true);
    if (remote->forward(check) != local.forward(check)) {
      std::fprintf(stderr, "FAIL cancel: logits after a cancelled forward differ from local\n");
      ++failures;
    }
    forwards_sent += 4;
    // Every stage reports every forward (ran, skipped or abandoned); wait for them all.
    const int64_t expected = forwards_before + forwards_sent * int64_t(pipeline.stages().size());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (reports().first < expected && std::chrono::steady_clock::now() < deadline) {
      pipeline.arrived(-1);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    abandoned = reports().second - abandoned_before;
  }
  const mpi::StageTimes& first = pipeline.stages().front();
  std::fprintf(stderr, "cancel mid-forward: %lld abandoned\n", static_cast<long long>(abandoned));
  // The first stage is the one running the long forward when the cancel
  // comes; with one layer it has no point between layers to stop at.
  if (abandoned == 0 && first.layer_last - first.layer_first > 1) {
    std::fprintf(stderr, "FAIL cancel: no stage stopped a forward cancelled while it ran\n");
    ++failures;
  }
  return failures;
}

int run(bool sampling) {
  TempDir dir;
  // make_model_pair's pair, with layers enough for three stages.
  RandomModelSpec spec;
  spec.arch = "llama";
  spec.n_vocab = 260;
  spec.n_embd = 64;
  spec.n_ff = 128;
  spec.n_layer = 4;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.seed = 3;
  spec.weight_type = DType::F32;
  ModelPair pair;
  pair.target = Model::load(testing_support::write_model(dir, "target.gguf", spec));
  spec.weight_type = DType::Q4_0;
  pair.draft = Model::load(testing_support::write_model(dir, "draft.gguf", spec));
  spec.seed = 5;  // a second drafter that agrees less with the target
  const auto other_draft = Model::load(testing_support::write_model(dir, "draft2.gguf", spec));
  Worker worker(1);
  mpi::PipelineOptions options;
  options.timeout_s = 60;
  const auto make_target = mpi::pipeline_targets(*pair.target, options, 1);
  check(make_target != nullptr, "run me under mpirun with at least 2 ranks");
  std::fprintf(stderr, "%s\n", mpi::running_pipeline()->describe().c_str());

  StrategyConfig base;
  base.target = pair.target;
  base.draft = pair.draft;
  base.target_worker = &worker;
  base.ctx_size = 96;
  base.name = "ar";
  auto ar = make_strategy(base);
  int failures = 0;
  int64_t accepted = 0, drafted = 0;
  for (int p = 0; p < 10; ++p) {
    GenerationRequest req;
    req.prompt = {256};
    for (int j = 0; j <= p % 5; ++j) req.prompt.push_back((p * 31 + j * 17 + 3) % 256);
    req.n_predict = 20;
    req.sampling.temp = 0;
    const std::vector<int32_t> expected = ar->generate(req).tokens;
    for (StrategyConfig c : variants()) {
      c.target = base.target;
      c.draft = base.draft;
      c.target_worker = &worker;
      c.ctx_size = base.ctx_size;
      c.make_target = make_target;
      if (c.name == "cosine" || c.name == "specinfer") c.drafters = {pair.draft, other_draft};
      const GenerationResult got = make_strategy(c)->generate(req);
      accepted += got.stats.accepted;
      drafted += got.stats.drafted;
      if (got.tokens != expected) {
        std::fprintf(stderr, "FAIL greedy: %s on prompt %d differs from ar\n", c.name.c_str(), p);
        ++failures;
      }
    }
  }
  if (accepted == 0 || accepted == drafted) {
    std::fprintf(stderr, "FAIL: the pair accepted %lld of %lld drafts: not a meaningful test\n",
                 static_cast<long long>(accepted), static_cast<long long>(drafted));
    ++failures;
  }
  std::fprintf(stderr, "greedy: %d failures\n", failures);
  failures += check_cancel_mid_forward(base, make_target);

  if (sampling) {
    const SamplingParams params = untruncated_sampling(1.5f);
    constexpr int kRuns = 1500;
    const auto reference = histograms(*ar, kRuns, params);
    for (StrategyConfig c : variants()) {
      if (c.name == "sd") continue;
      c.target = base.target;
      c.draft = base.draft;
      c.target_worker = &worker;
      c.ctx_size = 64;
      c.make_target = make_target;
      if (c.name == "cosine" || c.name == "specinfer") c.drafters = {pair.draft, other_draft};
      auto strategy = make_strategy(c);
      const auto got = histograms(*strategy, kRuns, params);
      failures += chi_square_rejections(got, reference, c.name);
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
    code = parspec::run(argc > 1 && std::string(argv[1]) == "--sampling");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
  }
  parspec::mpi::end_session(code);
  return code;
}
