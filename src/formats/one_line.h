/* one_line.h: error messages of the formats layer quote names read from
 * files (tensor names, JSON tokens), which may hold newlines or other
 * control bytes; the public entry points pass their error through
 * error_one_line() so the message stays one printable line. */
#ifndef LT_FORMATS_ONE_LINE_H
#define LT_FORMATS_ONE_LINE_H
#include <stdio.h>
#include <string.h>
#include "base/error.h"

/* Replaces control bytes of the current error message with '?'; returns -1. */
static inline int error_one_line(void) {
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", error_message());
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return error_set("%s", buf);
}
#endif
