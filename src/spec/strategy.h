#pragma once
// What every decoding strategy shares: the request, the result with its
// accounting (metric names as in shared/notes/conventions.md), and the
// interface. Plain autoregressive decoding (`ar`) is the reference every
// other strategy must reproduce token for token.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/worker.h"
#include "model/model.h"
#include "sample/sampler.h"

namespace parspec {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // non-empty
  int n_predict = 128;          // maximum tokens to generate
  SamplingParams sampling;
  // Generation stops after a token for which this returns true (the token is kept).
  std::function<bool(int32_t)> is_stop;
  // Called for every generated token in order, as soon as it is final.
  std::function<void(int32_t)> on_token;
};

struct GenerationStats {
  int n_prompt = 0;
  int n_gen = 0;
  double t_prompt_ms = 0;
  double t_gen_ms = 0;
  int64_t drafted = 0;        // draft tokens proposed to the target
  int64_t accepted = 0;       // draft tokens the target accepted
  int64_t verify_steps = 0;   // target verification forwards (decode steps for ar)
  int64_t target_forwards = 0;
  int64_t draft_forwards = 0;
  double t_draft_ms = 0;
  double t_verify_ms = 0;

  double tok_per_s() const { return t_gen_ms > 0 ? n_gen * 1000.0 / t_gen_ms : 0; }
  double alpha() const { return drafted > 0 ? static_cast<double>(accepted) / drafted : 0; }
  double tau() const { return verify_steps > 0 ? static_cast<double>(n_gen) / verify_steps : 0; }
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
};

// Plain autoregressive decoding of `model` with `worker`, in a context of
// ctx_size tokens (prompt + generation).
std::unique_ptr<Strategy> make_autoregressive(std::shared_ptr<const Model> model, Worker& worker,
                                              int ctx_size);

}  // namespace parspec
