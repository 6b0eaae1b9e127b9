/* A small Ordo program in C: a model declared by a schema, a normalizer and
 * a view, called once per transaction in priority order.
 *
 *   cc -o example example.c $(pkg-config --cflags --libs ordo)
 */
#include <ordo.h>
#include <stdio.h>
#include <string.h>

/* Normalization (priority -3): keeps doc.title free of leading spaces. */
static void normalize(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  char *title = NULL;
  (void)note;
  (void)user_data;
  if (ordo_get_string(bus, "doc.title", &title) == ORDO_OK) {
    const char *t = title;
    while (*t == ' ') t++;
    if (t != title) ordo_set_string(bus, "doc.title", t); /* same transaction */
    ordo_free(title);
  }
}

/* View content (no priority): runs after every priority contract, once. */
static void show(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  char *title = NULL;
  size_t i;
  printf("%s: txn %llu, changed:", (const char *)user_data, (unsigned long long)note->txn);
  for (i = 0; i < note->n_changed; i++) printf(" %s", note->changed[i]);
  if (ordo_get_string(bus, "doc.title", &title) == ORDO_OK) {
    printf(" -> title \"%s\"", title);
    ordo_free(title);
  }
  printf("\n");
}

static int fail(const char *what, ordo_status st) {
  fprintf(stderr, "%s: %s: %s\n", what, ordo_status_name(st), ordo_last_error_message());
  return 1;
}

/* The model's shape (docs/schema.md): what the bus accepts and the defaults
 * its reads return. */
static const char *schema =
    "{\"ordo-schema\": 1, \"keys\": {"
    "  \"doc.title\": {\"type\": \"string\", \"default\": \"untitled\"},"
    "  \"doc.count\": {\"type\": \"int64\", \"min\": 0, \"default\": 0}}}";

int main(void) {
  ordo_bus *bus = NULL;
  const char *title[] = {"doc.title"};
  const char *doc[] = {"doc.title", "doc.count"};
  ordo_contract_spec normalizer = ORDO_CONTRACT_SPEC_INIT;
  ordo_contract_spec view = ORDO_CONTRACT_SPEC_INIT;
  uint64_t txn = 0;
  ordo_status st;
  char *title0 = NULL;

  if ((st = ordo_bus_new_with_schema(schema, &bus)) != ORDO_OK) return fail("schema", st);
  if (ordo_get_string(bus, "doc.title", &title0) == ORDO_OK) {
    printf("before any write: doc.title = \"%s\" (the schema's default)\n", title0);
    ordo_free(title0);
  }

  normalizer.name = "normalize-title";
  normalizer.reads = title;
  normalizer.n_reads = 1;
  normalizer.writes = title;
  normalizer.n_writes = 1;
  normalizer.priority = -3;
  normalizer.callback = normalize;

  view.name = "title-label";
  view.reads = doc;
  view.n_reads = 2;
  view.callback = show;
  view.user_data = "title-label";

  if ((st = ordo_register(bus, &view, NULL)) != ORDO_OK) return fail("register view", st);
  if ((st = ordo_register(bus, &normalizer, NULL)) != ORDO_OK) return fail("register normalizer", st);

  ordo_begin(bus);
  ordo_set_string(bus, "doc.title", "   Songs");
  ordo_set_int64(bus, "doc.count", 1);
  ordo_set_int64(bus, "doc.count", 2); /* coalesced: one call per transaction */
  if ((st = ordo_commit(bus, &txn)) != ORDO_OK) return fail("commit", st);
  printf("committed txn %llu; doc.title changed %llu time(s)\n", (unsigned long long)txn,
         (unsigned long long)ordo_counter(bus, "doc.title"));

  /* Errors are status codes with a precise, thread-local message. */
  ordo_begin(bus);
  st = ordo_set_int64(bus, "doc.cuont", 3);
  printf("a misspelt keypath: %s: %s\n", ordo_status_name(st), ordo_last_error_message());
  st = ordo_set_int64(bus, "doc.count", -1);
  printf("a value below min: %s: %s\n", ordo_status_name(st), ordo_last_error_message());
  ordo_rollback(bus);
  st = ordo_set_int64(bus, "doc.count", 3);
  printf("write outside a transaction: %s: %s\n", ordo_status_name(st), ordo_last_error_message());

  ordo_bus_free(bus);
  return 0;
}
