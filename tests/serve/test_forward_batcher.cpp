// Continuous batching is lossless: Model::forward_multi gives every sequence
// the logits of its solo forward bit for bit, and strategies whose forwards go
// through a ForwardBatcher from several threads at once emit exactly the
// tokens of their solo runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "core/threads.h"
#include "decode/local_model.h"
#include "decode/registry.h"
#include "model/executor.h"
#include "model/model.h"
#include "serve/forward_batcher.h"
#include "serve/request_scheduler.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::make_model_pair;
using testing_support::ModelPair;
using testing_support::TempDir;

// The prefix of sequence `s` (different lengths and tokens per sequence).
std::vector<int32_t> prefix(int s) {
  std::vector<int32_t> p = {256};
  for (int j = 0; j < 3 + 5 * s; ++j) p.push_back((s * 37 + j * 11 + 5) % 256);
  return p;
}

// Sequence s's batch on top of its prefix: a chain (s % 3 == 0), a single
// token (1), or a tree with two branches (2).
Batch batch_for(int s, int32_t n_committed) {
  Batch b;
  const int kind = s % 3;
  if (kind == 0) {
    for (int i = 0; i < 4; ++i) b.add(10 + i + s, n_committed + i, i - 1, true);
  } else if (kind == 1) {
    b.add(42 + s, n_committed, -1, true);
  } else {
    b.add(7, n_committed, -1, true);
    b.add(8, n_committed + 1, 0, true);
    b.add(9, n_committed + 1, 0, false);
    b.add(10, n_committed + 2, 2, true);
  }
  return b;
}

void commit_prefix(const Model& model, Worker& worker, KvCache& kv, const std::vector<int32_t>& p) {
  model.forward(worker, Batch::chain(kv, p, false), kv);
  std::vector<int32_t> path(p.size());
  for (size_t i = 0; i < p.size(); ++i) path[i] = static_cast<int32_t>(i);
  kv.commit(path, {});
}

class ForwardMulti : public ::testing::TestWithParam<DType> {};

TEST_P(ForwardMulti, EverySequenceGetsItsSoloLogits) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", GetParam(), DType::Q8_0, 300, 3);
  const Model& model = *pair.target;
  Worker worker(2);
  constexpr int kSequences = 6;
  std::vector<std::unique_ptr<KvCache>> solo, multi;
  std::vector<Batch> batches;
  std::vector<std::vector<float>> expected;
  for (int s = 0; s < kSequences; ++s) {
    solo.push_back(std::make_unique<KvCache>(model.config(), 128));
    multi.push_back(std::make_unique<KvCache>(model.config(), 128));
    commit_prefix(model, worker, *solo[s], prefix(s));
    commit_prefix(model, worker, *multi[s], prefix(s));
    batches.push_back(batch_for(s, solo[s]->n_committed()));
    expected.push_back(model.forward(worker, batches[s], *solo[s]));
  }
  std::vector<Model::SequenceBatch> sequences;
  for (int s = 0; s < kSequences; ++s) sequences.push_back({&batches[s], multi[s].get()});
  const std::vector<std::vector<float>> got = model.forward_multi(worker, sequences);
  ASSERT_EQ(got.size(), static_cast<size_t>(kSequences));
  for (int s = 0; s < kSequences; ++s) {
    ASSERT_EQ(got[s].size(), expected[s].size()) << "sequence " << s;
    EXPECT_TRUE(got[s] == expected[s]) << "sequence " << s << ": logits differ from its solo run";
    EXPECT_EQ(multi[s]->n_spec(), solo[s]->n_spec());
  }
  // A second step on top of the first: the cells each pass added are the same.
  std::vector<Batch> next;
  for (int s = 0; s < kSequences; ++s) {
    Batch b;
    b.add(99, solo[s]->n_committed() + 5, 0, true);
    next.push_back(b);
  }
  sequences.clear();
  for (int s = 0; s < kSequences; ++s) sequences.push_back({&next[s], multi[s].get()});
  const auto got2 = model.forward_multi(worker, sequences);
  for (int s = 0; s < kSequences; ++s)
    EXPECT_TRUE(got2[s] == model.forward(worker, next[s], *solo[s])) << "sequence " << s;
}

INSTANTIATE_TEST_SUITE_P(Types, ForwardMulti,
                         ::testing::Values(DType::F32, DType::F16, DType::Q4_0, DType::Q8_0));

TEST(ForwardMulti, RefusesTwoBatchesOnOneCache) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::F32, 300, 3);
  Worker worker(1);
  KvCache kv(pair.target->config(), 32);
  Batch a;
  a.add(1, 0, -1, true);
  const Model::SequenceBatch both[] = {{&a, &kv}, {&a, &kv}};
  EXPECT_THROW(pair.target->forward_multi(worker, both), Error);
}

