// The CUDA backend (src/cuda): batch invariance on the GPU (a token's logits
// are == whether it runs alone, in a chain, in a tree or beside another
// sequence, for every weight type the backend runs), the device KV cache
// through commit/keep/truncate, every strategy's greedy output against GPU
// `ar`'s, and GPU against CPU on the zoo. Where no GPU can be used the tests
// skip with the reason; the error a user gets then is tested here too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "cuda/backend.h"
#include "decode/local_model.h"
#include "decode/strategy.h"
#include "model/executor.h"
#include "sampling_exactness.h"
#include "strategy_variants.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::bitwise_equal;
using testing_support::describe;
using testing_support::strategy_variants;
using testing_support::TempDir;
using testing_support::write_model;

#define SKIP_WITHOUT_GPU()                                                \
  do {                                                                    \
    const std::string reason = cuda::unavailable_reason(0);               \
    if (!reason.empty()) GTEST_SKIP() << "no GPU to test on: " << reason; \
  } while (0)

TEST(CudaBackend, SaysWhyWhenNoDeviceCanBeUsed) {
  const std::string reason = cuda::unavailable_reason(0);
  if (reason.empty()) {
    const cuda::DeviceInfo info = cuda::device_info(0);
    EXPECT_FALSE(info.name.empty());
    EXPECT_GT(info.total_bytes, 0u);
    EXPECT_NE(cuda::describe(info).find(info.name), std::string::npos);
    EXPECT_NE(cuda::unavailable_reason(1 << 20), "");  // no such device
    return;
  }
  try {
    cuda::make_executor(0);
    FAIL() << "make_executor succeeded without a usable device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

// wide: K-quant rows of several super-blocks (5 and 17), so that the kernels'
// warps each take several, some one more than others.
RandomModelSpec small_spec(const std::string& arch, DType type, bool wide = false) {
  RandomModelSpec spec;
  spec.arch = arch;
  spec.n_vocab = 300;
  spec.n_embd = 128;
  spec.n_head = 4;  // head dim 32
  spec.n_head_kv = 2;
  spec.n_ff = 256;
  spec.n_layer = 2;
  spec.weight_type = type;
  spec.seed = 7;
  if (type == DType::Q4_K || type == DType::Q6_K) {
    spec.n_embd = 256;  // K-quant rows are multiples of 256
    spec.n_ff = 512;
  }
  if (wide) {
    spec.n_embd = 5 * 256;
    spec.n_head = 10;  // head dim 128
    spec.n_ff = 17 * 256;
  }
  return spec;
}

const std::vector<int32_t> kTokens = {256, 72, 101, 108, 108, 111, 44, 32, 119, 111};
// 72 tokens: more than the largest graph's 64 rows.
const std::vector<int32_t> kLong = [] {
  std::vector<int32_t> t = kTokens;
  while (t.size() < 72) t.push_back(static_cast<int32_t>((t.size() * 37 + 11) % 256));
  return t;
}();

struct InvarianceCase {
  std::string arch;
  DType type;
  bool wide = false;  // small_spec's
};

class CudaBatchInvariance : public ::testing::TestWithParam<InvarianceCase> {};

// Every check on `executor`; `gpu` adds the device's own (graphs against
// eager passes, greedy selection on the device).
void check_invariance(const Model& model, ForwardExecutor& executor, bool gpu) {
  const size_t n_vocab = static_cast<size_t>(model.config().n_vocab);
  const int n = static_cast<int>(kTokens.size());

  // Alone: one token per forward, each committed; with and without graphs.
  auto alone_run = [&](ForwardExecutor& e, int count) {
    std::vector<std::vector<float>> out;
    KvCache kv(model.config(), 128);
    for (int i = 0; i < count; ++i) {
      out.push_back(e.forward(model, Batch::chain(kv, {&kLong[i], 1}, true), kv));
      const int32_t cell = 0;
      kv.commit({&cell, 1});
    }
    return out;
  };
  const std::vector<std::vector<float>> alone = alone_run(executor, static_cast<int>(kLong.size()));
  ASSERT_EQ(alone[0].size(), n_vocab);
  if (gpu) {
    auto eager = cuda::make_executor(0);
    cuda::use_graphs(*eager, false);
    const std::vector<std::vector<float>> alone_eager = alone_run(*eager, n);
    for (int i = 0; i < n; ++i)
      EXPECT_TRUE(bitwise_equal(alone_eager[i].data(), alone[i].data(), n_vocab))
          << "graph and eager decoding differ at " << i;
  }

  // A prompt longer than the largest graph (a pass of its own kernels).
  {
    KvCache long_kv(model.config(), 128);
    const std::vector<float> all =
        executor.forward(model, Batch::chain(long_kv, kLong, true), long_kv);
    for (size_t i = 0; i < kLong.size(); ++i)
      EXPECT_TRUE(bitwise_equal(&all[i * n_vocab], alone[i].data(), n_vocab))
          << "long chain row " << i;
  }

  // A chain of 40 rows, then the rest: passes that graphs take (up to 64 rows)
  // with more rows than the tensor-core kernels' in-block input (16), and
  // after a committed prefix.
  {
    KvCache mid_kv(model.config(), 128);
    const std::span<const int32_t> tokens(kLong);
    const std::vector<float> first =
        executor.forward(model, Batch::chain(mid_kv, tokens.first(40), true), mid_kv);
    for (int i = 0; i < 40; ++i)
      EXPECT_TRUE(bitwise_equal(&first[i * n_vocab], alone[i].data(), n_vocab))
          << "40-row chain row " << i;
    std::vector<int32_t> cells(40);
    for (int i = 0; i < 40; ++i) cells[i] = i;
    mid_kv.commit(cells);
    const std::vector<float> rest =
        executor.forward(model, Batch::chain(mid_kv, tokens.subspan(40), true), mid_kv);
    for (size_t i = 40; i < kLong.size(); ++i)
      EXPECT_TRUE(bitwise_equal(&rest[(i - 40) * n_vocab], alone[i].data(), n_vocab))
          << "chain after 40 committed, row " << i;
  }

  // A chain: the first half, then the rest, every row's logits.
  KvCache kv(model.config(), 64);
  const int half = n / 2;
  const std::vector<int32_t> first(kTokens.begin(), kTokens.begin() + half);
  const std::vector<float> l1 = executor.forward(model, Batch::chain(kv, first, true), kv);
  for (int i = 0; i < half; ++i)
    EXPECT_TRUE(bitwise_equal(&l1[i * n_vocab], alone[i].data(), n_vocab)) << "chain row " << i;
  std::vector<int32_t> path(half);
  for (int i = 0; i < half; ++i) path[i] = i;
  kv.commit(path);

  // A tree below the committed half: the true continuation (cells 0, 2, 4)
  // beside decoys (cells 1, 3), and a third decoy branch (cell 5).
  Batch tree;
  tree.add(kTokens[half], half, -1, true);         // 0
  tree.add(7, half, -1, true);                     // 1
  tree.add(kTokens[half + 1], half + 1, 0, true);  // 2
  tree.add(9, half + 1, 1, true);                  // 3
  tree.add(kTokens[half + 2], half + 2, 2, true);  // 4
  tree.add(11, half + 2, 2, true);                 // 5
  const std::vector<float> lt = executor.forward(model, tree, kv);
  EXPECT_TRUE(bitwise_equal(&lt[0 * n_vocab], alone[half].data(), n_vocab)) << "tree cell 0";
  EXPECT_TRUE(bitwise_equal(&lt[2 * n_vocab], alone[half + 1].data(), n_vocab)) << "tree cell 2";
  EXPECT_TRUE(bitwise_equal(&lt[4 * n_vocab], alone[half + 2].data(), n_vocab)) << "tree cell 4";

  // Commit cells 0 and 2, keep 4 (it becomes cell 0): the device rows move as the cells do.
  const std::vector<int32_t> kept = kv.commit(std::vector<int32_t>{0, 2}, std::vector<int32_t>{4});
  ASSERT_EQ(kept.size(), 1u);
  ASSERT_EQ(kv.n_committed(), half + 2);
  Batch next;
  next.add(kTokens[half + 3], half + 3, kept[0], true);
  const std::vector<float> ln = executor.forward(model, next, kv);
  EXPECT_TRUE(bitwise_equal(ln.data(), alone[half + 3].data(), n_vocab)) << "after commit+keep";

  // Beside another sequence in one multi-sequence forward.
  kv.truncate(half);
  KvCache other(model.config(), 64);
  const Batch mine = Batch::chain(kv, {kTokens.begin() + half, kTokens.end()}, true);
  const std::vector<int32_t> theirs_tokens = {256, 50, 60, 70, 80, 90, 100};
  const Batch theirs = Batch::chain(other, theirs_tokens, true);
  const Model::SequenceBatch sequences[] = {{&theirs, &other}, {&mine, &kv}};
  const auto multi = executor.forward_multi(model, sequences);
  ASSERT_EQ(multi.size(), 2u);
  ASSERT_EQ(multi[1].size(), (n - half) * n_vocab);
  for (int i = half; i < n; ++i)
    EXPECT_TRUE(bitwise_equal(&multi[1][(i - half) * n_vocab], alone[i].data(), n_vocab))
        << "multi-sequence row " << i;
  // The other sequence alone gives its own logits back too.
  KvCache solo(model.config(), 64);
  const std::vector<float> solo_logits =
      executor.forward(model, Batch::chain(solo, theirs_tokens, true), solo);
  EXPECT_TRUE(bitwise_equal(multi[0].data(), solo_logits.data(), solo_logits.size()));

  // Layer pieces: forward_layers + output_logits give forward's logits.
  KvCache pieces(model.config(), 64);
  const Batch chain = Batch::chain(pieces, kTokens, true);
  std::vector<float> hidden(kTokens.size() * model.config().n_embd);
  model.embed(kTokens, hidden.data());
  const int32_t first_cell = pieces.add_cells(chain.positions, chain.parents);
  executor.forward_layers(model, chain, pieces, first_cell, 0, model.config().n_layer,
                          hidden.data());
  std::vector<float> piece_logits(kTokens.size() * n_vocab);
  executor.output_logits(model, hidden.data(), n, piece_logits.data());
  for (int i = 0; i < n; ++i)
    EXPECT_TRUE(bitwise_equal(&piece_logits[i * n_vocab], alone[i].data(), n_vocab))
        << "layer pieces row " << i;

  // Greedy selection on the device agrees with the logits it selects from.
  if (!gpu) return;
  const std::vector<int32_t> picked = cuda::last_argmax(executor, n);
  for (int i = 0; i < n; ++i) {
    const float* r = &piece_logits[i * n_vocab];
    EXPECT_EQ(picked[i], std::max_element(r, r + n_vocab) - r) << "argmax row " << i;
  }
}

// check_invariance on a GPU executor with the given attention kernel; a kernel
// other than the per-head one must also give that kernel's bits.
void check_invariance_on_gpu(const InvarianceCase& p, cuda::AttentionKernel kernel) {
  TempDir dir;
  auto model = Model::load(write_model(dir, "m.gguf", small_spec(p.arch, p.type, p.wide)));
  auto executor = cuda::make_executor(0);
  cuda::use_attention(*executor, kernel);
  check_invariance(*model, *executor, true);
  if (kernel == cuda::AttentionKernel::kPerHead) return;
  auto per_head = cuda::make_executor(0);
  cuda::use_attention(*per_head, cuda::AttentionKernel::kPerHead);
  KvCache want_kv(model->config(), 128), got_kv(model->config(), 128);
  const std::vector<float> want =
      per_head->forward(*model, Batch::chain(want_kv, kLong, true), want_kv);
  const std::vector<float> got =
      executor->forward(*model, Batch::chain(got_kv, kLong, true), got_kv);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(bitwise_equal(got.data(), want.data(), want.size()))
      << "differs from the per-head kernel";
}

TEST_P(CudaBatchInvariance, LogitsEqualAloneChainTreeAndMultiSequence) {
  SKIP_WITHOUT_GPU();
  check_invariance_on_gpu(GetParam(), cuda::AttentionKernel::kPerHead);
}

// The same with the query heads of a KV head sharing an attention block.
TEST_P(CudaBatchInvariance, LogitsEqualAloneChainTreeAndMultiSequenceWithGroupedAttention) {
  SKIP_WITHOUT_GPU();
  check_invariance_on_gpu(GetParam(), cuda::AttentionKernel::kGrouped);
}

// The same with a tile of rows sharing the keys they have in common.
TEST_P(CudaBatchInvariance, LogitsEqualAloneChainTreeAndMultiSequenceWithTiledAttention) {
  SKIP_WITHOUT_GPU();
  check_invariance_on_gpu(GetParam(), cuda::AttentionKernel::kTiled);
}

// The same with the committed keys and values of a few rows loaded before the
// kernel before attention ends, and one-split rows merged in their block.
TEST_P(CudaBatchInvariance, LogitsEqualAloneChainTreeAndMultiSequenceWithPrestagedAttention) {
  SKIP_WITHOUT_GPU();
  check_invariance_on_gpu(GetParam(), cuda::AttentionKernel::kPrestaged);
}

// The same checks hold on the CPU, here on every machine: a failure on the
// GPU is then the backend's, not the test's.
TEST_P(CudaBatchInvariance, TheSameChecksHoldOnTheCpu) {
  TempDir dir;
  const InvarianceCase& p = GetParam();
  auto model = Model::load(write_model(dir, "m.gguf", small_spec(p.arch, p.type, p.wide)));
  Worker worker(2);
  CpuExecutor cpu(worker);
  check_invariance(*model, cpu, false);
}

// Invariance alone would pass a kernel that is consistently wrong: the GPU's
// logits must also be the CPU's up to float rounding. The two reduce in
// different orders, so with quantized activations (Q8_0, Q8_K) a value near a
// rounding boundary may land on the other integer, a difference of one quant
// step that the next layers carry (about 1% of the largest logit measured);
// a kernel that reads its weights wrongly is off by the logits' own size.
TEST_P(CudaBatchInvariance, LogitsMatchTheCpuUpToRounding) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  const InvarianceCase& p = GetParam();
  auto model = Model::load(write_model(dir, "m.gguf", small_spec(p.arch, p.type, p.wide)));
  Worker worker(2);
  CpuExecutor cpu(worker);
  auto gpu = cuda::make_executor(0);
  KvCache cpu_kv(model->config(), 128), gpu_kv(model->config(), 128);
  const std::vector<float> want = cpu.forward(*model, Batch::chain(cpu_kv, kLong, true), cpu_kv);
  const std::vector<float> got = gpu->forward(*model, Batch::chain(gpu_kv, kLong, true), gpu_kv);
  ASSERT_EQ(got.size(), want.size());
  float largest = 1.0f, worst = 0.0f;
  for (size_t i = 0; i < want.size(); ++i) {
    largest = std::max(largest, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(got[i] - want[i]));
  }
  const bool quantized_activations = p.type == DType::Q8_0 || p.type == DType::Q4_0 ||
                                     p.type == DType::Q4_K || p.type == DType::Q6_K;
  const float bound = quantized_activations ? 5e-2f : 1e-3f;
  EXPECT_LE(worst, bound * largest) << "largest |logit| " << largest;
}

std::string case_name(const ::testing::TestParamInfo<InvarianceCase>& info) {
  return info.param.arch + "_" + std::string(type_info(info.param.type).name) +
         (info.param.wide ? "_wide" : "");
}

INSTANTIATE_TEST_SUITE_P(
    WeightTypes, CudaBatchInvariance,
    ::testing::Values(InvarianceCase{"llama", DType::F32}, InvarianceCase{"llama", DType::F16},
                      InvarianceCase{"llama", DType::BF16}, InvarianceCase{"llama", DType::Q8_0},
                      InvarianceCase{"llama", DType::Q4_0}, InvarianceCase{"llama", DType::Q4_K},
                      InvarianceCase{"llama", DType::Q6_K}, InvarianceCase{"qwen2", DType::F16},
                      InvarianceCase{"qwen2", DType::Q4_0},
                      InvarianceCase{"llama", DType::Q4_K, true},
                      InvarianceCase{"llama", DType::Q6_K, true}),
    case_name);

// Attention splits a row's keys at fixed chunk boundaries over several blocks
// per head and merges them in order: over a cache long enough that each split
// takes several chunks, a tail decoded as one chain and token by token gives
// the same bits, and the CPU's logits up to float rounding.
TEST(CudaAttention, LongCachesGiveTheSameBitsInEveryBatchAndTheCpusLogits) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  RandomModelSpec spec = small_spec("llama", DType::F32);
  spec.n_ctx = 4096;
  auto model = Model::load(write_model(dir, "m.gguf", spec));
  const size_t n_vocab = static_cast<size_t>(model->config().n_vocab);
  std::vector<int32_t> prompt = {256};
  while (prompt.size() < 2300)
    prompt.push_back(static_cast<int32_t>((prompt.size() * 37 + 11) % 256));
  const std::vector<int32_t> tail = {72, 101, 108, 108, 111};
  auto prefill = [&](ForwardExecutor& e, KvCache& kv) {
    e.forward(*model, Batch::chain(kv, prompt, false), kv);
    std::vector<int32_t> path(prompt.size());
    for (size_t i = 0; i < path.size(); ++i) path[i] = static_cast<int32_t>(i);
    kv.commit(path);
  };
  auto gpu = cuda::make_executor(0);
  cuda::use_attention(*gpu, cuda::AttentionKernel::kPerHead);
  KvCache chain_kv(model->config(), 2400), alone_kv(model->config(), 2400);
  prefill(*gpu, chain_kv);
  const std::vector<float> chain =
      gpu->forward(*model, Batch::chain(chain_kv, tail, true), chain_kv);
  ASSERT_EQ(chain.size(), tail.size() * n_vocab);
  prefill(*gpu, alone_kv);
  for (size_t i = 0; i < tail.size(); ++i) {
    const std::vector<float> one =
        gpu->forward(*model, Batch::chain(alone_kv, {&tail[i], 1}, true), alone_kv);
    EXPECT_TRUE(bitwise_equal(&chain[i * n_vocab], one.data(), n_vocab)) << "tail row " << i;
    const int32_t cell = 0;
    alone_kv.commit({&cell, 1});
  }

  // A tree over the cache: the tail's first three tokens (cells 0, 2, 4) beside decoys.
  const int at = static_cast<int>(prompt.size());
  auto tree_over = [&](ForwardExecutor& e) {
    KvCache kv(model->config(), 2400);
    prefill(e, kv);
    Batch tree;
    tree.add(tail[0], at, -1, true);     // 0
    tree.add(7, at, -1, true);           // 1
    tree.add(tail[1], at + 1, 0, true);  // 2
    tree.add(9, at + 1, 1, true);        // 3
    tree.add(tail[2], at + 2, 2, true);  // 4
    tree.add(11, at + 2, 2, true);       // 5
    return e.forward(*model, tree, kv);
  };
  const std::vector<float> tree = tree_over(*gpu);
  for (int cell : {0, 2, 4})
    EXPECT_TRUE(bitwise_equal(&tree[cell * n_vocab], &chain[cell / 2 * n_vocab], n_vocab))
        << "tree cell " << cell;

  // The other kernels (the query heads of a KV head in one block; tiles of
  // rows sharing their keys, here the prefill's too; keys and values loaded
  // early for a few rows): the same bits.
  for (const auto kernel : {cuda::AttentionKernel::kGrouped, cuda::AttentionKernel::kTiled,
                            cuda::AttentionKernel::kPrestaged}) {
    const char* name = kernel == cuda::AttentionKernel::kGrouped ? "grouped"
                       : kernel == cuda::AttentionKernel::kTiled ? "tiled"
                                                                 : "prestaged";
    auto other = cuda::make_executor(0);
    cuda::use_attention(*other, kernel);
    KvCache other_kv(model->config(), 2400);
    prefill(*other, other_kv);
    const std::vector<float> other_chain =
        other->forward(*model, Batch::chain(other_kv, tail, true), other_kv);
    EXPECT_TRUE(bitwise_equal(other_chain.data(), chain.data(), chain.size()))
        << name << " attention differs in a chain";
    const std::vector<float> other_tree = tree_over(*other);
    ASSERT_EQ(other_tree.size(), tree.size());
    EXPECT_TRUE(bitwise_equal(other_tree.data(), tree.data(), tree.size()))
        << name << " attention differs in a tree";
    if (kernel != cuda::AttentionKernel::kPrestaged) continue;
    // Its rows (a few at a time) over the long cache: the tail token by token.
    KvCache one_kv(model->config(), 2400);
    prefill(*other, one_kv);
    for (size_t i = 0; i < tail.size(); ++i) {
      const std::vector<float> one =
          other->forward(*model, Batch::chain(one_kv, {&tail[i], 1}, true), one_kv);
      EXPECT_TRUE(bitwise_equal(&chain[i * n_vocab], one.data(), n_vocab))
          << name << " attention differs at tail row " << i << " alone";
      const int32_t cell = 0;
      one_kv.commit({&cell, 1});
    }
  }

  Worker worker(2);
  CpuExecutor cpu(worker);
  KvCache cpu_kv(model->config(), 2400);
  prefill(cpu, cpu_kv);
  const std::vector<float> want = cpu.forward(*model, Batch::chain(cpu_kv, tail, true), cpu_kv);
  float largest = 1.0f, worst = 0.0f;
  for (size_t i = 0; i < want.size(); ++i) {
    largest = std::max(largest, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(chain[i] - want[i]));
  }
  EXPECT_LE(worst, 1e-3f * largest) << "largest |logit| " << largest;
}

