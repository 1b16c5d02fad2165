// parspec make-model: writes a random-weight GGUF file of any supported architecture, or
// (--inflate) a trained model embedded into a larger shape.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "model/gguf.h"
#include "model/inflate.h"
#include "model/model_config.h"
#include "model/random_model.h"
#include "strategies/ppd/ppd_prompts.h"
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

struct ShapeFlags {
  int n_embd, n_layer, n_head, n_head_kv, n_ff;
};

// Whether --type names llama.cpp's Q4_K_M mix rather than one type (any case).
bool names_q4_k_m(const std::string& type_name) {
  std::string lower = type_name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "q4_k_m";
}

int inflate_command(const ArgParser& args, const std::string& source, const std::string& out_path,
                    const std::string& preset, const ShapeFlags& flags,
                    const std::string& type_name, int experts, int experts_used, int n_ctx) {
  for (const char* random_only :
       {"--arch", "--n-vocab", "--rope-base", "--tied", "--llama3-rope", "--seed", "--logit-spread",
        "--sliding-window", "--attn-softcap", "--final-softcap", "--rope-scale",
        "--longrope-context", "--n-ff-expert", "--n-ff-shared"})
    check(!args.given(random_only), "make-model: ", random_only,
          " is for random models; an inflated model keeps the source's");
  const bool any_shape = args.given("--n-embd") || args.given("--n-layer") ||
                         args.given("--n-head") || args.given("--n-head-kv") ||
                         args.given("--n-ff");
  check(args.given("--preset") || any_shape, "make-model --inflate: give a --preset (",
        inflate_preset_names(),
        ") or the shape (--n-embd, --n-layer, --n-ff, --n-head, --n-head-kv)");

  InflateOptions options;
  if (args.given("--preset")) {
    const ModelConfig source_config = ModelConfig::from_gguf(*GgufFile::open(source));
    options.shape = inflate_preset(preset, source_config.head_dim);
  }
  if (args.given("--n-embd")) {
    options.shape.n_embd = flags.n_embd;
    // A new width without new head counts: derive them from the head dimension.
    if (!args.given("--n-head")) options.shape.n_head = 0;
    if (!args.given("--n-head-kv")) options.shape.n_head_kv = 0;
  }
  if (args.given("--n-layer")) options.shape.n_layer = flags.n_layer;
  if (args.given("--n-ff")) options.shape.n_ff = flags.n_ff;
  if (args.given("--n-head")) {
    options.shape.n_head = flags.n_head;
    if (!args.given("--n-head-kv")) options.shape.n_head_kv = 0;
  }
  if (args.given("--n-head-kv")) options.shape.n_head_kv = flags.n_head_kv;
  for (int dim : {options.shape.n_embd, options.shape.n_layer, options.shape.n_ff,
                  options.shape.n_head, options.shape.n_head_kv})
    check(dim >= 0, "make-model: shape values must be positive");
  if (args.given("--type")) {
    options.q4_k_m = names_q4_k_m(type_name);
    if (!options.q4_k_m) options.weight_type = parse_dtype(type_name);
  }
  options.experts = experts;
  options.experts_used = experts_used;
  if (args.given("--ctx")) {
    check(n_ctx > 0, "make-model: --ctx must be positive, got ", n_ctx);
    options.context_length = n_ctx;
  }
  options.progress = isatty(STDERR_FILENO) != 0;

  inflate_model(source, options, out_path);
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(out_path));
  std::fprintf(stderr,
               "make-model: wrote %s (%s inflated to %d layers, n_embd %d, n_ff %d, %d heads "
               "(kv %d), n_vocab %d)\n",
               out_path.c_str(), source.c_str(), c.n_layer, c.n_embd, c.n_ff, c.n_head, c.n_head_kv,
               c.n_vocab);
  // PPD prompt tokens trained for the source go along, zero-padded like its embeddings.
  const std::string side = ppd_side_file_for(source);
  if (std::filesystem::exists(side)) {
    inflate_ppd_prompts(side, c.n_embd, ppd_side_file_for(out_path));
    std::fprintf(stderr, "make-model: wrote %s (%s widened to n_embd %d)\n",
                 ppd_side_file_for(out_path).c_str(), side.c_str(), c.n_embd);
  }
  return 0;
}

}  // namespace

