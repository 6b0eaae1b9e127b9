/*
 * ordo-c-bench: the work of ordo-bench's "delivery" scenario driven from C
 * through libordo.so, for the c-abi scenario. ordo-bench runs it and drives
 * it through a pipe so that the C and Swift figures are measured in the
 * same rounds:
 *
 *   ordo-c-bench N        registers N contracts, contract i reading
 *                         "model.item<i>.value", then prints "ready".
 *   stdin:  OPS           runs OPS transactions, each setting every keypath
 *                         once (an int64, new each transaction), and prints
 *   stdout: NS CALLS      the elapsed nanoseconds and the total callback
 *                         calls so far. EOF ends the program.
 *
 * Build: cc -O2 ordo-c-bench.c $(pkg-config --cflags --libs ordo)
 */
#define _POSIX_C_SOURCE 200809L
#include <ordo.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void on_change(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  (void)bus;
  (void)note;
  ++*(uint64_t *)user_data;
}

static void fail(const char *what, ordo_status st) {
  fprintf(stderr, "ordo-c-bench: %s: %s: %s\n", what, ordo_status_name(st), ordo_last_error_message());
  exit(1);
}

int main(int argc, char **argv) {
  if (argc != 2 || atoi(argv[1]) <= 0) {
    fprintf(stderr, "usage: ordo-c-bench N  (then OPS lines on stdin)\n");
    return 64;
  }
  size_t n = (size_t)atoi(argv[1]);
  ordo_bus *bus = ordo_bus_new();
  if (!bus) return 1;
  char **keys = calloc(n, sizeof *keys);
  uint64_t calls = 0;
  for (size_t i = 0; i < n; i++) {
    char name[32];
    keys[i] = malloc(48);
    snprintf(keys[i], 48, "model.item%zu.value", i);
    snprintf(name, sizeof name, "o%zu", i);
    const char *reads[1] = {keys[i]};
    ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
    spec.name = name;
    spec.reads = reads;
    spec.n_reads = 1;
    spec.callback = on_change;
    spec.user_data = &calls;
    ordo_status st = ordo_register(bus, &spec, NULL);
    if (st != ORDO_OK) fail("register", st);
  }
  printf("ready\n");
  fflush(stdout);

  int64_t value = 0;
  long ops;
  while (scanf("%ld", &ops) == 1) {
    uint64_t t0 = now_ns();
    for (long t = 0; t < ops; t++) {
      value++;
      ordo_status st = ordo_begin(bus);
      if (st != ORDO_OK) fail("begin", st);
      for (size_t i = 0; i < n; i++) {
        st = ordo_set_int64(bus, keys[i], value);
        if (st != ORDO_OK) fail("set", st);
      }
      st = ordo_commit(bus, NULL);
      if (st != ORDO_OK) fail("commit", st);
    }
    uint64_t t1 = now_ns();
    printf("%llu %llu\n", (unsigned long long)(t1 - t0), (unsigned long long)calls);
    fflush(stdout);
  }
  for (size_t i = 0; i < n; i++) free(keys[i]);
  free(keys);
  ordo_bus_free(bus);
  return 0;
}
