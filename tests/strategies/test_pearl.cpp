// PEARL: the scheduler driven by scripted drafters and targets (the paper's
// appendix-B example row by row, the ablations' mode machines, cancellation,
// errors), and the `pearl` strategy on random models (greedy output equal to
// ar's for every mode and window; statistics; reproducible sampling; pinning).
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "decode/strategy.h"
#include "model/model.h"
#include "random_pair_test.h"
#include "stats_helpers.h"
#include "strategies/pearl/pearl_engine.h"
#include "strategies/pearl/pearl_window.h"
#include "test_helpers.h"
#include "tuning/cost_model.h"

namespace parspec {
namespace {

using namespace std::chrono_literals;
using testing_support::TempDir;

// ---------------------------------------------------------------------------
// Scripted sides.

// Words <-> token ids for readable scripts.
class Words {
 public:
  int32_t id(const std::string& word) {
    auto [it, added] = ids_.emplace(word, static_cast<int32_t>(words_.size()));
    if (added) words_.push_back(word);
    return it->second;
  }
  std::vector<int32_t> ids(const std::string& text) {
    std::vector<int32_t> out;
    std::istringstream in(text);
    for (std::string w; in >> w;) out.push_back(id(w));
    return out;
  }
  std::string text(const std::vector<int32_t>& tokens) const {
    std::ostringstream out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out << ' ';
      const int32_t t = tokens[i];
      if (t >= 0 && t < static_cast<int32_t>(words_.size()))
        out << words_[t];
      else
        out << '#' << t;
    }
    return out.str();
  }

 private:
  std::map<std::string, int32_t> ids_;
  std::vector<std::string> words_;
};

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The target's greedy continuation is `truth`: after a prefix of it, the next
// token of it; after anything else, kOffTrack (never a right answer).
constexpr int32_t kOffTrack = -1000;

int32_t truth_next(const std::vector<int32_t>& truth, std::span<const int32_t> context) {
  if (context.size() >= truth.size()) return kOffTrack;
  if (!std::equal(context.begin(), context.end(), truth.begin())) return kOffTrack;
  return truth[context.size()];
}

class ScriptedTarget final : public PearlTarget {
 public:
  // The cache holds the prompt minus its last token, as for a model target.
  ScriptedTarget(std::vector<int32_t> truth, size_t prompt_size) : truth_(std::move(truth)) {
    cache_.assign(truth_.begin(), truth_.begin() + prompt_size - 1);
  }

  void forward(std::span<const int32_t> tokens) override {
    if (gate_) gate_(forwards_);
    if (fail_forward_) throw Error("scripted target failure");
    ++forwards_;
    inputs_.emplace_back(tokens.begin(), tokens.end());
    rows_.clear();
    std::vector<int32_t> context = cache_;
    for (int32_t t : tokens) {
      context.push_back(t);
      rows_.push_back(truth_next(truth_, context));
    }
  }
  bool check(int row, const DraftToken& draft, int32_t* correction) override {
    *correction = rows_.at(row);
    return draft.token == rows_.at(row);
  }
  int32_t sample(int row) override { return rows_.at(row); }
  void commit(int n) override {
    EXPECT_LE(static_cast<size_t>(n), inputs_.back().size());
    cache_.insert(cache_.end(), inputs_.back().begin(), inputs_.back().begin() + n);
    if (on_commit_) on_commit_();
  }

  std::vector<int32_t> truth_;
  std::vector<int32_t> cache_;
  std::vector<int32_t> rows_;
  std::vector<std::vector<int32_t>> inputs_;  // every forward's tokens
  int forwards_ = 0;
  bool fail_forward_ = false;
  std::function<void(int forward_index)> gate_;  // runs before each forward
  std::function<void()> on_commit_;
};

class ScriptedDrafter final : public PearlDrafter {
 public:
  // `propose(context)` is the draft after a full context.
  explicit ScriptedDrafter(std::function<int32_t(std::span<const int32_t>)> propose)
      : propose_(std::move(propose)) {}

  DraftToken next(std::span<const int32_t> context, uint64_t draw) override {
    if (before_) before_(draw);
    {
      std::lock_guard lock(mutex_);
      if (calls_ == fail_at_call_) throw Error("scripted drafter failure");
      ++calls_;
    }
    DraftToken d;
    d.token = propose_(context);
    {
      std::lock_guard lock(mutex_);
      ++produced_;
    }
    produced_changed_.notify_all();
    return d;
  }
  void rollback(size_t n) override { rollbacks_.push_back(n); }