// The batcher is a ForwardExecutor: a multi-sequence forward from one thread
// goes into a round as one forward and gives every sequence its solo logits;
// layer pieces are refused.
TEST(ForwardBatcherExecutor, ForwardMultiFromOneThreadGivesSoloLogits) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::Q8_0, DType::Q4_0, 300, 3);
  const Model& model = *pair.target;
  Worker worker(2);
  CpuExecutor cpu(worker);
  ForwardBatcher batcher(cpu, 64, nullptr, &model);
  constexpr int kSequences = 3;
  std::vector<std::unique_ptr<KvCache>> solo, batched;
  std::vector<Batch> batches;
  std::vector<std::vector<float>> expected;
  for (int s = 0; s < kSequences; ++s) {
    solo.push_back(std::make_unique<KvCache>(model.config(), 64));
    batched.push_back(std::make_unique<KvCache>(model.config(), 64));
    commit_prefix(model, worker, *solo[s], prefix(s));
    commit_prefix(model, worker, *batched[s], prefix(s));
    batches.push_back(batch_for(s, solo[s]->n_committed()));
    expected.push_back(cpu.forward(model, batches[s], *solo[s]));
  }
  std::vector<Model::SequenceBatch> sequences;
  for (int s = 0; s < kSequences; ++s) sequences.push_back({&batches[s], batched[s].get()});
  ForwardExecutor& executor = batcher;
  batcher.join();
  const std::vector<std::vector<float>> got = executor.forward_multi(model, sequences);
  batcher.leave();
  ASSERT_EQ(got.size(), static_cast<size_t>(kSequences));
  for (int s = 0; s < kSequences; ++s) EXPECT_TRUE(got[s] == expected[s]) << "sequence " << s;
  const ForwardBatcher::Stats st = batcher.stats();
  EXPECT_EQ(st.rounds, 1);
  EXPECT_EQ(st.passes, 1);
  EXPECT_EQ(st.sequence_forwards, kSequences);
  std::vector<float> hidden(static_cast<size_t>(model.config().n_embd));
  EXPECT_THROW(executor.mlp_block(model, 0, 1, hidden.data()), Error);
}

// A joined thread with nothing to run waits for the next target pass without
// holding up the rounds of the others; alone, it goes on at once.
TEST(ForwardBatcherWait, WaitsForTheNextTargetPassWithoutStallingRounds) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::Q8_0, DType::Q4_0, 300, 5);
  Worker worker(1);
  CpuExecutor executor(worker);
  ForwardBatcher batcher(executor, 64, nullptr, pair.target.get());
  batcher.join();
  batcher.wait_for_target_pass();  // alone: no pass can come
  EXPECT_EQ(batcher.stats().target_passes, 0);

  batcher.join();
  int64_t passes_seen = -1;
  std::thread waiting([&] {
    batcher.wait_for_target_pass();
    passes_seen = batcher.stats().target_passes;
    batcher.leave();
  });
  KvCache kv(pair.target->config(), 32);
  Batch b;
  b.add(5, 0, -1, true);
  // Runs although the other joined thread never sends a forward.
  EXPECT_EQ(batcher.forward(*pair.target, b, kv).size(),
            static_cast<size_t>(pair.target->config().n_vocab));
  waiting.join();
  EXPECT_GE(passes_seen, 1);
  batcher.leave();
  EXPECT_EQ(batcher.joined(), 0);
}

// With a draft worker a waiting thread is let go when a target pass is about
// to run, and that round waits for its drafting forward: the two run at once.
TEST(ForwardBatcherWait, WaitingDrafterDraftsBesideTheNextTargetPass) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::Q8_0, DType::Q4_0, 300, 5);
  Worker worker(1), draft_worker(1);
  CpuExecutor executor(worker), draft_executor(draft_worker);
  ForwardBatcher batcher(executor, 64, &draft_executor, pair.target.get());
  batcher.join();
  batcher.join();
  Batch b;
  b.add(5, 0, -1, true);
  std::thread drafting([&] {
    KvCache kv(pair.draft->config(), 32);
    batcher.wait_for_target_pass();
    batcher.forward(*pair.draft, b, kv);
    batcher.leave();
  });
  KvCache kv(pair.target->config(), 32);
  batcher.forward(*pair.target, b, kv);
  drafting.join();
  batcher.leave();
  const ForwardBatcher::Stats st = batcher.stats();
  EXPECT_EQ(st.rounds, 1);
  EXPECT_EQ(st.overlapped, 1);
  EXPECT_EQ(st.target_passes, 1);
  EXPECT_GT(st.overlapped_draft_ms, 0.0);
}

