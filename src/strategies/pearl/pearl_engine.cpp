#include "strategies/pearl/pearl_engine.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "sample/sampler.h"

namespace parspec {

namespace {

// Windows are short; the bound keeps (round, index) packable into one draw id.
constexpr int kMaxWindow = 1024;

std::vector<int32_t> tokens_of(const std::deque<DraftToken>& drafts) {
  std::vector<int32_t> out;
  out.reserve(drafts.size());
  for (const DraftToken& d : drafts) out.push_back(d.token);
  return out;
}

}  // namespace

bool judge_sampled(const Distribution& p, const DraftToken& draft, Rng& rng, int32_t* correction) {
  check(draft.q.size() == p.size(), "pearl: a sampled draft needs its distribution");
  return verify_token_sampled(draft.token, draft.q, p, rng, correction);
}

PearlEngine::PearlEngine(PearlDrafter& drafter, PearlTarget& target, PearlOptions options)
    : drafter_(drafter), target_(target), options_(options) {
  check(options_.window >= 1 && options_.window <= kMaxWindow, "pearl: the window γ must be in 1..",
        kMaxWindow, " (got ", options_.window, ")");
  drafter_thread_ = borrow_runner();
  drafter_thread_->post([this] { drafter_main(); });
}

void PearlEngine::set_window(int window) {
  check(window >= 1 && window <= kMaxWindow, "pearl: the window γ must be in 1..", kMaxWindow,
        " (got ", window, ")");
  wait_idle();
  options_.window = window;
}

PearlEngine::~PearlEngine() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    cancel_.store(true, std::memory_order_release);
  }
  changed_.notify_all();
  drafter_thread_.reset();  // waits for drafter_main to return
}

void PearlEngine::reset(std::span<const int32_t> verified) {
  check(!verified.empty(), "pearl: the sequence to continue is empty");
  wait_idle();
  context_.assign(verified.begin(), verified.end());
  n_verified_ = context_.size();
  last_verified_ = context_.back();
  pending_.clear();
  mode_ = options_.pre_verify ? PearlMode::kPreVerify : PearlMode::kDraft;
  round_index_ = 0;
}

void PearlEngine::step(std::vector<PearlRound>& rounds) {
  check(!context_.empty(), "pearl: step() before reset()");
  rounds.clear();
  do {
    rounds.emplace_back();
    PearlRound& round = rounds.back();
    round.mode = mode_;
    try {
      run_round(round);
    } catch (...) {
      // Never leave the drafter running on state the caller may free.
      cancel_window();
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return !busy_; });
      error_ = nullptr;
      throw;
    }
    mode_ = round.next_mode;
    ++round_index_;
  } while (rounds.back().emitted.empty());
}

void PearlEngine::run_round(PearlRound& round) {
  switch (mode_) {
    case PearlMode::kPreVerify:  // post-verify with nothing pending
    case PearlMode::kPostVerify:
      verify_and_draft(round);
      break;
    case PearlMode::kDraft:
      draft_only(round);
      break;
    case PearlMode::kVerify:
      verify_only(round);
      break;
  }
}

void PearlEngine::verify_and_draft(PearlRound& round) {
  // The drafter continues after the pending drafts as if all were accepted
  // (pre-verify: none are pending, and the forward checks only the first draft).
  start_window(options_.window);
  std::vector<int32_t> input = {last_verified_};
  for (const DraftToken& d : pending_) input.push_back(d.token);
  target_.forward(input);
  const int n_pending = static_cast<int>(pending_.size());
  round.n_proposed = n_pending + 1;
  int32_t correction = 0;
  const int n_accepted = check_pending(round, &correction);
  if (n_accepted == n_pending) {
    // The forward's last row pre-verifies the new window's first draft.
    const DraftToken& first = window_draft(0);
    round.checked.push_back(first.token);
    if (target_.check(n_pending, first, &correction)) {
      round.n_accepted = n_pending + 1;
      target_.commit(n_pending + 1);
      wait_idle();
      round.drafted = tokens_of(window_);
      for (const DraftToken& d : pending_) round.emitted.push_back(d.token);
      round.emitted.push_back(first.token);
      n_verified_ += n_pending + 1;
      last_verified_ = first.token;
      pending_.assign(std::make_move_iterator(window_.begin() + 1),
                      std::make_move_iterator(window_.end()));
      round.next_mode = options_.post_verify ? PearlMode::kPostVerify : PearlMode::kVerify;
      return;
    }
  }
  cancel_window();
  target_.commit(1 + n_accepted);
  wait_idle();
  round.drafted = tokens_of(window_);
  settle_rejection(round, n_accepted, correction);
}