int cmd_make_model(int argc, char** argv) {
  const RandomModelSpec defaults;
  std::string out_path, arch = defaults.arch, type_name = "f32", preset = "tiny";
  int n_vocab = defaults.n_vocab, n_embd = defaults.n_embd, n_layer = defaults.n_layer;
  int n_head = defaults.n_head, n_head_kv = defaults.n_head_kv, n_ff = defaults.n_ff;
  int n_ctx = defaults.n_ctx;
  int n_expert = 0, n_expert_used = 2, n_ff_expert = 0, n_ff_shared = 0;
  float rope_base = defaults.rope_freq_base;
  bool tied = false, llama3_rope = false;
  float logit_spread = defaults.logit_spread, attn_softcap = 0, final_softcap = 0;
  float rope_scale = defaults.rope_linear_scale;
  int sliding_window = defaults.sliding_window, longrope_context = 0;
  uint64_t seed = defaults.seed;
  std::string inflate_source;

  ArgParser args(
      "make-model",
      "Writes a GGUF model with random weights and a byte-level vocabulary (for tests and speed\n"
      "measurements). Explicit options override the preset.\n\n"
      "With --inflate SRC.gguf it instead embeds the trained model SRC into a larger\n"
      "llama/qwen2 shape that computes the same function: the source's weights in the leading\n"
      "rows and columns, every other weight zero, the extra layers identities through the\n"
      "residual, RMSNorm weights and epsilon rescaled for the zero padding, query heads kept in\n"
      "their key/value groups, the head dimension, vocabulary and tokenizer unchanged. The\n"
      "result costs what a dense model of the large shape costs and predicts what the source\n"
      "predicts, so a pair of inflated models has the source pair's acceptance rates: a\n"
      "benchmark device, not a better model (its weights are mostly zeros; it is a fair cost\n"
      "model only for kernels that do not skip zeros, as parspec's do not). PPD prompt tokens\n"
      "trained for SRC (SRC.ppd.gguf beside it) are widened the same way to OUT.ppd.gguf.\n\n"
      "Inflate presets: 100m, 1b, 3b, 8b (widths, depth and key/value width of GPT-2 small with\n"
      "GQA, Llama 3.2 1B and 3B, Llama 3.1 8B; heads sized to the source's head dimension).\n"
      "Shape options override a preset; unset ones keep the source's. --type sets the weight\n"
      "type (default: each tensor keeps the source's); a quantized type gives the quantized\n"
      "source's function. --experts N turns each FFN into N identical experts.");
  args.option("-o,--output", &out_path, "FILE", "output .gguf path (required)");
  args.option("--inflate", &inflate_source, "SRC",
              "embed the trained model SRC.gguf into a larger shape (see above)");
  args.option("--preset", &preset, "NAME",
              "tiny | 1b (Llama-3.2-1B-like shape, 32000 tokens); with --inflate: 100m | 1b | "
              "3b | 8b");
  args.option("--arch", &arch, "NAME", supported_architectures());
  args.option("--n-vocab", &n_vocab, "N", "vocabulary size (>= 258)");
  args.option("--n-embd", &n_embd, "N", "embedding width");
  args.option("--n-layer", &n_layer, "N", "number of layers");
  args.option("--n-head", &n_head, "N", "attention heads");
  args.option("--n-head-kv", &n_head_kv, "N", "key/value heads");
  args.option("--n-ff", &n_ff, "N", "feed-forward width");
  args.option(
      "--experts", &n_expert, "N",
      "mixture-of-experts FFNs with N experts (llama: Mixtral-style, each --n-ff wide; "
      "qwen2moe and qwen3moe need it); with --inflate: the source's FFN copied into N identical "
      "experts behind a random router (the same function at a mixture-of-experts "
      "model's cost)");
  args.option("--experts-used", &n_expert_used, "K", "experts each token runs (top-K)");
  args.option("--n-ff-expert", &n_ff_expert, "N",
              "qwen2moe, qwen3moe: width of one routed expert (default --n-ff)");
  args.option("--n-ff-shared", &n_ff_shared, "N",
              "qwen2moe: width of the shared expert (default --n-ff)");
  args.option("--ctx", &n_ctx, "N",
              "training context length written to the file (with --inflate: instead of the "
              "source's)");
  args.option("--rope-base", &rope_base, "F", "RoPE frequency base");
  args.option("--type", &type_name, "TYPE",
              "weight type: f32|f16|bf16|q8_0|q4_0|q4_k|q6_k, or q4_k_m: q4_k with q6_k where "
              "llama.cpp's Q4_K_M puts it (output layer; attn_v and ffn_down of a third of the "
              "layers) (with --inflate: default the source's)");
  args.flag("--tied", &tied, "tie the output layer to the token embeddings");
  args.flag("--llama3-rope", &llama3_rope, "add Llama 3.1-style rope_freqs.weight");
  args.option("--seed", &seed, "S", "random seed");
  args.option("--logit-spread", &logit_spread, "X",
              "output weights N(0, X / sqrt(n_embd)): X > 1 gives peaked next-token "
              "distributions (default: 1)");
  args.option("--sliding-window", &sliding_window, "N",
              "write attention.sliding_window N (llama: Mistral-style, every layer; gemma2: even "
              "layers; gemma3: five of six; phi3: every layer); 0: leave it out (gemma3: 4096)");
  args.option("--attn-softcap", &attn_softcap, "F",
              "gemma2: attn_logit_softcapping (default: left out, 50 applies)");
  args.option("--final-softcap", &final_softcap, "F",
              "gemma2/gemma3: final_logit_softcapping (default: left out)");
  args.option("--rope-scale", &rope_scale, "F",
              "linear RoPE scaling factor (gemma3's global layers)");
  args.option("--longrope-context", &longrope_context, "N",
              "phi3: LongRoPE factor tensors for an original context of N (< --ctx)");
  if (!args.parse(argc, argv, 2)) return 0;
  check(!out_path.empty(), "make-model: an output path is required (-o FILE)");
  if (args.given("--inflate"))
    return inflate_command(args, inflate_source, out_path, preset,
                           {n_embd, n_layer, n_head, n_head_kv, n_ff}, type_name, n_expert,
                           n_expert_used, n_ctx);

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
  spec.q4_k_m = names_q4_k_m(type_name);
  spec.weight_type = spec.q4_k_m ? DType::Q4_K : parse_dtype(type_name);
  spec.tied_embeddings = tied;
  spec.llama3_rope_freqs = llama3_rope;
  spec.seed = seed;
  spec.logit_spread = logit_spread;
  spec.sliding_window = sliding_window;
  spec.attn_logit_softcap = attn_softcap;
  spec.final_logit_softcap = final_softcap;
  spec.rope_linear_scale = rope_scale;
  spec.longrope_original_context = longrope_context;
  spec.n_expert = n_expert;
  spec.n_expert_used = n_expert > 0 ? n_expert_used : 0;
  spec.n_ff_expert = n_ff_expert;
  spec.n_ff_shared = n_ff_shared;
  check(spec.arch == "qwen2moe" || spec.arch == "qwen3moe" || !args.given("--n-ff-expert"),
        "make-model: --n-ff-expert is for qwen2moe and qwen3moe (a llama expert is --n-ff wide)");
  check(spec.arch == "qwen2moe" || !args.given("--n-ff-shared"),
        "make-model: --n-ff-shared is for qwen2moe (the only family with a shared expert)");

  write_random_model(spec, out_path);
  std::fprintf(stderr, "make-model: wrote %s (%s, %d layers, n_embd %d, n_vocab %d, %s)\n",
               out_path.c_str(), spec.arch.c_str(), spec.n_layer, spec.n_embd, spec.n_vocab,
               spec.q4_k_m ? "q4_K_M" : std::string(type_info(spec.weight_type).name).c_str());
  return 0;
}

}  // namespace parspec
