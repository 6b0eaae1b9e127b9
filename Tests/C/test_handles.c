/* Handles (ordo.h "Handles", SPEC §13): every ordo_handle_* function, the
 * NULL handle, ownership (nothing to free: valgrind checks), and the rules
 * a handle obeys exactly like its keypath string: transactions, a
 * callback's write set and read set, stability, net change. */
#define _POSIX_C_SOURCE 200809L
#include <ordo.h>

#include "check.h"

#include <pthread.h>
#include <stdint.h>

static void test_null_and_resolve(void) {
  ordo_bus *bus = ordo_bus_new();
  ordo_handle *h = NULL;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_resolve(NULL, "a", &h));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_resolve(bus, NULL, &h));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_resolve(bus, "a", NULL));
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_resolve(bus, "a..b", &h));
  CHECK(strstr(ordo_last_error_message(), "a..b") != NULL);
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_resolve(bus, "doc.*", &h));
  CHECK(h == NULL);

  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_set_int64(NULL, 1));
  CHECK(strstr(ordo_last_error_message(), "handle is NULL") != NULL);
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_set_bool(NULL, true));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_set_double(NULL, 1.0));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_set_string(NULL, "x"));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_set_bytes(NULL, "x", 1));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_touch(NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_remove(NULL));
  int64_t i = 0;
  uint64_t n = 7;
  ordo_type t;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_get_int64(NULL, &i));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_get_type(NULL, &t));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_get_counter(NULL, &n));
  CHECK(ordo_handle_counter(NULL) == 0);
  CHECK(ordo_handle_keypath(NULL) == NULL);

  EXPECT(ORDO_OK, ordo_resolve(bus, "doc.title", &h));
  CHECK(h != NULL);
  CHECK(strcmp(ordo_handle_keypath(h), "doc.title") == 0);
  ordo_handle *again = NULL;
  EXPECT(ORDO_OK, ordo_resolve(bus, "doc.title", &again));
  CHECK(again == h);
  /* Resolving writes nothing. */
  bool b;
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_bool(bus, "doc.title", &b));
  CHECK(ordo_counter(bus, "doc.title") == 0);
  CHECK(ordo_transaction_id(bus) == 0);
  /* Outside a transaction, like the string. */
  EXPECT(ORDO_E_NO_TRANSACTION, ordo_handle_set_string(h, "x"));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_get_int64(h, NULL));
  ordo_bus_free(bus);
}

