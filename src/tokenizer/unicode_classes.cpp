#include "tokenizer/unicode_classes.h"

namespace parspec {

namespace {

// Letters (Lo, Lm) and digits (Nd) of Unicode 15.0 and 15.1 that PCRE2 10.42's
// Unicode 14 tables do not know: Kawi, Nag Mundari, Cyrillic extended-D
// modifiers, Egyptian hieroglyph format additions, CJK extensions H and I,
// Khojki, Kana, Latin extended-G, Kaktovik numerals. Found by comparing every
// code point's class in llama.cpp's unicode-data.cpp with PCRE2's \p{L} / \p{N}.
constexpr std::string_view kLettersAdded =
    R"(\x{1123F}-\x{11240}\x{11F02}\x{11F04}-\x{11F10}\x{11F12}-\x{11F33}\x{1342F})"
    R"(\x{13441}-\x{13446}\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A}\x{1E030}-\x{1E06D})"
    R"(\x{1E4D0}-\x{1E4EB}\x{2B739}\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
constexpr std::string_view kDigitsAdded =
    R"(\x{11F50}-\x{11F59}\x{1D2C0}-\x{1D2D3}\x{1E4F0}-\x{1E4F9})";
// llama.cpp's whitespace (unicode_set_whitespace): PCRE2's \s without U+180E.
constexpr std::string_view kWhitespace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

}  // namespace

std::string with_llama_cpp_classes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() * 4);
  bool in_class = false;  // inside [...]
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const std::string_view rest = pattern.substr(i);
      std::string_view members;
      size_t length = 2;
      if (rest.starts_with(R"(\p{L})")) {
        members = kLettersAdded;
        length = 5;
      } else if (rest.starts_with(R"(\p{N})")) {
        members = kDigitsAdded;
        length = 5;
      } else if (rest[1] == 's' || rest[1] == 'S') {
        // Replaced whole: PCRE2's \s is not llama.cpp's.
        if (rest[1] == 'S' && in_class) {
          // A negated set cannot be a member of a class; none of the patterns has one.
          out.append(rest.substr(0, 2));
        } else if (in_class) {
          out.append(kWhitespace);
        } else {
          out.append(rest[1] == 's' ? "[" : "[^").append(kWhitespace).append("]");
        }
        ++i;
        continue;
      } else {
        out.append(rest.substr(0, 2));  // another escape, kept
        ++i;
        continue;
      }
      const std::string_view escape = rest.substr(0, length);
      if (in_class)
        out.append(escape).append(members);
      else
        out.append("[").append(escape).append(members).append("]");
      i += length - 1;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // literal ]
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace parspec
