// parspec tune: measures the cost model's inputs for a target and a draft
// model on this machine (or reads them from the tuning cache), prints the
// predicted tokens/s of every candidate beside measured tokens/s of the best
// ones and ar, and the choice `--strategy auto` makes, with its reason.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "core/error.h"
#include "core/worker.h"
#include "decode/cost_model.h"
#include "decode/strategies.h"
#include "decode/tuning.h"
#include "model/model.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace parspec {

namespace {

struct TuneArgs {
  std::string model_path, draft_path, cache_dir;
  int n_threads = 1, threads_draft = 0, measure = 3, n_predict = 64;
  bool retune = false;
};

bool parse_tune_args(int argc, char** argv, TuneArgs& a) {
  a.n_threads = available_cores();
  ArgParser args("tune",
                 "Measure, on this machine, the target's forward latency per batch size, the "
                 "draft's cost per token and the acceptance of its drafts on a few calibration "
                 "prompts; predict tokens/s of ar, sd (γ 1..8) and pearl (window 1..8), run the "
                 "best predicted ones and ar for real, and print the choice of --strategy auto. "
                 "Measurements are cached per model files, CPU and threads.");
  args.option("-m,--model", &a.model_path, "FILE", "target model (GGUF)");
  args.option("-md,--model-draft", &a.draft_path, "FILE", "draft model (GGUF)");
  args.option("-t,--threads", &a.n_threads, "N", "threads of the target model");
  args.option("-td,--threads-draft", &a.threads_draft, "N",
              "threads of the draft model's own worker; 0 = share the target's worker");
  args.option("--measure", &a.measure, "K",
              "run the K best predicted candidates (and ar) for real; 0 = predictions only");
  args.option("-n,--n-predict", &a.n_predict, "N",
              "tokens per calibration prompt in the real runs");
  args.option("--cache-dir", &a.cache_dir, "DIR",
              "tuning cache directory (default: $PARSPEC_CACHE_DIR, else "
              "$XDG_CACHE_HOME/parspec, else ~/.cache/parspec)");
  args.flag("--retune", &a.retune, "measure again even when the cache has an entry");
  if (!args.parse(argc, argv)) return false;
  check(!a.model_path.empty(), "no target model given (-m FILE)");
  check(!a.draft_path.empty(), "no draft model given (-md FILE)");
  check(a.n_threads >= 1, "-t must be at least 1");
  check(a.threads_draft >= 0, "-td must not be negative");
  check(a.measure >= 0, "--measure must not be negative");
  check(a.n_predict >= 1, "-n must be at least 1");
  return true;
}

void print_measurements(const Tuning& t, const TuneArgs& a) {
  const CostMeasurements& m = t.measurements;
  std::printf("target: %s\ndraft:  %s\nthreads: -t %d -td %d\n", a.model_path.c_str(),
              a.draft_path.c_str(), a.n_threads, a.threads_draft);
  std::printf("measurements (%s: %s)\n", t.from_cache ? "from the cache" : "measured now",
              t.cache_file.c_str());
  std::printf("  target forward L(n), ms:");
  for (size_t n = 0; n < m.target_ms.size(); ++n) std::printf(" %zu:%.2f", n + 1, m.target_ms[n]);
  std::printf("\n  draft forward, ms per token: %.3f\n", m.draft_ms);
  std::printf("  overhead of real generation, ms: %.3f per target step, %.3f per draft token\n",
              m.target_overhead_ms, m.draft_overhead_ms);
  std::printf("  P(first k drafts accepted):");
  for (size_t k = 0; k < m.accept_prefix.size(); ++k)
    std::printf(" %zu:%.2f", k + 1, m.accept_prefix[k]);
  std::printf("\n  draft and target on cores of their own (pearl in parallel): %s\n",
              m.parallel ? "yes" : "no");
  std::printf("  pearl's measured speed over the formula's at the calibration window: %.2f\n",
              m.pearl_efficiency);
  if (!m.rejected.empty()) {
    std::printf("  predicted fastest but measured no faster than ar (not chosen):");
    for (const std::string& r : m.rejected) std::printf(" %s", r.c_str());
    std::printf("\n");
  }
  std::printf("  calibration: %d tokens, %.1f s\n\n", m.calibration_tokens, m.calibration_s);
}

}  // namespace

int cmd_tune(int argc, char** argv) {
  TuneArgs a;
  if (!parse_tune_args(argc, argv, a)) return 0;
  std::shared_ptr<const Model> target = Model::load(a.model_path);
  std::shared_ptr<const Model> draft = Model::load(a.draft_path);
  check(target->config().n_vocab == draft->config().n_vocab, "the draft model's vocabulary (",
        draft->config().n_vocab, " tokens) differs from the target's (", target->config().n_vocab,
        ")");
  Worker target_worker(a.n_threads);
  std::unique_ptr<Worker> draft_worker;
  if (a.threads_draft > 0) draft_worker = std::make_unique<Worker>(a.threads_draft);
  StrategyConfig base;
  base.target = target;
  base.draft = draft;
  base.target_worker = &target_worker;
  base.draft_worker = draft_worker ? draft_worker.get() : &target_worker;

  TuneOptions options;
  options.cache_dir = a.cache_dir;
  options.retune = a.retune;
  options.calibration.progress = [](const std::string& s) {
    std::fprintf(stderr, "%s\n", s.c_str());
  };
  const Tuning t = tune(base, options);
  print_measurements(t, a);

  const std::vector<Prediction> ranked = rank_candidates(t.measurements);
  // Measured: the K best predicted, the choice and ar.
  std::vector<Candidate> to_measure;
  const auto add = [&](const Candidate& c) {
    for (const Candidate& have : to_measure)
      if (have.label() == c.label()) return;
    to_measure.push_back(c);
  };
  if (a.measure > 0) {
    add({"ar", 0});
    add(t.choice.chosen);
    for (int i = 0; i < a.measure && i < static_cast<int>(ranked.size()); ++i)
      add(ranked[i].candidate);
  }
  std::vector<double> measured;
  const auto prompts = calibration_prompts(*target);
  if (!to_measure.empty()) {
    std::fprintf(stderr, "tune: running %zu candidates on the calibration prompts\n",
                 to_measure.size());
    measured = measure_candidates(base, to_measure, prompts, a.n_predict);
  }

  std::printf("%-10s %12s %12s %10s %12s %10s\n", "candidate", "predicted", "tokens/step",
              "ms/step", "measured", "meas/pred");
  for (const Prediction& p : ranked) {
    std::printf("%-10s %12.1f %12.2f %10.2f", p.candidate.label().c_str(), p.tok_per_s,
                p.tokens_per_step, p.ms_per_step);
    const auto found = std::find_if(to_measure.begin(), to_measure.end(), [&](const Candidate& c) {
      return c.label() == p.candidate.label();
    });
    if (found != to_measure.end()) {
      const double tps = measured[found - to_measure.begin()];
      std::printf(" %12.1f %10.2f", tps, p.tok_per_s > 0 ? tps / p.tok_per_s : 0.0);
    }
    std::printf("\n");
  }
  std::printf("(tok/s; measured: greedy, %zu calibration prompts x %d tokens, interleaved)\n\n",
              prompts.size(), a.n_predict);
  std::printf("choice: %s\nreason: %s\n", t.choice.chosen.label().c_str(), t.choice.reason.c_str());
  return 0;
}

}  // namespace parspec
