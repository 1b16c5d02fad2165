#pragma once
// UTF-8 helpers and GPT-2's byte-to-unicode mapping, shared by the tokenizer,
// its streaming decoder and the BPE trainer.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace parspec::utf8 {

// What the bytes at some position hold.
enum class SeqKind {
  kComplete,    // a whole well-formed sequence of `length` bytes
  kIncomplete,  // a well-formed prefix cut off by the end of the input (`length` bytes)
  kInvalid,     // an ill-formed sequence; `length` is its maximal subpart (>= 1 byte)
};
struct Seq {
  SeqKind kind;
  size_t length;
};

// Classifies the sequence starting at s[pos] (pos < s.size()). Well-formed means
// Unicode's definition: no overlongs, no surrogates, nothing above U+10FFFF.
Seq classify(std::string_view s, size_t pos);

// Bytes of the next unit at s[pos]: a complete sequence, or 1 for any byte that
// does not start one (so that every input can be walked unit by unit).
size_t unit_length(std::string_view s, size_t pos);

bool is_valid(std::string_view s);
void append(std::string& out, uint32_t codepoint);
// Decodes the complete sequence at s[pos] (as reported by classify).
uint32_t decode_at(std::string_view s, size_t pos, size_t length);

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace parspec::utf8

namespace parspec {

// GPT-2's reversible mapping of bytes to printable code points: the bytes
// '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to themselves, the 68 others to
// U+0100 onwards in byte order. Byte-level BPE vocabularies store their tokens
// in this form (a space is "Ġ", U+0120).
const std::array<uint32_t, 256>& byte_to_codepoint();
// The byte a code point stands for, or -1 if it is not part of the mapping.
int codepoint_to_byte(uint32_t codepoint);
// Raw bytes to their mapped text and back. `unmap_bytes` returns false (and
// leaves `out` partly written) if some character is not part of the mapping.
std::string map_bytes(std::string_view raw);
bool unmap_bytes(std::string_view mapped, std::string& out);

}  // namespace parspec
