// parspec info MODEL.gguf: what a model file contains.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/backend.h"
#include "kernels/isa.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "strategies/ppd/ppd_prompts.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/device_options.h"

namespace parspec {

namespace {

// A PPD side file (general.architecture "ppd"): its prompt tokens and how
// well they guessed on held-out text, checked as `ppd` would load it.
void describe_ppd_side_file(const std::string& path, const GgufFile& file) {
  const PpdPrompts p = PpdPrompts::load(path);
  std::printf("%s\n", path.c_str());
  std::printf("  architecture   ppd (prompt tokens for --strategy ppd)%s%s\n",
              file.has("general.name") ? "  name: " : "",
              file.get_string("general.name", "").c_str());
  std::printf("  base model     %s\n", file.get_string("ppd.base.name", "not recorded").c_str());
  std::printf("  prompt tokens  %d x %d ensemble tokens, %d wide, %s mask\n", p.prompt_tokens,
              p.ensemble_tokens, p.n_embd, file.get_string("ppd.mask", "ensemble").c_str());
  for (const char* key : {"ppd.accuracy.top1", "ppd.accuracy.top5"}) {
    if (!file.has(key)) continue;
    std::printf("  %-14s", key + 4);
    for (float a : file.get_float_array(key)) std::printf(" %.3f", a);
    std::printf("  (by distance)\n");
  }
  if (p.rank_accuracy.empty()) std::printf("  rank accuracy  not measured\n");
  std::printf("  size           %llu bytes\n", static_cast<unsigned long long>(p.file_bytes));
}

}  // namespace

int cmd_info(int argc, char** argv) {
  std::vector<std::string> files;
  bool show_tensors = false;
  ArgParser args(
      "info",
      "Print architecture, shapes, tensor types and tokenizer of GGUF models (and what a PPD "
      "side file holds).");
  args.positional("MODEL.gguf", &files, 16, "model files to describe");
  args.flag("--tensors", &show_tensors, "also list every tensor");
  if (!args.parse(argc, argv)) return 0;
  check(!files.empty(), "no model file given (usage: parspec info MODEL.gguf)");

  // Resolved first: a bad PARSPEC_ISA is an error before any file is read.
  const std::string kernels = isa_report();
  const std::string gpu_reason = cuda::unavailable_reason(0);
  const std::string gpu = gpu_reason.empty() ? device_label(0) : "none: " + gpu_reason;
  for (const std::string& path : files) {
    auto file = GgufFile::open(path);
    if (is_ppd_side_file(*file)) {
      describe_ppd_side_file(path, *file);
      continue;
    }
    const ModelConfig c = ModelConfig::from_gguf(*file);
    uint64_t n_params = 0, n_bytes = 0;
    std::map<std::string, int> type_counts;
    for (const auto& t : file->tensors()) {
      n_params += t.n_elements;
      n_bytes += t.n_bytes;
      ++type_counts[std::string(type_info(t.type).name)];
    }
    std::printf("%s\n", path.c_str());
    std::printf("  architecture   %s%s%s\n", c.arch.c_str(),
                c.name.empty() ? "" : "  name: ", c.name.c_str());
    std::printf("  layers         %d\n", c.n_layer);
    std::printf("  embedding      %d\n", c.n_embd);
    std::printf("  heads          %d (kv %d, head dim %d)\n", c.n_head, c.n_head_kv, c.head_dim);
    std::printf("  feed-forward   %d\n", c.n_ff);
    if (c.moe.enabled())
      std::printf(
          "  experts        %d experts, %d per token, each %d wide%s%s\n", c.moe.n_expert,
          c.moe.n_expert_used, c.moe.n_ff_expert, c.moe.n_ff_shared > 0 ? ", a shared expert " : "",
          c.moe.n_ff_shared > 0 ? (std::to_string(c.moe.n_ff_shared) + " wide").c_str() : "");
    std::printf("  vocabulary     %d\n", c.n_vocab);
    std::printf("  context (train) %d\n", c.n_ctx_train);
    std::printf("  rope           base %g, %s pairs, %d dims%s%s\n", c.rope_freq_base,
                c.rope_style == RopeStyle::kNeox ? "neox" : "adjacent", c.rope_dims,
                c.rope_freq_factors.empty() ? "" : ", llama3 frequency factors",
                c.rope_linear_scale != 1.0f ? ", linear scaling" : "");
    std::printf("  embeddings     %s\n",
                c.tied_embeddings ? "tied (output = token_embd)" : "untied");
    std::printf("  parameters     %.2f M in %zu tensors, %.2f MiB\n", n_params / 1e6,
                file->tensors().size(), n_bytes / 1048576.0);
    std::printf("  kernels        %s\n", kernels.c_str());
    std::printf("  gpu            %s\n", gpu.c_str());
    std::printf("  tensor types  ");
    for (const auto& [name, count] : type_counts) std::printf(" %s×%d", name.c_str(), count);
    std::printf("\n");
    try {
      auto tok = Tokenizer::from_gguf(*file);
      std::printf("  tokenizer      %s\n", tok->describe().c_str());
    } catch (const Error& e) {
      std::printf("  tokenizer      none usable (%s)\n", e.what());
    }
    if (show_tensors) {
      for (const auto& t : file->tensors()) {
        std::printf("    %-32s %-5s [", t.name.c_str(),
                    std::string(type_info(t.type).name).c_str());
        for (size_t i = 0; i < t.dims.size(); ++i)
          std::printf("%s%lld", i ? ", " : "", static_cast<long long>(t.dims[i]));
        std::printf("]\n");
      }
    }
  }
  return 0;
}

}  // namespace parspec
