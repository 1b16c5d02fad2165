// parspec generate: text generation from a prompt, printing the text as it is
// produced, then prompt and generation speed.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/timer.h"
#include "core/worker.h"
#include "decode/registry.h"
#include "model/model.h"
#include "mpi/pipeline.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/chat_loop.h"
#include "tools/commands.h"
#include "tools/generate_run.h"
#include "tools/llama_flags.h"
#include "tools/model_loading.h"
#include "tools/prompt_input.h"
#include "tools/stop_strings.h"
#include "tools/strategy_options.h"

namespace parspec {

namespace {

// -cnv: the models and strategy as for one prompt, then the chat loop.
int run_conversation(const std::string& model_path, const std::string& chat_template,
                     const std::string& system_prompt, const std::string& strategy_name,
                     const StrategyOptions& strategy_options, int n_threads, int n_ctx,
                     bool ctx_given, int n_predict, SamplingParams sampling,
                     std::optional<uint64_t> seed, const std::vector<std::string>& stop_strings) {
  validate_sampling_params(sampling);
  std::shared_ptr<const Model> model =
      load_model(model_path, strategy_options.devices.target_loading());
  auto tokenizer = Tokenizer::from_gguf(model->gguf());
  const ChatTemplate tmpl = ChatTemplate::for_model(model->gguf(), chat_template);
  if (!tmpl.fallback_warning().empty())
    std::fprintf(stderr, "warning: %s\n", tmpl.fallback_warning().c_str());
  ChatLoopSettings settings;
  settings.n_ctx = resolve_context_size(n_ctx, ctx_given, {&model->config()}, model_path);
  model->use_context_size(settings.n_ctx);
  settings.system_prompt = system_prompt;
  settings.n_predict = n_predict;
  settings.stop_strings = stop_strings;
  sampling.seed = seed ? *seed : std::random_device{}();
  settings.sampling = sampling;
  StrategyResources resources;
  resources.init(model, strategy_options, n_threads);
  auto strategy =
      make_strategy(resources.config_for(strategy_name, strategy_options, settings.n_ctx));
  return run_chat_loop(*strategy, *tokenizer, tmpl, settings);
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  GenerateArgs a;
  ArgParser args("generate", "Generate text from a prompt with a GGUF model.");
  add_generate_options(args, a);
  if (!args.parse(argc, argv)) return 0;
  check(!a.model_path.empty(), "no model given (-m FILE)");
  const bool prompt_given = args.given("-p") || args.given("--prompt");
  check(!(prompt_given && !a.prompt_file.empty()), "give either -p or -f, not both");
  if (a.strategy_name.empty()) {
    const bool draft = !a.strategy_options.draft_path.empty();
    // Under mpirun the pipeline's own defaults (the tuned default measures in one process).
    const StrategyRole role =
        mpi::distributed_run()
            ? (draft ? StrategyRole::generate_pipeline_drafted
                     : StrategyRole::generate_pipeline_plain)
            : (draft ? StrategyRole::generate_drafted : StrategyRole::generate_plain);
    a.strategy_name = strategy_for(role).name;
  }
  // An unknown name fails before the draft model loads.
  a.strategy_options.check_strategy(args, a.strategy_name);
  if (a.conversation) {
    check(!prompt_given && a.prompt_file.empty() && !a.json,
          "-cnv reads the user's turns from stdin: give no -p, -f or --json");
    return run_conversation(a.model_path, a.chat_template, a.system_prompt, a.strategy_name,
                            a.strategy_options, a.n_threads, a.n_ctx, args.given("-c"), a.n_predict,
                            a.sampling, a.seed, a.stop_strings);
  }
  PreparedRun run = prepare_run(a, args);
  StrategyResources resources;
  resources.init(run.model, a.strategy_options, a.n_threads);
  auto strategy =
      make_strategy(resources.config_for(a.strategy_name, a.strategy_options, run.n_ctx));
  for (const std::string& note : strategy->notes()) std::fprintf(stderr, "%s\n", note.c_str());
  generate_and_print(*strategy, a, run.prompt, std::move(run.prompt_tokens), run.n_predict,
                     *run.tokenizer);
  return 0;
}

}  // namespace parspec
