#pragma once
// A cost model of speculative decoding on the machine it runs on: measured
// target latency L(n) for a forward over n tokens, the drafter's cost per
// token and per-position acceptance of chain drafting on a short calibration
// set; from them, predicted tokens/s of ar, sd (γ = 1..8) and PEARL (window
// 1..8), and the choice of the fastest. A library: it returns data and
// prints nothing (progress goes to a callback).
//
// The predictions (per step, in ms, with E(γ) = Σ_{k<γ} P(first k+1 drafts accepted),
// T(n) = L(n) + the target's overhead per step, D = d + the draft's overhead per token):
//   ar:        1 token per T(1)
//   sd γ:      1 + E(γ) tokens per γ·D + T(γ+1)          (γ draft forwards, one verification)
//   pearl γ:   E(γ) + 1 − P(all γ accepted) tokens per round of max(γ·D, T(γ+1)) when the
//              two models have cores of their own, γ·D + T(γ+1) when they share them,
//              times the measured efficiency of PEARL at a calibration window
//              (PEARL, "Parallel Speculative Decoding with Adaptive Draft Length": drafting the
//              next window while the target verifies this one; a fully accepted window emits
//              no bonus token, the drafter already continues).
#include <functional>
#include <string>
#include <vector>

#include "decode/strategy.h"

namespace parspec {

struct CostMeasurements {
  // target_ms[n-1] = L(n): median time of one target forward over a chain of n
  // tokens with logits for all of them (a verification), on a short context.
  std::vector<double> target_ms;
  double draft_ms = 0;  // one draft forward of one token
  // Time a real generation spends beyond those forwards (sampling, verification,
  // cache bookkeeping, caches cooled by the other model), measured by running ar
  // and sd on the calibration prompts: per target step and per draft token.
  double target_overhead_ms = 0;
  double draft_overhead_ms = 0;
  // PEARL's measured tokens/s over the formula's (below) at a calibration
  // window: what thread hand-offs and pre-verify rounds cost, and how parallel
  // the two threads really run on a loaded machine. 1 when not measured.
  double pearl_efficiency = 1;
  // Candidates that were predicted fastest but measured no faster than ar in
  // real runs on the calibration prompts (see tune()): never chosen.
  std::vector<std::string> rejected;
  // accept_prefix[k]: fraction of calibration steps whose first k+1 drafts were
  // all accepted (greedy chain drafting), non-increasing in k.
  std::vector<double> accept_prefix;
  // Whether the drafter and the target have cores of their own (PEARL runs them at once).
  bool parallel = false;
  int calibration_tokens = 0;  // tokens generated to measure acceptance
  double calibration_s = 0;    // wall time of the whole measurement
};

struct Candidate {
  std::string strategy = "ar";  // ar, sd or pearl
  int param = 0;                // sd: γ; pearl: the window; ar: 0
  // "ar", "sd:3", "pearl:2": the form of bench's --strategies entries.
  std::string label() const;
};

struct Prediction {
  Candidate candidate;
  double tokens_per_step = 1;
  double ms_per_step = 0;
  double tok_per_s = 0;
};

inline constexpr int kMaxTunedGamma = 8;

// E(γ): expected accepted drafts of a step drafting γ tokens.
double expected_accepted(const CostMeasurements& m, int gamma);
// The prediction for one candidate; throws Error when the measurements do not
// cover it (γ beyond the measured positions or L(γ+1)).
Prediction predict(const CostMeasurements& m, const Candidate& c);
// ar, sd:1..max_gamma and pearl:1..max_gamma (as far as the measurements reach).
std::vector<Candidate> tuned_candidates(const CostMeasurements& m, int max_gamma = kMaxTunedGamma);
// Predictions for every candidate, fastest first.
std::vector<Prediction> rank_candidates(const CostMeasurements& m, int max_gamma = kMaxTunedGamma);

struct TuneChoice {
  Candidate chosen;
  Prediction predicted;  // of the chosen candidate
  Prediction ar;         // of ar
  std::string reason;    // one sentence
};

// The fastest predicted candidate that is not rejected, or ar unless that
// beats ar's prediction by more than `margin` (0.05: 5%).
TuneChoice choose_strategy(const CostMeasurements& m, double margin = 0.05);

// A StrategyConfig for `c` derived from `base` (name and its parameter set).
StrategyConfig config_for_candidate(const StrategyConfig& base, const Candidate& c);

struct CalibrationOptions {
  int n_predict = 32;    // tokens per calibration prompt
  int pearl_window = 3;  // the window PEARL's efficiency is measured at (0: not measured)
  int max_gamma = kMaxTunedGamma;
  int timing_runs = 5;  // timed forwards per batch size at least (median); more when fast
  std::function<void(const std::string&)> progress;  // may be empty
};

// Prompts for the calibration: a few texts of the bundled prompt sets
// (bench/prompts) tokenized with the target's tokenizer, or fixed token ids
// when the model has no usable tokenizer.
std::vector<std::vector<int32_t>> calibration_prompts(const Model& target);

// Measured tokens/s of each candidate: greedy runs of `n_predict` tokens on
// every prompt, candidates interleaved prompt by prompt.
std::vector<double> measure_candidates(const StrategyConfig& base,
                                       const std::vector<Candidate>& candidates,
                                       const std::vector<std::vector<int32_t>>& prompts,
                                       int n_predict);

// L(1..max_n) alone, timed as measure_costs times it (a short committed
// context, logits for every row, batch sizes interleaved pass by pass, the
// median of at least `runs` passes): for strategies sized by their input
// length (ppd's trees).
std::vector<double> measure_target_latencies(const Model& target, Worker& worker, int max_n,
                                             int runs);

// Measures L(1..max_gamma+1), the draft cost, acceptance and the overheads
// (greedy ar and sd:max_gamma on `prompts`) for `config`'s target, drafter and
// workers (config.draft must be set).
CostMeasurements measure_costs(const StrategyConfig& config,
                               const std::vector<std::vector<int32_t>>& prompts,
                               const CalibrationOptions& options);

}  // namespace parspec
