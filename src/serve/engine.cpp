#include "serve/engine.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/threads.h"
#include "decode/local_model.h"
#include "decode/registry.h"
#include "tokenizer/stream_decoder.h"

namespace parspec {

namespace {

double ms_since(CompletionJob::Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(CompletionJob::Clock::now() - t).count();
}

// A job's text as it is generated: tokens are decoded as they come, grouped
// by target step (the last token of a step is the target's own, the ones
// before it accepted drafts), and released to the job once no stop string can
// still start in them. The text ends before the first stop string, as
// OpenAI's API does.
class TextAssembler {
 public:
  TextAssembler(const Tokenizer& tokenizer, CompletionJob& job) : decoder_(tokenizer), job_(job) {
    for (const std::string& s : job.stop) longest_stop_ = std::max(longest_stop_, s.size());
  }

  // Adds a generated token; true when the text now contains a stop string.
  bool add(int32_t token) {
    const std::string piece = decoder_.feed(token);
    group_.push_back(piece);
    const size_t before = text_.size();
    text_ += piece;
    if (stop_at_ == std::string::npos && !job_.stop.empty() && !piece.empty()) {
      const size_t from = before >= longest_stop_ ? before - longest_stop_ + 1 : 0;
      for (const std::string& s : job_.stop) {
        const size_t at = text_.find(s, from);
        if (at != std::string::npos) stop_at_ = std::min(stop_at_, at);
      }
    }
    return stop_at_ != std::string::npos;
  }

  // The current step ended (the target runs its next forward, or the request
  // finished): its pieces get their sources and what is safe is released.
  void close_step(bool final) {
    for (size_t i = 0; i < group_.size(); ++i)
      staged_.push_back({std::move(group_[i]), i + 1 < group_.size()});
    group_.clear();
    if (final) {
      // An unfinished character at the end comes out as U+FFFD, as generate prints it.
      std::string rest = decoder_.flush();
      text_ += rest;
      staged_.push_back({std::move(rest), false});
    }
    size_t limit = std::min(stop_at_, text_.size());
    if (!final && longest_stop_ > 0)
      limit = std::min(limit, text_.size() >= longest_stop_ - 1 ? text_.size() - (longest_stop_ - 1)
                                                                : size_t{0});
    std::vector<OutputPiece> out;
    while (!staged_.empty()) {
      OutputPiece& p = staged_.front();
      if (released_ + p.text.size() > limit) {
        if (!final) break;
        p.text.resize(limit - released_);
      }
      released_ += p.text.size();
      if (!p.text.empty()) out.push_back(std::move(p));
      staged_.pop_front();
    }
    if (out.empty()) return;
    std::lock_guard lock(job_.mutex);
    for (OutputPiece& p : out) job_.pieces.push_back(std::move(p));
    job_.cv.notify_all();
  }

  bool stopped() const { return stop_at_ != std::string::npos; }

 private:
  StreamDecoder decoder_;
  CompletionJob& job_;
  std::string text_;
  std::vector<std::string> group_;
  std::deque<OutputPiece> staged_;
  size_t released_ = 0;
  size_t stop_at_ = std::string::npos;
  size_t longest_stop_ = 0;
};

}  // namespace

Engine::Engine(EngineOptions options, const Tokenizer& tokenizer)
    : options_(std::move(options)),
      tokenizer_(tokenizer),
      cpu_target_(options_.target_executor == nullptr
                      ? std::make_unique<CpuExecutor>(*options_.base.target_worker)
                      : nullptr),
      cpu_draft_(options_.draft_executor == nullptr && options_.draft_worker != nullptr
                     ? std::make_unique<CpuExecutor>(*options_.draft_worker)
                     : nullptr),
      batcher_(options_.target_executor != nullptr ? *options_.target_executor : *cpu_target_,
               options_.token_budget,
               options_.draft_executor != nullptr ? options_.draft_executor : cpu_draft_.get(),
               options_.base.target.get()) {
  check(options_.slots >= 1, "at least one generation slot is needed");
  for (int i = 0; i < options_.slots; ++i)
    slots_.push_back(start_thread("slot " + std::to_string(i), [this] { slot_main(); }));
}

Engine::~Engine() {
  drain();
}

bool Engine::submit(std::shared_ptr<CompletionJob> job) {
  std::lock_guard lock(mutex_);
  // Jobs in the queue wait for a slot (a free slot takes one at once).
  if (draining_ || active_ + static_cast<int>(queue_.size()) >= options_.slots + options_.max_queue)
    return false;
  queue_.push_back(std::move(job));
  cv_.notify_one();
  return true;
}

void Engine::drain() {
  {
    std::lock_guard lock(mutex_);
    draining_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : slots_)
    if (t.joinable()) t.join();
}

int Engine::queue_depth() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(queue_.size());
}

