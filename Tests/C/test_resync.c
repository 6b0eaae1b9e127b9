/* Resynchronization through the C ABI (ordo.h "Resynchronization"):
 * ordo_changes (values, tombstones, counters, changed-at, the last id, the
 * epoch rule, argument checks) and ordo_get_epoch. Under valgrind. */
#include <ordo.h>

#include "check.h"

#include <stdint.h>

struct seen {
  int n;
  char keys[8][32];
  int has_value[8];
  int64_t ints[8];
  char strs[8][16];
  uint64_t counters[8], changed_at[8];
};

static void on_change(const char *keypath, const ordo_value *value, uint64_t counter, uint64_t changed_at, void *user_data) {
  struct seen *s = user_data;
  if (s->n >= 8) return;
  int i = s->n++;
  snprintf(s->keys[i], sizeof s->keys[i], "%s", keypath);
  s->has_value[i] = value != NULL;
  if (value && value->type == ORDO_TYPE_INT64) s->ints[i] = value->i;
  if (value && value->type == ORDO_TYPE_STRING) snprintf(s->strs[i], sizeof s->strs[i], "%s", value->s);
  s->counters[i] = counter;
  s->changed_at[i] = changed_at;
}

int main(void) {
  ordo_bus *bus = ordo_bus_new();
  EXPECT(ORDO_OK, ordo_begin(bus));
  EXPECT(ORDO_OK, ordo_set_int64(bus, "doc.a", 1));
  EXPECT(ORDO_OK, ordo_set_int64(bus, "doc.b", 2));
  EXPECT(ORDO_OK, ordo_set_string(bus, "other", "x"));
  EXPECT(ORDO_OK, ordo_commit(bus, NULL));
  EXPECT(ORDO_OK, ordo_begin(bus));
  EXPECT(ORDO_OK, ordo_set_int64(bus, "doc.a", 10));
  EXPECT(ORDO_OK, ordo_remove(bus, "doc.b"));
  EXPECT(ORDO_OK, ordo_commit(bus, NULL));

  struct seen s;
  memset(&s, 0, sizeof s);
  const char *all[] = {"**"};
  uint64_t txn = 0;
  EXPECT(ORDO_OK, ordo_changes(bus, 0, all, 1, on_change, &s, &txn));
  CHECK(txn == 2);
  CHECK(s.n == 3);
  /* keypath order: doc.a, doc.b, other */
  CHECK(strcmp(s.keys[0], "doc.a") == 0 && s.has_value[0] && s.ints[0] == 10 && s.counters[0] == 2 && s.changed_at[0] == 2);
  CHECK(strcmp(s.keys[1], "doc.b") == 0 && !s.has_value[1] && s.counters[1] == 2 && s.changed_at[1] == 2);
  CHECK(strcmp(s.keys[2], "other") == 0 && strcmp(s.strs[2], "x") == 0 && s.counters[2] == 1 && s.changed_at[2] == 1);

  memset(&s, 0, sizeof s);
  const char *docs[] = {"doc.*"};
  EXPECT(ORDO_OK, ordo_changes(bus, 1, docs, 1, on_change, &s, NULL));
  CHECK(s.n == 2);
  memset(&s, 0, sizeof s);
  EXPECT(ORDO_OK, ordo_changes(bus, 2, all, 1, on_change, &s, &txn));
  CHECK(s.n == 0 && txn == 2);
  EXPECT(ORDO_OK, ordo_changes(bus, 0, NULL, 0, on_change, &s, &txn));
  CHECK(s.n == 0);

  /* Errors change nothing and call nothing. */
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_changes(bus, 3, all, 1, on_change, &s, &txn));
  CHECK(strstr(ordo_last_error_message(), "another epoch") != NULL);
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_changes(NULL, 0, all, 1, on_change, &s, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_changes(bus, 0, all, 1, NULL, &s, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_changes(bus, 0, NULL, 1, on_change, &s, NULL));
  const char *bad[] = {"a..b"};
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_changes(bus, 0, bad, 1, on_change, &s, NULL));
  CHECK(s.n == 0);

  char *epoch = NULL;
  EXPECT(ORDO_OK, ordo_get_epoch(bus, &epoch));
  CHECK(epoch && strlen(epoch) == 36 && epoch[8] == '-' && epoch[14] == '4');
  ordo_bus *other = ordo_bus_new();
  char *epoch2 = NULL;
  EXPECT(ORDO_OK, ordo_get_epoch(other, &epoch2));
  CHECK(epoch2 && strcmp(epoch, epoch2) != 0);
  ordo_free(epoch);
  ordo_free(epoch2);
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_epoch(bus, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_epoch(NULL, &epoch));
  ordo_bus_free(other);
  ordo_bus_free(bus);
  return check_report("test_resync");
}
