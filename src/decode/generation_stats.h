#pragma once
// What one generation (or a sum of them) did and how long it took: the metric
// names and definitions of bench/README.md, shared by every output that shows
// them (`generate --json`, the server's timings and metrics, bench reports).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace parspec {

// Per draft-position acceptance: how often the k-th draft token of a step was
// proposed and accepted (vLLM reports the same).
struct PositionAcceptance {
  std::vector<int64_t> proposed, accepted;
  void add(size_t position, bool was_accepted);
  // Position by position; the shorter one counts as zeros past its end.
  PositionAcceptance& operator+=(const PositionAcceptance& other);
};

struct GenerationStats {
  int64_t n_prompt = 0;
  int64_t n_gen = 0;
  double t_prompt_ms = 0;
  double t_gen_ms = 0;
  int64_t drafted = 0;       // draft tokens proposed to the target
  int64_t accepted = 0;      // draft tokens the target accepted
  int64_t verify_steps = 0;  // target verification forwards (decode steps for ar)
  int64_t target_forwards = 0;
  int64_t draft_forwards = 0;
  double t_draft_ms = 0;
  double t_verify_ms = 0;
  // A mixture-of-experts target's verification forwards: layer passes, and the
  // distinct experts they touched (model/moe.h); zero for a dense target.
  int64_t expert_layer_passes = 0;
  int64_t experts_touched = 0;
  PositionAcceptance per_position;
  int draft_window = 0;  // pearl: the window γ it ran with (measured or --pearl-window)
  // tree, dyntree with the shape chosen as they run: steps per shape ("d3c2",
  // "d4c2w3", "plain"); empty otherwise.
  std::map<std::string, int64_t> step_shapes;
  // cosine, specinfer: what each drafter of the pool did (empty for the others).
  struct DrafterUse {
    std::string name;
    int64_t routed_steps = 0;  // steps the drafter drafted in
    int64_t fused_tokens = 0;  // fused tokens (cosine) it was the most confident for
    double score = 0;          // its routing score after the last step (eq. 2 of CoSine)
  };
  std::vector<DrafterUse> drafter_use;

  // One verification's outcome: `proposed` draft tokens went to the target,
  // `accepted` of them (a path from the root) were accepted, and draft
  // positions 0..positions-1 were tried (a chain: positions == proposed; a
  // tree: the accepted depth, plus one if the end of the path had checked
  // children that were all rejected).
  void observe_step(int64_t proposed, int accepted, int positions);
  void observe_step(int proposed, int accepted) { observe_step(proposed, accepted, proposed); }

  // Adds a later generation: counts, times and per-position acceptance are
  // summed, drafters' steps and tokens summed by name. What describes the
  // state after a run (the window, a drafter's score) is the later run's
  // where it has one.
  GenerationStats& operator+=(const GenerationStats& other);

  double tok_per_s() const { return t_gen_ms > 0 ? n_gen * 1000.0 / t_gen_ms : 0; }
  double prompt_tok_per_s() const { return t_prompt_ms > 0 ? n_prompt * 1000.0 / t_prompt_ms : 0; }
  double alpha() const { return drafted > 0 ? static_cast<double>(accepted) / drafted : 0; }
  double tau() const { return verify_steps > 0 ? static_cast<double>(n_gen) / verify_steps : 0; }
  // Distinct experts a target forward touched per layer, on average (0: dense).
  double experts_per_forward() const {
    return expert_layer_passes > 0 ? static_cast<double>(experts_touched) / expert_layer_passes : 0;
  }

  // The counts, times and rates under their metric names: n_prompt, n_gen,
  // t_prompt_ms, t_gen_ms, tok_per_s, prompt_tok_per_s, drafted, accepted, tau,
  // alpha, verify_steps, target_forwards, draft_forwards, t_draft_ms,
  // t_verify_ms, draft_window, step_shapes where there are any, and
  // experts_per_forward for a mixture-of-experts target. Outputs add their own fields beside them.
  nlohmann::json to_json() const;
};

}  // namespace parspec
