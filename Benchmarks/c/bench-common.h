/* What the c-abi and c-gobject benchmark programs share (ordo-c-bench.c,
 * gobject-bench.c), so that both measure the same rounds: the sizes of a
 * batch and of a scale commit, the clock, the random draw of the scale
 * commits' properties, and the command lines they read and answer. */
#ifndef ORDO_BENCH_COMMON_H
#define ORDO_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* BATCH: the writes of every property in one batch; GROUP: the distinct
 * properties one scale commit changes. */
enum { BATCH = 10, GROUP = 10 };

/* Nanoseconds on the monotonic clock. */
static inline uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* SplitMix64, as ordo-bench's SplitMix: the next number from *state. */
static inline uint64_t bench_rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15u);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

/* OPS groups of GROUP distinct indices below n, drawn from *rng before
 * timing; out of memory, says so as program and exits. */
static inline size_t *bench_draw_groups(uint64_t *rng, long ops, size_t n, const char *program) {
  size_t *picks = malloc((size_t)ops * GROUP * sizeof *picks);
  if (!picks) {
    fprintf(stderr, "%s: out of memory\n", program);
    exit(1);
  }
  for (long t = 0; t < ops; t++) {
    size_t *g = picks + (size_t)t * GROUP;
    for (int j = 0; j < GROUP; j++) {
      size_t k;
      int dup;
      do {
        k = (size_t)(bench_rng_next(rng) % n);
        dup = 0;
        for (int i = 0; i < j; i++) dup |= g[i] == k;
      } while (dup);
      g[j] = k;
    }
  }
  return picks;
}

/* Reads the next command line from stdin: "WORD OPS" into word (32 bytes)
 * and *ops, or, when fallback is not NULL, "OPS" alone with word set to
 * fallback. Returns 0 at EOF. A malformed line, or OPS not positive: says so
 * as program and exits with 64. */
static inline int bench_read_command(char *word, long *ops, const char *fallback, const char *program) {
  char line[128];
  if (!fgets(line, sizeof line, stdin)) return 0;
  word[0] = '\0';
  *ops = 0;
  int fields = sscanf(line, "%31s %ld", word, ops);
  if (fields != 2 && fallback && sscanf(line, "%ld", ops) == 1) {
    snprintf(word, 32, "%s", fallback);
    fields = 2;
  }
  if (fields != 2) {
    fprintf(stderr, "%s: malformed command: %s", program, line);
    exit(64);
  }
  if (*ops <= 0) {
    fprintf(stderr, "%s: OPS must be positive: %s", program, line);
    exit(64);
  }
  return 1;
}

/* Answers a command: "NS CALLS", the elapsed nanoseconds and the total
 * callback calls so far. */
static inline void bench_answer(uint64_t ns, uint64_t calls) {
  printf("%llu %llu\n", (unsigned long long)ns, (unsigned long long)calls);
  fflush(stdout);
}

#endif
