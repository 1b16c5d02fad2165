#pragma once
// Command-line parsing in llama.cpp's style: multi-letter short flags such as
// -md and -td, long flags with a value as the next argument or after '='.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace parspec {

class ArgParser {
 public:
  ArgParser(std::string command, std::string summary);

  // `names` is a comma-separated list such as "-m,--model".
  void flag(const std::string& names, bool* out, const std::string& help);
  void option(const std::string& names, std::string* out, const std::string& value_name,
              const std::string& help);
  void option(const std::string& names, int* out, const std::string& value_name,
              const std::string& help);
  void option(const std::string& names, int64_t* out, const std::string& value_name,
              const std::string& help);
  void option(const std::string& names, uint64_t* out, const std::string& value_name,
              const std::string& help);
  void option(const std::string& names, float* out, const std::string& value_name,
              const std::string& help);
  // A seed: 0 to 18446744073709551615, or -1 for none (a random seed).
  void option(const std::string& names, std::optional<uint64_t>* out, const std::string& value_name,
              const std::string& help);
  // A repeatable option: each occurrence appends its value.
  void option(const std::string& names, std::vector<std::string>* out,
              const std::string& value_name, const std::string& help);
  // A flag llama.cpp scripts pass that means nothing on the CPU (-ngl, -fa, ...):
  // accepted (with its value when `value_name` is not empty) and ignored with a
  // note on stderr that says why.
  void ignored(const std::string& names, const std::string& value_name, const std::string& why);
  // The default shown in --help and docs/cli.md for an option whose default
  // depends on the machine (e.g. the number of cores).
  void describe_default(const std::string& name, const std::string& text);
  // Limits a numeric option registered before: a value outside [lo, hi] is an
  // error naming the flag and this range (also where the value's type could
  // not hold it), raised while parsing.
  void bound(const std::string& name, double lo, double hi);
  // Accepts `max_positional` plain arguments (named in the usage line).
  void positional(const std::string& name, std::vector<std::string>* out, size_t max_count,
                  const std::string& help);

  // Parses argv[first..argc). Returns false when --help was given (the help text
  // has been printed to stdout). Throws Error for an unknown flag, a missing or
  // malformed value, or too many positional arguments.
  bool parse(int argc, char** argv, int first = 2);
  // Whether a flag or option with this name was given on the command line.
  bool given(const std::string& name) const;
  std::string help() const;
  // The flags as Markdown table rows "| flags | value | meaning | llama.cpp |"
  // (docs/cli.md is generated from these; `parspec COMMAND --help-markdown`).
  std::string markdown() const;

 private:
  struct Spec {
    std::vector<std::string> names;
    std::string value_name;  // empty: a flag without value
    std::string help;
    std::string default_text;
    std::function<void(const std::string&)> set;
    bool seen = false;
    bool bounded = false;
    double lo = 0, hi = 0;
    std::string ignored_why;  // non-empty: accepted and ignored
  };
  Spec& add(const std::string& names, const std::string& value_name, const std::string& help,
            std::string default_text, std::function<void(const std::string&)> set);
  Spec* lookup(const std::string& name);

  std::string command_, summary_;
  std::vector<Spec> specs_;
  std::string positional_name_, positional_help_;
  std::vector<std::string>* positional_ = nullptr;
  size_t max_positional_ = 0;
};

}  // namespace parspec
