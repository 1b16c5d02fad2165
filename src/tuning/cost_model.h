#pragma once
// A cost model of speculative decoding on the machine it runs on: measured
// target latency L(n) for a forward over n tokens, the drafter's latency per
// forward of n tokens, per-position acceptance of chain drafting and
// per-depth, per-rank acceptance for trees on a short calibration set; from
// them, predicted tokens/s of ar, sd (γ = 1..8), PEARL (window 1..8) and
// tree shapes of `tree` and `dyntree` whose node count L(n) was measured for,
// and the choice of the fastest. A library: it returns data and prints
// nothing (progress goes to a callback).
//
// The predictions (per step, in ms, with E(γ) = Σ_{k<γ} P(first k+1 drafts accepted),
// T(n) = L(n) + the target's overhead per step + (n−1)·verify_row_ms, D(n) = the draft's forward
// over n tokens + its overhead per forward, D = D(1)):
//   ar:        1 token per T(1)
//   sd γ:      1 + E(γ) tokens per γ·D + T(γ+1)          (γ draft forwards, one verification)
//   pearl γ:   E(γ) + 1 − P(all γ accepted) tokens per round of max(γ·D, T(γ+1)) when the
//              two models have cores of their own, γ·D + T(γ+1) when they share them,
//              times the measured efficiency of PEARL at a calibration window
//              (PEARL, "Parallel Speculative Decoding with Adaptive Draft Length": drafting the
//              next window while the target verifies this one; a fully accepted window emits
//              no bonus token, the drafter already continues).
//   trees:     depth K, c children per node (the drafter's top c), n_d nodes at depth d
//              (tree: c^d; dyntree: min(w, c·n_{d-1}), width w), N = Σ n_d nodes:
//              1 + Σ_nodes P(node on the target's path) tokens per
//              D + Σ_{d<K} D(n_d) + T(N+1) + N·(overhead per node)
//              (one draft forward catches up and scores the root, one per level but the
//              last, one verification over the root and every node, as tree_speculation.cpp
//              runs them). P(node of ranks r_1..r_d on the path) = Π_j a_c[j][r_j], a_c the
//              measured per-depth, per-rank acceptance at branching c (see tree_accept);
//              dyntree keeps per level the n_d nodes of highest P, as Sequoia ("Sequoia:
//              Scalable, Robust, and Hardware-aware Speculative Decoding") and Medusa size
//              their trees by positional acceptance. The node budget is hardware-aware:
//              only shapes with N + 1 <= the largest n L(n) was measured for are
//              candidates, and L(N+1) prices each one.
//
// Each family's own file (src/strategies) registers its formula and its
// candidate shapes (tuning/cost_family.h); this layer knows no strategy by name.
#include <functional>
#include <memory>
#include <span>
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
  // The target's may be negative (down to -L(1)/2): a forward timed among
  // other batch sizes and the drafter's can be slower than one of a run of ar
  // steps, and ar's measured speed is what its prediction must meet.
  double target_overhead_ms = 0;
  double draft_overhead_ms = 0;
  // What a real verification forward costs per row beyond the first, over
  // L(n) − L(1): the calibration's sd verifications (γ+1 rows, timed by the
  // target's meter) against the L(n) timed alone. Timed alone, interleaved
  // batch sizes come out a few ms short of the same forward inside a
  // generation at some n (kernel tiles, the drafter's forwards in between);
  // pricing every row from a real run keeps sd and trees, which verify more
  // rows per token than ar, from being predicted too fast. May be negative.
  double verify_row_ms = 0;
  // PEARL's measured tokens/s over the formula's (below) at a calibration
  // window: what thread hand-offs and pre-verify rounds cost, and how parallel
  // the two threads really run on a loaded machine. 1 when not measured.
  double pearl_efficiency = 1;
  // Candidates that were predicted fastest but measured no faster than ar in
  // real runs on the calibration prompts (see tune()): never chosen.
  std::vector<std::string> rejected;
  // The real-run check's pick (see tune() and decide_check()): of the fastest
  // prediction and the best predictions of other families within
  // kRivalMargin of it, the simplest one as fast as the measured fastest
  // within the check's noise, and faster than ar. Chosen while not rejected;
  // empty: none (or not checked).
  std::string measured_best;
  // The real-run check's figures, one per candidate run beside ar (see tune()).
  struct Checked {
    std::string label;
    double tok_per_s = 0;  // measured, all check prompts
    // Per prompt, log(ms per token / the fastest's): mean and standard error.
    double slower = 0, slower_se = 0;
  };
  std::vector<Checked> checked;
  double checked_ar_tok_per_s = 0;
  // accept_prefix[k]: fraction of calibration steps whose first k+1 drafts were
  // all accepted (greedy chain drafting), non-increasing in k.
  std::vector<double> accept_prefix;
  // draft_batch_ms[n-1]: median time of one draft forward over n tokens with
  // logits for all of them (a tree level); draft_batch_ms[0] is draft_ms.
  std::vector<double> draft_batch_ms;
  // tree_accept[c-1][d-1][r] (r < c): along the target's greedy continuations
  // of the calibration prompts, at draft depth d of a step whose tokens at
  // depths 1..d-1 were each among the drafter's top c, the probability that
  // the target's token is the drafter's rank-r token. Steps as a c-ary tree
  // would take them (the next step starts after the accepted path and the
  // target's token). Σ_r tree_accept[c-1][d-1][r] is P(depth d accepted |
  // depths < d accepted) of a full c-ary tree.
  std::vector<std::vector<std::vector<double>>> tree_accept;
  // What a tree step costs beyond the formula per node (the drafter's softmax
  // and top-c per drafted node, the tree mask, the path's commit, the tree's
  // bookkeeping), measured by running one tree shape on the calibration
  // prompts against the formula with verify_row_ms and the draft's overhead,
  // so that L(n)'s error at the tree's row count is not charged to the tree.
  double tree_node_overhead_ms = 0;
  // A mixture-of-experts target (model/moe.h; all zero for a dense one): a
  // forward costs more the more distinct experts its rows touch, and the timed
  // forwards' tokens (varied run by run) touch more of them than a real
  // verification's drafted text does. target_experts[n-1]: distinct experts
  // per layer the timed forward over n tokens touched (mean); expert_ms: what
  // one more distinct expert per layer costs a forward, fitted over the timed
  // forwards as L(n) = a + b·n + expert_ms·target_experts[n-1];
  // expert_overlap: how much consecutive real tokens share experts, fitted to
  // the calibration's sd verifications (see verify_experts). A verification
  // over n tokens is priced at L(n) + expert_ms·(verify_experts(n) −
  // target_experts[n-1]) (see verification_ms).
  int n_expert = 0, n_expert_used = 0;
  std::vector<double> target_experts;
  double expert_ms = 0;
  double expert_overlap = 1;
  // Whether the drafter and the target have cores of their own (PEARL runs them at once).
  bool parallel = false;
  int calibration_tokens = 0;  // tokens generated to measure acceptance
  double calibration_s = 0;    // wall time of the whole measurement
};

