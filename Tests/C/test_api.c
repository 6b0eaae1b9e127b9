/* The C ABI outside callbacks: every declared function, values, counters,
 * transactions, and every error path (NULL pointers, malformed keypaths,
 * invalid UTF-8, type mismatches, registration failures).
 *
 * ordo.h comes first: it must be self-contained (C99, -pedantic). */
#include <ordo.h>

#include "check.h"

#include <math.h>
#include <stdint.h>

static int destroyed = 0;
static void count_destroy(void *user_data) {
  (void)user_data;
  destroyed++;
}

static void nop(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  (void)bus;
  (void)note;
  (void)user_data;
}

static void test_library(void) {
  CHECK(strcmp(ordo_version(), ORDO_VERSION_STRING) == 0);
  CHECK(ordo_version() == ordo_version());
  /* Nothing failed on this thread yet. */
  CHECK(ordo_last_error_message() != NULL);
  CHECK(strcmp(ordo_last_error_message(), "") == 0);

  CHECK(strcmp(ordo_status_name(ORDO_OK), "ORDO_OK") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_INVALID_ARGUMENT), "ORDO_E_INVALID_ARGUMENT") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_INVALID_KEYPATH), "ORDO_E_INVALID_KEYPATH") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_TYPE_MISMATCH), "ORDO_E_TYPE_MISMATCH") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_NOT_FOUND), "ORDO_E_NOT_FOUND") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_NO_TRANSACTION), "ORDO_E_NO_TRANSACTION") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_CONTRACT_VIOLATION), "ORDO_E_CONTRACT_VIOLATION") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_STABILITY), "ORDO_E_STABILITY") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_CYCLE), "ORDO_E_CYCLE") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_ORDER_CONFLICT), "ORDO_E_ORDER_CONFLICT") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_DUPLICATE_NAME), "ORDO_E_DUPLICATE_NAME") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_LIMIT), "ORDO_E_LIMIT") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_DBUS), "ORDO_E_DBUS") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_STORAGE), "ORDO_E_STORAGE") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_INTERNAL), "ORDO_E_INTERNAL") == 0);
  CHECK(strcmp(ordo_status_name((ordo_status)42), "ORDO_E_UNKNOWN") == 0);

  /* The status values are ABI. */
  CHECK(ORDO_OK == 0 && ORDO_E_INVALID_ARGUMENT == 1 && ORDO_E_INVALID_KEYPATH == 2 &&
        ORDO_E_TYPE_MISMATCH == 3 && ORDO_E_NOT_FOUND == 4 && ORDO_E_NO_TRANSACTION == 5 &&
        ORDO_E_CONTRACT_VIOLATION == 6 && ORDO_E_STABILITY == 7 && ORDO_E_CYCLE == 8 &&
        ORDO_E_ORDER_CONFLICT == 9 && ORDO_E_DUPLICATE_NAME == 10 && ORDO_E_LIMIT == 11 &&
        ORDO_E_DBUS == 12 && ORDO_E_STORAGE == 13 && ORDO_E_INTERNAL == 99);
  CHECK(ORDO_NO_PRIORITY == INT32_MIN);
  CHECK(ORDO_NOTIFY_INITIAL == 1);

  ordo_free(NULL);
  ordo_bus_free(NULL);
}

