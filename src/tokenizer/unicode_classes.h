#pragma once
// The character classes of the pre-tokenizer regexes as llama.cpp defines
// them. PCRE2 brings its own Unicode tables (10.42 in Debian 12: Unicode 14),
// llama.cpp has Unicode 15.1's; and PCRE2's \s also matches U+180E, which
// llama.cpp's whitespace list leaves out. Rewriting \p{L}, \p{N}, \s and \S in
// a pattern with the differences spelled out makes both split text alike.
#include <string>
#include <string_view>

namespace parspec {

// `pattern` with \p{L} and \p{N} extended by the letters and digits added in
// Unicode 15.0 and 15.1, and \s / \S replaced by llama.cpp's whitespace list
// (inside or outside brackets alike).
std::string with_llama_cpp_classes(std::string_view pattern);

}  // namespace parspec
