/*
 * ordo-c-bench: Ordo's workloads driven from C through libordo.so, for the
 * c-abi and c-gobject scenarios. ordo-bench runs it and drives it through a
 * pipe so that its figures and the comparators' are measured in the same
 * rounds.
 *
 *   ordo-c-bench N [strings|handles]
 *       registers N contracts, contract i reading "model.item<i>.value"
 *       (every keypath already holds a value, resolved to a handle, and has
 *       been changed once since the contracts exist), then prints "ready". Then reads command lines on stdin:
 *
 *   OPS              OPS transactions, each setting every keypath once (an
 *                    int64, new each transaction): through the keypath
 *                    strings (ordo_set_int64), or through the handles
 *                    (ordo_handle_set_int64) when the second argument is
 *                    "handles"
 *   strings OPS      the same through the strings
 *   handles OPS      the same through the handles
 *   batch OPS        OPS transactions, each writing every keypath BATCH (10)
 *                    times through its handle, every write a new value (the
 *                    counterpart of GObject's freeze/thaw batch)
 *   scale OPS        OPS transactions, each setting 10 distinct keypaths
 *                    drawn at random among the N through their handles (the
 *                    draw is made before the clock starts)
 *   scale-strings OPS   the same through the strings
 *   floor OPS        the scale commits done by the least a thread-safe bus
 *                    must do, without Ordo: N keypath records and N
 *                    contract records (64 bytes each, in two arrays, in
 *                    the order Ordo's dense tables hold them); each write
 *                    takes a lock, stores the value and records the
 *                    keypath once per transaction; the commit takes the
 *                    lock, schedules each changed keypath's reader once,
 *                    orders the schedule and calls each contract with a
 *                    notification, counting. Its growth from 10 to
 *                    100 000 is the floor of Ordo's (docs/performance.md).
 *
 *   Each command prints "NS CALLS": the elapsed nanoseconds and the total
 *   callback calls so far. EOF ends the program.
 *
 * Build: cc -O2 ordo-c-bench.c $(pkg-config --cflags --libs ordo)
 */
#define _POSIX_C_SOURCE 200809L
#include <ordo.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench-common.h"

static void on_change(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  (void)bus;
  (void)note;
  ++*(uint64_t *)user_data;
}

/* The floor (see "floor" above). */
typedef struct floor_contract floor_contract;
typedef struct floor_node {
  int64_t value;
  uint64_t counter;
  uint64_t stamp; /* the transaction that last recorded it */
  floor_contract *reader;
  const char *keypath;
} __attribute__((aligned(64))) floor_node;

struct floor_contract {
  ordo_callback callback;
  void *user_data;
  uint64_t id;
  uint64_t scheduled; /* the transaction that last scheduled it */
  uint64_t calls;
  const char *trigger;
} __attribute__((aligned(64)));

typedef struct floor_bus {
  unsigned next_ticket, serving; /* a ticket lock, as Ordo's */
  uint64_t txn;
  size_t n_journal;
  floor_node *journal[GROUP];
  floor_contract *schedule[GROUP];
} floor_bus;

static void floor_lock(floor_bus *b) {
  unsigned t = __atomic_fetch_add(&b->next_ticket, 1, __ATOMIC_ACQUIRE);
  while (__atomic_load_n(&b->serving, __ATOMIC_ACQUIRE) != t) {
  }
}

static void floor_unlock(floor_bus *b) { __atomic_store_n(&b->serving, b->serving + 1, __ATOMIC_RELEASE); }

__attribute__((noinline)) static void floor_set(floor_bus *b, floor_node *k, int64_t value) {
  floor_lock(b);
  if (k->value != value) {
    k->value = value;
    if (k->stamp != b->txn + 1 && b->n_journal < GROUP) {
      k->stamp = b->txn + 1;
      b->journal[b->n_journal++] = k;
    }
  }
  floor_unlock(b);
}