  int calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  // Waits (at most 10 s) until n drafts were produced in all.
  void wait_produced(int n) {
    std::unique_lock lock(mutex_);
    produced_changed_.wait_for(lock, 10s, [&] { return produced_ >= n; });
  }

  std::function<int32_t(std::span<const int32_t>)> propose_;
  std::function<void(uint64_t draw)> before_;  // runs before each draft
  std::vector<size_t> rollbacks_;
  int fail_at_call_ = -1;

 private:
  std::mutex mutex_;
  std::condition_variable produced_changed_;
  int calls_ = 0, produced_ = 0;
};

// ---------------------------------------------------------------------------
// The paper's appendix B, table 9, γ = 5, tokens as words.

struct TableRow {
  PearlMode mode;
  const char* drafted;
  const char* checked;
  int n_accepted;
  const char* emitted;
  PearlMode next_mode;
};

TEST(PearlEngine, ReproducesThePapersStepByStepExample) {
  constexpr auto kPre = PearlMode::kPreVerify;
  constexpr auto kPost = PearlMode::kPostVerify;
  Words w;
  const std::vector<int32_t> prompt = w.ids("x+y = 4z , x*y = 4z^2 , express x-y in z");
  const std::vector<int32_t> truth = concat(
      prompt,
      w.ids("I ' m happy to help you with your question ! However , I notice that the equations "
            "you provided"));
  // What the draft model proposes after each context it is asked about (the
  // table's "draft model output" column, one window per step).
  const std::vector<std::pair<const char*, const char*>> windows = {
      {"", "Great , I ' m"},
      {"I", "' m gl ad you"},
      {"I ' m gl ad you", "are interested in explor ing"},
      {"I ' m happy", "to help you with this"},
      {"I ' m happy to help you with this", "equation ! However , I"},
      {"I ' m happy to help you with your", "question ! However , I"},
      {"I ' m happy to help you with your question ! However , I", "notice that the equation you"},
      {"I ' m happy to help you with your question ! However , I notice that the equation you",
       "provided is not correct ."},
  };
  std::map<std::vector<int32_t>, int32_t> script;
  for (const auto& [before, window] : windows) {
    std::vector<int32_t> context = concat(prompt, w.ids(before));
    for (int32_t t : w.ids(window)) {
      script[context] = t;
      context.push_back(t);
    }
  }
  std::vector<std::string> unscripted;
  ScriptedDrafter drafter([&](std::span<const int32_t> context) {
    const auto found = script.find(std::vector<int32_t>(context.begin(), context.end()));
    if (found != script.end()) return found->second;
    unscripted.push_back(w.text({context.begin() + prompt.size(), context.end()}));
    return kOffTrack;
  });
  ScriptedTarget target(truth, prompt.size());
  // As in the paper's setting (γ = c), each target forward takes as long as
  // the window: it ends once the round's five drafts exist.
  target.gate_ = [&](int forward_index) { drafter.wait_produced(5 * (forward_index + 1)); };

  const std::vector<TableRow> table = {
      {kPre, "Great , I ' m", "Great", 0, "I", kPre},
      {kPre, "' m gl ad you", "'", 1, "'", kPost},
      {kPost, "are interested in explor ing", "m gl", 1, "m happy", kPre},
      {kPre, "to help you with this", "to", 1, "to", kPost},
      {kPost, "equation ! However , I", "help you with this", 3, "help you with your", kPre},
      {kPre, "question ! However , I", "question", 1, "question", kPost},
      {kPost, "notice that the equation you", "! However , I notice", 5, "! However , I notice",
       kPost},
      {kPost, "provided is not correct .", "that the equation", 2, "that the equations", kPre},
  };
  // The target's input each step: the last verified token, then the pending drafts.
  const std::vector<const char*> target_inputs = {"z",
                                                  "I",
                                                  "' m gl ad you",
                                                  "happy",
                                                  "to help you with this",
                                                  "your",
                                                  "question ! However , I",
                                                  "notice that the equation you"};

  PearlOptions options;
  options.window = 5;
  PearlEngine engine(drafter, target, options);
  engine.reset(prompt);
  std::vector<int32_t> output;
  std::vector<PearlRound> rounds;
  for (size_t step = 0; step < table.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const TableRow& row = table[step];
    ASSERT_EQ(engine.mode(), row.mode);
    engine.step(rounds);
    ASSERT_EQ(rounds.size(), 1u);
    const PearlRound& r = rounds[0];
    EXPECT_EQ(r.mode, row.mode);
    EXPECT_EQ(w.text(r.drafted), row.drafted);
    EXPECT_EQ(w.text(r.checked), row.checked);
    EXPECT_EQ(r.n_accepted, row.n_accepted);
    EXPECT_EQ(r.n_proposed, row.mode == kPre ? 1 : 5);  // γ-1 pending and the new first draft
    EXPECT_EQ(w.text(r.emitted), row.emitted);
    EXPECT_EQ(r.next_mode, row.next_mode);
    EXPECT_EQ(engine.mode(), row.next_mode);
    EXPECT_EQ(w.text(target.inputs_.at(step)), target_inputs[step]);
    output.insert(output.end(), r.emitted.begin(), r.emitted.end());
  }
  // The table's last "output prefix".
  EXPECT_EQ(w.text(output),
            "I ' m happy to help you with your question ! However , I notice that the equations");
  EXPECT_TRUE(unscripted.empty()) << "drafter asked after: " << unscripted.front();
  // The drafter rolled back to the verified prefix after each rejection
  // (steps 0, 2, 4 and 7).
  const size_t p = prompt.size();
  EXPECT_EQ(drafter.rollbacks_, (std::vector<size_t>{p, p + 3, p + 8, p + 17}));
}

// ---------------------------------------------------------------------------
// Random scripts: the output is the target's stream in every mode, and every
// round follows the mode machine.

struct RandomScript {
  std::vector<int32_t> truth;
  size_t prompt_size = 3;
};

RandomScript random_script(uint64_t seed, size_t length) {
  RandomScript s;
  Rng rng(seed);
  for (size_t i = 0; i < length; ++i) s.truth.push_back(static_cast<int32_t>(rng.next() % 50));
  return s;
}

// Agrees with the target with probability ~`agree`, deterministically per context.
int32_t noisy_draft(const std::vector<int32_t>& truth, std::span<const int32_t> context,
                    double agree) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : context) h = (h ^ static_cast<uint64_t>(t + 7)) * 1099511628211ULL;
  Rng rng(h);
  const int32_t right = truth_next(truth, context);
  if (right != kOffTrack && rng.uniform() < agree) return right;
  return 50 + static_cast<int32_t>(rng.next() % 3);  // never in the truth
}

