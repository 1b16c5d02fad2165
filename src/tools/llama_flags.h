#pragma once
// How parspec's command-line flags relate to llama.cpp's (llama-cli,
// llama-speculative, llama-perplexity, llama-tokenize, llama-quantize): the
// third column of docs/cli.md, which is generated from the parsers' own tables.
#include <string>
#include <vector>

namespace parspec {

class ArgParser;

// Registers llama.cpp's GPU and memory-placement flags that scripts pass
// (-ngl, -ngld, -fa, -sm, -mg, -ts, -nkvo, --mlock, --no-mmap, -b, -ub) as
// accepted and ignored, each with a note when given; batch_size = false leaves
// -b to the caller (serve, where it is the token budget); layers = false leaves
// -ngl and -ngld to the caller (commands that run on the GPU: DeviceOptions).
void add_ignored_gpu_flags(ArgParser& args, bool batch_size = true, bool layers = true);

// "same as llama.cpp", "different on purpose: ...", or "parspec only" for a flag
// of `command` known by any of `names`.
std::string llama_cpp_counterpart(const std::string& command,
                                  const std::vector<std::string>& names);

// llama.cpp flags of the tools parspec mirrors that parspec does not accept,
// as Markdown table rows "| flags | tool | why not |".
std::string llama_cpp_unsupported_markdown();

}  // namespace parspec
