/* ordo_snapshot through the C ABI (ordo.h "Resynchronization"): patterns,
 * values of every type, counters, the id, keypaths without a stored value
 * (a schema default, a removal, a touch), the calling thread's view inside
 * its transaction and inside a callback, the contract's read rule, argument
 * checks. Under valgrind. */
#include <ordo.h>

#include "check.h"

#include <stdint.h>

#define MAX_SEEN 16

struct seen {
  int n;
  char keys[MAX_SEEN][32];
  int has_value[MAX_SEEN];
  ordo_type types[MAX_SEEN];
  bool bools[MAX_SEEN];
  int64_t ints[MAX_SEEN];
  double doubles[MAX_SEEN];
  char strs[MAX_SEEN][16];
  unsigned char bytes[MAX_SEEN][4];
  size_t lens[MAX_SEEN];
  uint64_t counters[MAX_SEEN];
};

static void on_keypath(const char *keypath, const ordo_value *value, uint64_t counter, void *user_data) {
  struct seen *s = user_data;
  if (s->n >= MAX_SEEN) return;
  int i = s->n++;
  snprintf(s->keys[i], sizeof s->keys[i], "%s", keypath);
  s->has_value[i] = value != NULL;
  s->counters[i] = counter;
  if (!value) return;
  s->types[i] = value->type;
  s->bools[i] = value->b;
  s->ints[i] = value->i;
  s->doubles[i] = value->d;
  if (value->type == ORDO_TYPE_STRING) snprintf(s->strs[i], sizeof s->strs[i], "%s", value->s);
  if (value->type == ORDO_TYPE_BYTES && value->len <= sizeof s->bytes[i]) memcpy(s->bytes[i], value->bytes, value->len);
  s->lens[i] = value->len;
}

/* The index of keypath in s, or -1. */
static int find(const struct seen *s, const char *keypath) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->keys[i], keypath) == 0) return i;
  return -1;
}

/* What the callback below saw: a snapshot of its reads during the pass, and
 * the status of one of a keypath outside them. */
struct in_pass {
  int calls;
  uint64_t note_txn, snapshot_txn;
  struct seen items;
  ordo_status outside;
};

static void read_in_pass(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  struct in_pass *p = user_data;
  p->calls++;
  p->note_txn = note->txn;
  memset(&p->items, 0, sizeof p->items);
  const char *items[] = {"doc.items.*"};
  if (ordo_snapshot(bus, items, 1, on_keypath, &p->items, &p->snapshot_txn) != ORDO_OK) p->items.n = -1;
  const char *title[] = {"doc.title"};
  struct seen ignored;
  memset(&ignored, 0, sizeof ignored);
  p->outside = ordo_snapshot(bus, title, 1, on_keypath, &ignored, NULL);
  if (ignored.n) p->outside = ORDO_E_INTERNAL;
}

static const char *schema =
    "{\"ordo-schema\": 1, \"keys\": {"
    "\"doc.title\": {\"type\": \"string\", \"default\": \"untitled\"},"
    "\"doc.note\": {\"type\": \"string\"},"
    "\"doc.count\": {\"type\": \"int64\", \"default\": 0},"
    "\"doc.flag\": {\"type\": \"bool\"},"
    "\"doc.ratio\": {\"type\": \"double\"},"
    "\"doc.blob\": {\"type\": \"bytes\"},"
    "\"doc.items.*\": {\"type\": \"string\"},"
    "\"ui.refresh\": {\"type\": \"event\"}}}";