void expect_valid_transition(const PearlRound& r, const PearlOptions& o, size_t n_pending) {
  const auto after_rejection = o.pre_verify ? PearlMode::kPreVerify : PearlMode::kDraft;
  const bool all_accepted = r.n_accepted == static_cast<int>(r.checked.size());
  const size_t proposed = r.n_proposed;
  EXPECT_LE(r.checked.size(), proposed);
  switch (r.mode) {
    case PearlMode::kPreVerify:
      ASSERT_TRUE(o.pre_verify);
      EXPECT_EQ(r.checked.size(), 1u);
      EXPECT_EQ(proposed, 1u);
      EXPECT_EQ(r.emitted.size(), 1u);
      EXPECT_EQ(r.next_mode, all_accepted
                                 ? (o.post_verify ? PearlMode::kPostVerify : PearlMode::kVerify)
                                 : PearlMode::kPreVerify);
      if (all_accepted) {
        EXPECT_EQ(r.drafted.size(), static_cast<size_t>(o.window));
      }
      break;
    case PearlMode::kPostVerify:
      ASSERT_TRUE(o.post_verify);
      EXPECT_LE(r.checked.size(), n_pending + 1);
      EXPECT_EQ(proposed, n_pending + 1);
      if (all_accepted) {
        EXPECT_EQ(r.checked.size(), n_pending + 1);
        EXPECT_EQ(r.emitted.size(), r.checked.size());  // no bonus token
        EXPECT_EQ(r.drafted.size(), static_cast<size_t>(o.window));
        EXPECT_EQ(r.next_mode, PearlMode::kPostVerify);
      } else {
        EXPECT_EQ(r.emitted.size(), static_cast<size_t>(r.n_accepted) + 1);
        EXPECT_EQ(r.next_mode, after_rejection);
      }
      break;
    case PearlMode::kDraft:
      ASSERT_FALSE(o.pre_verify);
      EXPECT_TRUE(r.checked.empty());
      EXPECT_EQ(proposed, 0u);
      EXPECT_TRUE(r.emitted.empty());
      EXPECT_EQ(r.drafted.size(), static_cast<size_t>(o.window));
      EXPECT_EQ(r.next_mode, o.post_verify ? PearlMode::kPostVerify : PearlMode::kVerify);
      break;
    case PearlMode::kVerify:
      ASSERT_FALSE(o.post_verify);
      EXPECT_TRUE(r.drafted.empty());  // the drafter idles
      EXPECT_EQ(proposed, n_pending);
      EXPECT_EQ(r.checked.size(), all_accepted ? n_pending : static_cast<size_t>(r.n_accepted) + 1);
      EXPECT_EQ(r.emitted.size(), static_cast<size_t>(r.n_accepted) + 1);  // correction or bonus
      EXPECT_EQ(r.next_mode, after_rejection);
      break;
  }
}

