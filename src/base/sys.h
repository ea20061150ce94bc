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
/* With LMTUNE_SMAPS=FILE set: copies /proc/self/smaps to FILE whenever the
 * resident set is at a new high (the memory bench attributes the peak). */
void rss_snapshot_if_peak(void);
/* The same at the process baseline, to FILE.baseline. */
void rss_snapshot_baseline(void);
/* Makes resident at start-up the code a run executes later, so the process
 * baseline measured after it holds it: the program's own code segments and
 * the libm functions it calls. */
void sys_warm_code(void);
/* OpenMP threads that wait sleep (OMP_WAIT_POLICY=passive) unless the user
 * chose a policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT set): libgomp reads the
 * policy when it loads, before main, so this sets it and executes the
 * program again (/proc/self/exe, same arguments); it returns only where
 * nothing had to change or the exec failed (then libgomp's default stays). */
void sys_default_wait_policy(char **argv);
#endif
