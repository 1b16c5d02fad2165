#pragma once
// PEARL's scheduler (Liu et al., "PEARL: Parallel Speculative Decoding with
// Adaptive Draft Length"), free of models so that tests can drive it with
// scripted token streams. A drafter thread and the caller's thread (the
// target) run at the same time; every round both start from the same
// sequence, and the round's verdict picks the next round's mode:
//
//   pre-verify  (the sequence is fully verified): the drafter drafts a window
//     of γ tokens while the target runs its one-token forward over the last
//     verified token, whose logits judge the first draft. Rejected: emit the
//     correction, drop the rest of the window (the drafter stops at once) and
//     stay in pre-verify. Accepted: emit it, keep the other γ-1 drafts pending,
//     go to post-verify.
//   post-verify (drafts are pending): the drafter drafts the next window,
//     assuming every pending draft will be accepted, while the target runs one
//     forward over [last verified, pending...]: its rows judge the pending
//     drafts and then the new window's first draft. All accepted: emit them
//     (no bonus token: the next forward supplies that row), the rest of the new
//     window becomes pending, stay in post-verify. A rejection: emit the
//     accepted prefix and the correction, roll the drafter back, go to
//     pre-verify.
//
// Ablations (the paper's table 4): without pre-verify, a fully verified
// sequence is first drafted with the target idle (a "draft" round) and the
// next post-verify round judges the whole window; without post-verify, pending
// drafts are judged by a plain verification with the drafter idle (a "verify"
// round, which emits a bonus token after full acceptance). Without both, PEARL
// is classic speculative decoding.
//
// Ownership of state between the threads: the context (verified tokens,
// pending drafts, drafts of the running window) belongs to the drafter thread
// while it drafts a window and to the caller otherwise; drafts are handed over
// one by one through a small mutex-protected queue. Nothing of either model is
// copied. Every round ends with the drafter idle.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/threads.h"
#include "decode/verify.h"

namespace parspec {

struct DraftToken {
  int32_t token = 0;
  Distribution q;  // the distribution `token` was drawn from; empty when greedy
};

// The draft model as the scheduler sees it; called on the drafter thread only
// (rollback(): while the drafter thread is idle).
class PearlDrafter {
 public:
  virtual ~PearlDrafter() = default;
  // The next draft token after `context` (verified tokens, then drafts assumed
  // accepted). Successive calls usually extend the previous context by the
  // previous draft, so an implementation keeps state (a KV cache) for it.
  // `draw` identifies this draft (round and index) for a reproducible RNG.
  virtual DraftToken next(std::span<const int32_t> context, uint64_t draw) = 0;
  // The context was cut to its first n tokens: forget anything after them.
  virtual void rollback(size_t n) = 0;
};

// The target model as the scheduler sees it; called on the thread that runs
// PearlEngine::step(). Its cache holds the verified sequence minus its last
// token.
class PearlTarget {
 public:
  virtual ~PearlTarget() = default;
  // One forward over `tokens` (the last verified token, then unverified
  // drafts) after the cache; row i is the next-token distribution after
  // tokens[i].
  virtual void forward(std::span<const int32_t> tokens) = 0;
  // Judges `draft` by row i (exact: greedy argmax match, or rejection
  // sampling). Returns true if accepted; otherwise sets *correction (the
  // argmax, or a draw from norm(max(0, p - q))).
  virtual bool check(int row, const DraftToken& draft, int32_t* correction) = 0;
  // A token drawn from row i (a plain verification's bonus token).
  virtual int32_t sample(int row) = 0;
  // Keeps the first n tokens of the last forward in the cache.
  virtual void commit(int n) = 0;
};

// Speculative sampling for one draft token (Leviathan et al.; Chen et al.),
// the rule of verify_chain_sampled applied token by token: accept x with
// probability min(1, p(x)/q(x)); otherwise *correction is drawn from
// norm(max(0, p - q)) (from p itself when that is empty, i.e. p == q).
bool judge_sampled(const Distribution& p, const DraftToken& draft, Rng& rng, int32_t* correction);

struct PearlOptions {
  int window = 4;  // γ
  bool pre_verify = true;
  bool post_verify = true;
};

enum class PearlMode { kPreVerify, kPostVerify, kDraft, kVerify };

// One round: a row of the paper's appendix-B table.
struct PearlRound {
  PearlMode mode = PearlMode::kPreVerify;
  std::vector<int32_t> drafted;  // what the drafter drafted during the round
  std::vector<int32_t> checked;  // drafts the target judged, in order
  int n_accepted = 0;            // accepted prefix of `checked`
  // Drafts submitted to the target: those in its forward plus the one its last
  // row judges, judged or not after a rejection (sd counts the same way).
  int n_proposed = 0;
  std::vector<int32_t> emitted;  // appended to the verified sequence
  PearlMode next_mode = PearlMode::kPreVerify;
};

class PearlEngine {
 public:
  // Starts the drafter thread (a borrowed runner: engines made one after the
  // other reuse one thread); `drafter` and `target` must outlive the engine.
  PearlEngine(PearlDrafter& drafter, PearlTarget& target, PearlOptions options);
  ~PearlEngine();
  PearlEngine(const PearlEngine&) = delete;
  PearlEngine& operator=(const PearlEngine&) = delete;

