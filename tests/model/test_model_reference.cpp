// The engine's logits against an independent NumPy implementation of the same
// architectures (tests/reference/reference_forward.py, float64), on random
// models written by the project's GGUF writer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include "model/model.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::TempDir;

struct ReferenceCase {
  const char* name;
  RandomModelSpec spec;
  // Largest allowed |engine - reference| relative to the largest |reference logit|.
  // F32/F16/BF16 weights differ only by float32 rounding; Q8_0/Q4_0 weights are
  // multiplied with activations quantized to 8 bits, as llama.cpp does, while the
  // reference keeps activations exact, so a percent-level gap is expected.
  double tolerance;
};

// Test names and failure messages show the case name, not its bytes.
void PrintTo(const ReferenceCase& c, std::ostream* os) {
  *os << c.name;
}

RandomModelSpec make_spec(const char* arch, DType type, bool tied, bool llama3, int n_head,
                          int n_head_kv) {
  RandomModelSpec s;
  s.arch = arch;
  s.weight_type = type;
  s.n_embd = 64;
  s.n_ff = 160;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.n_layer = 3;
  s.n_vocab = 290;
  s.tied_embeddings = tied;
  s.llama3_rope_freqs = llama3;
  s.rope_freq_base = 500000.0f;
  s.seed = 11;
  return s;
}

// A family's traits on make_spec's shape: windows shorter than the test's 12
// tokens, caps that random scores reach, a LongRoPE context below the test's 32.
RandomModelSpec family_spec(const char* arch, int window) {
  RandomModelSpec s = make_spec(arch, DType::F32, false, false, 4, 2);
  s.sliding_window = window;
  return s;
}

RandomModelSpec gemma2_spec() {
  RandomModelSpec s = family_spec("gemma2", 5);
  s.attn_logit_softcap = 2.0f;
  s.final_logit_softcap = 3.0f;
  return s;
}

RandomModelSpec gemma3_spec() {
  RandomModelSpec s = family_spec("gemma3", 5);
  s.n_layer = 6;
  s.rope_linear_scale = 4.0f;
  return s;
}

RandomModelSpec phi3_longrope_spec() {
  RandomModelSpec s = family_spec("phi3", 0);
  s.longrope_original_context = 16;
  return s;
}

std::vector<ReferenceCase> reference_cases() {
  return {
      {"qwen3_f32", family_spec("qwen3", 0), 1e-4},
      {"llama_sliding_f32", family_spec("llama", 5), 1e-4},
      {"gemma2_window_caps_f32", gemma2_spec(), 1e-4},
      {"gemma3_f32", gemma3_spec(), 1e-4},
      {"phi3_window_f32", family_spec("phi3", 5), 1e-4},
      {"phi3_longrope_f32", phi3_longrope_spec(), 1e-4},
      {"llama_gqa_untied_f32", make_spec("llama", DType::F32, false, false, 8, 2), 1e-4},
      {"llama_tied_llama3rope_f16", make_spec("llama", DType::F16, true, true, 4, 4), 1e-4},
      {"llama_mqa_bf16", make_spec("llama", DType::BF16, false, false, 4, 1), 1e-4},
      {"qwen2_gqa_tied_f32", make_spec("qwen2", DType::F32, true, false, 4, 2), 1e-4},
      {"qwen2_gqa_untied_f16", make_spec("qwen2", DType::F16, false, false, 8, 4), 1e-4},
      {"llama_q8_0", make_spec("llama", DType::Q8_0, false, false, 4, 2), 3e-2},
      {"qwen2_q4_0", make_spec("qwen2", DType::Q4_0, true, false, 4, 2), 5e-2},
  };
}

class ReferenceTest : public ::testing::TestWithParam<ReferenceCase> {};

TEST_P(ReferenceTest, LogitsMatchTheNumPyReference) {
  TempDir dir;
  const ReferenceCase& rc = GetParam();
  const std::string model_path = testing_support::write_model(dir, "m.gguf", rc.spec);
  auto model = Model::load(model_path);
  model->use_context_size(32);  // the cache's size, given to the reference too
  const std::vector<int32_t> tokens = {256, 84, 104, 101, 32, 113, 117, 105, 99, 107, 33, 10};

  Worker worker(2);
  KvCache kv(model->config(), 32);
  const std::vector<float> logits = model->forward(worker, Batch::chain(kv, tokens, true), kv);

  std::ostringstream ids;
  for (size_t i = 0; i < tokens.size(); ++i) ids << (i ? "," : "") << tokens[i];
  const std::string out_path = dir.file("ref.bin");
  const std::string cmd = "/usr/bin/python3 " PARSPEC_SOURCE_DIR
                          "/tests/reference/reference_forward.py " +
                          model_path + " --tokens " + ids.str() + " --context 32 --out " + out_path;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "reference failed: " << cmd;
  std::ifstream in(out_path, std::ios::binary);
  std::vector<float> ref(logits.size());
  in.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(ref.size() * 4));
  ASSERT_EQ(in.gcount(), static_cast<std::streamsize>(ref.size() * 4)) << "reference output size";

  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
    max_err = std::max(max_err, std::fabs(static_cast<double>(logits[i]) - ref[i]));
  }
  ASSERT_GT(max_ref, 1e-3) << "degenerate logits";
  EXPECT_LE(max_err / max_ref, rc.tolerance)
      << "max abs error " << max_err << ", max |logit| " << max_ref;
  // The argmax agrees at every position for the float types.
  if (rc.tolerance < 1e-3) {
    const int n_vocab = model->config().n_vocab;
    for (size_t p = 0; p < tokens.size(); ++p) {
      const float* a = &logits[p * n_vocab];
      const float* b = &ref[p * n_vocab];
      EXPECT_EQ(std::max_element(a, a + n_vocab) - a, std::max_element(b, b + n_vocab) - b)
          << "position " << p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, ReferenceTest, ::testing::ValuesIn(reference_cases()),
                         [](const auto& test_case) { return std::string(test_case.param.name); });

}  // namespace
}  // namespace parspec