TEST(PearlEngine, EveryModeEmitsTheTargetsStreamAndFollowsTheModeMachine) {
  for (const bool pre : {true, false}) {
    for (const bool post : {true, false}) {
      for (const int window : {1, 2, 3, 5}) {
        for (const double agree : {0.3, 0.9}) {
          SCOPED_TRACE("pre " + std::to_string(pre) + " post " + std::to_string(post) + " window " +
                       std::to_string(window) + " agree " + std::to_string(agree));
          const RandomScript s = random_script(window * 131 + pre * 7 + post * 3, 160);
          const std::vector<int32_t> prompt(s.truth.begin(), s.truth.begin() + s.prompt_size);
          ScriptedDrafter drafter(
              [&](std::span<const int32_t> c) { return noisy_draft(s.truth, c, agree); });
          ScriptedTarget target(s.truth, s.prompt_size);
          const PearlOptions options{window, pre, post};
          PearlEngine engine(drafter, target, options);
          engine.reset(prompt);
          std::vector<int32_t> output = prompt;
          std::vector<PearlRound> rounds;
          size_t n_pending = 0;
          int steps = 0, accepted_in_post = 0;
          while (output.size() + 2 * window + 2 < s.truth.size()) {
            const int calls_before = drafter.calls();
            engine.step(rounds);
            ++steps;
            ASSERT_FALSE(rounds.empty());
            for (size_t i = 0; i < rounds.size(); ++i) {
              const PearlRound& r = rounds[i];
              // Only a draft round may emit nothing, and it never ends a step.
              EXPECT_EQ(r.emitted.empty(), i + 1 < rounds.size());
              expect_valid_transition(r, options, n_pending);
              if (r.mode == PearlMode::kPostVerify && r.n_accepted == int(r.checked.size()))
                accepted_in_post += 1;
              // Pending drafts after the round.
              const bool all = r.n_accepted == static_cast<int>(r.checked.size());
              if (r.next_mode == PearlMode::kPostVerify || r.next_mode == PearlMode::kVerify)
                n_pending = r.mode == PearlMode::kDraft ? r.drafted.size() : r.drafted.size() - 1;
              else
                n_pending = 0;
              if (r.mode == PearlMode::kVerify || (!all && r.mode != PearlMode::kDraft)) {
                EXPECT_EQ(n_pending, 0u);
              }
              output.insert(output.end(), r.emitted.begin(), r.emitted.end());
            }
            if (rounds.size() == 1 && rounds[0].mode == PearlMode::kVerify) {
              EXPECT_EQ(drafter.calls(), calls_before);  // the drafter idled
            }
            ASSERT_TRUE(std::equal(output.begin(), output.end(), s.truth.begin()))
                << "output left the target's stream at step " << steps;
          }
          // One target forward per step.
          EXPECT_EQ(target.forwards_, steps);
          if (post && agree > 0.5 && window > 1) {
            EXPECT_GT(accepted_in_post, 0);
          }
        }
      }
    }
  }
}

