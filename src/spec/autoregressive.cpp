#include <chrono>

#include "core/error.h"
#include "spec/strategy.h"

namespace parspec {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Prompts are prefilled in chunks of this many tokens; batch invariance makes
// the result independent of the chunk size, which only bounds memory.
constexpr size_t kPrefillChunk = 256;

class Autoregressive final : public Strategy {
 public:
  Autoregressive(std::shared_ptr<const Model> model, Worker& worker, int ctx_size)
      : model_(std::move(model)), worker_(worker), ctx_size_(ctx_size) {}

  std::string name() const override { return "ar"; }

  GenerationResult generate(const GenerationRequest& req) override {
    check(!req.prompt.empty(), "the prompt is empty");
    check(req.n_predict >= 0, "n_predict must not be negative");
    const int64_t needed = static_cast<int64_t>(req.prompt.size()) + req.n_predict;
    check(needed <= ctx_size_, "prompt (", req.prompt.size(), " tokens) + ", req.n_predict,
          " tokens to generate exceed the context size ", ctx_size_, " (raise -c/--ctx-size)");
    KvCache kv(model_->config(), ctx_size_);
    Sampler sampler(req.sampling);
    GenerationResult result;
    GenerationStats& st = result.stats;
    st.n_prompt = static_cast<int>(req.prompt.size());
    const int n_vocab = model_->config().n_vocab;

    const auto t0 = Clock::now();
    std::vector<float> logits;
    for (size_t begin = 0; begin < req.prompt.size(); begin += kPrefillChunk) {
      const size_t end = std::min(req.prompt.size(), begin + kPrefillChunk);
      std::span<const int32_t> chunk(req.prompt.data() + begin, end - begin);
      logits = model_->forward(worker_, Batch::chain(kv, chunk, false), kv);
      commit_all(kv);
    }
    const auto t1 = Clock::now();
    st.t_prompt_ms = ms_between(t0, t1);

    for (int i = 0; i < req.n_predict; ++i) {
      const int32_t token = sampler.sample(logits.data(), n_vocab);
      result.tokens.push_back(token);
      if (req.on_token) req.on_token(token);
      if ((req.is_stop && req.is_stop(token)) || i + 1 == req.n_predict) break;
      logits = model_->forward(worker_, Batch::chain(kv, std::span(&token, 1), true), kv);
      commit_all(kv);
      ++st.target_forwards;
    }
    st.n_gen = static_cast<int>(result.tokens.size());
    st.verify_steps = st.n_gen;
    st.t_gen_ms = ms_between(t1, Clock::now());
    st.t_verify_ms = st.t_gen_ms;
    return result;
  }

 private:
  static void commit_all(KvCache& kv) {
    std::vector<int32_t> path(kv.n_spec());
    for (int32_t i = 0; i < kv.n_spec(); ++i) path[i] = i;
    kv.commit(path);
  }

  std::shared_ptr<const Model> model_;
  Worker& worker_;
  int ctx_size_;
};

}  // namespace

std::unique_ptr<Strategy> make_autoregressive(std::shared_ptr<const Model> model, Worker& worker,
                                              int ctx_size) {
  return std::make_unique<Autoregressive>(std::move(model), worker, ctx_size);
}

}  // namespace parspec