// A configuration of a tuned strategy (its family: tuning/cost_family.h).
struct Candidate {
  std::string strategy;       // a registered name
  int param = 0;              // a chain's γ or window; 0: none
  int depth = 0, branch = 0;  // a tree: levels below the root, children per node (c)
  int width = 0;              // a dynamic tree: nodes kept per level (w); 0: a full tree
  // NAME, NAME:G or NAME:dDcC[wW] ("sd:3", "tree:d2c2", "dyntree:d4c2w3"): the
  // form of bench's --strategies entries (parse_strategy_spec reads it).
  std::string label() const;
};

// The reference strategy (ar) as a candidate.
Candidate reference_candidate();

struct Prediction {
  Candidate candidate;
  double tokens_per_step = 1;
  double ms_per_step = 0;
  double tok_per_s = 0;
};

inline constexpr int kMaxTunedGamma = 8;
// Tree shapes: at most this many nodes (L(n) is measured to n = kMaxTreeNodes + 1),
// this deep, with at most this many children per node.
inline constexpr int kMaxTreeNodes = 16;
inline constexpr int kMaxTreeDepth = 8;
inline constexpr int kMaxTreeBranch = 4;

// Distinct experts per layer a real verification over n tokens touches:
// n_expert − (n_expert − n_expert_used)·expert_overlap^(n−1) (n_expert_used for
// one token, all experts in the limit; expert_overlap 1 − n_expert_used/n_expert
// is independent routing, larger shares experts between neighbours). 0 for a
// dense target.
double verify_experts(const CostMeasurements& m, double n);
// L(n) priced at the experts a real verification over n tokens touches
// (L(n) itself for a dense target); throws Error when L(n) was not measured.
double verification_ms(const CostMeasurements& m, int n);
// expert_ms: the least-squares fit of L(n) = a + b·n + expert_ms·experts[n-1]
// over the measured n, at least 0 (0 when the experts do not vary or there are
// fewer than three sizes).
double fit_expert_ms(const std::vector<double>& target_ms, const std::vector<double>& experts);
// expert_overlap from `observed` distinct experts per layer of real forwards
// over `rows` tokens (a mean; rows > 1), clamped to [0, 1].
double fit_expert_overlap(int n_expert, int n_expert_used, double rows, double observed);