TEST(PearlEngine, WithoutBothHalvesItIsClassicSpeculativeDecoding) {
  Words w;
  const std::vector<int32_t> prompt = w.ids("p");
  const std::vector<int32_t> truth = concat(prompt, w.ids("a b c d e f g h"));
  // Drafts a b X, then (after the correction) d e f.
  std::map<std::vector<int32_t>, int32_t> script;
  for (const auto& [context, draft] :
       std::vector<std::pair<const char*, const char*>>{{"p", "a"},
                                                        {"p a", "b"},
                                                        {"p a b", "X"},
                                                        {"p a b c", "d"},
                                                        {"p a b c d", "e"},
                                                        {"p a b c d e", "f"}})
    script[w.ids(context)] = w.id(draft);
  const int32_t unknown = w.id("?");
  ScriptedDrafter drafter([&](std::span<const int32_t> c) {
    const auto found = script.find(std::vector<int32_t>(c.begin(), c.end()));
    return found == script.end() ? unknown : found->second;
  });
  ScriptedTarget target(truth, prompt.size());
  PearlEngine engine(drafter, target, PearlOptions{3, false, false});
  engine.reset(prompt);
  std::vector<PearlRound> rounds;
  engine.step(rounds);
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[0].mode, PearlMode::kDraft);
  EXPECT_EQ(w.text(rounds[0].drafted), "a b X");
  EXPECT_EQ(rounds[1].mode, PearlMode::kVerify);
  EXPECT_EQ(w.text(rounds[1].checked), "a b X");
  EXPECT_EQ(w.text(rounds[1].emitted), "a b c");  // two accepted, then the correction
  EXPECT_EQ(w.text(target.inputs_[0]), "p a b X");
  engine.step(rounds);
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(w.text(rounds[0].drafted), "d e f");
  EXPECT_EQ(w.text(rounds[1].emitted), "d e f g");  // all accepted, then the bonus
  EXPECT_EQ(w.text(target.inputs_[1]), "c d e f");
}

TEST(PearlEngine, ARejectedFirstDraftStopsTheWindowEarly) {
  Words w;
  const std::vector<int32_t> prompt = w.ids("p");
  const std::vector<int32_t> truth = concat(prompt, w.ids("a b c d e f g h i j"));
  const int32_t wrong = w.id("wrong");
  ScriptedDrafter drafter([&](std::span<const int32_t>) { return wrong; });
  ScriptedTarget target(truth, prompt.size());
  // Drafts after the first wait until the target has committed its verdict.
  std::mutex m;
  std::condition_variable cv;
  bool committed = false;
  target.on_commit_ = [&] {
    std::lock_guard lock(m);
    committed = true;
    cv.notify_all();
  };
  drafter.before_ = [&](uint64_t draw) {
    if ((draw & 1023) == 0) return;
    std::unique_lock lock(m);
    cv.wait_for(lock, 10s, [&] { return committed; });
  };
  PearlEngine engine(drafter, target, PearlOptions{8, true, true});
  engine.reset(prompt);
  std::vector<PearlRound> rounds;
  engine.step(rounds);
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(w.text(rounds[0].emitted), "a");
  // The draft in flight when the verdict came may finish; nothing after it.
  EXPECT_GE(rounds[0].drafted.size(), 1u);
  EXPECT_LE(rounds[0].drafted.size(), 2u);
  EXPECT_EQ(engine.mode(), PearlMode::kPreVerify);
}

TEST(PearlEngine, ErrorsOfEitherSideReachTheCallerAndLeaveTheEngineUsable) {
  Words w;
  const std::vector<int32_t> prompt = w.ids("p");
  const std::vector<int32_t> truth = concat(prompt, w.ids("a b c d e f g h i j k l m n"));
  ScriptedDrafter drafter([&](std::span<const int32_t> c) { return truth_next(truth, c); });
  ScriptedTarget target(truth, prompt.size());
  PearlEngine engine(drafter, target, PearlOptions{3, true, true});
  engine.reset(prompt);
  std::vector<PearlRound> rounds;
  drafter.fail_at_call_ = 0;
  EXPECT_THROW(engine.step(rounds), Error);
  drafter.fail_at_call_ = -1;
  target.fail_forward_ = true;
  EXPECT_THROW(engine.step(rounds), Error);
  target.fail_forward_ = false;
  // A fresh sequence on fresh sides works.
  ScriptedTarget fresh(truth, prompt.size());
  ScriptedDrafter fresh_drafter([&](std::span<const int32_t> c) { return truth_next(truth, c); });
  PearlEngine engine2(fresh_drafter, fresh, PearlOptions{3, true, true});
  engine2.reset(prompt);
  engine2.step(rounds);
  EXPECT_EQ(w.text(rounds[0].emitted), "a");
  EXPECT_THROW({ PearlEngine bad(drafter, target, PearlOptions{0, true, true}); }, Error);
}