// A CPU executor that records the models of the forwards it runs.
class RecordingExecutor final : public ForwardExecutor {
 public:
  explicit RecordingExecutor(Worker& worker) : cpu_(worker) {}
  std::vector<const Model*> models;  // one per forward, in order

  std::vector<float> forward(const Model& model, const Batch& batch, KvCache& kv) override {
    models.push_back(&model);
    return cpu_.forward(model, batch, kv);
  }
  std::vector<std::vector<float>> forward_multi(
      const Model& model, std::span<const Model::SequenceBatch> sequences) override {
    models.push_back(&model);
    return cpu_.forward_multi(model, sequences);
  }
  void forward_layers(const Model& model, const Batch& batch, KvCache& kv, int32_t first_cell,
                      int layer_first, int layer_last, float* hidden) override {
    cpu_.forward_layers(model, batch, kv, first_cell, layer_first, layer_last, hidden);
  }
  void attention_output(const Model& model, int layer, const Batch& batch, KvCache& kv,
                        int32_t first_cell, const float* hidden, float* out,
                        AttentionProbe* probe) override {
    cpu_.attention_output(model, layer, batch, kv, first_cell, hidden, out, probe);
  }
  void mlp_block(const Model& model, int layer, int n_tokens, float* hidden) override {
    cpu_.mlp_block(model, layer, n_tokens, hidden);
  }
  void output_logits(const Model& model, const float* hidden, int n, float* logits) override {
    cpu_.output_logits(model, hidden, n, logits);
  }

 private:
  CpuExecutor cpu_;
};

// A GPU executor keeps each cache's rows on its own device, so a drafter's
// forwards must reach the draft executor also when they run alone in a round
// (the rounds beside a target pass are WaitingDrafterDraftsBesideTheNextTargetPass's).
TEST(ForwardBatcherWait, DraftPassesAlwaysRunOnTheDraftExecutor) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::Q8_0, DType::Q4_0, 300, 5);
  Worker worker(1), draft_worker(1);
  RecordingExecutor executor(worker), draft_executor(draft_worker);
  ForwardBatcher batcher(executor, 64, &draft_executor, pair.target.get());
  batcher.join();
  for (int i = 0; i < 3; ++i) {
    KvCache target_kv(pair.target->config(), 32), draft_kv(pair.draft->config(), 32);
    Batch b;
    b.add(5 + i, 0, -1, true);
    batcher.forward(*pair.draft, b, draft_kv);  // alone in its round
    batcher.forward(*pair.target, b, target_kv);
  }
  batcher.leave();
  ASSERT_EQ(draft_executor.models.size(), 3u);
  ASSERT_EQ(executor.models.size(), 3u);
  for (const Model* m : draft_executor.models) EXPECT_EQ(m, pair.draft.get());
  for (const Model* m : executor.models) EXPECT_EQ(m, pair.target.get());
}

struct Case {
  std::string strategy;
  float temp;
  bool pipelined = false;  // drafting passes on a worker of their own, beside verification
  // cosine under the server's request scheduler with a latency bound no batch
  // meets: one request is chosen per pass, the others wait (max_wait 2).
  bool scheduled = false;
};

class BatchedStrategies : public ::testing::TestWithParam<Case> {};

