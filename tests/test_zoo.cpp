// Greedy exactness on the bundled trained models (models/target.gguf and
// models/draft.gguf): real text through the real tokenizer, every strategy
// against `ar`. Trained drafters agree with the target far more often than
// random ones, so long accepted runs and full-window acceptance are exercised.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/model.h"
#include "spec/strategy.h"
#include "tokenizer/tokenizer.h"

namespace parspec {
namespace {

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
  for (const char* name : {"sd", "tree", "dyntree", "pearl"}) {
    StrategyConfig c = base;
    c.name = name;
    c.pearl_window = 4;
    variants.push_back(c);
  }
  variants.push_back(base);
  variants.back().name = "sd";
  variants.back().draft_max = 8;
  variants.back().adaptive = true;

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
    EXPECT_GT(accepted[v], 0) << variants[v].name;
    EXPECT_LT(accepted[v], drafted[v]) << variants[v].name;
  }
}

}  // namespace
}  // namespace parspec
