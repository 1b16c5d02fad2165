// parspec make-model: writes a random-weight llama/qwen2 GGUF file.
#include <cstdio>
#include <string>

#include "core/error.h"
#include "model/random_model.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace parspec {

namespace {

RandomModelSpec preset_spec(const std::string& preset) {
  RandomModelSpec spec;  // the struct's defaults are the "tiny" shape
  if (preset == "tiny") return spec;
  if (preset == "1b") {
    // Llama-3.2-1B-like layers with a moderate vocabulary.
    spec.n_vocab = 32000;
    spec.n_embd = 2048;
    spec.n_layer = 16;
    spec.n_head = 32;
    spec.n_head_kv = 8;
    spec.n_ff = 8192;
    spec.n_ctx = 8192;
    spec.rope_freq_base = 500000.0f;
    return spec;
  }
  fail("unknown preset '", preset, "' (expected tiny or 1b)");
}

}  // namespace

int cmd_make_model(int argc, char** argv) {
  const RandomModelSpec defaults;
  std::string out_path, arch = defaults.arch, type_name = "f32", preset = "tiny";
  int n_vocab = defaults.n_vocab, n_embd = defaults.n_embd, n_layer = defaults.n_layer;
  int n_head = defaults.n_head, n_head_kv = defaults.n_head_kv, n_ff = defaults.n_ff;
  int n_ctx = defaults.n_ctx;
  float rope_base = defaults.rope_freq_base;
  bool tied = false, llama3_rope = false;
  uint64_t seed = defaults.seed;

  ArgParser args("make-model",
                 "Writes a GGUF model with random weights and a byte-level vocabulary (for tests "
                 "and speed measurements). Explicit options override the preset.");
  args.option("-o,--output", &out_path, "FILE", "output .gguf path (required)");
  args.option("--preset", &preset, "NAME", "tiny | 1b (Llama-3.2-1B-like shape, 32000 tokens)");
  args.option("--arch", &arch, "NAME", "llama | qwen2");
  args.option("--n-vocab", &n_vocab, "N", "vocabulary size (>= 258)");
  args.option("--n-embd", &n_embd, "N", "embedding width");
  args.option("--n-layer", &n_layer, "N", "number of layers");
  args.option("--n-head", &n_head, "N", "attention heads");
  args.option("--n-head-kv", &n_head_kv, "N", "key/value heads");
  args.option("--n-ff", &n_ff, "N", "feed-forward width");
  args.option("--ctx", &n_ctx, "N", "training context length written to the file");
  args.option("--rope-base", &rope_base, "F", "RoPE frequency base");
  args.option("--type", &type_name, "TYPE", "weight type: f32|f16|bf16|q8_0|q4_0|q4_k|q6_k");
  args.flag("--tied", &tied, "tie the output layer to the token embeddings");
  args.flag("--llama3-rope", &llama3_rope, "add Llama 3.1-style rope_freqs.weight");
  args.option("--seed", &seed, "S", "random seed");
  if (!args.parse(argc, argv, 2)) return 0;
  check(!out_path.empty(), "make-model: an output path is required (-o FILE)");

  RandomModelSpec spec = preset_spec(preset);
  if (args.given("--arch")) spec.arch = arch;
  if (args.given("--n-vocab")) spec.n_vocab = n_vocab;
  if (args.given("--n-embd")) spec.n_embd = n_embd;
  if (args.given("--n-layer")) spec.n_layer = n_layer;
  if (args.given("--n-head")) spec.n_head = n_head;
  if (args.given("--n-head-kv")) spec.n_head_kv = n_head_kv;
  if (args.given("--n-ff")) spec.n_ff = n_ff;
  if (args.given("--ctx")) spec.n_ctx = n_ctx;
  if (args.given("--rope-base")) spec.rope_freq_base = rope_base;
  spec.weight_type = parse_dtype(type_name);
  spec.tied_embeddings = tied;
  spec.llama3_rope_freqs = llama3_rope;
  spec.seed = seed;

  write_random_model(spec, out_path);
  std::fprintf(stderr, "make-model: wrote %s (%s, %d layers, n_embd %d, n_vocab %d, %s)\n",
               out_path.c_str(), spec.arch.c_str(), spec.n_layer, spec.n_embd, spec.n_vocab,
               std::string(type_info(spec.weight_type).name).c_str());
  return 0;
}

}  // namespace parspec
