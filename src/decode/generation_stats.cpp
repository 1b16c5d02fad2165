#include "decode/generation_stats.h"

#include <algorithm>

namespace parspec {

void PositionAcceptance::add(size_t position, bool was_accepted) {
  if (proposed.size() <= position) {
    proposed.resize(position + 1, 0);
    accepted.resize(position + 1, 0);
  }
  ++proposed[position];
  if (was_accepted) ++accepted[position];
}

PositionAcceptance& PositionAcceptance::operator+=(const PositionAcceptance& other) {
  const size_t n =
      std::max({proposed.size(), accepted.size(), other.proposed.size(), other.accepted.size()});
  proposed.resize(n, 0);
  accepted.resize(n, 0);
  for (size_t i = 0; i < other.proposed.size(); ++i) proposed[i] += other.proposed[i];
  for (size_t i = 0; i < other.accepted.size(); ++i) accepted[i] += other.accepted[i];
  return *this;
}

void GenerationStats::observe_step(int64_t proposed, int n_accepted, int positions) {
  drafted += proposed;
  accepted += n_accepted;
  for (int i = 0; i < positions; ++i) per_position.add(i, i < n_accepted);
}

GenerationStats& GenerationStats::operator+=(const GenerationStats& other) {
  n_prompt += other.n_prompt;
  n_gen += other.n_gen;
  t_prompt_ms += other.t_prompt_ms;
  t_gen_ms += other.t_gen_ms;
  drafted += other.drafted;
  accepted += other.accepted;
  verify_steps += other.verify_steps;
  target_forwards += other.target_forwards;
  draft_forwards += other.draft_forwards;
  t_draft_ms += other.t_draft_ms;
  t_verify_ms += other.t_verify_ms;
  expert_layer_passes += other.expert_layer_passes;
  experts_touched += other.experts_touched;
  per_position += other.per_position;
  if (other.draft_window != 0) draft_window = other.draft_window;
  for (const auto& [shape, steps] : other.step_shapes) step_shapes[shape] += steps;
  for (const DrafterUse& use : other.drafter_use) {
    const auto same_name = [&](const DrafterUse& u) { return u.name == use.name; };
    const auto it = std::find_if(drafter_use.begin(), drafter_use.end(), same_name);
    if (it == drafter_use.end()) {
      drafter_use.push_back(use);
      continue;
    }
    it->routed_steps += use.routed_steps;
    it->fused_tokens += use.fused_tokens;
    it->score = use.score;
  }
  return *this;
}

nlohmann::json GenerationStats::to_json() const {
  nlohmann::json j = {
      {"n_prompt", n_prompt},
      {"n_gen", n_gen},
      {"t_prompt_ms", t_prompt_ms},
      {"t_gen_ms", t_gen_ms},
      {"tok_per_s", tok_per_s()},
      {"prompt_tok_per_s", prompt_tok_per_s()},
      {"drafted", drafted},
      {"accepted", accepted},
      {"tau", tau()},
      {"alpha", alpha()},
      {"verify_steps", verify_steps},
      {"target_forwards", target_forwards},
      {"draft_forwards", draft_forwards},
      {"t_draft_ms", t_draft_ms},
      {"t_verify_ms", t_verify_ms},
      {"draft_window", draft_window},
  };
  if (!step_shapes.empty()) j["step_shapes"] = step_shapes;
  if (expert_layer_passes > 0) j["experts_per_forward"] = experts_per_forward();
  return j;
}

}  // namespace parspec
