/* Conditional commits and owned values through the C ABI (SPEC §15):
 * ordo_expect_counter, ORDO_E_CONFLICT, ordo_owner_new / ordo_begin_owned /
 * ordo_owner_free, misuse, and read-modify-write from threads that retry on
 * a conflict and lose no update. */
#include <pthread.h>

#include "check.h"

typedef struct {
  int calls;
  uint64_t txn;
  size_t n_changed;
  char changed[4][64];
} recorder;

static void on_notify(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  recorder *r = user_data;
  size_t i;
  (void)bus;
  r->calls++;
  r->txn = note->txn;
  r->n_changed = note->n_changed;
  for (i = 0; i < note->n_changed && i < 4; i++) {
    strncpy(r->changed[i], note->changed[i], sizeof r->changed[i] - 1);
    r->changed[i][sizeof r->changed[i] - 1] = '\0';
  }
}

static void watch(ordo_bus *bus, const char *name, const char *pattern, recorder *r) {
  ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
  const char *reads[1];
  reads[0] = pattern;
  spec.name = name;
  spec.reads = reads;
  spec.n_reads = 1;
  spec.callback = on_notify;
  spec.user_data = r;
  OK(ordo_register(bus, &spec, NULL));
}

static void test_conditions(void) {
  ordo_bus *bus = ordo_bus_new();
  recorder r;
  uint64_t txn = 99, counter = 0;
  int64_t v = 0;
  memset(&r, 0, sizeof r);
  watch(bus, "reader", "cart.**", &r);

  /* A condition that holds. */
  OK(ordo_begin(bus));
  OK(ordo_expect_counter(bus, "cart.count", 0));
  OK(ordo_set_int64(bus, "cart.count", 5));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 1);
  CHECK(r.calls == 1);

  /* One that does not: nothing applied, no pass, no id used. */
  OK(ordo_begin(bus));
  OK(ordo_set_int64(bus, "cart.count", 6));
  OK(ordo_set_string(bus, "cart.note", "x"));
  OK(ordo_expect_counter(bus, "cart.count", 0));
  txn = 99;
  EXPECT(ORDO_E_CONFLICT, ordo_commit(bus, &txn));
  EXPECT_MESSAGE("\"cart.count\" was expected at counter 0 but is at 1");
  CHECK(txn == 99);
  OK(ordo_get_int64(bus, "cart.count", &v));
  CHECK(v == 5);
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_int64(bus, "cart.note", &v));
  OK(ordo_get_counter(bus, "cart.count", &counter));
  CHECK(counter == 1);
  CHECK(r.calls == 1);
  CHECK(ordo_transaction_id(bus) == 1);
  EXPECT(ORDO_E_NO_TRANSACTION, ordo_commit(bus, NULL));

  OK(ordo_begin(bus));
  OK(ordo_expect_counter(bus, "cart.count", 1));
  OK(ordo_set_int64(bus, "cart.count", 7));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 2);

  /* Misuse. */
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_expect_counter(NULL, "k", 0));
  EXPECT(ORDO_E_NO_TRANSACTION, ordo_expect_counter(bus, "k", 0));
  OK(ordo_begin(bus));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_expect_counter(bus, NULL, 0));
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_expect_counter(bus, "a..b", 0));
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_expect_counter(bus, "a.*", 0));
  OK(ordo_rollback(bus));
  ordo_bus_free(bus);
}

static void test_owners(void) {
  ordo_bus *bus = ordo_bus_new();
  ordo_bus *other = ordo_bus_new();
  ordo_owner *owner = NULL, *foreign = NULL;
  recorder r;
  uint64_t txn = 0;
  bool b = false;
  memset(&r, 0, sizeof r);
  watch(bus, "reader", "presence.**", &r);

  OK(ordo_owner_new(bus, "provider", &owner));
  OK(ordo_begin_owned(bus, owner));
  OK(ordo_set_bool(bus, "presence.alice", true));
  OK(ordo_set_bool(bus, "presence.bob", true));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 1);
  OK(ordo_begin(bus));
  OK(ordo_set_bool(bus, "presence.carol", true));
  OK(ordo_commit(bus, NULL));
  /* A plain write ends bob's ownership. */
  OK(ordo_begin(bus));
  OK(ordo_set_bool(bus, "presence.bob", true));
  OK(ordo_commit(bus, NULL));
  r.calls = 0;

  ordo_owner_free(owner);
  CHECK(r.calls == 1);
  CHECK(r.txn == 3);
  CHECK(r.n_changed == 1 && strcmp(r.changed[0], "presence.alice") == 0);
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_bool(bus, "presence.alice", &b));
  OK(ordo_get_bool(bus, "presence.bob", &b));
  OK(ordo_get_bool(bus, "presence.carol", &b));

  /* Misuse. */
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_owner_new(NULL, "x", &owner));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_owner_new(bus, NULL, &owner));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_owner_new(bus, "x", NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_begin_owned(bus, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_begin_owned(NULL, NULL));
  OK(ordo_owner_new(other, "foreign", &foreign));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_begin_owned(bus, foreign));
  EXPECT_MESSAGE("belongs to another bus");
  EXPECT(ORDO_E_NO_TRANSACTION, ordo_commit(bus, NULL));
  ordo_owner_free(NULL);

  /* An owner freed after its bus: nothing left to remove. */
  ordo_bus_free(other);
  ordo_owner_free(foreign);
  ordo_bus_free(bus);
}

#define THREADS 4
#define INCREMENTS 200

static void *increment(void *arg) {
  ordo_bus *bus = arg;
  int i;
  for (i = 0; i < INCREMENTS; i++) {
    for (;;) {
      int64_t v = 0;
      uint64_t counter = 0;
      ordo_status st;
      /* The counter first: a commit between the two reads then makes the
       * value newer than the counter, which the condition refuses. */
      if (ordo_get_counter(bus, "cart.count", &counter) != ORDO_OK) abort();
      if (ordo_get_int64(bus, "cart.count", &v) == ORDO_E_NOT_FOUND) v = 0;
      if (ordo_begin(bus) != ORDO_OK) abort();
      if (ordo_expect_counter(bus, "cart.count", counter) != ORDO_OK) abort();
      if (ordo_set_int64(bus, "cart.count", v + 1) != ORDO_OK) abort();
      st = ordo_commit(bus, NULL);
      if (st == ORDO_OK) break;
      if (st != ORDO_E_CONFLICT) abort();
    }
  }
  return NULL;
}

static void test_read_modify_write(void) {
  ordo_bus *bus = ordo_bus_new();
  pthread_t threads[THREADS];
  int64_t v = 0;
  int i;
  for (i = 0; i < THREADS; i++) CHECK(pthread_create(&threads[i], NULL, increment, bus) == 0);
  for (i = 0; i < THREADS; i++) CHECK(pthread_join(threads[i], NULL) == 0);
  OK(ordo_get_int64(bus, "cart.count", &v));
  CHECK(v == THREADS * INCREMENTS);
  ordo_bus_free(bus);
}

int main(void) {
  test_conditions();
  test_owners();
  test_read_modify_write();
  return check_report("test_conditions");
}
