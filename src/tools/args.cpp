#include "tools/args.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <type_traits>

#include "core/error.h"
#include "tools/llama_flags.h"

namespace parspec {

namespace {

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream ss(names);
  for (std::string part; std::getline(ss, part, ',');) out.push_back(part);
  return out;
}

template <class T>
T parse_number(const std::string& flag, const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc() && ptr == end && !text.empty()) return value;
  if constexpr (std::is_integral_v<T>) {
    // Say what is wrong with a number that is not a valid integer here:
    // too large (2147483648, 1e12) or not whole (1.5).
    char* double_end = nullptr;
    const double as_double = std::strtod(text.c_str(), &double_end);
    const bool is_number = !text.empty() && double_end == text.c_str() + text.size();
    const bool whole = is_number && std::nearbyint(as_double) == as_double;
    const bool in_range = as_double >= static_cast<double>(std::numeric_limits<T>::min()) &&
                          as_double <= static_cast<double>(std::numeric_limits<T>::max());
    if (whole && in_range && ec != std::errc::result_out_of_range)
      fail("value '", text, "' for ", flag, " must be written as a whole number (",
           static_cast<int64_t>(as_double), ")");
    if (ec == std::errc::result_out_of_range || whole)
      fail("value '", text, "' for ", flag, " is out of range (", std::numeric_limits<T>::min(),
           " to ", std::numeric_limits<T>::max(), ")");
    if (is_number) fail("value '", text, "' for ", flag, " must be a whole number");
    fail("invalid value '", text, "' for ", flag, " (expected a whole number)");
  }
  if (ec == std::errc::result_out_of_range)
    fail("value '", text, "' for ", flag, " is out of range (", std::numeric_limits<T>::lowest(),
         " to ", std::numeric_limits<T>::max(), ")");
  fail("invalid value '", text, "' for ", flag, " (expected a number)");
}

// A bound as the user would write it: 1000000000, not 1e+09.
std::string bound_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream os;
  os << v;
  return os.str();
}

