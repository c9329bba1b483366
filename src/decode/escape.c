/* Text for a console or a log (text.h): a model's output is any bytes, and a
 * raw control byte moves the cursor, rings, or switches a terminal's mode,
 * while invalid UTF-8 garbles the line around it. */
#include <stdio.h>
#include <stdlib.h>

#include "decode/text.h"

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 (RFC 3629:
 * no overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t gt__utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len;
  unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF)
    len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else
    return 0;
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xBF) return 0;
  return len;
}

char *gt_text_escape(const char *text, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  /* at most 4 output bytes per input byte (\xNN; a C1 is 6 for its 2) */
  char *out = malloc(n * 4 + 1), *o = out;
  if (!out) return NULL;
  for (size_t i = 0; i < n;) {
    size_t len = gt__utf8_len(s + i, n - i);
    if (len == 1 && (s[i] < 0x20 || s[i] == 0x7F) && s[i] != '\n' && s[i] != '\t') {
      o += sprintf(o, "\\x%02X", s[i]);
    } else if (len == 2 && s[i] == 0xC2 && s[i + 1] < 0xA0) {
      o += sprintf(o, "\\u%04X", s[i + 1]); /* U+0080 .. U+009F */
    } else if (len == 0) {
      o += sprintf(o, "\\x%02X", s[i]);
      len = 1;
    } else {
      for (size_t k = 0; k < len; k++) *o++ = (char)s[i + k];
    }
    i += len;
  }
  *o = '\0';
  return out;
}
