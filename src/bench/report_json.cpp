// The JSON form of a benchmark report (key names: bench/README.md).
#include <cmath>

#include "bench/report.h"

namespace parspec {

namespace {

using ojson = nlohmann::ordered_json;

// Keeps JSON numbers readable (no 17-digit timings) without losing anything
// that the measurement noise does not already swamp.
double rounded(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

}  // namespace

ojson report_json(const BenchReport& report) {
  const MachineInfo& m = report.machine;
  ojson machine = {
      {"cpu_model", m.cpu_model},
      {"cores", m.cores},
      {"threads", m.threads},
      {"threads_draft", m.threads_draft},
      {"memory_bytes", m.memory_bytes},
      {"memory_gib", rounded(m.memory_bytes / double(1 << 30), 2)},
  };
  const auto or_null = [](bool defined, double value) {
    return defined ? ojson(value) : ojson(nullptr);
  };
  ojson results = ojson::array();
  for (const BenchResult& r : report.results) {
    ojson positions = ojson::array();
    for (double rate : r.position_acceptance()) positions.push_back(rounded(rate, 4));
    results.push_back({
        {"strategy", r.strategy},
        {"prompt_set", r.prompt_set},
        {"tok_per_s", rounded(r.tok_per_s(), 3)},
        {"speedup", or_null(r.speedup > 0, rounded(r.speedup, 4))},
        {"tau", rounded(r.tau(), 4)},
        {"alpha", or_null(r.total.drafted > 0, rounded(r.alpha(), 4))},
        {"t_draft_ms", rounded(r.t_draft_ms(), 4)},
        {"t_verify_ms", rounded(r.t_verify_ms(), 4)},
        {"experts_per_forward",
         or_null(r.total.expert_layer_passes > 0, rounded(r.total.experts_per_forward(), 4))},
        {"n_gen", r.total.n_gen},
        {"n_prompt", r.total.n_prompt},
        {"runs", r.runs},
        {"t_gen_ms", rounded(r.total.t_gen_ms, 3)},
        {"t_prompt_ms", rounded(r.total.t_prompt_ms, 3)},
        {"prompt_tok_per_s", rounded(r.prompt_tok_per_s(), 3)},
        {"drafted", r.total.drafted},
        {"accepted", r.total.accepted},
        {"verify_steps", r.total.verify_steps},
        {"target_forwards", r.total.target_forwards},
        {"draft_forwards", r.total.draft_forwards},
        {"t_draft_ms_total", rounded(r.total.t_draft_ms, 3)},
        {"t_verify_ms_total", rounded(r.total.t_verify_ms, 3)},
        {"per_position_acceptance", positions},
        {"per_position_proposed", r.total.per_position.proposed},
        {"per_position_accepted", r.total.per_position.accepted},
        {"mismatch", report.exactness_checked ? ojson(r.mismatches) : ojson(nullptr)},
        {"checked_runs", r.checked},
    });
    if (!r.total.step_shapes.empty()) results.back()["step_shapes"] = r.total.step_shapes;
  }
  ojson mismatches = ojson::array();
  for (const Mismatch& x : report.mismatches) {
    mismatches.push_back({{"strategy", x.strategy},
                          {"prompt_set", x.prompt_set},
                          {"prompt_index", x.prompt_index},
                          {"repeat", x.repeat},
                          {"position", x.position}});
  }
  return {
      {"machine", machine},       {"config", report.config},
      {"results", results},       {"exactness_checked", report.exactness_checked},
      {"mismatches", mismatches},
  };
}

}  // namespace parspec