template <class T>
std::string to_text(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

ArgParser::ArgParser(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

ArgParser::Spec& ArgParser::add(const std::string& names, const std::string& value_name,
                                const std::string& help, std::string default_text,
                                std::function<void(const std::string&)> set) {
  Spec spec;
  spec.names = split_names(names);
  spec.value_name = value_name;
  spec.help = help;
  spec.default_text = std::move(default_text);
  spec.set = std::move(set);
  specs_.push_back(std::move(spec));
  return specs_.back();
}

void ArgParser::flag(const std::string& names, bool* out, const std::string& help) {
  add(names, "", help, "", [out](const std::string&) { *out = true; });
}

void ArgParser::option(const std::string& names, std::string* out, const std::string& value_name,
                       const std::string& help) {
  add(names, value_name, help, *out, [out](const std::string& v) { *out = v; });
}

void ArgParser::option(const std::string& names, int* out, const std::string& value_name,
                       const std::string& help) {
  add(names, value_name, help, to_text(*out),
      [out, names](const std::string& v) { *out = parse_number<int>(names, v); });
}

void ArgParser::option(const std::string& names, int64_t* out, const std::string& value_name,
                       const std::string& help) {
  add(names, value_name, help, to_text(*out),
      [out, names](const std::string& v) { *out = parse_number<int64_t>(names, v); });
}

void ArgParser::option(const std::string& names, uint64_t* out, const std::string& value_name,
                       const std::string& help) {
  add(names, value_name, help, to_text(*out),
      [out, names](const std::string& v) { *out = parse_number<uint64_t>(names, v); });
}

void ArgParser::option(const std::string& names, std::optional<uint64_t>* out,
                       const std::string& value_name, const std::string& help) {
  add(names, value_name, help, *out ? to_text(**out) : "-1", [out, names](const std::string& v) {
    if (v == "-1") {
      out->reset();
      return;
    }
    try {
      *out = parse_number<uint64_t>(names, v);
    } catch (const Error& e) {
      fail(e.what(), "; -1 draws a random seed");
    }
  });
}

void ArgParser::option(const std::string& names, float* out, const std::string& value_name,
                       const std::string& help) {
  add(names, value_name, help, to_text(*out),
      [out, names](const std::string& v) { *out = parse_number<float>(names, v); });
}

void ArgParser::option(const std::string& names, std::vector<std::string>* out,
                       const std::string& value_name, const std::string& help) {
  add(names, value_name, help, "", [out](const std::string& v) { out->push_back(v); });
}

void ArgParser::ignored(const std::string& names, const std::string& value_name,
                        const std::string& why) {
  Spec& spec = add(names, value_name, "accepted for llama.cpp compatibility and ignored: " + why,
                   "", [](const std::string&) {});
  spec.ignored_why = why;
}

void ArgParser::describe_default(const std::string& name, const std::string& text) {
  Spec* spec = lookup(name);
  check(spec != nullptr, "ArgParser::describe_default: no option ", name);
  spec->default_text = text;
}

void ArgParser::bound(const std::string& name, double lo, double hi) {
  Spec* spec = lookup(name);
  check(spec != nullptr && !spec->value_name.empty(), "ArgParser::bound: no option ", name);
  spec->bounded = true;
  spec->lo = lo;
  spec->hi = hi;
}

void ArgParser::positional(const std::string& name, std::vector<std::string>* out, size_t max_count,
                           const std::string& help) {
  positional_name_ = name;
  positional_help_ = help;
  positional_ = out;
  max_positional_ = max_count;
}

ArgParser::Spec* ArgParser::lookup(const std::string& name) {
  for (auto& spec : specs_)
    for (const auto& n : spec.names)
      if (n == name) return &spec;
  return nullptr;
}

bool ArgParser::given(const std::string& name) const {
  for (const auto& spec : specs_)
    for (const auto& n : spec.names)
      if (n == name) return spec.seen;
  return false;
}

bool ArgParser::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (arg == "--help-markdown") {
      std::fputs(markdown().c_str(), stdout);
      return false;
    }
    if (arg.size() > 1 && arg[0] == '-' &&
        !(arg.size() > 1 && (std::isdigit(arg[1]) || arg[1] == '.'))) {
      std::string value;
      bool inline_value = false;
      if (auto eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        inline_value = true;
      }
      Spec* spec = lookup(arg);
      if (!spec) fail("unknown option '", arg, "' for '", command_, "' (see --help)");
      spec->seen = true;
      if (spec->value_name.empty()) {
        if (inline_value) fail("option ", arg, " takes no value");
        spec->set("");
        if (!spec->ignored_why.empty())
          std::fprintf(stderr, "note: %s is ignored: %s\n", arg.c_str(), spec->ignored_why.c_str());
        continue;
      }
      if (!inline_value) {
        if (i + 1 >= argc) fail("option ", arg, " needs a value (", spec->value_name, ")");
        value = argv[++i];
      }
      // A number beyond the bound is out of the bound's range, even where
      // the option's type could not hold it (-t 99999999999).
      if (spec->bounded) {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (!value.empty() && end == value.c_str() + value.size() &&
            !(v >= spec->lo && v <= spec->hi))
          fail("value '", value, "' for ", arg, " is out of range (", bound_text(spec->lo), " to ",
               bound_text(spec->hi), ")");
      }
      spec->set(value);
      if (spec->bounded) {
        const double v = std::strtod(value.c_str(), nullptr);
        if (!(v >= spec->lo && v <= spec->hi))
          fail("value '", value, "' for ", arg, " is out of range (", bound_text(spec->lo), " to ",
               bound_text(spec->hi), ")");
      }
      if (!spec->ignored_why.empty())
        std::fprintf(stderr, "note: %s %s is ignored: %s\n", arg.c_str(), value.c_str(),
                     spec->ignored_why.c_str());
      continue;
    }
    if (!positional_ || positional_->size() >= max_positional_)
      fail("unexpected argument '", arg, "' for '", command_, "' (see --help)");
    positional_->push_back(arg);
  }
  return true;
}

std::string ArgParser::help() const {
  std::ostringstream os;
  os << "usage: parspec " << command_ << " [options]";
  if (positional_) os << " " << positional_name_;
  os << "\n\n" << summary_ << "\n\n";
  if (positional_) os << "  " << positional_name_ << "\n      " << positional_help_ << "\n";
  for (const auto& spec : specs_) {
    os << "  ";
    for (size_t i = 0; i < spec.names.size(); ++i) os << (i ? ", " : "") << spec.names[i];
    if (!spec.value_name.empty()) os << " " << spec.value_name;
    os << "\n      " << spec.help;
    if (!spec.value_name.empty() && !spec.default_text.empty())
      os << " (default: " << spec.default_text << ")";
    os << "\n";
  }
  os << "  -h, --help\n      print this help and exit\n";
  return os.str();
}

std::string ArgParser::markdown() const {
  auto cell = [](std::string text) {  // one table cell: no newlines, escaped pipes
    std::string out;
    for (char c : text) {
      if (c == '\n')
        out += ' ';
      else if (c == '|')
        out += "\\|";
      else
        out += c;
    }
    return out;
  };
  std::ostringstream os;
  if (positional_)
    os << "| " << cell(positional_name_) << " | | " << cell(positional_help_) << " | "
       << cell(llama_cpp_counterpart(command_, {positional_name_})) << " |\n";
  for (const auto& spec : specs_) {
    os << "| ";
    for (size_t i = 0; i < spec.names.size(); ++i)
      os << (i ? ", " : "") << "`" << spec.names[i] << "`";
    os << " | " << cell(spec.value_name) << " | " << cell(spec.help);
    if (!spec.value_name.empty() && !spec.default_text.empty())
      os << " (default: " << cell(spec.default_text) << ")";
    os << " | " << cell(llama_cpp_counterpart(command_, spec.names)) << " |\n";
  }
  return os.str();
}

}  // namespace parspec
