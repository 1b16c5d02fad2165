#pragma once
// What generate, perplexity and tokenize share between reading their flags and
// running a model: the prompt text (-p with llama.cpp's escapes, -f FILE or
// stdin), the context size and generation length resolved against the model
// (-c 0, -n -1), and checks that fail up front with a message naming the flag.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/worker.h"
#include "model/model_config.h"

namespace parspec {

// Upper bound of -t/-td: the pool's own limit, checked while parsing so the
// message names the flag.
constexpr int kMaxThreads = Worker::kMaxThreads;

// Checks that `path` ('-': standard input) can be read as text: it exists and
// is not a directory (before a long model load). Errors name `flag` and the path.
void check_text_input(const std::string& path, const std::string& flag);

// The whole text of `path` ('-': standard input). Errors name `flag` and the
// path: a directory, a missing or unreadable file, or an input of more than
// `max_bytes` bytes (read no further; `too_long` says why that is too long).
std::string read_text_input(const std::string& path, const std::string& flag,
                            size_t max_bytes = SIZE_MAX, const std::string& too_long = "");

// Checks before a long run that `path` (an output file of `flag`; '-' is
// stdout) can be written: its folder exists and is writable, and the path is
// not a folder.
void check_writable(const std::string& path, const std::string& flag);

// llama.cpp's escape processing of -p text: \n \r \t \a \b \f \v \\ \' \" \?
// and \xHH; any other backslash sequence is kept as it is.
std::string process_escapes(std::string_view text);

// Context size in tokens for -c `requested`: 0 = the model's training context.
// Rejects negative sizes and sizes whose KV caches (of `models`, F32 keys and
// values) cannot fit in this machine's memory; warns on stderr when a size the
// user gave (`given`) is above the training context of the first model.
int resolve_context_size(int requested, bool given, const std::vector<const ModelConfig*>& models,
                         const std::string& model_path);

// Tokens to generate for -n `requested` (-1: until the context is full) after a
// prompt of `n_prompt` tokens in a context of `n_ctx`: a prompt that leaves no
// room, or a request beyond the context, is an error naming -n and -c.
int resolve_n_predict(int requested, int64_t n_prompt, int n_ctx);

// Bytes of F32 key and value rows for `n_ctx` tokens of `config`.
uint64_t kv_cache_bytes(const ModelConfig& config, int64_t n_ctx);

}  // namespace parspec