__attribute__((noinline)) static void floor_commit(floor_bus *b, ordo_bus *bus) {
  floor_lock(b);
  uint64_t txn = ++b->txn;
  size_t n = 0;
  for (size_t i = 0; i < b->n_journal; i++) {
    floor_node *k = b->journal[i];
    k->counter++;
    floor_contract *c = k->reader;
    if (c && c->scheduled != txn) {
      c->scheduled = txn;
      c->trigger = k->keypath;
      size_t j = n++;
      for (; j > 0 && b->schedule[j - 1]->id > c->id; j--) b->schedule[j] = b->schedule[j - 1];
      b->schedule[j] = c;
    }
  }
  for (size_t i = 0; i < n; i++) {
    floor_contract *c = b->schedule[i];
    const char *changed[2] = {c->trigger, NULL};
    ordo_notification note = {txn, c->id, changed, 1};
    c->callback(bus, &note, c->user_data);
    c->calls++;
  }
  b->n_journal = 0;
  floor_unlock(b);
}

static void fail(const char *what, ordo_status st) {
  fprintf(stderr, "ordo-c-bench: %s: %s: %s\n", what, ordo_status_name(st), ordo_last_error_message());
  exit(1);
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3 || atoi(argv[1]) <= 0 ||
      (argc == 3 && strcmp(argv[2], "strings") != 0 && strcmp(argv[2], "handles") != 0)) {
    fprintf(stderr, "usage: ordo-c-bench N [strings|handles]  (then command lines on stdin)\n");
    return 64;
  }
  size_t n = (size_t)atoi(argv[1]);
  if (n < GROUP) {
    fprintf(stderr, "ordo-c-bench: N must be at least %d\n", GROUP);
    return 64;
  }
  int default_handles = argc == 3 && strcmp(argv[2], "handles") == 0;
  ordo_bus *bus = ordo_bus_new();
  if (!bus) return 1;
  char **keys = calloc(n, sizeof *keys);
  ordo_handle **handles = calloc(n, sizeof *handles);
  if (!keys || !handles) return 1;
  uint64_t calls = 0;
  uint64_t rng = (uint64_t)n;

  /* Every keypath holds a value before the contracts exist (so this
   * transaction calls nobody): the measurement is of changes, not of the
   * first insertion of a keypath. */
  ordo_status st = ordo_begin(bus);
  if (st != ORDO_OK) fail("begin", st);
  for (size_t i = 0; i < n; i++) {
    keys[i] = malloc(48);
    if (!keys[i]) return 1;
    snprintf(keys[i], 48, "model.item%zu.value", i);
    st = ordo_resolve(bus, keys[i], &handles[i]);
    if (st != ORDO_OK) fail("resolve", st);
    st = ordo_handle_set_int64(handles[i], -1);
    if (st != ORDO_OK) fail("prefill", st);
  }
  st = ordo_commit(bus, NULL);
  if (st != ORDO_OK) fail("commit", st);
  for (size_t i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "o%zu", i);
    const char *reads[1] = {keys[i]};
    ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
    spec.name = name;
    spec.reads = reads;
    spec.n_reads = 1;
    spec.callback = on_change;
    spec.user_data = &calls;
    st = ordo_register(bus, &spec, NULL);
    if (st != ORDO_OK) fail("register", st);
  }
  if (calls != 0) {
    fprintf(stderr, "ordo-c-bench: registration made %llu calls\n", (unsigned long long)calls);
    return 1;
  }
  /* One change of every keypath with the contracts registered, so that
   * what the bus builds on a keypath's first write after registrations (its
   * readers) is built before the measurement, as in a running program. */
  if ((st = ordo_begin(bus)) != ORDO_OK) fail("begin", st);
  for (size_t i = 0; i < n; i++)
    if ((st = ordo_handle_set_int64(handles[i], 0)) != ORDO_OK) fail("warm-up", st);
  if ((st = ordo_commit(bus, NULL)) != ORDO_OK) fail("commit", st);
  if (calls != n) {
    fprintf(stderr, "ordo-c-bench: the warm-up made %llu calls\n", (unsigned long long)calls);
    return 1;
  }
  /* The floor's records, beside Ordo's. */
  floor_bus fbus = {0};
  void *fn_mem = NULL, *fc_mem = NULL;
  if (posix_memalign(&fn_mem, 64, n * sizeof(floor_node)) != 0 || posix_memalign(&fc_mem, 64, n * sizeof(floor_contract)) != 0)
    return 1;
  floor_node *fnodes = fn_mem;
  floor_contract *fcontracts = fc_mem;
  floor_node **fhandles = calloc(n, sizeof *fhandles);
  if (!fhandles) return 1;
  for (size_t i = 0; i < n; i++) {
    fcontracts[i] = (floor_contract){on_change, &calls, i + 1, 0, 0, NULL};
    fnodes[i] = (floor_node){-1, 0, 0, &fcontracts[i], keys[i]};
    fhandles[i] = &fnodes[i];
  }
  calls = 0;
  printf("ready\n");
  fflush(stdout);

  int64_t value = 0;
  char word[32];
  long ops;
  while (bench_read_command(word, &ops, default_handles ? "handles" : "strings", "ordo-c-bench")) {
    uint64_t t0 = 0, t1 = 0;
    if (strcmp(word, "strings") == 0) {
      t0 = bench_now_ns();
      for (long t = 0; t < ops; t++) {
        value++;
        if ((st = ordo_begin(bus)) != ORDO_OK) fail("begin", st);
        for (size_t i = 0; i < n; i++)
          if ((st = ordo_set_int64(bus, keys[i], value)) != ORDO_OK) fail("set", st);
        if ((st = ordo_commit(bus, NULL)) != ORDO_OK) fail("commit", st);
      }
      t1 = bench_now_ns();
    } else if (strcmp(word, "handles") == 0) {
      t0 = bench_now_ns();
      for (long t = 0; t < ops; t++) {
        value++;
        if ((st = ordo_begin(bus)) != ORDO_OK) fail("begin", st);
        for (size_t i = 0; i < n; i++)
          if ((st = ordo_handle_set_int64(handles[i], value)) != ORDO_OK) fail("handle set", st);
        if ((st = ordo_commit(bus, NULL)) != ORDO_OK) fail("commit", st);
      }
      t1 = bench_now_ns();
    } else if (strcmp(word, "batch") == 0) {
      t0 = bench_now_ns();
      for (long t = 0; t < ops; t++) {
        if ((st = ordo_begin(bus)) != ORDO_OK) fail("begin", st);
        for (int b = 0; b < BATCH; b++) {
          value++;
          for (size_t i = 0; i < n; i++)
            if ((st = ordo_handle_set_int64(handles[i], value)) != ORDO_OK) fail("handle set", st);
        }
        if ((st = ordo_commit(bus, NULL)) != ORDO_OK) fail("commit", st);
      }
      t1 = bench_now_ns();
    } else if (strcmp(word, "scale") == 0 || strcmp(word, "scale-strings") == 0) {
      int strings = strcmp(word, "scale-strings") == 0;
      size_t *picks = bench_draw_groups(&rng, ops, n, "ordo-c-bench");
      t0 = bench_now_ns();
      for (long t = 0; t < ops; t++) {
        const size_t *g = picks + (size_t)t * GROUP;
        value++;
        if ((st = ordo_begin(bus)) != ORDO_OK) fail("begin", st);
        if (strings) {
          for (int j = 0; j < GROUP; j++)
            if ((st = ordo_set_int64(bus, keys[g[j]], value)) != ORDO_OK) fail("set", st);
        } else {
          for (int j = 0; j < GROUP; j++)
            if ((st = ordo_handle_set_int64(handles[g[j]], value)) != ORDO_OK) fail("handle set", st);
        }
        if ((st = ordo_commit(bus, NULL)) != ORDO_OK) fail("commit", st);
      }
      t1 = bench_now_ns();
      free(picks);
    } else if (strcmp(word, "floor") == 0) {
      size_t *picks = bench_draw_groups(&rng, ops, n, "ordo-c-bench");
      t0 = bench_now_ns();
      for (long t = 0; t < ops; t++) {
        const size_t *g = picks + (size_t)t * GROUP;
        value++;
        for (int j = 0; j < GROUP; j++) floor_set(&fbus, fhandles[g[j]], value);
        floor_commit(&fbus, bus);
      }
      t1 = bench_now_ns();
      free(picks);
    } else {
      fprintf(stderr, "ordo-c-bench: unknown command %s\n", word);
      return 64;
    }
    bench_answer(t1 - t0, calls);
  }
  for (size_t i = 0; i < n; i++) free(keys[i]);
  free(keys);
  free(handles);
  free(fnodes);
  free(fcontracts);
  free(fhandles);
  ordo_bus_free(bus);
  return 0;
}