/* Every function given a NULL bus fails cleanly. */
static void test_null_bus(void) {
  bool b = false;
  int64_t i = 0;
  double d = 0;
  char *s = NULL;
  void *p = NULL;
  size_t n = 0;
  uint64_t u = 0;
  ordo_type t = ORDO_TYPE_BOOL;
  ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;

  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_begin(NULL));
  EXPECT_MESSAGE("bus is NULL");
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_commit(NULL, &u));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_commit(NULL, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_rollback(NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_bool(NULL, "a", true));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_int64(NULL, "a", 1));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_double(NULL, "a", 1.0));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_string(NULL, "a", "x"));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_bytes(NULL, "a", "x", 1));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_touch(NULL, "a"));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_remove(NULL, "a"));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_remove_tree(NULL, "a"));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_type(NULL, "a", &t));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_bool(NULL, "a", &b));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_int64(NULL, "a", &i));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_double(NULL, "a", &d));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_string(NULL, "a", &s));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_bytes(NULL, "a", &p, &n));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_counter(NULL, "a", &u));
  CHECK(ordo_counter(NULL, "a") == 0);
  EXPECT_MESSAGE("bus is NULL");
  CHECK(ordo_transaction_id(NULL) == 0);
  CHECK(ordo_current_contract(NULL) == 0);
  spec.name = "x";
  spec.callback = nop;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(NULL, &spec, &u));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_unregister(NULL, 1));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_dbus_publish(NULL, NULL, NULL));
  CHECK(ordo_dbus_fd(NULL) == -1);
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_dbus_dispatch(NULL, 0));
  CHECK(s == NULL && p == NULL && n == 0 && u == 0 && i == 0 && !b && d == 0);
}

