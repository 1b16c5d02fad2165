#pragma once
// The server's Prometheus metrics (text exposition format 0.0.4), named as in
// the project's conventions: drafted, accepted, alpha = accepted / drafted,
// tau = tokens per target verification step.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "decode/generation_stats.h"
#include "serve/forward_batcher.h"
#include "serve/request_scheduler.h"

namespace parspec {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Lines "NAME_bucket{le=..} N", NAME_sum, NAME_count.
  std::string render(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), + the +Inf bucket
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  // One HTTP request answered with `status` on `endpoint`.
  void count_request(const std::string& endpoint, int status);
  // A finished generation of `strategy`.
  void count_generation(const std::string& strategy, const GenerationStats& stats, double ttft_s,
                        double tpot_s);
  // The whole exposition, with the gauges passed in.
  std::string render(int queue_depth, int active, int64_t batch_rounds, int64_t batch_rows,
                     int64_t batch_sequence_forwards) const;

 private:
  struct PerStrategy {
    int64_t requests = 0;
    GenerationStats totals;  // over its finished requests
  };
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::map<std::string, PerStrategy> strategies_;
  // Pool strategies (cosine, specinfer): per drafter, over finished requests.
  struct PerDrafter {
    int64_t requests = 0, routed_steps = 0, fused_tokens = 0;
    double score_sum = 0;  // routing scores at the requests' ends
  };
  std::map<std::string, PerDrafter> drafters_;
  Histogram ttft_, tpot_;
};

// The batcher's pipeline (target passes, drafting beside them) and, with
// cosine, the request scheduler's decisions (null: none).
std::string render_pipeline_metrics(const ForwardBatcher::Stats& batcher,
                                    const RequestScheduler::Stats* scheduler);

}  // namespace parspec
