#include "bench/runner.h"

#include <optional>

#include "core/error.h"
#include "decode/registry.h"
#include "tokenizer/chat_template.h"

namespace parspec {

std::pair<std::string, int> parse_strategy_entry(const std::string& entry) {
  StrategySpec spec;
  try {
    spec = parse_strategy_spec(entry);
  } catch (const Error& e) {
    fail(e.what(), " in --strategies");
  }
  // NAME:G, not a tree shape: its one setting is the variant.
  const size_t colon = entry.find(':');
  const bool variant = colon != std::string::npos && colon + 1 < entry.size() &&
                       entry[colon + 1] >= '0' && entry[colon + 1] <= '9';
  return {spec.name, variant ? spec.settings[0].second : 0};
}

std::string tokenize_sets(std::vector<TokenizedSet>& sets, const Tokenizer& tokenizer,
                          const GgufFile& gguf, const std::string& chat_template, int n_predict,
                          int n_ctx, std::vector<std::string>* notes) {
  std::string template_used;
  for (TokenizedSet& ts : sets) {
    std::optional<ChatTemplate> tmpl;
    if (ts.set.chat) {
      tmpl = ChatTemplate::for_model(gguf, chat_template);
      template_used = std::string(tmpl->name());
      // A benchmark keeps its prompts comparable: no guessed template.
      if (!tmpl->fallback_warning().empty()) {
        notes->push_back("bench: note: set '" + ts.set.name + "' uses the raw prompt text (" +
                         gguf.path() + " has no chat template parspec knows)");
        tmpl.reset();
        template_used.clear();
      }
    }
    for (size_t i = 0; i < ts.set.prompts.size(); ++i) {
      const std::string& text = ts.set.prompts[i];
      std::vector<int32_t> tokens;
      if (tmpl) {
        const ChatMessage turn{"user", text};
        tokens = tmpl->encode(tokenizer, std::span(&turn, 1), true);
      } else {
        tokens = tokenizer.encode(text, true, false);
      }
      check(!tokens.empty(), ts.set.path, ": prompt ", i + 1, " produced no tokens");
      check(static_cast<int64_t>(tokens.size()) + n_predict <= n_ctx, ts.set.path, ": prompt ",
            i + 1, " has ", tokens.size(), " tokens; with -n ", n_predict,
            " that exceeds the context size ", n_ctx, " (raise -c or lower -n)");
      ts.prompts.push_back(std::move(tokens));
    }
  }
  return template_used;
}

namespace {

GenerationRequest make_request(const BenchPlan& plan, const std::vector<int32_t>& prompt, int n,
                               uint64_t seed) {
  GenerationRequest request;
  request.prompt = prompt;
  request.n_predict = n;
  request.sampling = plan.sampling;
  request.sampling.seed = seed;
  request.is_stop = plan.is_stop;
  return request;
}

// Every strategy on one prompt, in an order rotated by `done` so that no
// strategy always runs first (cold caches) or last.
std::vector<GenerationResult> run_prompt(BenchPlan& plan, const GenerationRequest& request,
                                         int done, const std::string& set, size_t prompt,
                                         int repeat, const BenchEvents& events) {
  const size_t n = plan.strategies.size();
  std::vector<GenerationResult> outputs(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t k = (i + done) % n;
    if (events.on_run) events.on_run(done + 1, set, repeat, plan.labels[k]);
    try {
      outputs[k] = plan.strategies[k]->generate(request);
    } catch (const Error& e) {
      if (events.on_error) events.on_error();
      fail("strategy '", plan.labels[k], "' on prompt ", prompt + 1, " of set '", set,
           "': ", e.what());
    }
    if (events.on_result) events.on_result(plan.labels[k], outputs[k].stats);
  }
  return outputs;
}

}  // namespace

BenchOutcome run_bench(BenchPlan& plan, const std::vector<TokenizedSet>& sets,
                       const BenchEvents& events) {
  if (plan.warmup > 0) {
    const GenerationRequest request = make_request(
        plan, sets.front().prompts.front(), std::min(plan.warmup, plan.n_predict), plan.seed);
    for (auto& strategy : plan.strategies) strategy->generate(request);
  }
  BenchOutcome out;
  int done = 0;
  for (int r = 0; r < plan.repeat; ++r) {
    for (const TokenizedSet& ts : sets) {
      for (size_t p = 0; p < ts.prompts.size(); ++p) {
        const GenerationRequest request =
            make_request(plan, ts.prompts[p], plan.n_predict, plan.seed + done);
        const std::vector<GenerationResult> outputs =
            run_prompt(plan, request, done, ts.set.name, p, r, events);
        const std::vector<int32_t>& reference = outputs[plan.reference].tokens;
        for (size_t k = 0; k < outputs.size(); ++k) {
          BenchRun run{plan.labels[k], ts.set.name, static_cast<int>(p), r, outputs[k].stats};
          if (plan.check_exact && k != plan.reference) {
            run.checked = true;
            if (auto at = first_difference(outputs[k].tokens, reference)) {
              run.matches_ar = false;
              out.mismatches.push_back({plan.labels[k], ts.set.name, static_cast<int>(p), r, *at});
              if (events.on_mismatch) events.on_mismatch(out.mismatches.back());
            }
          }
          out.runs.push_back(std::move(run));
        }
        ++done;
      }
    }
  }
  return out;
}

}  // namespace parspec