TEST(CudaBackend, RefusesFamiliesItCannotRun) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  for (const char* arch : {"qwen3", "gemma2", "phi3"}) {
    RandomModelSpec spec = small_spec(arch, DType::F16);
    auto model = Model::load(write_model(dir, std::string(arch) + ".gguf", spec));
    auto executor = cuda::make_executor(0);
    try {
      cuda::upload(*executor, *model);
      ADD_FAILURE() << "a " << arch << " model was uploaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("runs llama and qwen2 models"), std::string::npos)
          << e.what();
    }
  }
  // A llama file with experts (Mixtral-style): its FFNs are not the dense kernels'.
  RandomModelSpec mixtral = small_spec("llama", DType::F16);
  mixtral.n_expert = 4;
  mixtral.n_expert_used = 2;
  auto model = Model::load(write_model(dir, "mixtral.gguf", mixtral));
  auto executor = cuda::make_executor(0);
  try {
    cuda::upload(*executor, *model);
    ADD_FAILURE() << "a mixture-of-experts model was uploaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mixture-of-experts FFNs"), std::string::npos) << e.what();
  }
}

// Layer-parallel drafting's pass in one call gives what its pieces composed
// on the host give, bit for bit, over a prefill and a tree after it.
TEST(CudaLayerGroups, OneCallGivesThePiecesResults) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  RandomModelSpec spec = small_spec("llama", DType::F16);
  spec.n_layer = 4;
  auto model = Model::load(write_model(dir, "groups.gguf", spec));
  const ModelConfig& c = model->config();
  const std::vector<int> ends = {1, 3, 4};  // layer 0, layers 1-2 in parallel, layer 3
  auto executor = cuda::make_executor(0);

  // The pieces, as LayerParallelDrafter composes them where no executor runs the whole pass.
  auto pieces = [&](const Batch& batch, KvCache& kv) {
    const int32_t first_cell = kv.add_cells(batch.positions, batch.parents);
    const size_t n = batch.size(), row = static_cast<size_t>(c.n_embd);
    std::vector<float> hidden(n * row);
    model->embed(batch.tokens, hidden.data());
    int first = 0;
    for (int end : ends) {
      if (end - first == 1) {
        executor->forward_layers(*model, batch, kv, first_cell, first, end, hidden.data());
      } else {
        const std::vector<float> h0 = hidden;
        std::vector<float> outs(static_cast<size_t>(end - first) * n * row);
        for (int l = first; l < end; ++l)
          executor->attention_output(*model, l, batch, kv, first_cell, h0.data(),
                                     outs.data() + (l - first) * n * row, nullptr);
        for (int l = first; l < end; ++l) {
          for (size_t i = 0; i < n * row; ++i) hidden[i] += outs[(l - first) * n * row + i];
          executor->mlp_block(*model, l, static_cast<int>(n), hidden.data());
        }
      }
      first = end;
    }
    size_t n_out = 0;
    for (size_t i = 0; i < n; ++i)
      if (batch.want_logits[i]) {
        std::copy_n(&hidden[i * row], row, &hidden[n_out * row]);
        ++n_out;
      }
    std::vector<float> logits(n_out * static_cast<size_t>(c.n_vocab));
    executor->output_logits(*model, hidden.data(), static_cast<int>(n_out), logits.data());
    return logits;
  };
  // The whole pass, replayed from graphs and launched kernel by kernel.
  for (const bool graphs : {true, false}) {
    auto whole_executor = cuda::make_executor(0);
    cuda::use_graphs(*whole_executor, graphs);
    auto whole = [&](const Batch& batch, KvCache& kv) {
      const int32_t first_cell = kv.add_cells(batch.positions, batch.parents);
      std::vector<float> logits;
      EXPECT_TRUE(
          whole_executor->forward_layer_groups(*model, batch, kv, first_cell, ends, logits));
      return logits;
    };
    const std::string label = graphs ? " (graphs)" : " (kernel by kernel)";

    KvCache kv_pieces(c, 64), kv_whole(c, 64);
    const Batch prefill_pieces = Batch::chain(kv_pieces, kTokens, true);
    const Batch prefill_whole = Batch::chain(kv_whole, kTokens, true);
    const std::vector<float> a = pieces(prefill_pieces, kv_pieces);
    const std::vector<float> b = whole(prefill_whole, kv_whole);
    ASSERT_EQ(a.size(), kTokens.size() * static_cast<size_t>(c.n_vocab));
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(bitwise_equal(a.data(), b.data(), a.size())) << "prefill" << label;
    std::vector<int32_t> path(kTokens.size());
    for (size_t i = 0; i < path.size(); ++i) path[i] = static_cast<int32_t>(i);
    kv_pieces.commit(path);
    kv_whole.commit(path);

    // A tree after it, twice (the second replays what the first captured).
    for (int round = 0; round < 2; ++round) {
      const int32_t at = kv_pieces.n_committed();
      Batch tree;
      tree.add(5 + round, at, -1, true);
      tree.add(6, at, -1, false);
      tree.add(7, at + 1, 0, true);
      const std::vector<float> ta = pieces(tree, kv_pieces);
      const std::vector<float> tb = whole(tree, kv_whole);
      ASSERT_EQ(ta.size(), 2u * static_cast<size_t>(c.n_vocab));
      ASSERT_EQ(ta.size(), tb.size());
      EXPECT_TRUE(bitwise_equal(ta.data(), tb.data(), ta.size())) << "tree " << round << label;
      const int32_t keep[] = {0, 2};
      kv_pieces.commit(keep);
      kv_whole.commit(keep);
    }
  }
}

