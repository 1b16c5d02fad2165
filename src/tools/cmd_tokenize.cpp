// parspec tokenize: the tokens of a text under a model's vocabulary, in the
// format of llama.cpp's llama-tokenize (one "id -> 'text'" line per token, or
// with --ids a single list "[id, id, ...]").
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/prompt_input.h"

namespace parspec {

namespace {

// Token bytes made readable on one line: control characters and bytes that are
// not a whole UTF-8 character (a token may hold part of one) as escapes.
std::string escape_piece(std::string_view piece) {
  std::string out;
  const auto hex_escape = [&](unsigned char c) {
    constexpr char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  for (size_t pos = 0; pos < piece.size();) {
    const auto c = static_cast<unsigned char>(piece[pos]);
    const utf8::Seq seq = utf8::classify(piece, pos);
    if (seq.kind != utf8::SeqKind::kComplete) {
      hex_escape(c);
      ++pos;
      continue;
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7F) {
      hex_escape(c);
    } else {
      out.append(piece, pos, seq.length);
    }
    pos += seq.length;
  }
  return out;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  std::string model_path, prompt, text_file;
  bool ids_only = false, no_bos = false, no_parse_special = false, show_count = false,
       escape = true, no_escape = false;
  ArgParser args("tokenize", "Print the tokens of a text under a model's vocabulary.");
  args.option("-m,--model", &model_path, "FILE", "model (GGUF); only its vocabulary is read");
  args.option("-p,--prompt", &prompt, "TEXT", "text to tokenize");
  args.option("-f,--file", &text_file, "FILE", "read the text from a file ('-': stdin)");
  args.flag("-e,--escape", &escape, "process escapes (\\n, \\t, \\xHH, ...) in -p (the default)");
  args.flag("--no-escape", &no_escape, "take -p literally");
  args.flag("--ids", &ids_only, "print only the ids, as one list [id, id, ...]");
  args.flag("--no-bos", &no_bos, "do not add BOS (or EOS) even if the vocabulary asks for it");
  args.flag("--no-parse-special", &no_parse_special,
            "tokenize special-token text such as <|eot_id|> as plain text");
  args.flag("--show-count", &show_count, "print the number of tokens at the end");
  if (!args.parse(argc, argv)) return 0;
  check(!model_path.empty(), "no model given (-m FILE)");
  check(args.given("-p") || args.given("--prompt") || !text_file.empty(),
        "no text given (-p TEXT or -f FILE)");
  check(text_file.empty() || !(args.given("-p") || args.given("--prompt")),
        "give either -p or -f, not both");
  if (!text_file.empty())
    prompt = read_text_input(text_file, "-f");
  else if (escape && !no_escape)
    prompt = process_escapes(prompt);

  const auto file = GgufFile::open(model_path);
  const auto tokenizer = Tokenizer::from_gguf(*file);
  const std::vector<int32_t> ids = tokenizer->encode(prompt, !no_bos, !no_parse_special);

  if (ids_only) {
    std::string line = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) line += ", ";
      line += std::to_string(ids[i]);
    }
    line += "]\n";
    std::fputs(line.c_str(), stdout);
  } else {
    for (int32_t id : ids)
      std::printf("%6d -> '%s'\n", id, escape_piece(tokenizer->token_text(id)).c_str());
  }
  if (show_count) std::printf("Total number of tokens: %zu\n", ids.size());
  return 0;
}

}  // namespace parspec