static void test_values(void) {
  ordo_bus *bus = ordo_bus_new();
  bool b = false;
  int64_t i = 0;
  double d = 0;
  char *s = NULL;
  void *p = NULL;
  size_t n = 0;
  uint64_t txn = 99;
  ordo_type t = ORDO_TYPE_BOOL;
  const unsigned char raw[4] = {0, 0xff, 0, 7};

  CHECK(bus != NULL);
  CHECK(ordo_transaction_id(bus) == 0);

  /* Writes need a transaction. */
  EXPECT(ORDO_E_NO_TRANSACTION, ordo_set_int64(bus, "doc.count", 1));
  EXPECT_MESSAGE("doc.count");
  EXPECT(ORDO_E_NO_TRANSACTION, ordo_touch(bus, "doc.count"));
  EXPECT(ORDO_E_NO_TRANSACTION, ordo_remove(bus, "doc.count"));
  EXPECT(ORDO_E_NO_TRANSACTION, ordo_remove_tree(bus, "doc"));
  EXPECT(ORDO_E_NO_TRANSACTION, ordo_commit(bus, &txn));
  CHECK(txn == 99); /* untouched on failure */
  EXPECT(ORDO_E_NO_TRANSACTION, ordo_rollback(bus));

  OK(ordo_begin(bus));
  OK(ordo_set_bool(bus, "doc.flag", true));
  OK(ordo_set_int64(bus, "doc.count", -42));
  OK(ordo_set_double(bus, "doc.ratio", 0.25));
  OK(ordo_set_string(bus, "doc.title", "Songs \xc3\xa9"));
  OK(ordo_set_string(bus, "doc.empty", ""));
  OK(ordo_set_bytes(bus, "doc.blob", raw, sizeof raw));
  OK(ordo_set_bytes(bus, "doc.none", NULL, 0));
  /* The writer sees its own uncommitted writes. */
  OK(ordo_get_int64(bus, "doc.count", &i));
  CHECK(i == -42);
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 1);
  CHECK(ordo_transaction_id(bus) == 1);

  OK(ordo_get_bool(bus, "doc.flag", &b));
  CHECK(b);
  OK(ordo_get_int64(bus, "doc.count", &i));
  CHECK(i == -42);
  OK(ordo_get_double(bus, "doc.ratio", &d));
  CHECK(d == 0.25);
  OK(ordo_get_string(bus, "doc.title", &s));
  CHECK(s != NULL && strcmp(s, "Songs \xc3\xa9") == 0);
  ordo_free(s);
  s = NULL;
  OK(ordo_get_string(bus, "doc.empty", &s));
  CHECK(s != NULL && s[0] == '\0');
  ordo_free(s);
  s = NULL;
  OK(ordo_get_bytes(bus, "doc.blob", &p, &n));
  CHECK(p != NULL && n == 4 && memcmp(p, raw, 4) == 0);
  ordo_free(p);
  p = NULL;
  n = 99;
  OK(ordo_get_bytes(bus, "doc.none", &p, &n));
  CHECK(p != NULL && n == 0); /* never NULL, even for empty bytes */
  ordo_free(p);
  p = NULL;

  OK(ordo_get_type(bus, "doc.flag", &t));
  CHECK(t == ORDO_TYPE_BOOL);
  OK(ordo_get_type(bus, "doc.count", &t));
  CHECK(t == ORDO_TYPE_INT64);
  OK(ordo_get_type(bus, "doc.ratio", &t));
  CHECK(t == ORDO_TYPE_DOUBLE);
  OK(ordo_get_type(bus, "doc.title", &t));
  CHECK(t == ORDO_TYPE_STRING);
  OK(ordo_get_type(bus, "doc.blob", &t));
  CHECK(t == ORDO_TYPE_BYTES);

  /* Type mismatches name both types; out parameters stay untouched. */
  i = 7;
  EXPECT(ORDO_E_TYPE_MISMATCH, ordo_get_int64(bus, "doc.title", &i));
  EXPECT_MESSAGE("doc.title");
  EXPECT_MESSAGE("string");
  EXPECT_MESSAGE("int64");
  CHECK(i == 7);
  EXPECT(ORDO_E_TYPE_MISMATCH, ordo_get_bool(bus, "doc.count", &b));
  EXPECT(ORDO_E_TYPE_MISMATCH, ordo_get_double(bus, "doc.count", &d));
  EXPECT(ORDO_E_TYPE_MISMATCH, ordo_get_string(bus, "doc.blob", &s));
  CHECK(s == NULL);
  EXPECT(ORDO_E_TYPE_MISMATCH, ordo_get_bytes(bus, "doc.title", &p, &n));
  CHECK(p == NULL && n == 0);

  /* No value. */
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_int64(bus, "doc.missing", &i));
  EXPECT_MESSAGE("doc.missing");
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_type(bus, "doc.missing", &t));
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_bool(bus, "doc", &b));
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_double(bus, "doc.missing", &d));
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_string(bus, "doc.missing", &s));
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_bytes(bus, "doc.missing", &p, &n));

  /* NULL keypaths and out pointers. */
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_int64(bus, NULL, &i));
  EXPECT_MESSAGE("keypath is NULL");
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_int64(bus, "doc.count", NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_bool(bus, "doc.flag", NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_double(bus, "doc.ratio", NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_string(bus, "doc.title", NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_bytes(bus, "doc.blob", NULL, &n));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_bytes(bus, "doc.blob", &p, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_type(bus, "doc.blob", NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_counter(bus, "doc.blob", NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_counter(bus, NULL, &txn));
  CHECK(ordo_counter(bus, NULL) == 0);
  EXPECT_MESSAGE("keypath is NULL");

  OK(ordo_begin(bus));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_int64(bus, NULL, 1));
  EXPECT_MESSAGE("keypath is NULL");
  /* With both arguments bad, the NULL keypath is reported. */
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_string(bus, NULL, NULL));
  EXPECT_MESSAGE("keypath is NULL");
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_string(bus, "doc.title", NULL));
  EXPECT_MESSAGE("doc.title");
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_bytes(bus, "doc.blob", NULL, 3));
  EXPECT_MESSAGE("NULL");
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_bytes(bus, "doc.blob", raw, (size_t)-1));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_touch(bus, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_remove(bus, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_remove_tree(bus, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_bool(bus, NULL, true));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_double(bus, NULL, 1));

  /* Malformed keypaths: the message names the keypath and the position. */
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_set_int64(bus, "doc..count", 1));
  EXPECT_MESSAGE("doc..count");
  EXPECT_MESSAGE("byte 4");
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_set_int64(bus, "", 1));
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_set_int64(bus, "doc.*", 1));
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_set_int64(bus, "doc title", 1));
  EXPECT_MESSAGE("' '");
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_get_int64(bus, "doc.**", &i));
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_get_counter(bus, "a.", &txn));
  CHECK(ordo_counter(bus, ".a") == 0);
  EXPECT_MESSAGE(".a");
  /* Invalid UTF-8: a keypath is INVALID_KEYPATH, a string value
   * INVALID_ARGUMENT; both messages say where. */
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_set_int64(bus, "doc.\xff", 1));
  EXPECT_MESSAGE("UTF-8");
  EXPECT_MESSAGE("\\xff");
  EXPECT_MESSAGE("byte 4");
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_touch(bus, "caf\xc3\xa9"));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_string(bus, "doc.title", "ab\xc3("));
  EXPECT_MESSAGE("UTF-8");
  EXPECT_MESSAGE("byte 2");
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_string(bus, "doc.title", "\xed\xa0\x80")); /* a surrogate */
  /* Nothing of that was written; the transaction is still open and empty. */
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 0);

  /* Counters: one per transaction that changed the keypath. */
  CHECK(ordo_counter(bus, "doc.count") == 1);
  OK(ordo_get_counter(bus, "doc.count", &txn));
  CHECK(txn == 1);
  CHECK(ordo_counter(bus, "never.written") == 0);
  OK(ordo_begin(bus));
  OK(ordo_set_int64(bus, "doc.count", 5));
  OK(ordo_set_int64(bus, "doc.count", 6));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 2);
  CHECK(ordo_counter(bus, "doc.count") == 2);

  /* Equal values are no change; a -> x -> a is no change. */
  OK(ordo_begin(bus));
  OK(ordo_set_int64(bus, "doc.count", 6));
  OK(ordo_set_double(bus, "doc.ratio", 1.0));
  OK(ordo_set_double(bus, "doc.ratio", 0.25));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 0);
  CHECK(ordo_transaction_id(bus) == 2);
  /* Doubles compare bit for bit: -0.0 differs from 0.0, NaN equals itself. */
  OK(ordo_begin(bus));
  OK(ordo_set_double(bus, "doc.zero", 0.0));
  OK(ordo_set_double(bus, "doc.nan", NAN));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 3);
  OK(ordo_begin(bus));
  OK(ordo_set_double(bus, "doc.zero", -0.0));
  OK(ordo_set_double(bus, "doc.nan", NAN));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 4);
  CHECK(ordo_counter(bus, "doc.zero") == 2 && ordo_counter(bus, "doc.nan") == 1);

  /* touch, remove, remove_tree. */
  OK(ordo_begin(bus));
  OK(ordo_touch(bus, "host.value"));
  OK(ordo_remove(bus, "doc.flag"));
  OK(ordo_remove(bus, "doc.never"));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 5);
  CHECK(ordo_counter(bus, "host.value") == 1);
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_type(bus, "host.value", &t));
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_bool(bus, "doc.flag", &b));
  CHECK(ordo_counter(bus, "doc.flag") == 2);
  CHECK(ordo_counter(bus, "doc.never") == 0);
  OK(ordo_begin(bus));
  OK(ordo_remove_tree(bus, "doc"));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 6);
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_string(bus, "doc.title", &s));
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_int64(bus, "doc.count", &i));
  CHECK(ordo_counter(bus, "doc.count") == 3);

  /* Nesting: the pass runs once, at the outermost commit. */
  OK(ordo_begin(bus));
  OK(ordo_begin(bus));
  OK(ordo_set_int64(bus, "n.a", 1));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 0);
  OK(ordo_set_int64(bus, "n.b", 2));
  OK(ordo_commit(bus, NULL));
  CHECK(ordo_transaction_id(bus) == 7);
  CHECK(ordo_counter(bus, "n.a") == 1 && ordo_counter(bus, "n.b") == 1);

  /* Rollback discards the whole outermost transaction. */
  OK(ordo_begin(bus));
  OK(ordo_set_int64(bus, "r.a", 1));
  OK(ordo_begin(bus));
  OK(ordo_set_int64(bus, "n.a", 100));
  OK(ordo_rollback(bus));
  EXPECT(ORDO_E_NO_TRANSACTION, ordo_commit(bus, &txn));
  EXPECT(ORDO_E_NO_TRANSACTION, ordo_rollback(bus));
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_int64(bus, "r.a", &i));
  OK(ordo_get_int64(bus, "n.a", &i));
  CHECK(i == 1);
  CHECK(ordo_counter(bus, "n.a") == 1);
  CHECK(ordo_transaction_id(bus) == 7);

  ordo_bus_free(bus);
}