std::optional<RequestScheduler::Stats> Engine::scheduler_stats() const {
  if (!options_.scheduler) return std::nullopt;
  return options_.scheduler->stats();
}

int Engine::active() const {
  std::lock_guard lock(mutex_);
  return active_;
}

void Engine::slot_main() {
  for (;;) {
    std::shared_ptr<CompletionJob> job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return !queue_.empty() || draining_; });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      ++active_;
    }
    batcher_.join();
    std::string error;
    try {
      run(*job);
    } catch (const std::exception& e) {
      error = e.what();
      // The client gets it as a 500; the operator sees it here.
      std::fprintf(stderr, "serve: request failed: %s\n", e.what());
    }
    batcher_.leave();
    {
      std::lock_guard lock(mutex_);
      --active_;
    }
    std::lock_guard lock(job->mutex);
    job->error = error;
    job->finished = true;
    job->cv.notify_all();
  }
}

void Engine::run(CompletionJob& job) {
  TextAssembler text(tokenizer_, job);
  StrategyConfig config = options_.base;
  config.ctx_size = static_cast<int>(job.prompt.size()) + job.max_tokens;
  // A strategy per request: none times its sides, under other requests' load.
  config.time_sides_at_start = false;
  config.make_target = [&](const StrategyConfig& c) -> std::unique_ptr<Target> {
    return std::make_unique<LocalTarget>(c.target, batcher_, [&text] { text.close_step(false); });
  };
  // Requests run on the server's threads, which must not call MPI: easyspec drafts on threads.
  config.make_group_executor = nullptr;
  // Nor use an executor the batcher's rounds use: easyspec's pieces run on the draft worker.
  config.draft_executor = nullptr;
  // Pool strategies (cosine) share fewer drafters per request as more requests verify at once.
  config.verifier_load = [this] { return active(); };
  // cosine: each step asks the request scheduler for its verification pass, γ
  // and drafters; a refused step waits for the next target pass, then asks again.
  RequestScheduler* const scheduler = options_.scheduler.get();
  const int pool_id = scheduler != nullptr ? scheduler->add() : -1;
  struct LeavePool {
    RequestScheduler* scheduler;
    int id;
    ~LeavePool() {
      if (scheduler != nullptr) scheduler->remove(id);
    }
  } leave_pool{scheduler, pool_id};
  CompletionJob::Scheduling scheduling;
  if (scheduler != nullptr)
    config.schedule_step = [&](int length, int gamma, int drafters) {
      const PoolRequest state{length, gamma, length * options_.kv_mib_per_token};
      const StepDecision d = scheduler->admit(pool_id, state, drafters, batcher_, scheduling.waits);
      ++scheduling.steps;
      scheduling.forced += d.forced ? 1 : 0;
      scheduling.batch_sum += d.batch;
      scheduling.gamma_sum += d.gamma;
      scheduling.drafters_sum += d.drafters;
      return StrategyConfig::StepGrant{d.gamma, d.drafters};
    };
  if (config.draft || !config.drafters.empty())
    config.make_drafter = [&](const StrategyConfig& c) -> std::unique_ptr<Drafter> {
      return std::make_unique<ModelDrafter>(c.draft, batcher_);
    };
  const std::unique_ptr<Strategy> strategy = make_strategy(config);

  GenerationRequest request;
  request.prompt = job.prompt;
  request.n_predict = job.max_tokens;
  request.sampling = job.sampling;
  bool end_of_text = false;
  CompletionJob::Clock::time_point first_token{}, last_token{};
  int n_tokens = 0;
  request.on_token = [&](int32_t t) {
    last_token = CompletionJob::Clock::now();
    if (n_tokens++ == 0) {
      first_token = last_token;
      job.ttft_ms = ms_since(job.arrival);
    }
    if (tokenizer_.is_end_of_generation(t) && !job.ignore_eos) {
      end_of_text = true;
      return;
    }
    text.add(t);
  };
  request.is_stop = [&](int32_t) {
    return end_of_text || text.stopped() || job.cancelled.load(std::memory_order_relaxed);
  };
  GenerationResult result = strategy->generate(request);
  text.close_step(true);

  const double tpot_s =
      n_tokens > 1
          ? std::chrono::duration<double>(last_token - first_token).count() / (n_tokens - 1)
          : -1.0;
  metrics_.count_generation(strategy->name(), result.stats, job.ttft_ms / 1000.0, tpot_s);
  std::lock_guard lock(job.mutex);
  job.tokens = std::move(result.tokens);
  job.stats = result.stats;
  job.strategy = strategy->name();
  job.scheduling = scheduling;
  job.finish_reason = (end_of_text || text.stopped()) ? "stop" : "length";
}

}  // namespace parspec
