#pragma once
// UTF-8 validation for text that ends up in JSON (checkpoint metadata, args.json, results.json):
// nlohmann::json refuses to write invalid UTF-8, so such text is rejected where it enters, with an
// error that shows it (invalid bytes as \xNN) and says where the first bad byte is.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace libreyolo::utf8 {

// Offset of the first byte that is not part of a well-formed UTF-8 sequence (RFC 3629: no overlong
// forms, no surrogates, at most U+10FFFF), or npos when `s` is valid.
inline size_t first_invalid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else return i;
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}
inline bool valid(std::string_view s) { return first_invalid(s) == std::string_view::npos; }

// `s` with every byte that is not valid UTF-8 (and control characters) written as \xNN.
inline std::string escaped(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t bad = first_invalid(s.substr(i));
    const size_t good = bad == std::string_view::npos ? s.size() - i : bad;
    for (size_t k = 0; k < good; ++k) {
      const unsigned char c = static_cast<unsigned char>(s[i + k]);
      if (c < 0x20 || c == 0x7F) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02X", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
    i += good;
    if (i < s.size()) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned char>(s[i]));
      out += buf;
      ++i;
    }
  }
  return out;
}

// "" when valid, else e.g. "is not valid UTF-8 (byte 0xFF at offset 3 of 'ca\xFFt')".
inline std::string problem(std::string_view s) {
  const size_t at = first_invalid(s);
  if (at == std::string_view::npos) return {};
  char buf[48];
  std::snprintf(buf, sizeof buf, "byte 0x%02X at offset %zu", static_cast<unsigned char>(s[at]), at);
  return "is not valid UTF-8 (" + std::string(buf) + " of '" + escaped(s) + "')";
}

}  // namespace libreyolo::utf8
