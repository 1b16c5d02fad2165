#pragma once
// The prompt sets a benchmark runs: JSON Lines files, one prompt per line.
#include <string>
#include <string_view>
#include <vector>

namespace parspec {

// A named list of prompts read from a JSON Lines file.
struct PromptSet {
  std::string name;  // the file's stem: code, math, prose, chat, or a user file's stem
  std::string path;
  std::vector<std::string> prompts;
  // Prompts are user turns to wrap in the model's chat template: sets named "chat".
  bool chat = false;
};

// One JSON object per non-blank line with a non-empty string "prompt" (other
// keys are ignored). Throws Error naming `source` and the 1-based line number
// for a line that is not JSON, not an object, or lacks the prompt, and for a
// text without any prompt.
std::vector<std::string> parse_prompt_lines(std::string_view text, const std::string& source);

// `spec` is a set name (read from <prompts_dir>/<spec>.jsonl) or a path to a
// .jsonl file. Throws Error for a missing file (naming what was looked for)
// or bad content.
PromptSet load_prompt_set(const std::string& spec, const std::string& prompts_dir);

}  // namespace parspec
