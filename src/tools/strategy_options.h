#pragma once
// Command-line options that choose and tune a decoding strategy, shared by
// `generate` and `bench` so both accept the same flags with the same defaults.
#include <memory>
#include <string>
#include <vector>

#include "core/worker.h"
#include "model/model.h"
#include "spec/strategy.h"
#include "tools/args.h"

namespace parspec {

struct StrategyOptions {
  std::string draft_path;  // -md
  int threads_draft = 0;   // -td; 0: share the target's worker
  StrategyConfig config;   // tuning knobs with their defaults
  bool lossy_typical = false;
  bool no_pre_verify = false, no_post_verify = false;  // pearl ablations
  bool allow_draft_mismatch = false;  // run a draft whose vocabulary differs (α ≈ 0)
  // Where the workers' threads run: "auto" (not pinned), "separate" (target on
  // cores 0..t-1, draft on the next td cores), "shared" (both on the target's
  // cores: the resource competition of PEARL's appendix G).
  std::string placement = "auto";

  // Registers -md, -td, --draft-max, --draft-min, --draft-p-min, --adaptive-draft,
  // --tree-depth, --tree-branch, --tree-width, --tree-verify-depth, --lossy-typical,
  // --no-pre-verify, --no-post-verify, --placement. `args` must outlive the
  // config_for() calls (it tells whether --draft-max was given).
  void add_to(ArgParser& args);
  // Whether --draft-max was given (pearl then measures nothing).
  bool draft_max_given() const;

 private:
  const ArgParser* args_ = nullptr;
};

// Models and workers a strategy runs on, loaded once and shared by every
// strategy of a run.
struct StrategyResources {
  std::shared_ptr<const Model> target, draft;
  std::unique_ptr<Worker> target_worker, draft_worker;

  // Loads the draft (when a path is given) and creates the workers.
  void init(std::shared_ptr<const Model> target_model, const StrategyOptions& options, int threads);
  // A config for strategy `name` on these resources (throws when `name` needs
  // a draft and none was given).
  StrategyConfig config_for(const std::string& name, const StrategyOptions& options,
                            int ctx_size) const;
};

}  // namespace parspec
