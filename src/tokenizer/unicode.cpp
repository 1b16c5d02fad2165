#include "tokenizer/unicode.h"

namespace parspec::utf8 {

namespace {

bool is_continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

// Allowed range of the second byte for each lead byte (RFC 3629 table); the
// remaining bytes are always 0x80..0xBF.
struct LeadInfo {
  size_t length;  // 0: not a lead byte
  unsigned char second_lo, second_hi;
};

LeadInfo lead_info(unsigned char c) {
  if (c < 0x80) return {1, 0, 0};
  if (c < 0xC2) return {0, 0, 0};  // continuation bytes and overlong leads C0, C1
  if (c < 0xE0) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};  // no overlongs
  if (c == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (c < 0xF0) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};  // no overlongs
  if (c < 0xF4) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

}  // namespace

Seq classify(std::string_view s, size_t pos) {
  const auto lead = static_cast<unsigned char>(s[pos]);
  const LeadInfo info = lead_info(lead);
  if (info.length == 0) return {SeqKind::kInvalid, 1};
  if (info.length == 1) return {SeqKind::kComplete, 1};
  for (size_t k = 1; k < info.length; ++k) {
    if (pos + k >= s.size()) return {SeqKind::kIncomplete, k};
    const auto c = static_cast<unsigned char>(s[pos + k]);
    const bool ok = k == 1 ? (c >= info.second_lo && c <= info.second_hi) : is_continuation(c);
    if (!ok) return {SeqKind::kInvalid, k};
  }
  return {SeqKind::kComplete, info.length};
}

size_t unit_length(std::string_view s, size_t pos) {
  const Seq seq = classify(s, pos);
  return seq.kind == SeqKind::kComplete ? seq.length : 1;
}

bool is_valid(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const Seq seq = classify(s, pos);
    if (seq.kind != SeqKind::kComplete) return false;
    pos += seq.length;
  }
  return true;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

uint32_t decode_at(std::string_view s, size_t pos, size_t length) {
  const auto byte = [&](size_t k) {
    return static_cast<uint32_t>(static_cast<unsigned char>(s[pos + k]));
  };
  switch (length) {
    case 1:
      return byte(0);
    case 2:
      return ((byte(0) & 0x1F) << 6) | (byte(1) & 0x3F);
    case 3:
      return ((byte(0) & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
    default:
      return ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3F) << 12) | ((byte(2) & 0x3F) << 6) |
             (byte(3) & 0x3F);
  }
}

}  // namespace parspec::utf8

namespace parspec {

namespace {

bool maps_to_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// The 68 bytes that do not map to themselves take U+0100..U+0143 in byte order.
constexpr uint32_t kMappedEnd = 256 + 68;

struct ByteMapping {
  std::array<uint32_t, 256> forward{};
  std::array<int16_t, kMappedEnd> backward{};
  ByteMapping() {
    backward.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      forward[b] = maps_to_itself(b) ? b : next++;
      backward[forward[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMapping& mapping() {
  static const ByteMapping instance;
  return instance;
}

}  // namespace

const std::array<uint32_t, 256>& byte_to_codepoint() {
  return mapping().forward;
}

int codepoint_to_byte(uint32_t cp) {
  return cp < kMappedEnd ? mapping().backward[cp] : -1;
}

std::string map_bytes(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  const auto& forward = byte_to_codepoint();
  for (char c : raw) utf8::append(out, forward[static_cast<unsigned char>(c)]);
  return out;
}

bool unmap_bytes(std::string_view mapped, std::string& out) {
  for (size_t pos = 0; pos < mapped.size();) {
    const utf8::Seq seq = utf8::classify(mapped, pos);
    if (seq.kind != utf8::SeqKind::kComplete) return false;
    const int b = codepoint_to_byte(utf8::decode_at(mapped, pos, seq.length));
    if (b < 0) return false;
    out += static_cast<char>(b);
    pos += seq.length;
  }
  return true;
}

}  // namespace parspec