static void test_register_errors(void) {
  ordo_bus *bus = ordo_bus_new();
  ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
  const char *reads[] = {"doc.a"};
  const char *writes[] = {"doc.b"};
  const char *bad[] = {"doc.a", NULL};
  const char *bad_pattern[] = {"doc.**.x"};
  const char *bad_utf8[] = {"doc.\xc3"};
  uint64_t id = 12345, a_id = 0;
  int data = 0;
  struct {
    ordo_contract_spec spec;
    uint64_t future_field;
  } bigger;

  destroyed = 0;
  spec.reads = reads;
  spec.n_reads = 1;
  spec.callback = nop;
  spec.user_data = &data;
  spec.destroy = count_destroy;

  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, NULL, &id));
  EXPECT_MESSAGE("spec is NULL");
  /* name NULL */
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &spec, &id));
  EXPECT_MESSAGE("name");
  spec.name = "";
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &spec, &id));
  spec.name = "n\xff";
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &spec, &id));
  EXPECT_MESSAGE("UTF-8");
  spec.name = "a";
  spec.callback = NULL;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &spec, &id));
  EXPECT_MESSAGE("callback");
  spec.callback = nop;
  /* size versioning */
  spec.size = (uint32_t)sizeof(spec) - 8;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &spec, &id));
  EXPECT_MESSAGE("size");
  spec.size = 0;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &spec, &id));
  spec.size = (uint32_t)sizeof(spec);
  memset(&bigger, 0, sizeof bigger);
  bigger.spec = spec;
  bigger.spec.size = (uint32_t)sizeof bigger;
  bigger.future_field = 1;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &bigger.spec, &id));
  EXPECT_MESSAGE("unknown");
  bigger.spec.size = 100000;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &bigger.spec, &id));
  spec.flags = 0x80;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &spec, &id));
  EXPECT_MESSAGE("flags");
  spec.flags = 0;
  /* arrays */
  spec.reads = NULL;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &spec, &id));
  EXPECT_MESSAGE("reads");
  spec.reads = bad;
  spec.n_reads = 2;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &spec, &id));
  EXPECT_MESSAGE("reads[1]");
  spec.reads = bad_pattern;
  spec.n_reads = 1;
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_register(bus, &spec, &id));
  EXPECT_MESSAGE("doc.**.x");
  spec.reads = bad_utf8;
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_register(bus, &spec, &id));
  EXPECT_MESSAGE("UTF-8");
  spec.reads = reads;
  spec.writes = NULL;
  spec.n_writes = 1;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &spec, &id));
  EXPECT_MESSAGE("writes");
  spec.writes = bad_pattern;
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_register(bus, &spec, &id));
  /* an every-transaction contract may not write */
  spec.reads = NULL;
  spec.n_reads = 0;
  spec.writes = writes;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_register(bus, &spec, &id));
  CHECK(id == 12345);
  CHECK(destroyed == 0);

  /* A larger struct whose extra bytes are zero is fine; NULL arrays with
   * zero counts are fine; out_id may be NULL. */
  bigger.spec = spec;
  bigger.spec.size = (uint32_t)sizeof bigger;
  bigger.spec.writes = NULL;
  bigger.spec.n_writes = 0;
  bigger.future_field = 0;
  bigger.spec.name = "every";
  OK(ordo_register(bus, &bigger.spec, NULL));

  spec.reads = reads;
  spec.n_reads = 1;
  spec.writes = writes;
  spec.n_writes = 1;
  spec.name = "a";
  OK(ordo_register(bus, &spec, &a_id));
  CHECK(a_id != 0);
  EXPECT(ORDO_E_DUPLICATE_NAME, ordo_register(bus, &spec, &id));
  EXPECT_MESSAGE("\"a\"");

  /* A cycle: a reads doc.a writes doc.b; b reads doc.b writes doc.c;
   * c reads doc.c writes doc.a. The message names all three. */
  {
    const char *rb[] = {"doc.b"}, *wb[] = {"doc.c"};
    const char *rc[] = {"doc.c"}, *wc[] = {"doc.a"};
    spec.name = "b";
    spec.reads = rb;
    spec.writes = wb;
    OK(ordo_register(bus, &spec, &id));
    spec.name = "c";
    spec.reads = rc;
    spec.writes = wc;
    EXPECT(ORDO_E_CYCLE, ordo_register(bus, &spec, &id));
    EXPECT_MESSAGE("\"c\"");
    EXPECT_MESSAGE("a");
    EXPECT_MESSAGE("b");
    CHECK(strstr(ordo_last_error_message(), "a \xe2\x86\x92 b") != NULL ||
          strstr(ordo_last_error_message(), "b \xe2\x86\x92 c") != NULL);
  }
  /* A priority contract may not read what a data contract may write. */
  {
    const char *r[] = {"doc.c"};
    spec.name = "prio";
    spec.reads = r;
    spec.writes = NULL;
    spec.n_writes = 0;
    spec.priority = -1;
    EXPECT(ORDO_E_ORDER_CONFLICT, ordo_register(bus, &spec, &id));
    EXPECT_MESSAGE("prio");
    spec.priority = ORDO_NO_PRIORITY;
  }
  CHECK(destroyed == 0);

  /* Unregister: unknown ids are NOT_FOUND; destroy runs once. */
  EXPECT(ORDO_E_NOT_FOUND, ordo_unregister(bus, 0));
  EXPECT(ORDO_E_NOT_FOUND, ordo_unregister(bus, 999));
  EXPECT_MESSAGE("999");
  OK(ordo_unregister(bus, a_id));
  CHECK(destroyed == 1);
  EXPECT(ORDO_E_NOT_FOUND, ordo_unregister(bus, a_id));
  CHECK(destroyed == 1);
  CHECK(ordo_current_contract(bus) == 0);

  /* Freeing the bus destroys the remaining two ("every" and "b"). */
  ordo_bus_free(bus);
  CHECK(destroyed == 3);
}