// ---------------------------------------------------------------------------
// Sampling: scripted Markov models whose draft distribution differs much from
// the target's, so acceptance, rejection and residual draws all matter; the
// first three emitted tokens must follow the target's joint distribution.

constexpr int kMarkovVocab = 4;
constexpr int32_t kMarkovStart = 4;  // the prompt's token

// Row `last` of a Markov model: `base` rotated by `shift * last`.
Distribution markov_row(const std::array<float, kMarkovVocab>& base, int shift, int32_t last) {
  Distribution row(kMarkovVocab);
  for (int i = 0; i < kMarkovVocab; ++i) row[(i + shift * last) % kMarkovVocab] = base[i];
  return row;
}
Distribution target_row(int32_t last) {
  return markov_row({0.55f, 0.25f, 0.15f, 0.05f}, 1, last);
}
Distribution draft_row(int32_t last) {
  return markov_row({0.1f, 0.2f, 0.3f, 0.4f}, 3, last);
}

class MarkovTarget final : public PearlTarget {
 public:
  void forward(std::span<const int32_t> tokens) override {
    rows_.clear();
    for (int32_t t : tokens) rows_.push_back(target_row(t));
  }
  bool check(int row, const DraftToken& draft, int32_t* correction) override {
    if (!lossy_) return judge_sampled(rows_.at(row), draft, rng_, correction);
    // A plausible bug: accepting too eagerly.
    const double px = rows_[row][draft.token], qx = draft.q[draft.token];
    if (rng_.uniform() < std::min(1.0, 1.5 * px / qx)) return true;
    *correction = sample_from(rows_[row], rng_);
    return false;
  }
  int32_t sample(int row) override { return sample_from(rows_.at(row), rng_); }
  void commit(int) override {}

  Rng rng_;
  bool lossy_ = false;

 private:
  std::vector<Distribution> rows_;
};

class MarkovDrafter final : public PearlDrafter {
 public:
  DraftToken next(std::span<const int32_t> context, uint64_t draw) override {
    DraftToken d;
    d.q = draft_row(context.back());
    Rng rng(seed_ * 0x9e3779b97f4a7c15ULL + draw);
    d.token = sample_from(d.q, rng);
    return d;
  }
  void rollback(size_t) override {}

  uint64_t seed_ = 0;
};

// Whether the first three tokens PEARL emits fit the target's distribution.
bool pearl_samples_fit(const PearlOptions& options, bool lossy, std::string* why) {
  MarkovDrafter drafter;
  MarkovTarget target;
  target.lossy_ = lossy;
  PearlEngine engine(drafter, target, options);
  constexpr int kRuns = 12000;
  std::map<int32_t, int64_t> joint;
  std::vector<PearlRound> rounds;
  for (int r = 0; r < kRuns; ++r) {
    target.rng_.reseed(1000 + r);
    drafter.seed_ = 77 + r;
    const int32_t prompt[] = {kMarkovStart};
    engine.reset(prompt);
    std::vector<int32_t> out;
    while (out.size() < 3) {
      engine.step(rounds);
      for (const PearlRound& round : rounds)
        out.insert(out.end(), round.emitted.begin(), round.emitted.end());
    }
    ++joint[out[0] * 16 + out[1] * 4 + out[2]];
  }
  std::vector<double> expected(64);
  const Distribution p1 = target_row(kMarkovStart);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      for (int c = 0; c < 4; ++c)
        expected[a * 16 + b * 4 + c] = double(p1[a]) * target_row(a)[b] * target_row(b)[c];
  const auto fit = testing_support::chi_square_fit(joint, expected, kRuns);
  *why = "chi-square " + std::to_string(fit.statistic) + " with " + std::to_string(fit.df) + " df";
  return !fit.rejects();
}

