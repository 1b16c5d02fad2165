#include "tools/prompt_input.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace parspec {

void check_text_input(const std::string& path, const std::string& flag) {
  if (path == "-") return;
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  check(status.type() != std::filesystem::file_type::not_found, flag, " ", path,
        ": cannot open: no such file");
  check(status.type() != std::filesystem::file_type::directory, flag, " ", path,
        ": is a directory, not a text file");
}

std::string read_text_input(const std::string& path, const std::string& flag, size_t max_bytes,
                            const std::string& too_long) {
  check_text_input(path, flag);
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    check(file.good(), flag, " ", path, ": cannot open the file for reading");
  }
  std::istream& in = path == "-" ? std::cin : file;
  // Read in blocks, never more than max_bytes + 1: a longer input is refused
  // without holding it.
  std::string text;
  std::vector<char> block(size_t{1} << 20);
  while (text.size() <= max_bytes) {
    const size_t room = max_bytes - text.size();  // one byte more shows the input is longer
    const size_t want = room >= block.size() ? block.size() : room + 1;
    in.read(block.data(), static_cast<std::streamsize>(want));
    text.append(block.data(), static_cast<size_t>(in.gcount()));
    if (!in) break;
  }
  check(!in.bad(), flag, " ", path, path == "-" ? ": cannot read standard input" : ": read error");
  if (text.size() > max_bytes) {
    std::error_code ec;
    const auto size = path == "-" ? 0 : std::filesystem::file_size(path, ec);
    fail(flag, " ", path, ": ",
         size > max_bytes && !ec ? "the file has " + std::to_string(size) + " bytes"
                                 : "more than " + std::to_string(max_bytes) + " bytes",
         ", ", too_long);
  }
  return text;
}

void check_writable(const std::string& path, const std::string& flag) {
  if (path.empty() || path == "-") return;
  namespace fs = std::filesystem;
  std::error_code ec;
  check(!fs::is_directory(path, ec), flag, " ", path, ": is a directory; give a file name");
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  check(fs::is_directory(dir, ec), flag, " ", path, ": the folder ", dir, " does not exist");
  check(access(dir.c_str(), W_OK) == 0, flag, " ", path, ": the folder ", dir, " is not writable");
  check(!fs::exists(path, ec) || access(path.c_str(), W_OK) == 0, flag, " ", path,
        ": the file exists and is not writable");
}

std::string process_escapes(std::string_view text) {
  auto hex_value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char c = text[++i];
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case '?':
        out += '?';
        break;
      case 'x':
        // Two hex digits, as llama.cpp; otherwise the sequence stays as written.
        if (i + 2 < text.size() && hex_value(text[i + 1]) >= 0 && hex_value(text[i + 2]) >= 0) {
          out += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
          i += 2;
        } else {
          out += "\\x";
        }
        break;
      default:
        out += '\\';
        out += c;
    }
  }
  return out;
}

uint64_t kv_cache_bytes(const ModelConfig& config, int64_t n_ctx) {
  return 2ull * sizeof(float) * static_cast<uint64_t>(config.n_layer) *
         static_cast<uint64_t>(config.kv_dim()) * static_cast<uint64_t>(n_ctx);
}

int resolve_context_size(int requested, bool given, const std::vector<const ModelConfig*>& models,
                         const std::string& model_path) {
  check(requested >= 0, "-c ", requested, ": the context size must be positive (0 = the model's ",
        "training context)");
  check(!models.empty(), "resolve_context_size: no model");
  const int n_train = models.front()->n_ctx_train;
  int n_ctx = requested;
  if (n_ctx == 0) {
    check(n_train > 0, "-c 0 asks for the training context, but ", model_path,
          " does not give one (context_length); pass -c N");
    n_ctx = n_train;
  } else if (given && n_train > 0 && n_ctx > n_train) {
    std::fprintf(stderr,
                 "warning: -c %d exceeds the training context of %s (%d tokens): quality beyond "
                 "it is not what the model was trained for\n",
                 n_ctx, model_path.c_str(), n_train);
  }
  uint64_t bytes = 0;
  for (const ModelConfig* m : models) bytes += kv_cache_bytes(*m, n_ctx);
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    const uint64_t memory = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
    check(bytes <= memory, "-c ", n_ctx, ": the KV cache of this context needs ",
          bytes / (1ull << 20), " MiB, more than this machine's ", memory / (1ull << 20),
          " MiB of memory; use a smaller context size");
  }
  return n_ctx;
}

int resolve_n_predict(int requested, int64_t n_prompt, int n_ctx) {
  check(requested >= -1, "-n ", requested,
        ": the number of tokens to generate must be >= 0, or -1 (until the context is full)");
  // A prompt tokenized only up to n_ctx + 1 tokens (Tokenizer::encode_prefix) has "more than"
  // n_ctx.
  check(n_prompt<n_ctx, "the prompt has ", n_prompt> n_ctx ? "more than " + std::to_string(n_ctx)
                                                           : std::to_string(n_prompt),
        " tokens and leaves no room in the context of ", n_ctx, " tokens (raise -c/--ctx-size)");
  const int64_t room = n_ctx - n_prompt;
  if (requested == -1) return static_cast<int>(room);
  check(requested <= room, "-n ", requested, ": the prompt (", n_prompt, " tokens) + ", requested,
        " tokens to generate exceed the context size ", n_ctx,
        " (raise -c/--ctx-size, or -n -1 to stop when the context is full)");
  return requested;
}

}  // namespace parspec