// E(γ): expected accepted drafts of a step drafting γ tokens.
double expected_accepted(const CostMeasurements& m, int gamma);
// Nodes per depth 1..K of a tree candidate (full: c^d; width w: min(w, c·n_{d-1})).
std::vector<int> tree_level_sizes(const Candidate& c);
// Expected accepted nodes of a tree candidate's step (see the header comment);
// throws Error when tree_accept does not cover its depth or branching.
double expected_tree_accepted(const CostMeasurements& m, const Candidate& c);
// The prediction for one candidate; throws Error when the measurements do not
// cover it (γ beyond the measured positions or L(γ+1)).
Prediction predict(const CostMeasurements& m, const Candidate& c);
// ar, sd:1..max_gamma and pearl:1..max_gamma, and a grid of tree and dyntree
// shapes (c 2..4, w 2..4, depths to kMaxTreeDepth) whose nodes fit the measured
// L(n) and draft batch sizes, as far as the measurements reach.
std::vector<Candidate> tuned_candidates(const CostMeasurements& m, int max_gamma = kMaxTunedGamma);
// Predictions for every candidate, fastest first.
std::vector<Prediction> rank_candidates(const CostMeasurements& m, int max_gamma = kMaxTunedGamma);

struct TuneChoice {
  Candidate chosen;
  Prediction predicted;  // of the chosen candidate
  Prediction ar;         // of ar
  std::string reason;    // one sentence
};

// Predictions this close to the fastest are too close to tell apart by the
// model: the real-run check measures them. 0.25: on the inflated 1B pair the
// best predictions' measured/predicted ratios spread from 0.89 (trees) to 1.08
// (sd) in one quiet run (docs/performance.md), so a rival predicted 20% slower
// could be the fastest.
inline constexpr double kRivalMargin = 0.25;
// The check's tie: a candidate whose per-prompt slowdown against the measured
// fastest is under this many standard errors (or under kTieFloor) is as fast
// as far as the check can tell, and the simplest of those is chosen.
inline constexpr double kTieStandardErrors = 2.0;
inline constexpr double kTieFloor = 0.01;

// measured_best when set and not rejected; else the fastest predicted
// candidate that is not rejected, or ar unless that beats ar's prediction by
// more than `margin` (0.05: 5%).
TuneChoice choose_strategy(const CostMeasurements& m, double margin = 0.05);

// A StrategyConfig for `c` derived from `base` (name and its parameter set).
StrategyConfig config_for_candidate(const StrategyConfig& base, const Candidate& c);

struct CalibrationOptions {
  int n_predict = 32;       // tokens per calibration prompt
  int parallel_window = 3;  // the window the parallel family (PEARL) is measured at (0: not)
  int max_gamma = kMaxTunedGamma;
  bool trees = true;    // measure tree acceptance, L(n) to kMaxTreeNodes + 1, the node overhead
  int timing_runs = 5;  // timed forwards per batch size at least (median); more when fast
  std::function<void(const std::string&)> progress;  // may be empty
};

// Prompts for the calibration: a few texts of the bundled prompt sets
// (bench/prompts) tokenized with the target's tokenizer, or fixed token ids
// when the model has no usable tokenizer.
std::vector<std::vector<int32_t>> calibration_prompts(const Model& target);