TEST(PearlEngine, SampledOutputFollowsTheTargetDistributionInEveryMode) {
  std::string why;
  for (const bool pre : {true, false})
    for (const bool post : {true, false}) {
      const PearlOptions options{3, pre, post};
      EXPECT_TRUE(pearl_samples_fit(options, false, &why))
          << "pre " << pre << " post " << post << ": " << why;
    }
  EXPECT_TRUE(pearl_samples_fit(PearlOptions{1, true, true}, false, &why)) << "window 1: " << why;
  // Negative control: the same test sees a biased acceptance rule.
  EXPECT_FALSE(pearl_samples_fit(PearlOptions{3, true, true}, true, &why))
      << "a lossy rule passed: " << why;
}

// ---------------------------------------------------------------------------
// The strategy on random models.

using testing_support::expect_seed_repeats;
using testing_support::short_prompt;

// ---------------------------------------------------------------------------
// The window from measured costs.

WindowCosts costs_with(std::vector<std::pair<int, double>> curve, double draft_ms, double overlap,
                       int max_window) {
  WindowCosts c;
  c.target.points = std::move(curve);
  c.draft_ms = draft_ms;
  c.overlap_cost = overlap;
  c.max_window = max_window;
  return c;
}

TEST(PearlWindow, TheForwardCurveInterpolatesAndContinuesItsLastSegment) {
  ForwardCurve t;
  t.points = {{1, 10}, {3, 14}, {5, 15}};
  EXPECT_DOUBLE_EQ(t.at(1), 10);
  EXPECT_DOUBLE_EQ(t.at(2), 12);
  EXPECT_DOUBLE_EQ(t.at(4), 14.5);
  EXPECT_DOUBLE_EQ(t.at(9), 17);  // past the last point, along 3..5
}

TEST(PearlWindow, TokensPerRoundFollowTheCostModel) {
  EXPECT_DOUBLE_EQ(tokens_per_round(1, 0.5), 1.0);  // 0.5 + 1 - 0.5
  EXPECT_DOUBLE_EQ(tokens_per_round(3, 1.0), 3.0);  // every draft, no bonus token
  EXPECT_DOUBLE_EQ(tokens_per_round(2, 0.5), 0.5 + 0.25 + 1 - 0.25);
}

// Where a forward over the window costs one forward and both sides overlap,
// the paper's rule holds: as many drafts as fit in a target forward.
TEST(PearlWindow, AFlatForwardAndFreeOverlapGiveThePapersWindow) {
  const WindowCosts flat = costs_with({{1, 10.0}, {2, 10.0}, {65, 10.0}}, 2.0, 0.0, 64);
  EXPECT_EQ(fastest_window(flat, 0.99), 5);
  EXPECT_EQ(fastest_window(flat, 0.6), 5);  // extra drafts are free: they cost no time
}

TEST(PearlWindow, DearerVerificationSharedHardwareAndLowAcceptanceShortenIt) {
  // A forward 5% dearer per token: a shorter window than the paper's 12.
  const WindowCosts gpu_like = costs_with({{1, 6.0}, {2, 6.3}, {3, 6.6}, {65, 25.2}}, 0.5, 0.0, 12);
  const int overlapped = fastest_window(gpu_like, 0.7);
  EXPECT_LT(overlapped, 12);
  EXPECT_GE(overlapped, 3);
  // The same when the sides take turns (one GPU, shared cores): shorter still.
  WindowCosts turns = gpu_like;
  turns.overlap_cost = 1.0;
  EXPECT_LE(fastest_window(turns, 0.7), overlapped);
  // More acceptance, a window at least as long; little, the shortest.
  EXPECT_GE(fastest_window(gpu_like, 0.9), overlapped);
  EXPECT_EQ(fastest_window(costs_with({{1, 10.0}, {2, 20.0}}, 2.0, 1.0, 5), 0.2), 1);
}

using PearlStrategy = testing_support::RandomPairStrategyTest;