void PearlEngine::draft_only(PearlRound& round) {
  start_window(options_.window);
  wait_idle();
  round.drafted = tokens_of(window_);
  pending_.assign(std::make_move_iterator(window_.begin()), std::make_move_iterator(window_.end()));
  round.next_mode = options_.post_verify ? PearlMode::kPostVerify : PearlMode::kVerify;
}

void PearlEngine::verify_only(PearlRound& round) {
  std::vector<int32_t> input = {last_verified_};
  for (const DraftToken& d : pending_) input.push_back(d.token);
  target_.forward(input);
  const int n_pending = static_cast<int>(pending_.size());
  round.n_proposed = n_pending;
  int32_t correction = 0;
  const int n_accepted = check_pending(round, &correction);
  if (n_accepted < n_pending) {
    target_.commit(1 + n_accepted);
    settle_rejection(round, n_accepted, correction);
    return;
  }
  const int32_t bonus = target_.sample(n_pending);
  target_.commit(n_pending + 1);
  for (const DraftToken& d : pending_) round.emitted.push_back(d.token);
  round.emitted.push_back(bonus);
  context_.push_back(bonus);
  n_verified_ += n_pending + 1;
  last_verified_ = bonus;
  pending_.clear();
  round.next_mode = options_.pre_verify ? PearlMode::kPreVerify : PearlMode::kDraft;
}

int PearlEngine::check_pending(PearlRound& round, int32_t* correction) {
  for (size_t i = 0; i < pending_.size(); ++i) {
    round.checked.push_back(pending_[i].token);
    if (!target_.check(static_cast<int>(i), pending_[i], correction)) return static_cast<int>(i);
    ++round.n_accepted;
  }
  return static_cast<int>(pending_.size());
}

void PearlEngine::settle_rejection(PearlRound& round, int n_accepted, int32_t correction) {
  for (int i = 0; i < n_accepted; ++i) round.emitted.push_back(pending_[i].token);
  round.emitted.push_back(correction);
  const size_t keep = n_verified_ + n_accepted;
  context_.resize(keep);
  drafter_.rollback(keep);
  context_.push_back(correction);
  n_verified_ = keep + 1;
  last_verified_ = correction;
  pending_.clear();
  round.next_mode = options_.pre_verify ? PearlMode::kPreVerify : PearlMode::kDraft;
}

void PearlEngine::start_window(int n) {
  {
    std::lock_guard lock(mutex_);
    check(!busy_, "pearl: a window was started while the drafter was busy");
    window_.clear();
    job_ = n;
    busy_ = true;
    cancel_.store(false, std::memory_order_release);
  }
  changed_.notify_all();
}

const DraftToken& PearlEngine::window_draft(size_t i) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return window_.size() > i || !busy_; });
  if (window_.size() > i) return window_[i];
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  fail("pearl: the drafter stopped before draft ", i + 1, " of its window");
}

void PearlEngine::wait_idle() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !busy_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void PearlEngine::drafter_main() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || job_ > 0; });
    if (stop_) return;
    const int n = std::exchange(job_, 0);
    const uint64_t round = round_index_;
    lock.unlock();
    try {
      for (int i = 0; i < n && !cancel_.load(std::memory_order_acquire); ++i) {
        DraftToken draft = drafter_.next(context_, (round << 10) | static_cast<uint64_t>(i));
        context_.push_back(draft.token);
        lock.lock();
        window_.push_back(std::move(draft));
        lock.unlock();
        changed_.notify_all();
      }
    } catch (...) {
      if (!lock.owns_lock()) lock.lock();
      error_ = std::current_exception();
      lock.unlock();
    }
    lock.lock();
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace parspec