static void test_values(void) {
  ordo_bus *bus = ordo_bus_new();
  ordo_handle *hb, *hi, *hd, *hs, *hy;
  EXPECT(ORDO_OK, ordo_resolve(bus, "v.b", &hb));
  EXPECT(ORDO_OK, ordo_resolve(bus, "v.i", &hi));
  EXPECT(ORDO_OK, ordo_resolve(bus, "v.d", &hd));
  EXPECT(ORDO_OK, ordo_resolve(bus, "v.s", &hs));
  EXPECT(ORDO_OK, ordo_resolve(bus, "v.y", &hy));
  EXPECT(ORDO_OK, ordo_begin(bus));
  EXPECT(ORDO_OK, ordo_handle_set_bool(hb, true));
  EXPECT(ORDO_OK, ordo_handle_set_int64(hi, -5));
  EXPECT(ORDO_OK, ordo_handle_set_double(hd, 2.5));
  EXPECT(ORDO_OK, ordo_handle_set_string(hs, "Songs"));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_set_string(hs, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_set_string(hs, "\xff"));
  EXPECT(ORDO_OK, ordo_handle_set_bytes(hy, "\x00\x01", 2));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_set_bytes(hy, NULL, 3));
  uint64_t txn = 0;
  EXPECT(ORDO_OK, ordo_commit(bus, &txn));
  CHECK(txn == 1);

  bool b = false;
  int64_t i = 0;
  double d = 0;
  char *s = NULL;
  void *y = NULL;
  size_t len = 0;
  ordo_type t;
  EXPECT(ORDO_OK, ordo_handle_get_bool(hb, &b));
  CHECK(b);
  EXPECT(ORDO_OK, ordo_handle_get_int64(hi, &i));
  CHECK(i == -5);
  EXPECT(ORDO_OK, ordo_handle_get_double(hd, &d));
  CHECK(d == 2.5);
  EXPECT(ORDO_OK, ordo_handle_get_string(hs, &s));
  CHECK(s && strcmp(s, "Songs") == 0);
  ordo_free(s);
  EXPECT(ORDO_OK, ordo_handle_get_bytes(hy, &y, &len));
  CHECK(len == 2 && memcmp(y, "\x00\x01", 2) == 0);
  ordo_free(y);
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_handle_get_bytes(hy, &y, NULL));
  EXPECT(ORDO_OK, ordo_handle_get_type(hd, &t));
  CHECK(t == ORDO_TYPE_DOUBLE);
  EXPECT(ORDO_E_TYPE_MISMATCH, ordo_handle_get_int64(hs, &i));
  CHECK(strstr(ordo_last_error_message(), "\"v.s\" holds a string, not an int64") != NULL);
  /* The string API sees what the handles wrote, and the reverse. */
  EXPECT(ORDO_OK, ordo_get_int64(bus, "v.i", &i));
  CHECK(i == -5);
  CHECK(ordo_handle_counter(hi) == 1);

  /* Net change: an equal value, or a round trip, is no change. */
  EXPECT(ORDO_OK, ordo_begin(bus));
  EXPECT(ORDO_OK, ordo_handle_set_int64(hi, -5));
  EXPECT(ORDO_OK, ordo_handle_set_string(hs, "Albums"));
  EXPECT(ORDO_OK, ordo_handle_set_string(hs, "Songs"));
  EXPECT(ORDO_OK, ordo_commit(bus, &txn));
  CHECK(txn == 0);
  CHECK(ordo_handle_counter(hi) == 1);

  /* touch and remove; a removed value keeps its counter. */
  EXPECT(ORDO_OK, ordo_begin(bus));
  EXPECT(ORDO_OK, ordo_handle_touch(hb));
  EXPECT(ORDO_OK, ordo_handle_remove(hi));
  EXPECT(ORDO_OK, ordo_commit(bus, &txn));
  CHECK(txn == 2);
  CHECK(ordo_handle_counter(hb) == 2);
  CHECK(ordo_handle_counter(hi) == 2);
  EXPECT(ORDO_E_NOT_FOUND, ordo_handle_get_int64(hi, &i));
  uint64_t n = 0;
  EXPECT(ORDO_OK, ordo_handle_get_counter(hi, &n));
  CHECK(n == 2);

  /* A rollback discards writes made through handles. */
  EXPECT(ORDO_OK, ordo_begin(bus));
  EXPECT(ORDO_OK, ordo_handle_set_double(hd, 9.0));
  EXPECT(ORDO_OK, ordo_rollback(bus));
  EXPECT(ORDO_OK, ordo_handle_get_double(hd, &d));
  CHECK(d == 2.5);
  ordo_bus_free(bus);
}

/* A callback writes and reads through handles under its contract's rules. */
struct rules_ctx {
  ordo_handle *allowed;   /* in the write set */
  ordo_handle *forbidden; /* outside both sets */
  ordo_handle *earlier;   /* read by a contract placed before it */
  ordo_status write_allowed, write_forbidden, write_earlier, read_forbidden;
  int calls;
};

static void rules_cb(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  (void)bus;
  (void)note;
  struct rules_ctx *c = user_data;
  c->calls++;
  c->write_allowed = ordo_handle_set_int64(c->allowed, 42);
  c->write_forbidden = ordo_handle_set_int64(c->forbidden, 1);
  c->write_earlier = ordo_handle_set_int64(c->earlier, 1);
  int64_t i;
  c->read_forbidden = ordo_handle_get_int64(c->forbidden, &i);
}

static int early_calls = 0;
static void early_cb(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  (void)bus;
  (void)note;
  (void)user_data;
  early_calls++;
}