/* The D-Bus functions exist and fail cleanly on a bus that is not published
 * (whether or not this build has D-Bus support). */
static void test_dbus(void) {
  ordo_bus *bus = ordo_bus_new();
  CHECK(ordo_dbus_fd(bus) == -1);
  EXPECT(ORDO_E_DBUS, ordo_dbus_dispatch(bus, 0));
  EXPECT(ORDO_E_DBUS, ordo_dbus_publish(bus, "unix:path=/nonexistent/ordo-test/no-socket", NULL));
  CHECK(ordo_dbus_fd(bus) == -1);
  /* A name that is not a D-Bus bus name is refused before anything connects
   * (libdbus itself would abort the process on it). */
  static const char *const bad_names[] = {"", "a", "dev..ordo", ".dev.ordo", "1abc.def", "not a name"};
  for (size_t k = 0; k < sizeof bad_names / sizeof bad_names[0]; k++) {
    EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_dbus_publish(bus, "unix:path=/nonexistent/ordo-test/no-socket", bad_names[k]));
    EXPECT_MESSAGE("is not a D-Bus bus name");
    CHECK(ordo_dbus_fd(bus) == -1);
  }
  ordo_bus_free(bus);
}

int main(void) {
  test_library();
  test_null_bus();
  test_values();
  test_register_errors();
  test_dbus();
  return check_report("test_api");
}
