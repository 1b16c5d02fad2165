// parspec generate: text generation from a prompt, printing the text as it is
// produced, then prompt and generation speed.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/worker.h"
#include "decode/strategies.h"
#include "decode/tuning.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/strategy_options.h"

namespace parspec {

namespace {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot open prompt file '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The run as one JSON object (the documented fields of README.md).
void print_json(const std::string& strategy, const std::string& chosen,
                const GenerationResult& result, const Tokenizer& tokenizer, bool ignore_eos,
                uint64_t seed, int n_threads) {
  const GenerationStats& st = result.stats;
  std::vector<int32_t> kept;
  for (int32_t t : result.tokens)
    if (ignore_eos || !tokenizer.is_end_of_generation(t)) kept.push_back(t);
  nlohmann::json out = {
      {"strategy", strategy},
      {"chosen", chosen},
      {"text", tokenizer.decode(std::span<const int32_t>(kept), /*render_special=*/false)},
      {"tokens", result.tokens},
      {"n_prompt", st.n_prompt},
      {"n_gen", st.n_gen},
      {"t_prompt_ms", st.t_prompt_ms},
      {"t_gen_ms", st.t_gen_ms},
      {"tok_per_s", st.tok_per_s()},
      {"prompt_tok_per_s", st.t_prompt_ms > 0 ? st.n_prompt * 1000.0 / st.t_prompt_ms : 0.0},
      {"drafted", st.drafted},
      {"accepted", st.accepted},
      {"tau", st.tau()},
      {"alpha", st.alpha()},
      {"verify_steps", st.verify_steps},
      {"target_forwards", st.target_forwards},
      {"draft_forwards", st.draft_forwards},
      {"t_draft_ms", st.t_draft_ms},
      {"t_verify_ms", st.t_verify_ms},
      {"draft_window", st.draft_window},
      {"seed", seed},
      {"threads", n_threads},
  };
  std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

// The rest of the streamed text, then speed (and acceptance) on stderr.
void print_speed(const std::string& strategy, const std::string& rest, const GenerationStats& st) {
  std::fputs(rest.c_str(), stdout);
  std::printf("\n");
  std::fprintf(stderr, "\nprompt:     %d tokens in %.1f ms (%.2f tok/s)\n", st.n_prompt,
               st.t_prompt_ms, st.t_prompt_ms > 0 ? st.n_prompt * 1000.0 / st.t_prompt_ms : 0.0);
  std::fprintf(stderr, "generation: %d tokens in %.1f ms (%.2f tok/s)\n", st.n_gen, st.t_gen_ms,
               st.tok_per_s());
  if (st.drafted > 0)
    std::fprintf(stderr,
                 "speculation (%s): drafted %lld, accepted %lld, alpha %.3f, tau %.2f tokens/step, "
                 "draft %.1f ms, verify %.1f ms\n",
                 strategy.c_str(), static_cast<long long>(st.drafted),
                 static_cast<long long>(st.accepted), st.alpha(), st.tau(), st.t_draft_ms,
                 st.t_verify_ms);
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  std::string model_path, prompt, prompt_file, chat_template, strategy_name;
  StrategyOptions strategy_options;
  int n_predict = 128, n_threads = available_cores(), n_ctx = 4096;
  SamplingParams sampling;
  int64_t seed = -1;
  bool json = false, chat = false, ignore_eos = false;
  ArgParser args("generate", "Generate text from a prompt with a GGUF model.");
  args.option("-m,--model", &model_path, "FILE", "model (GGUF)");
  args.option("-p,--prompt", &prompt, "TEXT", "prompt text");
  args.option("-f,--file", &prompt_file, "FILE", "read the prompt from a file");
  args.option("-n,--n-predict", &n_predict, "N", "maximum number of tokens to generate");
  args.option("-c,--ctx-size,--ctx", &n_ctx, "N", "context size in tokens (prompt + generation)");
  args.option("-t,--threads", &n_threads, "N", "threads");
  args.option("--temp", &sampling.temp, "T", "temperature; 0 = greedy");
  args.option("--top-k", &sampling.top_k, "K", "top-k sampling; 0 = off");
  args.option("--top-p", &sampling.top_p, "P", "top-p (nucleus) sampling; 1 = off");
  args.option("--min-p", &sampling.min_p, "P", "min-p sampling; 0 = off");
  args.option("--seed", &seed, "S", "random seed; -1 = a random seed (printed with --json)");
  args.flag("--chat", &chat, "wrap the prompt in the model's chat template (one user turn)");
  args.option("--chat-template", &chat_template, "NAME",
              "chat template to use instead of the detected one (llama3, chatml)");
  args.flag("--ignore-eos", &ignore_eos, "do not stop at end-of-generation tokens");
  args.option("--strategy", &strategy_name, "NAME",
              "decoding strategy: " + strategy_list() +
                  " (all but ar and auto need -md; default: auto with -md, ar without)");
  strategy_options.add_to(args);
  args.flag("--json", &json, "print one JSON object with the text, token ids and timings");
  if (!args.parse(argc, argv)) return 0;
  check(!model_path.empty(), "no model given (-m FILE)");
  check(prompt.empty() || prompt_file.empty(), "give either -p or -f, not both");
  if (!prompt_file.empty()) prompt = read_text_file(prompt_file);
  check(!prompt.empty(), "no prompt given (-p TEXT or -f FILE)");
  check(n_predict >= 0, "-n must not be negative");
  check(n_threads >= 1, "-t must be at least 1");
  sampling.seed = seed < 0 ? std::random_device{}() : static_cast<uint64_t>(seed);
  validate_sampling_params(sampling);

  std::shared_ptr<const Model> model = Model::load(model_path);
  auto tokenizer = Tokenizer::from_gguf(model->gguf());
  std::vector<int32_t> prompt_tokens;
  if (chat || !chat_template.empty()) {
    const ChatTemplate tmpl = ChatTemplate::for_model(model->gguf(), chat_template);
    const ChatMessage turn{"user", prompt};
    prompt_tokens = tmpl.encode(*tokenizer, std::span(&turn, 1), true);
  } else {
    prompt_tokens = tokenizer->encode(prompt, true, false);
  }
  check(!prompt_tokens.empty(), "the prompt produced no tokens");

  if (strategy_name.empty()) strategy_name = strategy_options.draft_path.empty() ? "ar" : "auto";
  strategy_info(strategy_name);  // an unknown name fails before the draft model loads
  strategy_options.check_given(args, {strategy_name});
  StrategyResources resources;
  resources.init(model, strategy_options, n_threads);
  auto strategy = make_strategy(resources.config_for(strategy_name, strategy_options, n_ctx));
  for (const std::string& note : strategy->notes()) std::fprintf(stderr, "%s\n", note.c_str());
  StreamDecoder stream(*tokenizer);
  GenerationRequest request;
  request.prompt = prompt_tokens;
  request.n_predict = n_predict;
  request.sampling = sampling;
  if (!ignore_eos) request.is_stop = [&](int32_t t) { return tokenizer->is_end_of_generation(t); };
  if (!json) {
    request.on_token = [&](int32_t t) {
      if (tokenizer->is_end_of_generation(t) && !ignore_eos) return;
      std::fputs(stream.feed(t).c_str(), stdout);
      std::fflush(stdout);
    };
    std::fputs(prompt.c_str(), stdout);
  }
  const GenerationResult result = strategy->generate(request);
  if (json)
    print_json(strategy->name(), chosen_strategy(*strategy), result, *tokenizer, ignore_eos,
               sampling.seed, n_threads);
  else
    print_speed(strategy->name(), stream.flush(), result.stats);
  return 0;
}

}  // namespace parspec