// Context cells beyond prompt and generation a candidate may need for its
// speculative cells (a tree's nodes and the levels a dynamic tree keeps).
inline constexpr int kCandidateSpecRoom = 4 * kMaxTreeNodes + 2 * kMaxTunedGamma + 16;

// A greedy request for `n_predict` tokens after `prompt`.
GenerationRequest greedy_request(std::span<const int32_t> prompt, int n_predict);

// Greedy runs of `n_predict` tokens of each candidate on every prompt,
// candidates interleaved prompt by prompt: ms[k][p] and tokens[k][p].
struct CandidateRuns {
  std::vector<std::vector<double>> ms, tokens;
  double tok_per_s(size_t k) const;  // over all prompts
};
CandidateRuns run_candidates(const StrategyConfig& base, const std::vector<Candidate>& candidates,
                             const std::vector<std::vector<int32_t>>& prompts, int n_predict);
// tok_per_s of run_candidates for each candidate.
std::vector<double> measure_candidates(const StrategyConfig& base,
                                       const std::vector<Candidate>& candidates,
                                       const std::vector<std::vector<int32_t>>& prompts,
                                       int n_predict);

// How much machinery a candidate runs, for the check's tie: its family's
// complexity (ar, then sd, tree, dyntree, pearl with its second thread), then
// fewer rows per step first.
int complexity_rank(const Candidate& c);

struct CheckOutcome {
  std::string chosen;                 // "" when none was faster than ar
  std::vector<std::string> rejected;  // measured no faster than ar
  std::vector<CostMeasurements::Checked> checked;
  double ar_tok_per_s = 0;
};
// The real-run check's decision on `runs` of `contenders` followed by ar (the
// last row): contenders not faster than ar are rejected; of the others, the
// simplest (complexity_rank) whose per-prompt slowdown against the measured
// fastest is not significant (kTieStandardErrors, kTieFloor) is chosen. Per
// prompt, because acceptance varies by prompt far more than timing does: the
// standard error over prompts is what says whether the check resolves a gap.
CheckOutcome decide_check(const std::vector<Candidate>& contenders, const CandidateRuns& runs);

// The rank of each of `tokens` in the drafter's distribution after the
// tokens before it: ranks[j] for tokens[j], j >= 1 (ranks[0] is 0), capped at
// `cap` (cap: not among the top cap). One forward of the drafter side over
// the whole sequence.
std::vector<int> draft_ranks(std::shared_ptr<const Model> draft, Worker& worker,
                             const std::vector<int32_t>& tokens, int cap);
// The same on a drafter side (its sequence is begun anew).
std::vector<int> draft_ranks(Drafter& drafter, const std::vector<int32_t>& tokens, int cap);
// tree_accept (CostMeasurements) from per-sequence ranks of the target's
// tokens, each sequence's steps starting after index `first` (its first
// generated token, which the prompt's forward yields), up to kMaxTreeBranch children and
// `max_depth` depths. A depth no step reached repeats the depth above it.
std::vector<std::vector<std::vector<double>>> tree_acceptance(
    const std::vector<std::vector<int>>& ranks, const std::vector<int>& first, int max_depth);

// L(1..max_n) alone of `model` as a target side on `worker` (LocalTarget),
// timed as measure_costs times it (a short committed context, logits for
// every row, batch sizes interleaved pass by pass, the median of at least
// `runs` passes): for strategies sized by their input length (ppd's trees).
std::vector<double> measure_target_latencies(std::shared_ptr<const Model> model, Worker& worker,
                                             int max_n, int runs);
// The same on a target side (a GPU's, the server's).
std::vector<double> measure_target_latencies(std::unique_ptr<Target> target, int max_n, int runs);

// Measures L(1..max(max_gamma, kMaxTreeNodes)+1), the draft cost per batch
// size, chain and tree acceptance and the overheads (greedy runs of the
// families that calibrate: the reference, a chain at max_gamma and one tree
// shape on `prompts`) for `config`'s target, drafter and workers, timing
// forwards through the sides (config.draft must be set).
CostMeasurements measure_costs(const StrategyConfig& config,
                               const std::vector<std::vector<int32_t>>& prompts,
                               const CalibrationOptions& options);

}  // namespace parspec