static void test_rules_in_callbacks(void) {
  ordo_bus *bus = ordo_bus_new();
  struct rules_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  EXPECT(ORDO_OK, ordo_resolve(bus, "out.x", &ctx.allowed));
  EXPECT(ORDO_OK, ordo_resolve(bus, "secret", &ctx.forbidden));
  EXPECT(ORDO_OK, ordo_resolve(bus, "st.able", &ctx.earlier));

  const char *early_reads[] = {"in", "st.able"};
  ordo_contract_spec early = ORDO_CONTRACT_SPEC_INIT;
  early.name = "early";
  early.reads = early_reads;
  early.n_reads = 2;
  early.priority = -3;
  early.callback = early_cb;
  EXPECT(ORDO_OK, ordo_register(bus, &early, NULL));

  const char *reads[] = {"in"};
  const char *writes[] = {"out.*", "st.*"};
  ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
  spec.name = "writer";
  spec.reads = reads;
  spec.n_reads = 1;
  spec.writes = writes;
  spec.n_writes = 2;
  spec.priority = 1;
  spec.callback = rules_cb;
  spec.user_data = &ctx;
  EXPECT(ORDO_OK, ordo_register(bus, &spec, NULL));

  ordo_handle *in;
  EXPECT(ORDO_OK, ordo_resolve(bus, "in", &in));
  EXPECT(ORDO_OK, ordo_begin(bus));
  EXPECT(ORDO_OK, ordo_handle_set_bool(in, true));
  uint64_t txn = 0;
  EXPECT(ORDO_OK, ordo_commit(bus, &txn));
  CHECK(txn == 1);
  CHECK(ctx.calls == 1);
  CHECK(early_calls == 1);
  CHECK(ctx.write_allowed == ORDO_OK);
  CHECK(ctx.write_forbidden == ORDO_E_CONTRACT_VIOLATION);
  CHECK(ctx.write_earlier == ORDO_E_STABILITY);
  CHECK(ctx.read_forbidden == ORDO_E_CONTRACT_VIOLATION);
  int64_t i = 0;
  EXPECT(ORDO_OK, ordo_handle_get_int64(ctx.allowed, &i));
  CHECK(i == 42);
  CHECK(ordo_handle_counter(ctx.allowed) == 1);
  CHECK(ordo_handle_counter(ctx.earlier) == 0);
  ordo_bus_free(bus);
}

/* Scalar sets through handles are held back inside the library until the
 * bus is used otherwise (docs/semantics.md, "Writes held back"): none of it
 * may show. More writes than are held at once, reads of the transaction's
 * own writes through handles and strings, a string write between them, the
 * counter only at the commit, and a bus freed with writes held (valgrind
 * checks that nothing leaks or is read after free). */
enum { HELD_N = 40 };

static void test_held_writes(void) {
  ordo_bus *bus = ordo_bus_new();
  ordo_handle *h[HELD_N];
  char key[32];
  for (int k = 0; k < HELD_N; k++) {
    snprintf(key, sizeof key, "held.k%d", k);
    EXPECT(ORDO_OK, ordo_resolve(bus, key, &h[k]));
  }
  EXPECT(ORDO_OK, ordo_begin(bus));
  for (int k = 0; k < HELD_N; k++) EXPECT(ORDO_OK, ordo_handle_set_int64(h[k], k));
  int64_t i = -1;
  EXPECT(ORDO_OK, ordo_handle_get_int64(h[HELD_N - 1], &i));
  CHECK(i == HELD_N - 1);
  EXPECT(ORDO_OK, ordo_handle_set_int64(h[3], 300));
  EXPECT(ORDO_OK, ordo_get_int64(bus, "held.k3", &i));
  CHECK(i == 300);
  EXPECT(ORDO_OK, ordo_handle_set_int64(h[4], 400));
  EXPECT(ORDO_OK, ordo_set_int64(bus, "held.k4", 401)); /* after the held 400 */
  EXPECT(ORDO_OK, ordo_handle_set_int64(h[5], 500));
  CHECK(ordo_handle_counter(h[5]) == 0);
  uint64_t txn = 0;
  EXPECT(ORDO_OK, ordo_commit(bus, &txn));
  CHECK(txn == 1);
  EXPECT(ORDO_OK, ordo_handle_get_int64(h[4], &i));
  CHECK(i == 401);
  EXPECT(ORDO_OK, ordo_handle_get_int64(h[5], &i));
  CHECK(i == 500);
  CHECK(ordo_handle_counter(h[5]) == 1 && ordo_handle_counter(h[HELD_N - 1]) == 1);

  EXPECT(ORDO_OK, ordo_begin(bus));
  EXPECT(ORDO_OK, ordo_handle_set_int64(h[0], 7));
  ordo_bus_free(bus); /* a transaction open, a write held */
}