// Six requests at once through one batcher, each on its own thread as the
// server runs them: every one emits the tokens of its solo run.
TEST_P(BatchedStrategies, ConcurrentRequestsEqualSoloRuns) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::Q8_0, DType::Q4_0, 300, 5);
  Worker worker(2);
  StrategyConfig base;
  base.name = GetParam().strategy;
  base.target = pair.target;
  base.draft = pair.draft;
  base.target_worker = &worker;
  base.ctx_size = 96;
  if (base.name == "cosine" || base.name == "specinfer") base.drafters = {pair.draft, pair.target};
  constexpr int kRequests = 6;
  std::vector<GenerationRequest> requests(kRequests);
  std::vector<std::vector<int32_t>> solo(kRequests), batched(kRequests);
  std::vector<int64_t> target_forwards(kRequests);
  for (int r = 0; r < kRequests; ++r) {
    requests[r].prompt = prefix(r);
    requests[r].n_predict = 20 + 3 * r;
    requests[r].sampling.temp = GetParam().temp;
    requests[r].sampling.seed = 100 + r;
    solo[r] = make_strategy(base)->generate(requests[r]).tokens;
  }

  Worker draft_worker(1);
  CpuExecutor executor(worker), draft_executor(draft_worker);
  // Small budget: prompts are split over rounds.
  ForwardBatcher batcher(executor, 64, GetParam().pipelined ? &draft_executor : nullptr,
                         pair.target.get());
  // The batcher's threads exist from here on: rounds start none.
  const uint64_t threads_before = threads_started();
  SchedulerOptions scheduling;
  scheduling.model.target_ms = {1.0, 1.5, 2.0};
  scheduling.model.draft_token_ms = 0.5;
  scheduling.bounds.max_latency_ms = 0.001;
  scheduling.max_wait = 2;
  RequestScheduler scheduler(scheduling);
  std::vector<int64_t> waits(kRequests, 0);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kRequests);
  // All join before the first forward, so the first round holds every prompt.
  for (int r = 0; r < kRequests; ++r) batcher.join();
  for (int r = 0; r < kRequests; ++r) {
    threads.push_back(start_thread("request", [&, r] {
      try {
        StrategyConfig c = base;
        c.make_target = [&](const StrategyConfig& cc) -> std::unique_ptr<Target> {
          return std::make_unique<LocalTarget>(cc.target, batcher);
        };
        c.make_drafter = [&](const StrategyConfig& cc) -> std::unique_ptr<Drafter> {
          return std::make_unique<ModelDrafter>(cc.draft, batcher);
        };
        const int id = scheduler.add();
        if (GetParam().scheduled)
          c.schedule_step = [&, id](int length, int gamma, int drafters) {
            const StepDecision d =
                scheduler.admit(id, {length, gamma, 0}, drafters, batcher, waits[r]);
            return StrategyConfig::StepGrant{d.gamma, d.drafters};
          };
        const GenerationResult result = make_strategy(c)->generate(requests[r]);
        scheduler.remove(id);
        batched[r] = result.tokens;
        target_forwards[r] = result.stats.target_forwards;
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
      batcher.leave();
    }));
  }
  for (std::thread& t : threads) t.join();
  // Only the requests' own threads were started, however many rounds ran
  // (overlapped ones included) and however many pool calls the strategies made.
  EXPECT_EQ(threads_started(), threads_before + kRequests);
  for (int r = 0; r < kRequests; ++r) {
    EXPECT_EQ(errors[r], "");
    EXPECT_EQ(batched[r], solo[r]) << "request " << r << " differs from its solo run";
  }
  const ForwardBatcher::Stats st = batcher.stats();
  // Batching happened: rounds served several requests' forwards at once.
  EXPECT_GT(st.sequence_forwards, st.passes);
  if (GetParam().scheduled) {
    // One request chosen per pass: the others waited and were let in after two
    // refusals in a row.
    const RequestScheduler::Stats sched = scheduler.stats();
    EXPECT_GT(sched.refused, 0);
    EXPECT_GT(sched.forced, 0);
    EXPECT_EQ(sched.infeasible, sched.decisions);
    int64_t all_waits = 0;
    for (int64_t w : waits) all_waits += w;
    EXPECT_EQ(all_waits, sched.refused);
  }
  if (GetParam().pipelined) {
    EXPECT_GT(st.overlapped, 0);
    EXPECT_GT(st.overlapped_draft_ms, 0.0);
    EXPECT_LE(st.overlapped_draft_ms, st.draft_ms);
  } else if (base.name == "sd") {
    // The target's pass waits for every request still drafting: one target
    // forward serves all requests' steps, so there are no more target passes
    // than the longest request's own target forwards, plus the rounds of
    // prompt chunks the token budget put off (99 prompt rows, budget 64).
    // Drafting out of phase split them over 23-24 passes here.
    const int64_t longest = *std::max_element(target_forwards.begin(), target_forwards.end());
    EXPECT_LE(st.target_passes, longest + 3);
  }
  EXPECT_EQ(batcher.joined(), 0);
}

INSTANTIATE_TEST_SUITE_P(Strategies, BatchedStrategies,
                         ::testing::Values(Case{"ar", 0}, Case{"sd", 0}, Case{"tree", 0},
                                           Case{"dyntree", 0}, Case{"ar", 0.8f}, Case{"sd", 0.8f},
                                           Case{"specinfer", 0}, Case{"cosine", 0},
                                           Case{"cosine", 0.8f}, Case{"sd", 0, true},
                                           Case{"cosine", 0, true}, Case{"cosine", 0.8f, true},
                                           Case{"cosine", 0, false, true},
                                           Case{"cosine", 0, true, true}),
                         [](const auto& param_info) {
                           return param_info.param.strategy +
                                  (param_info.param.temp > 0 ? "_sampled" : "_greedy") +
                                  (param_info.param.pipelined ? "_pipelined" : "") +
                                  (param_info.param.scheduled ? "_scheduled" : "");
                         });

}  // namespace
}  // namespace parspec
