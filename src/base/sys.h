/* sys.h: wall-clock timing and the process's real memory (resident set and
 * its peak from /proc/self/status), which is what the train log reports. */
#ifndef LT_SYS_H
#define LT_SYS_H
#include <stddef.h>
double time_now(void);              /* seconds, monotonic */
double time_unix(void);             /* seconds since 1970 (wall clock, for records) */
size_t rss_current_bytes(void);     /* VmRSS */
size_t rss_peak_bytes(void);        /* VmHWM */
/* Parses "8GB", "7.5GiB", "512MB", "1000000" into bytes; -1 + error. */
int parse_size(const char *s, size_t *out);
/* "1.234 GB" style formatting with decimal units into buf. */
const char *format_bytes(char *buf, size_t n, size_t bytes);
#endif
