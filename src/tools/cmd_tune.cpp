// parspec tune: measures the cost model's inputs for a target and a draft
// model on this machine (or reads them from the tuning cache), prints the
// predicted tokens/s of every candidate beside measured tokens/s of the best
// ones and ar, and the choice `--strategy auto` makes, with its reason.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "core/error.h"
#include "core/worker.h"
#include "decode/local_model.h"
#include "decode/registry.h"
#include "model/model.h"
#include "strategies/ppd/ppd_prompts.h"
#include "strategies/ppd/ppd_tree.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/device_options.h"
#include "tools/model_loading.h"
#include "tuning/cost_model.h"
#include "tuning/tuning.h"

namespace parspec {

namespace {

struct TuneArgs {
  std::string model_path, draft_path, cache_dir, ppd_path, ppd_tree_out;
  int n_threads = 1, threads_draft = 0, measure = 3, n_predict = 64, ppd_max_budget = 48;
  bool retune = false;
  DeviceOptions devices;  // --device, -ngl, -ngld: measured where the models will run
};

bool parse_tune_args(int argc, char** argv, TuneArgs& a) {
  a.n_threads = available_cores();
  ArgParser args("tune",
                 "Measure, on this machine, the target's forward latency per batch size, the "
                 "draft's cost per token and the acceptance of its drafts on a few calibration "
                 "prompts (chains, and per depth and rank for trees); predict tokens/s of ar, sd "
                 "(γ 1..8), pearl (window 1..8) and tree and dyntree shapes whose node count fits "
                 "the measured L(n), run the best predicted ones and ar for real, and print the "
                 "choice of --strategy auto and the best predicted configuration of each family "
                 "(line 'tuned:'). Measurements are cached per model files, CPU, GPU and threads. "
                 "With both models on a GPU and no -ngld, the drafter is tuned on the CPU cores "
                 "too (idle while the GPU verifies), and tune says which placement runs its "
                 "choice faster (-ngld 0 or -ngld 99 pins one and tunes only that).");
  args.option("-m,--model", &a.model_path, "FILE", "target model (GGUF)");
  args.option("-md,--model-draft", &a.draft_path, "FILE", "draft model (GGUF)");
  args.option("-t,--threads", &a.n_threads, "N", "threads of the target model");
  args.option("-td,--threads-draft", &a.threads_draft, "N",
              "threads of the draft model's own worker; 0 = share the target's worker");
  args.option("--measure", &a.measure, "K",
              "run the K best predicted candidates, the best predicted of each family and ar for "
              "real; 0 = predictions only");
  args.option("-n,--n-predict", &a.n_predict, "N",
              "tokens per calibration prompt in the real runs");
  args.option("--cache-dir", &a.cache_dir, "DIR",
              "tuning cache directory (default: $PARSPEC_CACHE_DIR, else "
              "$XDG_CACHE_HOME/parspec, else ~/.cache/parspec)");
  args.flag("--retune", &a.retune, "measure again even when the cache has an entry");
  args.option(
      "--ppd", &a.ppd_path, "FILE",
      "tune `--strategy ppd` with these prompt tokens instead (no draft model): measure L(n), "
      "predict each tree size's speed, run the --measure best and ar for real, write the "
      "trees of the fastest");
  args.option("--ppd-tree-out", &a.ppd_tree_out, "FILE",
              "where --ppd writes the chosen trees (default: the side file with .tree for .gguf)");
  args.option("--ppd-max-budget", &a.ppd_max_budget, "N",
              "--ppd: largest input length per step considered (L(n) is timed up to it)");
  a.devices.add_to(args);
  if (!args.parse(argc, argv)) return false;
  check(!a.model_path.empty(), "no target model given (-m FILE)");
  check(!a.draft_path.empty() || !a.ppd_path.empty(),
        "no draft model given (-md FILE), nor PPD prompt tokens (--ppd FILE)");
  check(a.ppd_max_budget >= 1 && a.ppd_max_budget <= 512, "--ppd-max-budget must be 1..512");
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
  std::printf("\n  draft forward D(n), ms:");
  for (size_t n = 0; n < m.draft_batch_ms.size(); ++n)
    std::printf(" %zu:%.2f", n + 1, m.draft_batch_ms[n]);
  std::printf("\n");
  std::printf("  overhead of real generation, ms: %.3f per target step, %.3f per draft token\n",
              m.target_overhead_ms, m.draft_overhead_ms);
  std::printf("  P(first k drafts accepted):");
  for (size_t k = 0; k < m.accept_prefix.size(); ++k)
    std::printf(" %zu:%.2f", k + 1, m.accept_prefix[k]);
  std::printf("\n");
  // Trees: P(depth d accepted | depths above accepted) of a full c-ary tree.
  for (size_t c = 1; c < m.tree_accept.size(); ++c) {
    std::printf("  tree, c = %zu: P(depth d within the draft's top %zu | above accepted):", c + 1,
                c + 1);
    for (size_t d = 0; d < m.tree_accept[c].size(); ++d) {
      double p = 0;
      for (double r : m.tree_accept[c][d]) p += r;
      std::printf(" %zu:%.2f", d + 1, p);
    }
    std::printf("\n");
  }
  if (!m.tree_accept.empty())
    std::printf("  tree overhead beyond the forwards, ms per node: %.3f\n",
                m.tree_node_overhead_ms);
  std::printf("  draft and target on cores of their own (pearl in parallel): %s\n",
              m.parallel ? "yes" : "no");
  std::printf("  pearl's measured speed over the formula's at the calibration window: %.2f\n",
              m.pearl_efficiency);
  std::printf("  real verification forward beyond L(n), ms per row after the first: %.3f\n",
              m.verify_row_ms);
  if (m.n_expert > 0) {
    std::printf("  experts (%d, %d per token): one more distinct expert per layer costs %.3f ms;\n",
                m.n_expert, m.n_expert_used, m.expert_ms);
    std::printf("    distinct experts per layer, timed forwards / a real verification, by n:");
    for (size_t n = 1; n <= m.target_experts.size(); ++n)
      std::printf(" %zu:%.1f/%.1f", n, m.target_experts[n - 1], verify_experts(m, double(n)));
    std::printf("\n");
  }
  if (!m.checked.empty()) {
    std::printf("  check against ar (%.1f tok/s), per prompt against the fastest:",
                m.checked_ar_tok_per_s);
    for (const auto& c : m.checked)
      std::printf(" %s %.1f tok/s (%+.1f%% ± %.1f%%)", c.label.c_str(), c.tok_per_s, 100 * c.slower,
                  100 * c.slower_se);
    std::printf("\n");
  }
  if (!m.measured_best.empty())
    std::printf(
        "  chosen by the check (the simplest as fast as the fastest, and faster than ar): %s\n",
        m.measured_best.c_str());
  if (!m.rejected.empty()) {
    std::printf("  predicted fastest but measured no faster than ar (not chosen):");
    for (const std::string& r : m.rejected) std::printf(" %s", r.c_str());
    std::printf("\n");
  }
  std::printf("  calibration: %d tokens, %.1f s\n\n", m.calibration_tokens, m.calibration_s);
}

// The best predicted candidate of each speculative family (every tuned
// strategy but the reference), in registry order.
std::vector<Candidate> best_of_families(const std::vector<Prediction>& ranked) {
  std::vector<Candidate> out;
  for (const StrategyInfo& info : strategy_registry()) {
    if (info.cost == nullptr || info.name == reference_strategy_name()) continue;
    const auto best = std::find_if(ranked.begin(), ranked.end(), [&](const Prediction& p) {
      return p.candidate.strategy == info.name;
    });
    if (best != ranked.end()) out.push_back(best->candidate);
  }
  return out;
}

// Greedy tokens/s of each config on the prompts, configs interleaved prompt by prompt.
std::vector<double> measure_configs(const std::vector<StrategyConfig>& configs,
                                    const std::vector<std::vector<int32_t>>& prompts,
                                    int n_predict) {
  std::vector<std::unique_ptr<Strategy>> strategies;
  for (const StrategyConfig& c : configs) strategies.push_back(make_strategy(c));
  std::vector<double> tokens(configs.size(), 0), ms(configs.size(), 0);
  for (const auto& prompt : prompts) {
    GenerationRequest request;
    request.prompt = prompt;
    request.n_predict = n_predict;
    request.sampling.temp = 0;
    for (size_t i = 0; i < strategies.size(); ++i) {
      const GenerationStats s = strategies[i]->generate(request).stats;
      tokens[i] += s.n_gen;
      ms[i] += s.t_gen_ms;
    }
  }
  std::vector<double> out;
  for (size_t i = 0; i < configs.size(); ++i)
    out.push_back(ms[i] > 0 ? 1000.0 * tokens[i] / ms[i] : 0.0);
  return out;
}

// `tune --ppd`: PPD's online, hardware-aware stage. L(n) of this machine (the
// cost model's timing), the per-step overhead of real generation (from ar, as
// the cost model measures it), and for each input-length budget the trees of
// the offline stage with their Markov-chain forecast: the budget with the
// highest predicted tokens/s is chosen and its trees written.
int tune_ppd(const TuneArgs& a, std::shared_ptr<const Model> target, const DeviceSides& sides) {
  const PpdPrompts prompts = PpdPrompts::load(a.ppd_path);
  prompts.check_fits(*target);
  check(!prompts.rank_accuracy.empty(), a.ppd_path,
        ": the side file has no measured rank accuracies (ppd.rank_accuracy) to build trees from");
  Worker worker(a.n_threads);
  StrategyConfig base;
  base.target = target;
  base.target_worker = &worker;
  base.name = reference_strategy_name();
  sides.apply(base);
  const auto calibration = calibration_prompts(*target);
  int longest = 0;
  for (const auto& p : calibration) longest = std::max(longest, static_cast<int>(p.size()));
  base.ctx_size = longest + a.n_predict + 8;

  std::fprintf(stderr, "tune: timing target forwards over 1..%d rows\n", a.ppd_max_budget);
  const std::vector<double> latency =
      measure_target_latencies(make_target_side(base), a.ppd_max_budget, 5);
  const double ar_tps = measure_configs({base}, calibration, a.n_predict)[0];
  const double overhead = std::max(0.0, 1000.0 / std::max(ar_tps, 1e-9) - latency[0]);

  std::vector<int> budgets;
  for (int b : {1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 64, 96, 128})
    if (b <= a.ppd_max_budget) budgets.push_back(b);
  const std::vector<PpdBudgetChoice> ranked =
      rank_ppd_budgets(prompts.rank_accuracy, prompts.ensemble_tokens, budgets, latency, overhead);

  std::printf("target: %s\nprompt tokens: %s (%d x %d ensemble)\nthreads: -t %d\n",
              a.model_path.c_str(), a.ppd_path.c_str(), prompts.prompt_tokens,
              prompts.ensemble_tokens, a.n_threads);
  std::printf("  target forward L(n), ms:");
  for (size_t n = 0; n < latency.size(); ++n) std::printf(" %zu:%.2f", n + 1, latency[n]);
  std::printf("\n  overhead of real generation, ms per step: %.3f (ar measured %.1f tok/s)\n",
              overhead, ar_tps);

  // Measured: ar, the choice and the next best predicted budgets.
  std::vector<int> measured_budgets;
  for (int i = 0; i < a.measure && i < static_cast<int>(ranked.size()); ++i)
    measured_budgets.push_back(ranked[i].budget);
  std::vector<double> measured;
  if (!measured_budgets.empty()) {
    std::vector<StrategyConfig> configs = {base};
    for (int b : measured_budgets) configs.push_back(ppd_config_at_budget(base, a.ppd_path, b));
    std::fprintf(stderr, "tune: running %s and ppd at %zu budgets on the calibration prompts\n",
                 base.name.c_str(), measured_budgets.size());
    measured = measure_configs(configs, calibration, a.n_predict);
  }
  std::printf("%-8s %8s %12s %10s %12s %10s\n", "budget", "rows", "tokens/step", "ms/step",
              "predicted", "measured");
  std::printf("%-8s %8d %12.2f %10.2f %12.1f", base.name.c_str(), 1, 1.0, latency[0] + overhead,
              1000.0 / (latency[0] + overhead));
  if (!measured.empty()) std::printf(" %10.1f", measured[0]);
  std::printf("\n");
  for (const PpdBudgetChoice& c : ranked) {
    std::printf("%-8d %8.1f %12.2f %10.2f %12.1f", c.budget, c.forecast.rows, c.forecast.tokens,
                c.ms_per_step, c.tok_per_s);
    const auto found = std::find(measured_budgets.begin(), measured_budgets.end(), c.budget);
    if (found != measured_budgets.end())
      std::printf(" %10.1f", measured[1 + (found - measured_budgets.begin())]);
    std::printf("\n");
  }
  std::string out = a.ppd_tree_out;
  if (out.empty()) {
    out = a.ppd_path;
    const std::string suffix = ".gguf";
    if (out.size() > suffix.size() &&
        out.compare(out.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.resize(out.size() - suffix.size());
    out += ".tree";
  }
  // The choice: the predicted best, or among the budgets run for real the measured best (the
  // forecast leaves out what ppd's steps cost beyond the forward and ar's overhead).
  size_t chosen = 0;
  for (size_t i = 1; i < measured_budgets.size(); ++i)
    if (measured[1 + i] > measured[1 + chosen]) chosen = i;
  const PpdBudgetChoice& best = ranked[chosen];
  best.trees.save(out);
  std::printf(
      "(predicted: the Markov-chain forecast over L(n) + overhead; measured: greedy, %zu "
      "calibration prompts x %d tokens, interleaved)\n\n",
      calibration.size(), a.n_predict);
  std::printf(
      "choice: budget %d (%.2f tokens/step forecast, %.1f tok/s predicted vs ar %.1f%s)\n"
      "trees: %s (use: --strategy ppd --ppd %s --ppd-tree %s)%s\n",
      best.budget, best.forecast.tokens, best.tok_per_s, 1000.0 / (latency[0] + overhead),
      measured_budgets.size() > 1 ? "; the fastest measured of the predicted best" : "",
      out.c_str(), a.ppd_path.c_str(), out.c_str(),
      best.trees.has_guesses()
          ? ""
          : "\n(no tree pays here: these trees have no guesses, so ppd decodes as ar)");
  return 0;
}

// The drafter on the CPU cores beside the target on its GPU: `on_gpu` with a
// CPU copy of the draft model and the ordinary drafter on the workers, tuned
// (its own cache entry), then each placement's choice run on the calibration
// prompts, one after the other, and the faster one named.
void compare_draft_placements(const TuneArgs& a, const DeviceSides& sides,
                              const StrategyConfig& on_gpu, const Tuning& gpu_tuning,
                              const TuneOptions& options) {
  StrategyConfig on_cpu = on_gpu;
  on_cpu.draft = load_model(a.draft_path, WeightLoading::kAuto);
  on_cpu.make_drafter = nullptr;
  on_cpu.draft_executor = nullptr;
  on_cpu.device = "target on " + device_label(sides.target_device) + ", draft on cpu";
  std::fprintf(stderr, "tune: the drafter on the CPU (-ngld 0) too\n");
  const Tuning cpu_tuning = tune(on_cpu, options);
  const auto prompts = calibration_prompts(*on_gpu.target);
  const Candidate gpu_choice = gpu_tuning.choice.chosen, cpu_choice = cpu_tuning.choice.chosen;
  const double gpu_tps = measure_candidates(on_gpu, {gpu_choice}, prompts, a.n_predict).at(0);
  const double cpu_tps = measure_candidates(on_cpu, {cpu_choice}, prompts, a.n_predict).at(0);
  std::printf(
      "\ndrafter placement (no -ngld: both tuned, each choice run on the calibration "
      "prompts):\n");
  std::printf("  draft on the GPU: %-16s %8.1f tok/s\n", gpu_choice.label().c_str(), gpu_tps);
  std::printf("  draft on the CPU: %-16s %8.1f tok/s (its choice with -ngld 0)\n",
              cpu_choice.label().c_str(), cpu_tps);
  std::printf("placement: %s\n", cpu_tps > gpu_tps ? "the CPU: run with -ngld 0"
                                                   : "the GPU: keep the drafter beside the target");
}

}  // namespace

int cmd_tune(int argc, char** argv) {
  TuneArgs a;
  if (!parse_tune_args(argc, argv, a)) return 0;
  std::shared_ptr<const Model> target = load_model(a.model_path, a.devices.target_loading());
  DeviceSides sides;
  if (!a.ppd_path.empty()) {
    check(a.draft_path.empty(), "tune: --ppd tunes ppd, which needs no draft model (drop -md)");
    sides.init(a.devices, *target, nullptr);
    return tune_ppd(a, target, sides);
  }
  std::shared_ptr<const Model> draft = load_model(a.draft_path, a.devices.draft_loading());
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
  sides.init(a.devices, *target, draft.get());
  sides.apply(base);

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
    add(reference_candidate());
    add(t.choice.chosen);
    for (int i = 0; i < a.measure && i < static_cast<int>(ranked.size()); ++i)
      add(ranked[i].candidate);
    for (const Candidate& c : best_of_families(ranked)) add(c);
  }
  std::vector<double> measured;
  const auto prompts = calibration_prompts(*target);
  if (!to_measure.empty()) {
    std::fprintf(stderr, "tune: running %zu candidates on the calibration prompts\n",
                 to_measure.size());
    measured = measure_candidates(base, to_measure, prompts, a.n_predict);
  }

  std::printf("%-16s %12s %12s %10s %12s %10s\n", "candidate", "predicted", "tokens/step",
              "ms/step", "measured", "meas/pred");
  for (const Prediction& p : ranked) {
    std::printf("%-16s %12.1f %12.2f %10.2f", p.candidate.label().c_str(), p.tok_per_s,
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
  // bench/speculative_table.sh runs these as the "tuned" rows.
  std::printf("tuned:");
  for (const Candidate& c : best_of_families(ranked)) std::printf(" %s", c.label().c_str());
  std::printf("\n");
  if (sides.target_device >= 0 && sides.draft_device == sides.target_device &&
      a.devices.gpu_layers_draft < 0)
    compare_draft_placements(a, sides, base, t, options);
  return 0;
}

}  // namespace parspec
