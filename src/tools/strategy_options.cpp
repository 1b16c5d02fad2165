#include "tools/strategy_options.h"

#include <cstdio>

#include "core/error.h"
#include "core/worker.h"
#include "model/compat.h"

namespace parspec {

void StrategyOptions::add_to(ArgParser& args) {
  args_ = &args;
  args.option("-md,--model-draft", &draft_path, "FILE",
              "draft model (GGUF) for speculative strategies");
  args.option("-td,--threads-draft", &threads_draft, "N",
              "threads of the draft model's own worker; 0 = share the target's worker (pearl, "
              "which runs both models at once, then gives the draft as many threads as -t on "
              "the target's cores)");
  args.option("--draft-max", &config.draft_max, "N",
              "sd: draft tokens per step (γ; the maximum when adaptive; never more than the tokens "
              "still to generate); pearl: the window γ (left out: round(t(target forward) / "
              "t(draft forward)), measured at start-up)");
  args.option("--draft-min", &config.draft_min, "N", "sd: smallest γ when adaptive");
  args.option("--draft-p-min", &config.draft_p_min, "P",
              "sd: stop drafting when the draft's top probability is below P");
  args.flag("--adaptive-draft", &config.adaptive,
            "sd: grow γ by 2 after a fully accepted step, shrink by 1 otherwise");
  args.option("--tree-depth", &config.tree_depth, "D", "tree, dyntree: levels below the root");
  args.option("--tree-branch", &config.tree_branch, "C", "tree, dyntree: children per node");
  args.option("--tree-width", &config.tree_width, "W", "dyntree: nodes kept per level");
  args.option("--tree-verify-depth", &config.tree_verify_depth, "V",
              "dyntree: levels the target checks per step (0 = all); deeper levels are kept for "
              "the next step");
  args.flag(
      "--lossy-typical", &lossy_typical,
      "LOSSY: accept tree tokens by typical acceptance (Medusa/PPD) instead of exact verification");
  args.flag("--no-pre-verify", &no_pre_verify,
            "pearl ablation: draft each window with the target idle instead of checking its first "
            "token meanwhile");
  args.flag("--no-post-verify", &no_post_verify,
            "pearl ablation: verify pending drafts with the drafter idle instead of drafting the "
            "next window meanwhile");
  args.flag("--allow-draft-mismatch", &allow_draft_mismatch,
            "run with a draft whose tokenizer differs from the target's (token texts, special "
            "ids): lossless still, but its drafts are mostly rejected");
  // Bounds that keep a typo from running for minutes or exhausting memory.
  args.bound("-td", 0, 1024);
  args.bound("--draft-max", 1, 1024);
  args.bound("--draft-min", 1, 1024);
  args.bound("--draft-p-min", 0, 1);
  args.option("--placement", &placement, "MODE",
              "cores of the threads: auto (not pinned), separate (target on cores 0..t-1, draft "
              "on the next td cores), shared (draft on the target's cores: resource competition)");
}

bool StrategyOptions::draft_max_given() const {
  return args_ != nullptr && args_->given("--draft-max");
}

void StrategyResources::init(std::shared_ptr<const Model> target_model,
                             const StrategyOptions& options, int threads) {
  target = std::move(target_model);
  check(options.threads_draft >= 0, "-td must not be negative");
  const std::string& placement = options.placement;
  check(placement == "auto" || placement == "separate" || placement == "shared",
        "--placement must be auto, separate or shared (got '", placement, "')");
  std::vector<int> target_cores, draft_cores;  // empty: not pinned
  if (placement != "auto") {
    const std::vector<int> cores = allowed_cores();
    const int n = static_cast<int>(cores.size());
    check(threads <= n, "--placement ", placement, ": -t ", threads, " exceeds the ", n,
          " cores this process may use");
    target_cores.assign(cores.begin(), cores.begin() + threads);
    if (placement == "separate") {
      check(options.threads_draft >= 1,
            "--placement separate gives the draft cores of its own: give its threads with -td N");
      check(threads + options.threads_draft <= n, "--placement separate: -t ", threads, " + -td ",
            options.threads_draft, " exceed the ", n, " cores this process may use");
      draft_cores.assign(cores.begin() + threads, cores.begin() + threads + options.threads_draft);
    } else {
      draft_cores = target_cores;
    }
  }
  target_worker = std::make_unique<Worker>(threads, target_cores);
  if (!options.draft_path.empty()) {
    draft = Model::load(options.draft_path);
    const std::string mismatch = draft_incompatibility(target->gguf(), draft->gguf());
    if (!mismatch.empty() && !options.allow_draft_mismatch)
      fail("the draft model cannot draft for the target: ", mismatch,
           "; pass --allow-draft-mismatch to run anyway");
    if (!mismatch.empty())
      std::fprintf(stderr, "warning: --allow-draft-mismatch: %s\n", mismatch.c_str());
  }
  if (options.threads_draft > 0)
    draft_worker = std::make_unique<Worker>(options.threads_draft, draft_cores);
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
  c.pre_verify = !options.no_pre_verify;
  c.post_verify = !options.no_post_verify;
  c.pearl_window = options.draft_max_given() ? c.draft_max : 0;
  if (name != "ar" && !draft)
    fail("strategy '", name, "' needs a draft model: give one with -md FILE");
  return c;
}

}  // namespace parspec
