#include "tools/strategy_options.h"

#include "core/error.h"

namespace parspec {

void StrategyOptions::add_to(ArgParser& args) {
  args.option("-md,--model-draft", &draft_path, "FILE", "draft model (GGUF) for speculative strategies");
  args.option("-td,--threads-draft", &threads_draft, "N",
              "threads of the draft model's own worker; 0 = share the target's worker");
  args.option("--draft-max", &config.draft_max, "N", "sd: draft tokens per step (γ; the maximum when adaptive)");
  args.option("--draft-min", &config.draft_min, "N", "sd: smallest γ when adaptive");
  args.option("--draft-p-min", &config.draft_p_min, "P",
              "sd: stop drafting when the draft's top probability is below P");
  args.flag("--adaptive-draft", &config.adaptive,
            "sd: grow γ by 2 after a fully accepted step, shrink by 1 otherwise");
  args.option("--tree-depth", &config.tree_depth, "D", "tree, dyntree: levels below the root");
  args.option("--tree-branch", &config.tree_branch, "C", "tree, dyntree: children per node");
  args.option("--tree-width", &config.tree_width, "W", "dyntree: nodes kept per level");
  args.option("--tree-verify-depth", &config.tree_verify_depth, "V",
              "dyntree: levels the target checks per step (0 = all); deeper levels are kept for the next step");
  args.flag("--lossy-typical", &lossy_typical,
            "LOSSY: accept tree tokens by typical acceptance (Medusa/PPD) instead of exact verification");
}

void StrategyResources::init(std::shared_ptr<const Model> target_model,
                             const StrategyOptions& options, int threads) {
  target = std::move(target_model);
  target_worker = std::make_unique<Worker>(threads);
  if (!options.draft_path.empty()) draft = Model::load(options.draft_path);
  check(options.threads_draft >= 0, "-td must not be negative");
  if (options.threads_draft > 0) draft_worker = std::make_unique<Worker>(options.threads_draft);
}

StrategyConfig StrategyResources::config_for(const std::string& name,
                                             const StrategyOptions& options, int ctx_size) const {
  StrategyConfig c = options.config;
  c.name = name;
  c.target = target;
  c.draft = draft;
  c.target_worker = target_worker.get();
  c.draft_worker = draft_worker ? draft_worker.get() : target_worker.get();
  c.ctx_size = ctx_size;
  c.lossy_typical = options.lossy_typical;
  if (name != "ar" && !draft)
    fail("strategy '", name, "' needs a draft model: give one with -md FILE");
  return c;
}

}  // namespace parspec