std::vector<std::vector<int32_t>> prompts(int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = {256};
    for (int j = 0; j <= i % 5; ++j) p.push_back((i * 31 + j * 17 + 3) % 256);
    out.push_back(p);
  }
  return out;
}

class CudaStrategies : public ::testing::TestWithParam<std::string> {};

// The sides the command line gives a strategy on the GPU (tools/strategy_options.cpp).
void run_on(StrategyConfig& c, ForwardExecutor& target, ForwardExecutor& draft) {
  c.make_target = [&target](const StrategyConfig& config) -> std::unique_ptr<Target> {
    return std::make_unique<LocalTarget>(config.target, target);
  };
  c.make_drafter = [&draft](const StrategyConfig& config) -> std::unique_ptr<Drafter> {
    return std::make_unique<ModelDrafter>(config.draft, draft);
  };
  c.draft_executor = &draft;
}

// Every strategy on sides over `target` and `draft` (as the command line makes
// them) against `ar` on the same sides.
void check_strategies(const std::string& arch, ForwardExecutor& target, ForwardExecutor& draft) {
  TempDir dir;
  const testing_support::ModelPair pair =
      testing_support::make_model_pair(dir, arch, DType::F16, DType::Q4_0, 300, 5);
  Worker worker(1);
  StrategyConfig base;
  base.target = pair.target;
  base.draft = pair.draft;
  base.target_worker = &worker;
  base.ctx_size = 128;
  base.name = "ar";
  run_on(base, target, draft);
  auto ar = make_strategy(base);
  int64_t accepted = 0, drafted = 0;
  for (const auto& prompt : prompts(6)) {
    GenerationRequest req;
    req.prompt = prompt;
    req.n_predict = 20;
    req.sampling.temp = 0;
    const std::vector<int32_t> expected = ar->generate(req).tokens;
    ASSERT_EQ(expected.size(), 20u);
    for (StrategyConfig c : strategy_variants()) {
      c.target = base.target;
      c.draft = base.draft;
      c.target_worker = &worker;
      c.ctx_size = base.ctx_size;
      run_on(c, target, draft);
      const GenerationResult got = make_strategy(c)->generate(req);
      ASSERT_EQ(got.tokens, expected) << describe(c);
      accepted += got.stats.accepted;
      drafted += got.stats.drafted;
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
}

TEST_P(CudaStrategies, EveryStrategyReproducesGpuAutoregressiveDecoding) {
  SKIP_WITHOUT_GPU();
  auto target = cuda::make_executor(0);
  auto draft = cuda::make_executor(0);
  check_strategies(GetParam(), *target, *draft);
}

// The same sides over CPU executors, on every machine: the way the command
// line hands sides to the strategies holds for each of them.
TEST(CudaStrategiesOnCpu, TheSameSidesHold) {
  Worker target_worker(1), draft_worker(1);
  CpuExecutor target(target_worker), draft(draft_worker);
  check_strategies("llama", target, draft);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaStrategies, ::testing::Values("llama", "qwen2"));

// Sampled output on the GPU: every strategy's tokens at the first positions,
// over hundreds of seeds, have GPU `ar`'s distribution (two-sample
// chi-square, as the CPU's sampling test, which has the power of 2500 runs:
// a GPU forward costs a launch and a sync, so this one catches what only the
// GPU's sides could get wrong in fewer).
TEST(CudaSampling, EveryStrategyKeepsTheTargetsDistribution) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  // A small vocabulary keeps the histograms dense enough for the test.
  const testing_support::ModelPair pair =
      testing_support::make_model_pair(dir, "llama", DType::F32, DType::Q4_0, 260, 3);
  auto target = cuda::make_executor(0);
  auto draft = cuda::make_executor(0);
  Worker worker(1);
  StrategyConfig base = testing_support::pair_config(pair, worker, worker, 64);  // ar
  run_on(base, *target, *draft);
  testing_support::expect_every_strategy_keeps_the_distribution(
      base, 600, testing_support::untruncated_sampling(1.5f),
      [&](StrategyConfig& c) { run_on(c, *target, *draft); });
}

// The zoo's target on both backends, teacher-forced over its own greedy
// continuation of a few prompts: the largest logit difference is reported,
// and wherever the CPU's best token leads by a clear margin the GPU picks it.
TEST(CudaVsCpu, ZooGreedyAgreement) {
  SKIP_WITHOUT_GPU();
  // The source tree may sit elsewhere on the GPU machine than where this was built.
  const char* source_dir = std::getenv("PARSPEC_SOURCE_DIR");
  const std::string path =
      std::string(source_dir != nullptr ? source_dir : PARSPEC_SOURCE_DIR) + "/models/target.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  auto model = Model::load(path);
  const size_t n_vocab = static_cast<size_t>(model->config().n_vocab);
  Worker worker(2);
  CpuExecutor cpu(worker);
  auto gpu = cuda::make_executor(0);
  const std::vector<std::vector<int32_t>> starts = {
      {1, 400, 500, 600}, {1, 100, 200}, {1, 30, 31, 32, 33, 34}};
  double max_diff = 0;
  int compared = 0, disagreements = 0;
  for (const std::vector<int32_t>& start : starts) {
    StrategyConfig c;
    c.target = model;
    c.target_worker = &worker;
    c.ctx_size = 128;
    GenerationRequest req;
    req.prompt = start;
    req.n_predict = 48;
    req.sampling.temp = 0;
    std::vector<int32_t> tokens = start;
    const std::vector<int32_t> gen = make_strategy(c)->generate(req).tokens;
    tokens.insert(tokens.end(), gen.begin(), gen.end());
    KvCache cpu_kv(model->config(), 128), gpu_kv(model->config(), 128);
    const std::vector<float> a = cpu.forward(*model, Batch::chain(cpu_kv, tokens, true), cpu_kv);
    const std::vector<float> b = gpu->forward(*model, Batch::chain(gpu_kv, tokens, true), gpu_kv);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      const float* x = &a[i * n_vocab];
      const float* y = &b[i * n_vocab];
      for (size_t j = 0; j < n_vocab; ++j)
        max_diff = std::max(max_diff, double(std::fabs(x[j] - y[j])));
      std::vector<float> sorted(x, x + n_vocab);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      const int64_t cpu_best = std::max_element(x, x + n_vocab) - x;
      const int64_t gpu_best = std::max_element(y, y + n_vocab) - y;
      ++compared;
      if (cpu_best != gpu_best) {
        ++disagreements;
        std::printf("divergence at position %zu: cpu %lld, gpu %lld, cpu margin %.6f\n", i,
                    static_cast<long long>(cpu_best), static_cast<long long>(gpu_best),
                    sorted[0] - sorted[1]);
        EXPECT_LT(sorted[0] - sorted[1], 1e-2) << "the GPU missed a clear greedy choice at " << i;
      }
    }
  }
  std::printf(
      "GPU vs CPU on %s: %d positions, %d greedy disagreements, largest logit "
      "difference %.3g\n",
      path.c_str(), compared, disagreements, max_diff);
  RecordProperty("max_logit_difference", std::to_string(max_diff));
  EXPECT_LT(max_diff, 0.05);
}

}  // namespace
}  // namespace parspec
