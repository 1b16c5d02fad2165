// The cost model's measurement harness: forward latencies timed through the
// sides (decode/sides.h), acceptance and overheads from greedy runs of the
// families that calibrate (tuning/cost_family.h).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"
#include "decode/local_model.h"
#include "model/forward_timing.h"
#include "tuning/cost_family.h"
#include "tuning/cost_model.h"
#include "tuning/side_timers.h"

namespace parspec {

namespace {

// The least-squares non-decreasing fit of v (pool adjacent violators).
std::vector<double> non_decreasing(const std::vector<double>& v) {
  std::vector<double> sums, out;
  std::vector<int> counts;
  for (double x : v) {
    sums.push_back(x);
    counts.push_back(1);
    while (sums.size() > 1 &&
           sums[sums.size() - 2] / counts[counts.size() - 2] > sums.back() / counts.back()) {
      sums[sums.size() - 2] += sums.back();
      counts[counts.size() - 2] += counts.back();
      sums.pop_back();
      counts.pop_back();
    }
  }
  for (size_t b = 0; b < sums.size(); ++b)
    for (int i = 0; i < counts[b]; ++i) out.push_back(sums[b] / counts[b]);
  return out;
}

// v linearly interpolated at 1-based position x (v[0] is at 1), clamped to its ends.
double interpolated(const std::vector<double>& v, double x) {
  const double i = std::clamp(x - 1, 0.0, static_cast<double>(v.size() - 1));
  const size_t lo = static_cast<size_t>(i);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (i - lo) * (v[hi] - v[lo]);
}

}  // namespace

std::vector<int> draft_ranks(std::shared_ptr<const Model> draft, Worker& worker,
                             const std::vector<int32_t>& tokens, int cap) {
  ModelDrafter drafter(std::move(draft), worker);
  return draft_ranks(drafter, tokens, cap);
}

std::vector<int> draft_ranks(Drafter& drafter, const std::vector<int32_t>& tokens, int cap) {
  check(!tokens.empty() && cap >= 1, "draft_ranks: no tokens or a bad cap");
  const int n_vocab = drafter.n_vocab();
  drafter.begin(static_cast<int>(tokens.size()) + 1);
  const std::vector<float> logits = drafter.propose(chain_batch(0, tokens, true));
  std::vector<int> ranks(tokens.size(), 0);
  for (size_t j = 1; j < tokens.size(); ++j) {
    // The order of top_c: higher first, the lower id on ties.
    const float* row = &logits[(j - 1) * n_vocab];
    const int32_t t = tokens[j];
    int rank = 0;
    for (int32_t i = 0; i < n_vocab && rank < cap; ++i)
      rank += row[i] > row[t] || (row[i] == row[t] && i < t);
    ranks[j] = rank;
  }
  return ranks;
}

std::vector<std::vector<std::vector<double>>> tree_acceptance(
    const std::vector<std::vector<int>>& ranks, const std::vector<int>& first, int max_depth) {
  check(ranks.size() == first.size() && max_depth >= 1, "tree_acceptance: bad arguments");
  std::vector<std::vector<std::vector<double>>> out;
  for (int c = 1; c <= kMaxTreeBranch; ++c) {
    // Steps of a c-ary tree max_depth deep along each sequence: at depth d the
    // target's token is counted if the depths above it were all accepted.
    std::vector<int64_t> reached(max_depth, 0);
    std::vector<std::vector<int64_t>> at_rank(max_depth, std::vector<int64_t>(c, 0));
    for (size_t s = 0; s < ranks.size(); ++s) {
      const int n = static_cast<int>(ranks[s].size());
      // The first generated token comes from the prompt's forward; steps follow it.
      for (int i = std::max(first[s] + 1, 1); i < n;) {
        int accepted = 0;
        for (int d = 0; d < max_depth && i + d < n; ++d) {
          ++reached[d];
          const int r = ranks[s][i + d];
          if (r >= c) break;
          ++at_rank[d][r];
          accepted = d + 1;
        }
        i += accepted + 1;  // the accepted path and the target's own token
      }
    }
    std::vector<std::vector<double>> table;
    for (int d = 0; d < max_depth; ++d) {
      std::vector<double> row(c, 0.0);
      if (reached[d] == 0 && d > 0) {
        row = table.back();
      } else {
        for (int r = 0; r < c && reached[d] > 0; ++r)
          row[r] = static_cast<double>(at_rank[d][r]) / reached[d];
      }
      table.push_back(std::move(row));
    }
    out.push_back(std::move(table));
  }
  return out;
}

std::vector<double> measure_target_latencies(std::shared_ptr<const Model> model, Worker& worker,
                                             int max_n, int runs) {
  return measure_target_latencies(std::make_unique<LocalTarget>(std::move(model), worker), max_n,
                                  runs);
}

std::vector<double> measure_target_latencies(std::unique_ptr<Target> target, int max_n, int runs) {
  check(max_n >= 1 && runs >= 1, "measure_target_latencies: max_n and runs must be positive");
  TargetTimer timer(*target, max_n);
  std::vector<std::vector<double>> times(max_n);
  const auto pass = [&](bool keep) {
    for (int n = 1; n <= max_n; ++n) {
      const double ms = timer.forward_ms(n);
      if (keep) times[n - 1].push_back(ms);
    }
  };
  // A warm-up pass says how many passes fit in about two seconds (at least `runs`).
  const Stopwatch first;
  pass(false);
  const int passes =
      std::clamp(static_cast<int>(2000 / std::max(first.elapsed_ms(), 1e-3)), runs, 51);
  for (int r = 0; r < passes; ++r) pass(true);
  std::vector<double> out;
  for (const auto& t : times) out.push_back(median(t));
  return out;
}

CostMeasurements measure_costs(const StrategyConfig& config,
                               const std::vector<std::vector<int32_t>>& prompts,
                               const CalibrationOptions& options) {
  check(config.target && config.draft && config.target_worker,
        "tuning needs a target, a draft model and a worker");
  check(options.max_gamma >= 1 && options.n_predict >= 1 && options.timing_runs >= 1,
        "tuning: bad calibration options");
  check(!prompts.empty(), "tuning: no calibration prompts");
  const Stopwatch total;
  const auto say = [&](const std::string& s) {
    if (options.progress) options.progress(s);
  };
  Worker& target_worker = *config.target_worker;
  Worker& draft_worker = config.draft_worker ? *config.draft_worker : target_worker;

  CostMeasurements m;
  const int n_threads_both =
      target_worker.n_threads() +
      (&draft_worker == &target_worker ? target_worker.n_threads() : draft_worker.n_threads());
  m.parallel = n_threads_both <= static_cast<int>(allowed_cores().size());

  // Forward latencies, batch sizes interleaved run by run so that a change in
  // the machine's load affects them all alike.
  const int max_n = std::max(options.max_gamma, options.trees ? kMaxTreeNodes : 0) + 1;
  // Tree levels the drafter scores in one forward: at most kMaxTreeNodes / 2
  // (a drafted level has a level below it).
  const int max_draft_n = options.trees ? kMaxTreeNodes / 2 : 1;
  // The families that calibrate: the reference, a chain at the longest γ, a
  // tree shape whose cost per step, beyond the formula's, prices a node.
  const int gamma = options.max_gamma;
  const Candidate reference = reference_candidate();
  const Candidate chain =
      calibrating_strategy(CalibrationRole::chain).cost->calibration_candidate(gamma);
  const Candidate tree_shape =
      calibrating_strategy(CalibrationRole::tree).cost->calibration_candidate(0);
  say("tune: timing target forwards over 1.." + std::to_string(max_n) +
      " tokens and draft forwards over 1.." + std::to_string(max_draft_n) + ", and running " +
      reference.label() + ", " + chain.label() +
      (options.trees ? " and " + tree_shape.label() : "") + " on " +
      std::to_string(prompts.size()) + " calibration prompts");
  const MoeConfig& moe = config.target->config().moe;
  const std::unique_ptr<Target> timed_target = make_target_side(config);
  TargetTimer target_timer(*timed_target, max_n,
                           moe.enabled() ? &config.target->expert_tally() : nullptr);
  std::vector<std::vector<double>> target_expert_counts(max_n);
  // Through the sides: where the models run on a GPU, so are they timed.
  const std::unique_ptr<Drafter> timed_drafter = make_drafter_side(config);
  DrafterTimer draft_timer(*timed_drafter, max_draft_n);
  std::vector<std::vector<double>> target_times(max_n), draft_times(max_draft_n);
  // One pass times every batch size once, and the draft twice. A warm-up pass
  // says how many passes fit in about half a second (small models are timed
  // often: their forwards are short and noisy); the passes are spread between
  // the calibration generations below, so that the forwards and the real runs
  // see the same load of the machine.
  const auto timing_pass = [&](int r, bool keep) {
    for (int n = 1; n <= max_n; ++n) {
      const double ms = target_timer.forward_ms(n);
      if (keep) target_times[n - 1].push_back(ms);
      if (keep) target_expert_counts[n - 1].push_back(target_timer.last_experts());
    }
    for (int n = 1; n <= max_draft_n; ++n)
      for (int k = 0; k < (n == 1 ? 2 : 1); ++k) {
        const double ms = draft_timer.forward_ms(n);
        if (keep) draft_times[n - 1].push_back(ms);
      }
  };
  const Stopwatch first_pass;
  timing_pass(0, false);
  const double pass_ms = first_pass.elapsed_ms();
  const int runs =
      std::clamp(static_cast<int>(500 / std::max(pass_ms, 1e-3)), options.timing_runs, 51);
  const int passes_per_prompt =
      std::max(1, (runs + static_cast<int>(prompts.size()) - 1) / static_cast<int>(prompts.size()));
  int pass = 1;

  // Acceptance of greedy chain drafting at the longest γ, and what real
  // generations (the reference and that chain, prompt by prompt) cost beyond
  // their forwards.
  StrategyConfig sized = config;
  int longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, static_cast<int>(p.size()));
  sized.ctx_size = longest + options.n_predict + kCandidateSpecRoom;
  const std::unique_ptr<Strategy> sd_strategy = make_strategy(config_for_candidate(sized, chain));
  const std::unique_ptr<Strategy> ar_strategy =
      make_strategy(config_for_candidate(sized, reference));
  std::unique_ptr<Strategy> tree_strategy;
  if (options.trees) tree_strategy = make_strategy(config_for_candidate(sized, tree_shape));
  std::vector<int64_t> proposed(gamma, 0), accepted(gamma, 0);
  GenerationStats ar_total, sd_total, tree_total;
  // The target's greedy continuations (prompt + tokens), for tree acceptance.
  std::vector<std::vector<int32_t>> continuations;
  std::vector<int> generated_from;
  for (const auto& prompt : prompts) {
    for (int k = 0; k < passes_per_prompt; ++k) timing_pass(pass++, true);
    const GenerationRequest request = greedy_request(prompt, options.n_predict);
    GenerationResult ar_result = ar_strategy->generate(request);
    const GenerationStats& ar = ar_result.stats;
    generated_from.push_back(static_cast<int>(prompt.size()));
    continuations.push_back(prompt);
    continuations.back().insert(continuations.back().end(), ar_result.tokens.begin(),
                                ar_result.tokens.end());
    ar_total.n_gen += ar.n_gen;
    ar_total.t_gen_ms += ar.t_gen_ms;
    const GenerationStats st = sd_strategy->generate(request).stats;
    m.calibration_tokens += st.n_gen;
    sd_total.t_gen_ms += st.t_gen_ms;
    sd_total.verify_steps += st.verify_steps;
    sd_total.draft_forwards += st.draft_forwards;
    sd_total.drafted += st.drafted;
    sd_total.target_forwards += st.target_forwards;
    sd_total.t_verify_ms += st.t_verify_ms;
    sd_total.expert_layer_passes += st.expert_layer_passes;
    sd_total.experts_touched += st.experts_touched;
    const PositionAcceptance& pa = st.per_position;
    for (size_t k = 0; k < pa.proposed.size() && k < proposed.size(); ++k) {
      proposed[k] += pa.proposed[k];
      accepted[k] += pa.accepted[k];
    }
    if (tree_strategy) {
      const GenerationStats tree = tree_strategy->generate(request).stats;
      tree_total.t_gen_ms += tree.t_gen_ms;
      tree_total.verify_steps += tree.verify_steps;
    }
  }
  // Medians, made non-decreasing in n (a forward over more tokens costs no
  // less; a dip is the machine's noise).
  for (const auto& times : target_times) m.target_ms.push_back(median(times));
  for (const auto& times : draft_times) m.draft_batch_ms.push_back(median(times));
  m.target_ms = non_decreasing(m.target_ms);
  m.draft_batch_ms = non_decreasing(m.draft_batch_ms);
  m.draft_ms = m.draft_batch_ms[0];
  if (moe.enabled()) {
    // What an expert costs, from the timed forwards (their experts vary with
    // n); how many a real verification touches, from sd's.
    m.n_expert = moe.n_expert;
    m.n_expert_used = moe.n_expert_used;
    for (const auto& counts : target_expert_counts) {
      double sum = 0;
      for (double c : counts) sum += c;
      m.target_experts.push_back(counts.empty() ? 0 : sum / static_cast<double>(counts.size()));
    }
    m.expert_ms = fit_expert_ms(m.target_ms, m.target_experts);
    if (sd_total.verify_steps > 0 && sd_total.expert_layer_passes > 0)
      m.expert_overlap = fit_expert_overlap(
          m.n_expert, m.n_expert_used,
          1 + static_cast<double>(sd_total.drafted) / static_cast<double>(sd_total.verify_steps),
          sd_total.experts_per_forward());
  }
  // L at a fractional row count, priced at a real verification's experts.
  const auto verification_at = [&](double rows) {
    const double ms = interpolated(m.target_ms, rows);
    if (!moe.enabled()) return ms;
    return ms + m.expert_ms * (verify_experts(m, rows) - interpolated(m.target_experts, rows));
  };
  // ar: one target step per token. sd: per step one verification over
  // (drafts + 1) tokens (taken at γ, which nearly all steps draft) and its
  // draft forwards; what remains after the target's overhead is the drafts'.
  // The target's overhead may be negative: a forward timed alone (after the
  // drafter's, other batch sizes') can be slower than one of a run of ar steps.
  if (ar_total.n_gen > 0)
    m.target_overhead_ms =
        std::max(-0.5 * m.target_ms[0], ar_total.t_gen_ms / ar_total.n_gen - m.target_ms[0]);
  if (sd_total.verify_steps > 0 && sd_total.draft_forwards > 0) {
    const double steps = static_cast<double>(sd_total.verify_steps);
    // The verifications' real forwards (the target's meter) against L at
    // their mean row count: the excess over ar's, per row beyond the first.
    const double rows = 1 + sd_total.drafted / steps;
    if (sd_total.target_forwards > 0 && rows > 1.5) {
      const double real_ms = sd_total.t_verify_ms / sd_total.target_forwards;
      const double excess = real_ms - verification_at(rows) - m.target_overhead_ms;
      m.verify_row_ms =
          std::clamp(excess / (rows - 1), -0.5 * m.target_ms[0] / (rows - 1), m.target_ms[0]);
    }
    const double drafts_per_step = sd_total.draft_forwards / steps;
    const double explained = drafts_per_step * m.draft_ms + verification_at(rows) +
                             m.target_overhead_ms + (rows - 1) * m.verify_row_ms;
    m.draft_overhead_ms = std::max(0.0, (sd_total.t_gen_ms / steps - explained) / drafts_per_step);
  }
  for (size_t k = 0; k < proposed.size(); ++k) {
    const double rate = proposed[k] > 0 ? static_cast<double>(accepted[k]) / proposed[k] : 0;
    m.accept_prefix.push_back(std::min(k == 0 ? 1.0 : m.accept_prefix.back(), rate));
  }

