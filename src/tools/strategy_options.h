#pragma once
// Command-line options that choose and tune a decoding strategy, shared by
// `generate` and `bench` so both accept the same flags with the same defaults.
// The strategies' own options come from the registry (decode/registry.h).
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/placement.h"
#include "core/worker.h"
#include "decode/registry.h"
#include "decode/sides.h"
#include "model/executor.h"
#include "model/model.h"
#include "tools/args.h"
#include "tools/device_options.h"

namespace parspec {

struct StrategyOptions {
  std::string draft_path;             // -md
  std::string drafter_paths;          // --drafters a.gguf,b.gguf,... (pool strategies)
  int threads_draft = 0;              // -td; 0: share the target's worker
  bool allow_draft_mismatch = false;  // run a draft whose vocabulary differs (α ≈ 0)
  // Where the workers' threads run (core/placement.h): not pinned, separate
  // (target on cores 0..t-1, draft on the next td cores) or shared (both on
  // the target's cores).
  std::string placement = kUnpinnedPlacement;
  // The distributed runtime under mpirun (docs/distributed.md).
  int stages = 0;
  std::string layer_split;
  int head_layers = 0;
  float link_latency_us = 0, link_gbps = 0, dist_timeout_s = 60;
  std::vector<std::string> strategies_run;  // as given to check_given()
  DeviceOptions devices;                    // --device, -ngl, -ngld

  // Registers -md, -td, --placement, the device flags and every registered strategy's options; a
  // flag that several strategies take is registered once, its help naming
  // them. The object must not move afterwards (the parser writes into it).
  void add_to(ArgParser& args);
  // Sets strategy `name`'s options in `config` to the values given (or their defaults).
  void apply(const std::string& name, StrategyConfig& config) const;
  // Throws Error when a strategy flag was given on `args` that none of the
  // strategies `names` takes (naming the strategies that do). Remembers
  // `names`: the strategies of the run, from which init() chooses what the
  // other ranks of an mpirun job do.
  void check_given(const ArgParser& args, const std::vector<std::string>& names);
  // --strategy's value, in the form bench's --strategies takes: NAME, NAME:G
  // (pearl:3 sets pearl's window) or a tree shape (tree:d3c2). Throws Error for
  // an unknown name or form, and for a setting also given by its own flag.
  // Then check_given() on the name.
  StrategySpec check_strategy(const ArgParser& args, const std::string& entry);
  // Every strategy option by JSON key, as given or defaulted.
  nlohmann::ordered_json to_json() const;

 private:
  struct Slot {
    const StrategyOption* option = nullptr;
    int int_value = 0;
    float float_value = 0;
    bool bool_value = false;
    std::string string_value;
    OptionValue value() const;
  };
  std::deque<Slot> slots_;  // stable addresses for the parser
};

// Models and workers a strategy runs on, loaded once and shared by every
// strategy of a run.
struct StrategyResources {
  std::shared_ptr<const Model> target, draft;
  std::unique_ptr<Worker> target_worker, draft_worker;
  // Under mpirun (head rank): targets on the pipeline of ranks; null otherwise.
  std::function<std::unique_ptr<Target>(const StrategyConfig&)> make_target;
  // Under mpirun (head rank): easyspec's group executors on the other ranks; null otherwise.
  decltype(StrategyConfig::make_group_executor) make_group_executor;
  // --drafters: the pool's models, names (file stems) and, with -td N, a worker
  // of N threads each (so the pool drafts concurrently).
  std::vector<std::shared_ptr<const Model>> drafters;
  std::vector<std::string> drafter_names;
  std::vector<std::unique_ptr<Worker>> drafter_workers;
  // Where the target and the draft model run (a GPU's executors, or the CPU).
  DeviceSides devices;

  // Loads the draft (when a path is given) and creates the workers; with a GPU
  // chosen (DeviceOptions), uploads the models to it; under
  // mpirun, starts the pipeline of ranks for the target or, when a strategy
  // of the run drafts on the ranks (easyspec), prepares its drafter slots
  // (started by the first such strategy made; every target stays here).
  void init(std::shared_ptr<const Model> target_model, const StrategyOptions& options, int threads);
  // A config for strategy `entry` (NAME, NAME:G or a tree shape, as
  // check_strategy() takes it) on these resources (throws when the name is
  // unknown, or needs a draft and none was given).
  StrategyConfig config_for(const std::string& entry, const StrategyOptions& options,
                            int ctx_size) const;

 private:
  void load_drafters(const StrategyOptions& options);
};

}  // namespace parspec