TEST_F(PearlStrategy, GreedyOutputEqualsArInEveryModeWindowAndPlacement) {
  Worker draft_worker(1);
  int64_t accepted = 0, drafted = 0;
  for (int i = 0; i < 4; ++i) {
    const GenerationRequest req = greedy_request(short_prompt(i), 20);
    const std::vector<int32_t> expected = ar_tokens(req);
    for (const bool pre : {true, false})
      for (const bool post : {true, false})
        for (const int window : {1, 3, 6})
          for (Worker* dw : {&target_worker_, &draft_worker}) {
            StrategyConfig c = base_;
            c.name = "pearl";
            c.options["no_pre_verify"] = !pre;
            c.options["no_post_verify"] = !post;
            c.options["pearl_window"] = window;
            c.draft_worker = dw;
            const std::string what = "pre " + std::to_string(pre) + " post " +
                                     std::to_string(post) + " window " + std::to_string(window) +
                                     (dw == &draft_worker ? " own draft worker" : " shared worker");
            auto pearl = make_strategy(c);
            ASSERT_EQ(pearl->name(), "pearl");
            const GenerationResult got = pearl->generate(req);
            ASSERT_EQ(got.tokens, expected) << what;
            const GenerationStats& st = got.stats;
            EXPECT_EQ(st.n_gen, 20) << what;
            EXPECT_EQ(st.draft_window, window) << what;
            EXPECT_LE(st.accepted, st.drafted) << what;
            EXPECT_EQ(st.verify_steps, st.target_forwards) << what;  // one forward per step
            EXPECT_GT(st.draft_forwards, 0) << what;
            EXPECT_GE(st.tau(), 1.0) << what;
            EXPECT_LE(st.tau(), window + 1.0) << what;
            accepted += st.accepted;
            drafted += st.drafted;
          }
  }
  // Drafts were both accepted and rejected, so every path was exercised.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
}

TEST_F(PearlStrategy, ChoosesTheWindowAsItRunsWhenNoneIsGiven) {
  StrategyConfig c = base_;
  c.name = "pearl";
  c.options["pearl_window"] = 0;
  auto pearl = make_strategy(c);
  ASSERT_FALSE(pearl->notes().empty());
  EXPECT_NE(pearl->notes()[0].find("the window follows the acceptance"), std::string::npos)
      << pearl->notes()[0];
  for (int i = 0; i < 3; ++i) {
    const GenerationRequest req = greedy_request(short_prompt(i), 24);
    const GenerationResult got = pearl->generate(req);
    EXPECT_EQ(got.tokens, ar_tokens(req));
    EXPECT_GE(got.stats.draft_window, 1);
    EXPECT_LE(got.stats.draft_window, 64);
  }
  // Sampled: the same seed gives the same tokens, windows and all.
  expect_seed_repeats(*pearl);
}

TEST_F(PearlStrategy, SampledRunsAreReproducibleAndStopAtStopTokens) {
  StrategyConfig c = base_;
  c.name = "pearl";
  c.options["pearl_window"] = 4;
  auto pearl = make_strategy(c);
  GenerationRequest req;
  req.prompt = short_prompt(1);
  req.n_predict = 30;
  req.sampling.temp = 1.0f;
  req.sampling.seed = 1234;
  const auto first = pearl->generate(req).tokens;
  // Cancelled windows end at different drafts from run to run; the output
  // must not depend on it.
  for (int r = 0; r < 3; ++r) EXPECT_EQ(pearl->generate(req).tokens, first);
  ASSERT_EQ(first.size(), 30u);
  const int32_t stop = first[5];
  req.is_stop = [stop](int32_t t) { return t == stop; };
  std::vector<int32_t> streamed;
  req.on_token = [&](int32_t t) { streamed.push_back(t); };
  const auto stopped = pearl->generate(req).tokens;
  const auto end = std::find(first.begin(), first.end(), stop) + 1;
  EXPECT_EQ(stopped, std::vector<int32_t>(first.begin(), end));
  EXPECT_EQ(streamed, stopped);
}

TEST_F(PearlStrategy, RunsWithBothModelsPinnedToOneCore) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int core = 0;
  while (!CPU_ISSET(core, &saved)) ++core;
  Worker pinned{1, {core}};  // the resource-competition placement: the drafter gets its
  StrategyConfig c = base_;  // own worker on the same core
  c.name = "pearl";
  c.options["pearl_window"] = 3;
  c.target_worker = &pinned;
  c.draft_worker = &pinned;
  GenerationRequest req;
  req.prompt = short_prompt(2);
  req.n_predict = 16;
  req.sampling.temp = 0;
  const auto expected = ar_tokens(req);
  EXPECT_EQ(make_strategy(c)->generate(req).tokens, expected);
  // The strategy pinned this thread; give the rest of the suite every core back.
  sched_setaffinity(0, sizeof(saved), &saved);
}

}  // namespace
}  // namespace parspec
