// Rule 1 of normalize.h: Unicode symbols to ASCII/LaTeX, then NFKC.
// The mapping runs before NFKC on purpose: NFKC would turn x² into x2 and
// ½ into 1⁄2, losing the structure these characters carry.
#include <cstdlib>
#include <string>
#include <utf8proc.h>

#include "dapo/reward/normalize.h"

namespace dapo::reward {
namespace {

// The replacement of one code point, or nullptr to keep it (NFKC decides).
const char* replacement(int32_t cp) {
  switch (cp) {
    case 0x2212: case 0x2010: case 0x2011: case 0x2012: case 0x2013: case 0x2014: case 0xFE63: case 0xFF0D:
      return "-";
    case 0x00B7: case 0x22C5: case 0x00D7: case 0x2217: case 0x2219: case 0x2715: case 0x2716:
      return "*";
    case 0x00F7: case 0x2215: case 0x2044:
      return "/";
    case 0x03C0: return "\\pi ";
    case 0x221A: return "\\sqrt";
    case 0x221B: return "\\sqrt[3]";
    case 0x221C: return "\\sqrt[4]";
    case 0x221E: return "\\infty ";
    case 0x2264: case 0x2A7D: return "<=";
    case 0x2265: case 0x2A7E: return ">=";
    case 0x2260: return "\\ne ";
    case 0x00B1: return "\\pm ";
    case 0x2213: return "\\mp ";
    case 0x00B0: case 0x2103: case 0x2109: return "";  // degrees (and degrees C/F)
    case 0x222A: return "\\cup ";
    case 0x2229: return "\\cap ";
    case 0x2205: return "\\emptyset ";
    case 0x2208: return "\\in ";
    case 0x200B: case 0x200C: case 0x200D: case 0x2060: case 0x2061: case 0x2062: case 0x2063: case 0xFEFF:
      return "";  // invisible
    case 0x00BD: return "\\frac{1}{2}";
    case 0x2153: return "\\frac{1}{3}";
    case 0x2154: return "\\frac{2}{3}";
    case 0x00BC: return "\\frac{1}{4}";
    case 0x00BE: return "\\frac{3}{4}";
    case 0x2155: return "\\frac{1}{5}";
    case 0x2159: return "\\frac{1}{6}";
    case 0x215B: return "\\frac{1}{8}";
    case 0x03B1: return "\\alpha ";
    case 0x03B2: return "\\beta ";
    case 0x03B3: return "\\gamma ";
    case 0x03B4: return "\\delta ";
    case 0x03B5: return "\\epsilon ";
    case 0x03B8: return "\\theta ";
    case 0x03BB: return "\\lambda ";
    case 0x03BC: return "\\mu ";
    case 0x03C3: return "\\sigma ";
    case 0x03C6: return "\\phi ";
    case 0x03C9: return "\\omega ";
    default: return nullptr;
  }
}

// Superscript / subscript characters: the ASCII they stand for, or 0.
char superscript(int32_t cp) {
  switch (cp) {
    case 0x00B2: return '2';
    case 0x00B3: return '3';
    case 0x00B9: return '1';
    case 0x2070: return '0';
    case 0x2071: return 'i';
    case 0x207A: return '+';
    case 0x207B: return '-';
    case 0x207D: return '(';
    case 0x207E: return ')';
    case 0x207F: return 'n';
    default: return (cp >= 0x2074 && cp <= 0x2079) ? char('4' + (cp - 0x2074)) : 0;
  }
}
char subscript(int32_t cp) {
  if (cp >= 0x2080 && cp <= 0x2089) return char('0' + (cp - 0x2080));
  if (cp == 0x208A) return '+';
  if (cp == 0x208B) return '-';
  return 0;
}

}  // namespace

std::string normalize_unicode(std::string_view text) {
  bool ascii = true;
  for (unsigned char c : text)
    if (c >= 0x80 || c == 0) {
      ascii = false;
      break;
    }
  if (ascii) return std::string(text);

  std::string mapped;
  mapped.reserve(text.size() + 8);
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = utf8proc_ssize_t(text.size());
  char script_kind = 0;  // '^' or '_' while inside a run of super/subscripts
  while (left > 0) {
    int32_t cp = -1;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {  // invalid byte: drop it
      ++p;
      --left;
      continue;
    }
    p += n;
    left -= n;
    if (cp == 0) continue;  // a NUL would end the C string handed to NFKC
    const char sup = superscript(cp), sub = subscript(cp);
    const char kind = sup ? '^' : (sub ? '_' : 0);
    if (kind != script_kind && script_kind) mapped += '}';
    if (kind && kind != script_kind) {
      mapped += kind;
      mapped += '{';
    }
    script_kind = kind;
    if (kind) {
      mapped += sup ? sup : sub;
      continue;
    }
    if (const char* r = replacement(cp)) {
      mapped += r;
    } else {
      utf8proc_uint8_t buf[4];
      mapped.append(reinterpret_cast<const char*>(buf), size_t(utf8proc_encode_char(cp, buf)));
    }
  }
  if (script_kind) mapped += '}';

  utf8proc_uint8_t* nfkc = utf8proc_NFKC(reinterpret_cast<const utf8proc_uint8_t*>(mapped.c_str()));
  if (!nfkc) return mapped;
  std::string out(reinterpret_cast<const char*>(nfkc));
  std::free(nfkc);
  return out;
}

}  // namespace dapo::reward