int main(void) {
  ordo_bus *bus = NULL;
  OK(ordo_bus_new_with_schema(schema, &bus));
  const char *all[] = {"**"};
  struct seen s;
  uint64_t txn = 99;

  /* Declared keypaths without a stored value (with or without a default)
   * are not reported. */
  memset(&s, 0, sizeof s);
  OK(ordo_snapshot(bus, all, 1, on_keypath, &s, &txn));
  CHECK(s.n == 0 && txn == 0);

  OK(ordo_begin(bus));
  OK(ordo_set_string(bus, "doc.title", "Songs"));
  OK(ordo_set_int64(bus, "doc.count", 3));
  OK(ordo_set_bool(bus, "doc.flag", true));
  OK(ordo_set_double(bus, "doc.ratio", 0.5));
  OK(ordo_set_bytes(bus, "doc.blob", "\0\xff", 2));
  OK(ordo_set_string(bus, "doc.items.a", "Intro"));
  OK(ordo_set_string(bus, "doc.items.b", "Verse"));
  OK(ordo_commit(bus, NULL));
  OK(ordo_begin(bus));
  OK(ordo_set_int64(bus, "doc.count", 4));
  OK(ordo_remove(bus, "doc.items.b"));
  OK(ordo_touch(bus, "ui.refresh"));
  OK(ordo_commit(bus, NULL));

  /* Every matching keypath once, in keypath order, with its value (NULL for
   * a removal and an event) and counter. */
  memset(&s, 0, sizeof s);
  const char *doc_and_ui[] = {"doc.**", "ui.*", "doc.items.a"};
  OK(ordo_snapshot(bus, doc_and_ui, 3, on_keypath, &s, &txn));
  CHECK(txn == 2);
  CHECK(s.n == 8);
  const char *order[] = {"doc.blob", "doc.count", "doc.flag", "doc.items.a", "doc.items.b", "doc.ratio", "doc.title",
                         "ui.refresh"};
  for (int i = 0; i < 8 && i < s.n; i++) CHECK(strcmp(s.keys[i], order[i]) == 0);
  int i = find(&s, "doc.blob");
  CHECK(i >= 0 && s.has_value[i] && s.types[i] == ORDO_TYPE_BYTES && s.lens[i] == 2 && s.bytes[i][0] == 0 &&
        s.bytes[i][1] == 0xff && s.counters[i] == 1);
  i = find(&s, "doc.count");
  CHECK(i >= 0 && s.has_value[i] && s.types[i] == ORDO_TYPE_INT64 && s.ints[i] == 4 && s.counters[i] == 2);
  i = find(&s, "doc.flag");
  CHECK(i >= 0 && s.has_value[i] && s.types[i] == ORDO_TYPE_BOOL && s.bools[i] && s.counters[i] == 1);
  i = find(&s, "doc.items.a");
  CHECK(i >= 0 && s.has_value[i] && s.types[i] == ORDO_TYPE_STRING && strcmp(s.strs[i], "Intro") == 0 &&
        s.lens[i] == 5 && s.counters[i] == 1);
  i = find(&s, "doc.items.b");
  CHECK(i >= 0 && !s.has_value[i] && s.counters[i] == 2);
  i = find(&s, "doc.ratio");
  CHECK(i >= 0 && s.has_value[i] && s.types[i] == ORDO_TYPE_DOUBLE && s.doubles[i] == 0.5 && s.counters[i] == 1);
  i = find(&s, "doc.title");
  CHECK(i >= 0 && s.has_value[i] && strcmp(s.strs[i], "Songs") == 0);
  i = find(&s, "ui.refresh");
  CHECK(i >= 0 && !s.has_value[i] && s.counters[i] == 1);
  CHECK(find(&s, "doc.note") < 0);

  /* Patterns narrow it; no patterns (NULL with 0), nothing; out_txn may be NULL. */
  memset(&s, 0, sizeof s);
  const char *items[] = {"doc.items.*"};
  OK(ordo_snapshot(bus, items, 1, on_keypath, &s, NULL));
  CHECK(s.n == 2 && find(&s, "doc.items.a") == 0 && find(&s, "doc.items.b") == 1);
  memset(&s, 0, sizeof s);
  txn = 99;
  OK(ordo_snapshot(bus, NULL, 0, on_keypath, &s, &txn));
  CHECK(s.n == 0 && txn == 2);

  /* The calling thread's open transaction: its writes, counter 0 for a
   * value never committed; the id is still the last committed one. */
  OK(ordo_begin(bus));
  OK(ordo_set_string(bus, "doc.items.c", "Chorus"));
  OK(ordo_set_string(bus, "doc.items.b", "Bridge"));
  OK(ordo_remove(bus, "doc.items.a"));
  memset(&s, 0, sizeof s);
  OK(ordo_snapshot(bus, items, 1, on_keypath, &s, &txn));
  CHECK(txn == 2 && s.n == 3);
  i = find(&s, "doc.items.a");
  CHECK(i >= 0 && !s.has_value[i] && s.counters[i] == 1);
  i = find(&s, "doc.items.b");
  CHECK(i >= 0 && s.has_value[i] && strcmp(s.strs[i], "Bridge") == 0 && s.counters[i] == 2);
  i = find(&s, "doc.items.c");
  CHECK(i >= 0 && s.has_value[i] && strcmp(s.strs[i], "Chorus") == 0 && s.counters[i] == 0);
  OK(ordo_rollback(bus));

  /* Inside a callback: the pass's values and id (counters rise when the
   * pass ends), and the contract's read rule. */
  struct in_pass p;
  memset(&p, 0, sizeof p);
  const char *reads[] = {"doc.items.*"};
  ordo_contract_spec spec = {sizeof spec, "items", reads, 1, NULL, 0, ORDO_NO_PRIORITY, 0, read_in_pass, &p, NULL};
  uint64_t id = 0;
  OK(ordo_register(bus, &spec, &id));
  OK(ordo_begin(bus));
  OK(ordo_set_string(bus, "doc.items.a", "Outro"));
  OK(ordo_commit(bus, &txn));
  CHECK(p.calls == 1 && txn == 3 && p.note_txn == 3 && p.snapshot_txn == 3);
  i = find(&p.items, "doc.items.a");
  CHECK(p.items.n == 2 && i >= 0 && strcmp(p.items.strs[i], "Outro") == 0 && p.items.counters[i] == 1);
  CHECK(p.outside == ORDO_E_CONTRACT_VIOLATION);
  OK(ordo_unregister(bus, id));
  CHECK(ordo_counter(bus, "doc.items.a") == 2);

  /* Misuse: an error, a message, and no call. */
  memset(&s, 0, sizeof s);
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_snapshot(NULL, all, 1, on_keypath, &s, &txn));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_snapshot(bus, all, 1, NULL, &s, &txn));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_snapshot(bus, NULL, 1, on_keypath, &s, &txn));
  const char *null_pattern[] = {"doc.**", NULL};
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_snapshot(bus, null_pattern, 2, on_keypath, &s, &txn));
  EXPECT_MESSAGE("patterns[1] is NULL");
  const char *bad[] = {"doc.**", "a..b"};
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_snapshot(bus, bad, 2, on_keypath, &s, &txn));
  CHECK(s.n == 0);

  ordo_bus_free(bus);
  return check_report("test_snapshot");
}
