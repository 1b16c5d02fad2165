// parspec command-line entry point: dispatches to subcommands.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "core/error.h"
#include "decode/tuning.h"
#include "tools/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

const Command kCommands[] = {
    {"generate", parspec::cmd_generate, "generate text from a prompt"},
    {"bench", parspec::cmd_bench,
     "compare decoding strategies: tok/s, speedup over ar, tau, alpha"},
    {"tune", parspec::cmd_tune,
     "measure this machine's costs and pick the fastest strategy for a model pair (auto)"},
    {"perplexity", parspec::cmd_perplexity, "perplexity of a text file (as llama-perplexity)"},
    {"info", parspec::cmd_info, "architecture, shapes, tensor types and tokenizer of a GGUF model"},
    {"tokenize", parspec::cmd_tokenize, "print the tokens of a text"},
    {"bench-forward", parspec::cmd_bench_forward,
     "forward-pass speed: decode tokens/s vs memory roofline, latency per batch size"},
    {"quantize", parspec::cmd_quantize, "rewrite a model's weight matrices in another type"},
    {"make-model", parspec::cmd_make_model, "write a random-weight GGUF model (tests, benchmarks)"},
};

void print_usage(FILE* out) {
  std::fprintf(
      out,
      "usage: parspec COMMAND [options]\n\n"
      "parspec runs GGUF language models on the CPU with parallel speculative decoding.\n\n"
      "commands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-14s %s\n", c.name, c.summary);
  std::fprintf(out, "\nRun 'parspec COMMAND --help' for the options of a command.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("parspec 0.1\n");
    return 0;
  }
  // --strategy auto reports its tuning (seconds on first use) on stderr.
  parspec::set_tuning_progress(
      [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); });
  for (const auto& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(argc, argv);
    } catch (const parspec::Error& e) {
      std::fprintf(stderr, "parspec %s: error: %s\n", c.name, e.what());
      return 1;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "parspec %s: error: out of memory\n", c.name);
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "parspec %s: internal error: %s\n", c.name, e.what());
      return 3;
    }
  }
  std::fprintf(stderr, "parspec: unknown command '%s'\n\n", name.c_str());
  print_usage(stderr);
  return 2;
}
