#pragma once
// What every decoding strategy shares: the request, the result with its
// accounting (the metric names of bench/README.md), the interface, and the
// configuration the strategy registry (decode/registry.h) fills. Plain
// autoregressive decoding (`ar`) is the reference every other strategy must
// reproduce token for token.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/worker.h"
#include "decode/generation_stats.h"
#include "model/model.h"
#include "sample/sampler.h"

namespace parspec {

class Target;
class Drafter;
class GroupExecutor;
class ForwardExecutor;
struct LayerGroup;

struct GenerationRequest {
  std::vector<int32_t> prompt;  // non-empty
  int n_predict = 128;          // maximum tokens to generate
  SamplingParams sampling;
  // Generation stops after a token for which this returns true (the token is kept).
  std::function<bool(int32_t)> is_stop;
  // Called for every generated token in order, as soon as it is final.
  std::function<void(int32_t)> on_token;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated tokens (prompt excluded)
  GenerationStats stats;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  virtual GenerationResult generate(const GenerationRequest& request) = 0;
  // What the strategy measured or decided when it was made, one line each, for
  // the tool to show (libraries do not print).
  virtual std::vector<std::string> notes() const { return {}; }
  // What it decodes with when it hands the work to another strategy (auto's
  // choice "sd:3"; "ar" for a ppd tree without guesses); its name otherwise.
  virtual std::string runs() const { return name(); }
};

// A strategy option's value: its flag takes an integer, a real, nothing (a
// bool) or a word (a string).
using OptionValue = std::variant<int, float, bool, std::string>;

// Everything a strategy may need; each strategy reads what applies to it. The
// typed fields are the options several strategies share; a strategy's own
// options live in its file (src/strategies) as option_entry() values, kept
// in `options` by JSON key (decode/registry.h).
struct StrategyConfig {
  std::string name = "ar";  // a registered name (see strategy_names()); the reference by default
  std::shared_ptr<const Model> target;
  std::shared_ptr<const Model> draft;  // required by every strategy that needs_draft
  Worker* target_worker = nullptr;
  Worker* draft_worker = nullptr;  // may be the same worker as target_worker
  int ctx_size = 4096;
  // Where the sides run when not on the workers' CPU (a GPU's name, from the
  // command line): keys measured speeds (auto's tuning cache) apart.
  std::string device;
  // Chain drafting (sd, easyspec, the pool strategies).
  int draft_max = 4;         // γ: draft tokens per step (the maximum when adaptive)
  float draft_p_min = 0.0f;  // stop drafting when the draft's top probability falls below
  // Trees (tree, dyntree, pipedec, easyspec); 0: the strategy's default
  // (apply_fixed_tree_defaults: 4, 2, 8; tree and dyntree size themselves).
  int tree_depth = 0;   // levels below the root
  int tree_branch = 0;  // children per node (c)
  int tree_width = 0;   // nodes kept per level (w) of a dynamic tree
  // Whether tree and dyntree may time their own sides when made, to choose
  // their shapes. The server makes a strategy per request and the simulator
  // runs on a virtual clock: they turn it off, and the fixed defaults apply.
  bool time_sides_at_start = true;
  // Lossy, opt-in: typical acceptance (Medusa/PPD) instead of exact verification.
  bool lossy_typical = false;
  std::map<std::string, OptionValue> options;
  // A pool of drafters (cosine, specinfer: --drafters), each with a name (the
  // file's stem) and a worker (missing or null: draft_worker). Empty: the one
  // draft model.
  std::vector<std::shared_ptr<const Model>> drafters;
  std::vector<std::string> drafter_names;
  std::vector<Worker*> drafter_workers;
  // The server's verifier load (requests generating at once); empty: 1. A pool
  // strategy lets fewer drafters take part when the verifier is busy.
  std::function<int()> verifier_load;
  // The server's request scheduler (cosine): called at the start of each step
  // with the request's context length, the draft tokens it wants and the
  // drafters it would route to; it may block while the request waits for a
  // later verification pass, and returns what the step is granted. Empty: as
  // wanted, Γmax and verifier_load applied by the strategy itself.
  struct StepGrant {
    int gamma = 1;
    int drafters = 1;
  };
  std::function<StepGrant(int length, int gamma, int drafters)> schedule_step;
  // Another backend for the sides; null: a LocalTarget / ModelDrafter on the
  // config's models and workers. The server (src/serve) sets both for its
  // batched forwards; the distributed runtime (src/dist) sets make_target so
  // that the strategies verify on a pipeline of MPI ranks.
  std::function<std::unique_ptr<Target>(const StrategyConfig&)> make_target;
  std::function<std::unique_ptr<Drafter>(const StrategyConfig&)> make_drafter;
  // The executor the draft model runs on where that is not draft_worker's CPU
  // (a GPU's), for drafters that run the model in pieces (easyspec); null: the
  // worker.
  ForwardExecutor* draft_executor = nullptr;
  // Under mpirun (src/mpi/group_ranks.h): runs a layer-parallel drafter's
  // group attention blocks on MPI ranks that hold replicas of `draft`
  // (easyspec); null, or null returned: threads of this process.
  std::function<std::unique_ptr<GroupExecutor>(const Model& draft,
                                               const std::vector<LayerGroup>& groups)>
      make_group_executor;
};

// Names accepted by make_strategy, in the order benchmarks list them.
const std::vector<std::string>& strategy_names();
// Throws Error for an unknown name or a missing draft model.
std::unique_ptr<Strategy> make_strategy(const StrategyConfig& config);

}  // namespace parspec