  if (options.trees) {
    // Per-depth, per-rank acceptance from the drafter's ranks of the target's
    // tokens; the tree shape's real runs price what a node costs beyond the
    // forwards (per step, so that acceptance does not enter).
    std::vector<std::vector<int>> ranks;
    const std::unique_ptr<Drafter> ranker = make_drafter_side(config);
    for (const auto& tokens : continuations)
      ranks.push_back(draft_ranks(*ranker, tokens, kMaxTreeBranch));
    m.tree_accept = tree_acceptance(ranks, generated_from, kMaxTreeDepth);
    const Prediction formula = predict(m, tree_shape);
    if (tree_total.verify_steps > 0)
      m.tree_node_overhead_ms =
          std::max(0.0, (tree_total.t_gen_ms / tree_total.verify_steps - formula.ms_per_step) /
                            tree_nodes(tree_level_sizes(tree_shape)));
  }

  // The parallel family (PEARL) at one window, against the formula with the
  // measurements above.
  const int window = std::min(options.parallel_window, gamma);
  if (window >= 1) {
    const StrategyInfo& parallel = calibrating_strategy(CalibrationRole::parallel);
    const Candidate at_window = parallel.cost->calibration_candidate(window);
    say("tune: measuring " + parallel.name + " at window " + std::to_string(window));
    const std::unique_ptr<Strategy> pearl = make_strategy(config_for_candidate(sized, at_window));
    int64_t n_gen = 0;
    double t_gen_ms = 0;
    for (const auto& prompt : prompts) {
      const GenerationRequest request = greedy_request(prompt, options.n_predict);
      const GenerationStats st = pearl->generate(request).stats;
      n_gen += st.n_gen;
      t_gen_ms += st.t_gen_ms;
    }
    const double formula = predict(m, at_window).tok_per_s;
    if (n_gen > 0 && t_gen_ms > 0 && formula > 0)
      m.pearl_efficiency = std::clamp(n_gen * 1000.0 / t_gen_ms / formula, 0.05, 1.0);
  }
  m.calibration_s = total.elapsed_ms() / 1000.0;
  return m;
}

}  // namespace parspec