/* While one thread commits transactions that write every handle twice (a
 * value no transaction leaves behind, then the transaction's own), another
 * reads through the handles: it sees committed values only, never the
 * first value. The first values of all handles come before the second
 * ones, so most of them are applied by the library (more writes than it
 * holds back at once) and stay in its store, uncommitted, for much of the
 * transaction: a read path that did not give other threads the committed
 * value would return them. Under ThreadSanitizer in make test-c-tsan. */
enum { RACE_N = 20, RACE_ROUNDS = 300, RACE_UNSEEN = -7 };

struct race {
  ordo_bus *bus;
  ordo_handle *h[RACE_N];
  int committed; /* the last round whose commit returned (atomic) */
  int writer_failures;
};

static void *race_writer(void *arg) {
  struct race *r = arg;
  for (int round = 1; round <= RACE_ROUNDS; round++) {
    int bad = ordo_begin(r->bus) != ORDO_OK;
    for (int k = 0; k < RACE_N; k++) bad |= ordo_handle_set_int64(r->h[k], RACE_UNSEEN) != ORDO_OK;
    for (int k = 0; k < RACE_N; k++) bad |= ordo_handle_set_int64(r->h[k], round) != ORDO_OK;
    bad |= ordo_commit(r->bus, NULL) != ORDO_OK;
    r->writer_failures += bad;
    __atomic_store_n(&r->committed, round, __ATOMIC_RELEASE);
  }
  return NULL;
}

static void test_held_writes_and_readers(void) {
  struct race r = {.bus = ordo_bus_new()};
  char key[32];
  for (int k = 0; k < RACE_N; k++) {
    snprintf(key, sizeof key, "race.k%d", k);
    EXPECT(ORDO_OK, ordo_resolve(r.bus, key, &r.h[k]));
  }
  EXPECT(ORDO_OK, ordo_begin(r.bus));
  for (int k = 0; k < RACE_N; k++) EXPECT(ORDO_OK, ordo_handle_set_int64(r.h[k], 0));
  EXPECT(ORDO_OK, ordo_commit(r.bus, NULL));
  pthread_t writer;
  CHECK(pthread_create(&writer, NULL, race_writer, &r) == 0);
  long reads = 0, unseen = 0, failed = 0;
  for (int done = 0; !done;) {
    done = __atomic_load_n(&r.committed, __ATOMIC_ACQUIRE) == RACE_ROUNDS;
    for (int k = 0; k < RACE_N; k++) {
      int64_t v = 0;
      if (ordo_handle_get_int64(r.h[k], &v) != ORDO_OK) {
        failed++;
        continue;
      }
      reads++;
      if (v == RACE_UNSEEN) unseen++;
    }
  }
  CHECK(pthread_join(writer, NULL) == 0);
  CHECK(r.writer_failures == 0);
  CHECK(reads > 0 && failed == 0);
  CHECK(unseen == 0);
  int64_t v = 0;
  EXPECT(ORDO_OK, ordo_handle_get_int64(r.h[RACE_N - 1], &v));
  CHECK(v == RACE_ROUNDS);
  ordo_bus_free(r.bus);
}

int main(void) {
  test_null_and_resolve();
  test_values();
  test_rules_in_callbacks();
  test_held_writes();
  test_held_writes_and_readers();
  return check_report("test_handles");
}
