// Loading prompt sets from JSON Lines files.
#include "bench/prompt_sets.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/text_format.h"
#include "core/error.h"

namespace parspec {

namespace {

namespace fs = std::filesystem;

// nlohmann's messages start with "[json.exception.parse_error.101] "; the
// part after it is what a user can act on.
std::string json_error_text(const std::exception& e) {
  std::string_view what = e.what();
  if (auto close = what.find("] "); close != std::string_view::npos) what.remove_prefix(close + 2);
  return std::string(what);
}

}  // namespace

std::vector<std::string> parse_prompt_lines(std::string_view text, const std::string& source) {
  std::vector<std::string> prompts;
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t end = text.find('\n');
    const std::string_view line = trim(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (line.empty()) continue;
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail(source, ":", line_number, ": not a valid JSON line (", json_error_text(e), ")");
    }
    check(value.is_object(), source, ":", line_number,
          ": expected a JSON object such as {\"prompt\": \"...\"}");
    const auto it = value.find("prompt");
    check(it != value.end(), source, ":", line_number, ": the object has no \"prompt\" key");
    check(it->is_string(), source, ":", line_number, ": \"prompt\" must be a string");
    std::string prompt = it->get<std::string>();
    check(!prompt.empty(), source, ":", line_number, ": \"prompt\" is empty");
    prompts.push_back(std::move(prompt));
  }
  check(!prompts.empty(), source, ": no prompts (expected one {\"prompt\": \"...\"} per line)");
  return prompts;
}

PromptSet load_prompt_set(const std::string& spec, const std::string& prompts_dir) {
  check(!spec.empty(), "empty prompt set name");
  const bool is_path =
      spec.find('/') != std::string::npos || fs::path(spec).extension() == ".jsonl";
  PromptSet set;
  if (is_path) {
    set.path = spec;
    check(fs::is_regular_file(set.path), "cannot open prompt file '", set.path, "'");
  } else {
    set.path = (fs::path(prompts_dir) / (spec + ".jsonl")).string();
    if (!fs::is_regular_file(set.path)) {
      std::vector<std::string> known;
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(prompts_dir, ec))
        if (entry.path().extension() == ".jsonl") known.push_back(entry.path().stem().string());
      std::sort(known.begin(), known.end());
      std::string known_text;
      for (const auto& k : known) known_text += (known_text.empty() ? "" : ", ") + k;
      fail("unknown prompt set '", spec, "': no file ", set.path,
           known.empty() ? std::string(" (and no sets in that directory)")
                         : " (known sets: " + known_text + ")",
           "; give a set name or a path to a .jsonl file");
    }
  }
  std::ifstream in(set.path, std::ios::binary);
  check(in.good(), "cannot open prompt file '", set.path, "'");
  std::ostringstream contents;
  contents << in.rdbuf();
  set.name = fs::path(set.path).stem().string();
  set.prompts = parse_prompt_lines(contents.str(), set.path);
  set.chat = set.name == "chat";
  return set;
}

}  // namespace parspec