  // Starts a sequence whose tokens are all verified (a prompt, non-empty).
  void reset(std::span<const int32_t> verified);
  // Runs rounds until one emits tokens (a "draft" round emits none, so a step
  // is exactly one target forward). `rounds` receives the rounds run.
  void step(std::vector<PearlRound>& rounds);

  PearlMode mode() const { return mode_; }
  // The window of the rounds to come (between steps: the drafter is idle then).
  void set_window(int window);
  int window() const { return options_.window; }

 private:
  void run_round(PearlRound& round);
  // Pre-verify and post-verify rounds: one target forward over the pending
  // drafts and the new window's first, while the drafter drafts the window.
  void verify_and_draft(PearlRound& round);
  void draft_only(PearlRound& round);
  void verify_only(PearlRound& round);
  // Judges pending drafts by rows 0.. of the last forward; returns how many
  // were accepted (stops at the first rejection, setting *correction).
  int check_pending(PearlRound& round, int32_t* correction);
  // After a rejection: the verified sequence gains the n_accepted pending
  // drafts and the correction; everything drafted after them is dropped.
  void settle_rejection(PearlRound& round, int n_accepted, int32_t correction);

  // The drafter thread's side.
  void drafter_main();
  // Asks the drafter for n drafts after the context (caller side).
  void start_window(int n);
  // Waits for draft i of the running window; rethrows a drafter error.
  const DraftToken& window_draft(size_t i);
  // Asks the drafter to stop after its current forward (non-blocking).
  void cancel_window() { cancel_.store(true, std::memory_order_release); }
  // Waits until the drafter is idle; rethrows a drafter error.
  void wait_idle();

  PearlDrafter& drafter_;
  PearlTarget& target_;
  PearlOptions options_;

  // Verified tokens, then the pending drafts, then (while a window runs) its
  // drafts. Drafter-owned while busy_.
  std::vector<int32_t> context_;
  size_t n_verified_ = 0;
  int32_t last_verified_ = 0;
  std::vector<DraftToken> pending_;
  PearlMode mode_ = PearlMode::kPreVerify;
  uint64_t round_index_ = 0;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<DraftToken> window_;  // drafts of the running window (references stay valid)
  int job_ = 0;                    // drafts asked for, not yet taken by the drafter
  bool busy_ = false;              // a window was asked for and is not finished
  bool stop_ = false;
  std::atomic<bool> cancel_{false};
  std::exception_ptr error_;
  BorrowedRunner drafter_thread_;  // runs drafter_main for the engine's life
};

}  // namespace parspec
