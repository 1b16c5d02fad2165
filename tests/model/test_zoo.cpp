// Greedy exactness on the bundled trained models (models/target.gguf and
// models/draft.gguf): real text through the real tokenizer, every strategy
// against `ar`. Trained drafters agree with the target far more often than
// random ones, so long accepted runs and full-window acceptance are exercised.
// Also: every zoo file's tokenization and logits against the trainer's own
// PyTorch forward pass (models/zoo/reference.py), an independent reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/worker.h"
#include "decode/registry.h"
#include "decode/strategy.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "test_helpers.h"
#include "tokenizer/tokenizer.h"

namespace parspec {
namespace {

using testing_support::TempDir;

const char* const kPrompts[] = {
    "def read_config(path):\n    \"\"\"Read the configuration file",
    "import os\nimport sys\n\n\nclass Loader:\n",
    "    for name in sorted(names):\n        if name.startswith(",
    "    def __init__(self, name, value=None):\n        self.",
    "        raise ValueError(\"invalid ",
    "return self._data[key]\n\n    def keys(self):",
    "# Copyright (C) 2001 Python Software Foundation\n",
    "This program is free software; you can redistribute it and/or modify",
    "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND",
    "Permission is hereby granted, free of charge, to any person obtaining",
    "The package provides a library for",
    "See the documentation in /usr/share/doc for",
    "Q: A farmer has 12 apples and buys 7 more. How many apples does he have?\nA:",
    "Q: Tom reads 15 pages a day for 4 days. How many pages does he read?\nA:",
    "Q: A box holds 36 pencils shared equally by 4 students. How many each?\nA:",
    "[section]\nname = ",
    "{\n  \"name\": \"parspec\",\n  \"version\": ",
    "Description: ",
    "if __name__ == \"__main__\":\n    ",
    "    except KeyError:\n        ",
};

std::string zoo_path(const char* name) {
  return std::string(PARSPEC_SOURCE_DIR) + "/models/" + name;
}

TEST(ZooExactness, EveryStrategyReproducesArOnTheBundledModels) {
  ASSERT_TRUE(std::filesystem::exists(zoo_path("target.gguf"))) << "the bundled zoo is missing";
  std::shared_ptr<const Model> target = Model::load(zoo_path("target.gguf"));
  std::shared_ptr<const Model> draft = Model::load(zoo_path("draft.gguf"));
  const auto tokenizer = Tokenizer::from_gguf(target->gguf());
  Worker target_worker(1), draft_worker(1);
  StrategyConfig base;
  base.target = target;
  base.draft = draft;
  base.target_worker = &target_worker;
  base.draft_worker = &draft_worker;
  base.ctx_size = 256;
  base.name = "ar";
  auto ar = make_strategy(base);
  std::vector<StrategyConfig> variants;
  for (const std::string& name : strategy_names()) {  // every strategy but the reference
    if (name == "ar") continue;
    StrategyConfig c = base;
    c.name = name;
    c.options["pearl_window"] = 4;
    variants.push_back(c);
  }
  variants.push_back(base);
  variants.back().name = "sd";
  variants.back().draft_max = 8;
  variants.back().options["adaptive_draft"] = true;
  // The pool strategies on the whole zoo: the general and the three domain drafters.
  for (const char* name : {"specinfer", "cosine"}) {
    variants.push_back(base);
    variants.back().name = name;
    for (const char* file :
         {"draft.gguf", "draft-code.gguf", "draft-prose.gguf", "draft-math.gguf"})
      variants.back().drafters.push_back(Model::load(zoo_path(file)));
  }

  std::vector<int64_t> accepted(variants.size(), 0), drafted(variants.size(), 0);
  for (const char* text : kPrompts) {
    GenerationRequest req;
    req.prompt = tokenizer->encode(text, true, false);
    req.n_predict = 32;
    req.sampling.temp = 0;
    const auto expected = ar->generate(req).tokens;
    for (size_t v = 0; v < variants.size(); ++v) {
      const auto got = make_strategy(variants[v])->generate(req);
      ASSERT_EQ(got.tokens, expected) << variants[v].name << " on: " << text;
      accepted[v] += got.stats.accepted;
      drafted[v] += got.stats.drafted;
    }
  }
  for (size_t v = 0; v < variants.size(); ++v) {
    // auto may run ar here, and pp is ar on a pipeline: neither drafts.
    if (!strategy_info(variants[v].name).needs_draft) continue;
    EXPECT_GT(accepted[v], 0) << variants[v].name;
    EXPECT_LT(accepted[v], drafted[v]) << variants[v].name;
  }
}

class ZooReference : public ::testing::TestWithParam<const char*> {};

TEST_P(ZooReference, TokensAndLogitsMatchTheTrainersForwardPass) {
  const std::string model_path = zoo_path(GetParam());
  std::shared_ptr<const Model> model = Model::load(model_path);
  const auto tokenizer = Tokenizer::from_gguf(model->gguf());
  TempDir dir;
  {
    std::ofstream prompts(dir.file("prompts.txt"));
    for (const char* text : kPrompts) prompts << nlohmann::json(text).dump() << "\n";
  }
  const std::string cmd = "/usr/bin/python3 " PARSPEC_SOURCE_DIR "/models/zoo/reference.py -m " +
                          model_path + " --prompts-file " + dir.file("prompts.txt") + " --dump " +
                          dir.file("ref");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "reference failed (needs python3-torch): " << cmd;

  std::ifstream ids_in(dir.file("ref.ids"));
  std::ifstream logits_in(dir.file("ref.bin"), std::ios::binary);
  const int n_vocab = model->config().n_vocab;
  Worker worker(1);
  double max_err = 0, max_logit = 0;
  int positions = 0, argmax_checked = 0;
  for (const char* text : kPrompts) {
    std::string line;
    ASSERT_TRUE(std::getline(ids_in, line)) << "reference wrote too few prompts";
    std::vector<int32_t> expected_ids;
    std::istringstream fields(line);
    for (int32_t id; fields >> id;) expected_ids.push_back(id);
    const std::vector<int32_t> ids = tokenizer->encode(text, true, false);
    ASSERT_EQ(ids, expected_ids) << "tokenization of: " << text;

    std::vector<float> ref(ids.size() * n_vocab);
    logits_in.read(reinterpret_cast<char*>(ref.data()),
                   static_cast<std::streamsize>(ref.size() * sizeof(float)));
    ASSERT_EQ(logits_in.gcount(), static_cast<std::streamsize>(ref.size() * sizeof(float)));
    KvCache kv(model->config(), 64);
    const std::vector<float> logits = model->forward(worker, Batch::chain(kv, ids, true), kv);
    ASSERT_EQ(logits.size(), ref.size());
    for (size_t p = 0; p < ids.size(); ++p, ++positions) {
      const float* a = &logits[p * n_vocab];
      const float* b = &ref[p * n_vocab];
      for (int v = 0; v < n_vocab; ++v) {
        max_err = std::max(max_err, std::fabs(static_cast<double>(a[v]) - b[v]));
        max_logit = std::max(max_logit, std::fabs(static_cast<double>(b[v])));
      }
      // The greedy choice agrees wherever the reference's top two are clearly apart.
      std::vector<float> top(b, b + n_vocab);
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<>());
      if (top[0] - top[1] > 1e-2f) {
        ++argmax_checked;
        EXPECT_EQ(std::max_element(a, a + n_vocab) - a, std::max_element(b, b + n_vocab) - b)
            << "greedy token at position " << p << " of: " << text;
      }
    }
  }
  ASSERT_GT(max_logit, 1.0) << "degenerate reference logits";
  EXPECT_GT(argmax_checked, positions / 2);
  // F16 weights, float32 arithmetic on both sides: only summation order differs.
  EXPECT_LE(max_err / max_logit, 1e-5) << "max abs error " << max_err << " over " << positions
                                       << " positions, max |logit| " << max_logit;
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooReference,
                         ::testing::Values("target.gguf", "draft.gguf", "draft-code.gguf",
                                           "draft-prose.gguf", "draft-math.gguf", "draft-deep.gguf",
                                           "target-chat.gguf", "draft-chat.gguf"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           name = name.substr(0, name.find('.'));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace parspec
