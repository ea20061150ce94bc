/* utf8.h: strict UTF-8 validation (Unicode Table 3-7: no overlong forms,
 * surrogates, code points above U+10FFFF or truncated sequences), shared by
 * the data reader (a JSONL line must be valid) and the tokenizer (encode
 * input, training text, the decoder's replacement of ill-formed bytes). */
#ifndef LT_UTF8_H
#define LT_UTF8_H
#include <stddef.h>

/* For a lead byte b: how many continuation bytes follow (0 when b is not a
 * valid lead: 80-C1, F5-FF) and the range [*lo, *hi] the first of them must
 * fall in, which excludes overlong forms, surrogates and > U+10FFFF. */
size_t utf8_lead(unsigned char b, unsigned char *lo, unsigned char *hi);
/* Length of the well-formed sequence at s (len > 0 bytes available), or 0. */
size_t utf8_valid_len(const unsigned char *s, size_t len);
/* Byte offset of the first byte that does not start a well-formed sequence,
 * or len when all of s is valid. */
size_t utf8_first_invalid(const char *s, size_t len);
#endif
