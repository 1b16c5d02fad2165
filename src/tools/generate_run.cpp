// The flow `generate` and `simulate` share (generate_run.h).
#include "tools/generate_run.h"

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
#include "tools/llama_flags.h"
#include "tools/model_loading.h"
#include "tools/prompt_input.h"
#include "tools/stop_strings.h"
#include "tools/strategy_options.h"

namespace parspec {

namespace {

// The run as one JSON object (the documented fields of README.md).
void print_json(const std::string& strategy, const std::string& chosen,
                const GenerationResult& result, const Tokenizer& tokenizer, bool ignore_eos,
                uint64_t seed, int n_threads, const nlohmann::json* simulated) {
  const GenerationStats& st = result.stats;
  std::vector<int32_t> kept;
  for (int32_t t : result.tokens)
    if (ignore_eos || !tokenizer.is_end_of_generation(t)) kept.push_back(t);
  nlohmann::json out = st.to_json();
  out["strategy"] = strategy;
  out["chosen"] = chosen;
  out["text"] = tokenizer.decode(std::span<const int32_t>(kept), /*render_special=*/false);
  out["tokens"] = result.tokens;
  out["seed"] = seed;
  out["threads"] = n_threads;
  if (const mpi::Pipeline* pipeline = mpi::running_pipeline()) {
    // Under mpirun: where the layers ran, whether the link was emulated, and
    // each stage's own compute time over the run (prompt included).
    nlohmann::json stages = nlohmann::json::array();
    for (const mpi::StageTimes& stage : pipeline->stages())
      stages.push_back({{"rank", stage.rank},
                        {"host", stage.host},
                        {"layers", {stage.layer_first, stage.layer_last}},
                        {"forwards", stage.forwards},
                        {"skipped", stage.skipped},
                        {"abandoned", stage.abandoned},
                        {"compute_ms", stage.compute_ms},
                        {"cpu_ms", stage.cpu_ms}});
    out["distributed"] = {{"pipeline", pipeline->describe()},
                          {"link_emulated", pipeline->options().link.active()},
                          {"link_latency_us", pipeline->options().link.latency_us},
                          {"link_gbps", pipeline->options().link.gbps},
                          {"stages", stages}};
  }
  if (simulated != nullptr) {
    out["ms_per_token"] = st.n_gen > 0 ? st.t_gen_ms / static_cast<double>(st.n_gen) : 0.0;
    out["simulated"] = *simulated;
  }
  std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

// The rest of the streamed text, then speed (and acceptance) on stderr.
void print_speed(const std::string& strategy, const std::string& rest, const GenerationStats& st) {
  std::fputs(rest.c_str(), stdout);
  std::printf("\n");
  std::fprintf(stderr, "\nprompt:     %lld tokens in %.1f ms (%.2f tok/s)\n",
               static_cast<long long>(st.n_prompt), st.t_prompt_ms, st.prompt_tok_per_s());
  std::fprintf(stderr, "generation: %lld tokens in %.1f ms (%.2f tok/s)\n",
               static_cast<long long>(st.n_gen), st.t_gen_ms, st.tok_per_s());
  if (st.drafted > 0)
    std::fprintf(stderr,
                 "speculation (%s): drafted %lld, accepted %lld, alpha %.3f, tau %.2f tokens/step, "
                 "draft %.1f ms, verify %.1f ms\n",
                 strategy.c_str(), static_cast<long long>(st.drafted),
                 static_cast<long long>(st.accepted), st.alpha(), st.tau(), st.t_draft_ms,
                 st.t_verify_ms);
  if (!st.step_shapes.empty()) {
    std::string shapes;
    for (const auto& [shape, steps] : st.step_shapes)
      shapes += (shapes.empty() ? "" : ", ") + shape + " " + std::to_string(steps);
    std::fprintf(stderr, "steps by tree shape: %s\n", shapes.c_str());
  }
}

// The prompt text from -p (escapes processed unless --no-escape) or -f. A
// file is read no further than the text `n_ctx` tokens can cover: what goes
// beyond cannot be a prompt in this context.
std::string read_prompt(const GenerateArgs& a, const Tokenizer& tokenizer, int n_ctx) {
  std::string prompt = a.prompt;
  const size_t per_token = tokenizer.max_token_bytes();
  const size_t max_bytes = (static_cast<size_t>(n_ctx) + 2) * per_token;
  if (!a.prompt_file.empty())
    prompt = read_text_input(a.prompt_file, "-f", max_bytes,
                             "more than a prompt in the context of " + std::to_string(n_ctx) +
                                 " tokens can hold (a token stands for at most " +
                                 std::to_string(per_token) +
                                 " bytes); raise -c/--ctx-size or shorten the prompt");
  else if (a.escape && !a.no_escape)
    prompt = process_escapes(prompt);
  check(!prompt.empty(), a.prompt_file.empty() ? "-p: the prompt is empty" : "-f ",
        a.prompt_file.empty() ? "" : a.prompt_file,
        a.prompt_file.empty() ? "" : ": the file is empty");
  return prompt;
}

// The prompt's tokens, in the chat template with --chat or --chat-template
// (whose end-of-turn text joins the stop strings where the vocabulary spells it
// as text).
// Tokenized no further than `max_tokens`.
std::vector<int32_t> encode_prompt(GenerateArgs& a, const std::string& prompt, const Model& model,
                                   const Tokenizer& tokenizer, size_t max_tokens) {
  std::vector<int32_t> tokens;
  if (a.chat || !a.chat_template.empty()) {
    const ChatTemplate tmpl = ChatTemplate::for_model(model.gguf(), a.chat_template);
    if (!tmpl.fallback_warning().empty())
      std::fprintf(stderr, "warning: %s\n", tmpl.fallback_warning().c_str());
    std::vector<ChatMessage> turns;
    if (!a.system_prompt.empty()) turns.push_back({"system", a.system_prompt});
    turns.push_back({"user", prompt});
    tokens = tmpl.encode(tokenizer, turns, true, max_tokens);
    const std::string end_of_turn = tmpl.end_of_turn_stop(tokenizer);
    if (!end_of_turn.empty()) a.stop_strings.push_back(end_of_turn);
  } else {
    tokens = tokenizer.encode_prefix(prompt, true, false, max_tokens);
  }
  check(!tokens.empty(), "the prompt produced no tokens");
  warn_on_double_bos(tokenizer, tokens);
  return tokens;
}

}  // namespace

void add_generate_options(ArgParser& args, GenerateArgs& a) {
  args.option("-m,--model", &a.model_path, "FILE", "model (GGUF)");
  args.option("-p,--prompt", &a.prompt, "TEXT", "prompt text");
  args.option("-f,--file", &a.prompt_file, "FILE", "read the prompt from a file ('-': stdin)");
  args.flag("-e,--escape", &a.escape, "process escapes (\\n, \\t, \\xHH, ...) in -p (the default)");
  args.flag("--no-escape", &a.no_escape, "take -p literally");
  args.option("-n,--n-predict", &a.n_predict, "N",
              "maximum number of tokens to generate; -1 = until end of text or a full context");
  args.option("-c,--ctx-size,--ctx", &a.n_ctx, "N",
              "context size in tokens (prompt + generation); 0 = the model's training context");
  args.option("-t,--threads", &a.n_threads, "N", "threads");
  args.option("-r,--reverse-prompt", &a.stop_strings, "TEXT",
              "stop once the generated text ends with TEXT (may be repeated)");
  add_ignored_gpu_flags(args, true, /*layers=*/false);
  args.option("--temp", &a.sampling.temp, "T", "temperature; 0 = greedy");
  args.option("--top-k", &a.sampling.top_k, "K", "top-k sampling; 0 = off");
  args.option("--top-p", &a.sampling.top_p, "P", "top-p (nucleus) sampling; 1 = off");
  args.option("--min-p", &a.sampling.min_p, "P", "min-p sampling; 0 = off");
  args.option("--seed", &a.seed, "S", "random seed; -1 = a random seed (printed with --json)");
  args.flag("--chat", &a.chat, "wrap the prompt in the model's chat template (one user turn)");
  args.flag("-cnv,--conversation,-i,--interactive", &a.conversation,
            "interactive conversation in the chat template: one user turn per line of stdin");
  args.option("-sys,--system-prompt", &a.system_prompt, "TEXT",
              "system message of the conversation (-cnv) or of --chat");
  args.option(
      "--chat-template", &a.chat_template, "NAME",
      "chat template to use instead of the detected one (llama3, chatml, qwen3, gemma, phi3; a "
      "model without one gets chatml, with a warning)");
  args.flag("--ignore-eos", &a.ignore_eos, "do not stop at end-of-generation tokens");
  args.option("--strategy", &a.strategy_name, "NAME",
              "decoding strategy: " + strategy_list() +
                  " (all but ar, pp and auto need -md; default: auto with -md, ar without; under "
                  "mpirun pipedec with -md, pp without); NAME:G sets the strategy's main number "
                  "as in bench --strategies (sd:3: --draft-max 3, pearl:3: --pearl-window 3)");
  a.strategy_options.add_to(args);
  args.flag("--json", &a.json, "print one JSON object with the text, token ids and timings");
  args.bound("-t", 1, kMaxThreads);
  args.describe_default("-t", "the cores this process may use");
  args.bound("--top-k", 0, 1e9);
}

void generate_and_print(Strategy& strategy, const GenerateArgs& a, const std::string& prompt,
                        std::vector<int32_t> prompt_tokens, int n_predict,
                        const Tokenizer& tokenizer,
                        const std::function<nlohmann::json()>& simulated) {
  StreamDecoder stream(tokenizer);
  GenerationRequest request;
  request.prompt = std::move(prompt_tokens);
  request.n_predict = n_predict;
  request.sampling = a.sampling;
  StopStrings stop(tokenizer, a.stop_strings);
  request.is_stop = [&](int32_t t) {
    return (!a.ignore_eos && tokenizer.is_end_of_generation(t)) || stop.feed(t);
  };
  if (!a.json) {
    request.on_token = [&](int32_t t) {
      if (tokenizer.is_end_of_generation(t) && !a.ignore_eos) return;
      std::fputs(stream.feed(t).c_str(), stdout);
      std::fflush(stdout);
    };
    std::fputs(prompt.c_str(), stdout);
  }
  const GenerationResult result = strategy.generate(request);
  if (a.json) {
    const nlohmann::json report = simulated ? simulated() : nlohmann::json();
    print_json(strategy.name(), strategy.runs(), result, tokenizer, a.ignore_eos, a.sampling.seed,
               a.n_threads, simulated ? &report : nullptr);
  } else
    print_speed(strategy.name(), stream.flush(), result.stats);
  if (simulated && !a.json && result.stats.n_gen > 0)
    std::fprintf(stderr, "simulated:  %.3f ms per token on the cluster's clock\n",
                 result.stats.t_gen_ms / static_cast<double>(result.stats.n_gen));
}

PreparedRun prepare_run(GenerateArgs& a, const ArgParser& args) {
  const bool prompt_given = args.given("-p") || args.given("--prompt");
  check(prompt_given || !a.prompt_file.empty(), "no prompt given (-p TEXT or -f FILE)");
  if (!a.prompt_file.empty()) check_text_input(a.prompt_file, "-f");
  check(a.n_predict >= -1, "-n ", a.n_predict,
        ": the number of tokens to generate must be >= 0, or -1 (until the context is full)");
  a.sampling.seed = a.seed ? *a.seed : std::random_device{}();
  validate_sampling_params(a.sampling);

  PreparedRun run;
  run.model = load_model(a.model_path, a.strategy_options.devices.target_loading());
  run.tokenizer = Tokenizer::from_gguf(run.model->gguf());
  run.n_ctx = resolve_context_size(a.n_ctx, args.given("-c"), {&run.model->config()}, a.model_path);
  run.model->use_context_size(run.n_ctx);
  run.prompt = read_prompt(a, *run.tokenizer, run.n_ctx);
  // Tokenized up to one token past the context: enough to refuse a longer prompt.
  run.prompt_tokens =
      encode_prompt(a, run.prompt, *run.model, *run.tokenizer, static_cast<size_t>(run.n_ctx) + 1);
  run.n_predict =
      resolve_n_predict(a.n_predict, static_cast<int64_t>(run.prompt_tokens.size()), run.n_ctx);
  return run;
}

}  // namespace parspec
