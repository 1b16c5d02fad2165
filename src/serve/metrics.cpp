#include "serve/metrics.h"

#include <sstream>

namespace parspec {

namespace {

std::string number(double v) {
  std::ostringstream s;
  s.precision(10);
  s << v;
  return s.str();
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name) const {
  std::ostringstream s;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    s << name << "_bucket{le=\"" << number(bounds_[i]) << "\"} " << cumulative << "\n";
  }
  s << name << "_bucket{le=\"+Inf\"} " << count_ << "\n";
  s << name << "_sum " << number(sum_) << "\n" << name << "_count " << count_ << "\n";
  return s.str();
}

ServerMetrics::ServerMetrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      tpot_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {}

void ServerMetrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

void ServerMetrics::count_generation(const std::string& strategy, const GenerationStats& st,
                                     double ttft_s, double tpot_s) {
  std::lock_guard lock(mutex_);
  PerStrategy& p = strategies_[strategy];
  ++p.requests;
  p.totals += st;
  for (const GenerationStats::DrafterUse& u : st.drafter_use) {
    PerDrafter& d = drafters_[u.name];
    ++d.requests;
    d.routed_steps += u.routed_steps;
    d.fused_tokens += u.fused_tokens;
    d.score_sum += u.score;
  }
  if (ttft_s >= 0) ttft_.observe(ttft_s);
  if (tpot_s >= 0) tpot_.observe(tpot_s);
}

std::string ServerMetrics::render(int queue_depth, int active, int64_t batch_rounds,
                                  int64_t batch_rows, int64_t batch_sequence_forwards) const {
  std::lock_guard lock(mutex_);
  std::ostringstream s;
  s << "# HELP parspec_http_requests_total HTTP requests answered, by endpoint and status.\n"
       "# TYPE parspec_http_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    s << "parspec_http_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second
      << "\"} " << n << "\n";
  s << "# HELP parspec_queue_depth Requests waiting for a generation slot.\n"
       "# TYPE parspec_queue_depth gauge\nparspec_queue_depth "
    << queue_depth
    << "\n# HELP parspec_active_requests Requests generating now (in the running batch).\n"
       "# TYPE parspec_active_requests gauge\nparspec_active_requests "
    << active
    << "\n# HELP parspec_batch_rounds_total Batched forward rounds run.\n"
       "# TYPE parspec_batch_rounds_total counter\nparspec_batch_rounds_total "
    << batch_rounds
    << "\n# HELP parspec_batch_rows_total Batch rows (tokens) run in those rounds.\n"
       "# TYPE parspec_batch_rows_total counter\nparspec_batch_rows_total "
    << batch_rows
    << "\n# HELP parspec_batch_sequence_forwards_total Per-request forwards served by rounds.\n"
       "# TYPE parspec_batch_sequence_forwards_total counter\n"
       "parspec_batch_sequence_forwards_total "
    << batch_sequence_forwards << "\n";

  const auto per_strategy = [&](const char* name, const char* type, const char* help, auto value) {
    s << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    for (const auto& [strategy, p] : strategies_)
      s << name << "{strategy=\"" << strategy << "\"} " << number(value(p)) << "\n";
  };
  per_strategy("parspec_requests_total", "counter", "Generations finished.",
               [](const PerStrategy& p) { return double(p.requests); });
  per_strategy("parspec_prompt_tokens_total", "counter", "Prompt tokens processed.",
               [](const PerStrategy& p) { return double(p.totals.n_prompt); });
  per_strategy("parspec_generated_tokens_total", "counter", "Tokens generated.",
               [](const PerStrategy& p) { return double(p.totals.n_gen); });
  per_strategy("parspec_drafted_total", "counter", "Draft tokens proposed to the target.",
               [](const PerStrategy& p) { return double(p.totals.drafted); });
  per_strategy("parspec_accepted_total", "counter", "Draft tokens the target accepted.",
               [](const PerStrategy& p) { return double(p.totals.accepted); });
  per_strategy("parspec_verify_steps_total", "counter", "Target verification steps.",
               [](const PerStrategy& p) { return double(p.totals.verify_steps); });
  per_strategy("parspec_alpha", "gauge", "Acceptance rate: accepted / drafted, since start.",
               [](const PerStrategy& p) { return p.totals.alpha(); });
  per_strategy("parspec_tau", "gauge",
               "Mean accepted length: tokens per target verification step, since start.",
               [](const PerStrategy& p) { return p.totals.tau(); });
  const auto per_drafter = [&](const char* name, const char* type, const char* help, auto value) {
    if (drafters_.empty()) return;
    s << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    for (const auto& [drafter, d] : drafters_)
      s << name << "{drafter=\"" << drafter << "\"} " << number(value(d)) << "\n";
  };
  per_drafter("parspec_drafter_routed_steps_total", "counter",
              "Steps a drafter of the pool drafted in (routing's choices).",
              [](const PerDrafter& d) { return double(d.routed_steps); });
  per_drafter("parspec_drafter_fused_tokens_total", "counter",
              "Fused tokens a drafter was the most confident for (cosine).",
              [](const PerDrafter& d) { return double(d.fused_tokens); });
  per_drafter("parspec_drafter_routing_score", "gauge",
              "Mean routing score (CoSine eq. 2) of a drafter at the end of its requests.",
              [](const PerDrafter& d) { return d.requests > 0 ? d.score_sum / d.requests : 0.0; });
  s << "# HELP parspec_time_to_first_token_seconds Time from arrival to the first token.\n"
       "# TYPE parspec_time_to_first_token_seconds histogram\n"
    << ttft_.render("parspec_time_to_first_token_seconds")
    << "# HELP parspec_time_per_output_token_seconds Mean time between output tokens of a "
       "request.\n# TYPE parspec_time_per_output_token_seconds histogram\n"
    << tpot_.render("parspec_time_per_output_token_seconds");
  return s.str();
}

std::string render_pipeline_metrics(const ForwardBatcher::Stats& b,
                                    const RequestScheduler::Stats* scheduler) {
  std::ostringstream s;
  const auto metric = [&](const char* name, const char* type, const char* help, double value) {
    s << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
      << name << " " << number(value) << "\n";
  };
  metric("parspec_batch_overlapped_rounds_total", "counter",
         "Rounds whose drafting passes ran beside the verification pass (-td).",
         double(b.overlapped));
  metric("parspec_batch_overlapped_draft_seconds_total", "counter",
         "Drafting time that ran while the target's pass ran (per round the shorter of the two).",
         b.overlapped_draft_ms / 1000.0);
  metric("parspec_batch_draft_seconds_total", "counter", "Time of the drafting passes in all.",
         b.draft_ms / 1000.0);
  metric("parspec_batch_target_passes_total", "counter", "Passes of the target model.",
         double(b.target_passes));
  metric("parspec_batch_target_sequence_forwards_total", "counter",
         "Requests' target forwards those passes served (per pass: requests in one target "
         "forward).",
         double(b.target_sequence_forwards));
  if (scheduler == nullptr) return s.str();
  const RequestScheduler::Stats& r = *scheduler;
  metric("parspec_scheduler_decisions_total", "counter",
         "Batches the request scheduler chose (CoSine eq. 8 solved over the pool).",
         double(r.decisions));
  metric("parspec_scheduler_infeasible_total", "counter",
         "Of those, decisions where no batch met the bounds (the shortest request alone).",
         double(r.infeasible));
  metric("parspec_scheduler_admitted_steps_total", "counter",
         "Request steps admitted to the coming verification pass.", double(r.admitted));
  metric("parspec_scheduler_waits_total", "counter",
         "Request steps left out of the chosen batch: they drafted beside its verification "
         "pass and verified in a later one.",
         double(r.refused));
  metric("parspec_scheduler_forced_total", "counter",
         "Steps admitted after --sched-max-wait refusals in a row.", double(r.forced));
  metric("parspec_scheduler_batch_size_sum", "counter",
         "Sum over steps (admitted or waiting) of the chosen batch's size b.", double(r.batch_sum));
  metric("parspec_scheduler_gamma_sum", "counter",
         "Sum over steps (admitted or waiting) of the draft tokens granted (after adaptive "
         "speculation).",
         double(r.gamma_sum));
  metric("parspec_scheduler_drafters_sum", "counter",
         "Sum over steps (admitted or waiting) of the drafters participating.",
         double(r.drafters_sum));
  metric("parspec_scheduler_batch_size", "gauge", "b of the last step's batch.",
         double(r.last_batch));
  metric("parspec_scheduler_gamma_total", "gauge",
         "Γ (draft tokens of the batch after adaptive speculation) of the last step.",
         double(r.last_gamma_total));
  metric("parspec_scheduler_drafters", "gauge", "Drafters of the last step.",
         double(r.last_drafters));
  return s.str();
}

}  // namespace parspec
