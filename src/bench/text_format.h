#pragma once
// Small text helpers the benchmark library's parsers and writers share.
#include <cstdarg>
#include <cstdio>
#include <string>
#include <string_view>

namespace parspec {

// `s` without leading and trailing blanks (spaces, tabs, CR, LF).
inline std::string_view trim(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// printf into a string (lines of a report: up to 511 characters).
inline std::string printf_text(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string printf_text(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

// One number through a printf format such as "%.2f".
inline std::string format(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, value);
  return buf;
}

}  // namespace parspec
