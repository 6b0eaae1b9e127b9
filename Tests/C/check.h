/* Minimal checks for the C tests: each failure prints where and why
 * (with the library's last error message) and makes the program exit 1. */
#ifndef ORDO_TEST_CHECK_H
#define ORDO_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ordo.h>

static int check_failures = 0;
static int check_count = 0;

#define CHECK(cond)                                                               \
  do {                                                                            \
    check_count++;                                                                \
    if (!(cond)) {                                                                \
      check_failures++;                                                           \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__,     \
              __LINE__, #cond, ordo_last_error_message());                        \
    }                                                                             \
  } while (0)

/* A call must return the given status; for a failure, the thread's message
 * must be non-empty. */
#define EXPECT(status, call)                                                      \
  do {                                                                            \
    ordo_status expect_got_ = (call);                                             \
    check_count++;                                                                \
    if (expect_got_ != (status)) {                                                \
      check_failures++;                                                           \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (last error: %s)\n",   \
              __FILE__, __LINE__, #call, ordo_status_name(expect_got_),          \
              ordo_status_name(status), ordo_last_error_message());              \
    } else if ((status) != ORDO_OK && ordo_last_error_message()[0] == '\0') {     \
      check_failures++;                                                           \
      fprintf(stderr, "%s:%d: %s failed without a message\n", __FILE__,           \
              __LINE__, #call);                                                   \
    }                                                                             \
  } while (0)

#define OK(call) EXPECT(ORDO_OK, call)

/* The last error message must contain `needle`. */
#define EXPECT_MESSAGE(needle)                                                    \
  do {                                                                            \
    check_count++;                                                                \
    if (strstr(ordo_last_error_message(), (needle)) == NULL) {                    \
      check_failures++;                                                           \
      fprintf(stderr, "%s:%d: last error \"%s\" does not mention \"%s\"\n",      \
              __FILE__, __LINE__, ordo_last_error_message(), (needle));           \
    }                                                                             \
  } while (0)

static int check_report(const char *name) {
  if (check_failures) {
    fprintf(stderr, "%s: %d of %d checks failed\n", name, check_failures, check_count);
    return 1;
  }
  printf("%s: %d checks passed\n", name, check_count);
  return 0;
}

#endif
