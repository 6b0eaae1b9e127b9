/* SPEC §14 through the C ABI: buses made with a schema (text and file), the
 * schema read back, every write kind refused with ORDO_E_SCHEMA or
 * ORDO_E_TYPE_MISMATCH and nothing changed, handles, registration, defaults
 * and ordo_is_stored. Run under valgrind by Tests/C/run.sh. */
#include <stdint.h>

#include "check.h"

static const char *schema_text =
    "{\"ordo-schema\": 1, \"keys\": {"
    " \"playlist.title\": {\"type\": \"string\", \"default\": \"\", \"max-length\": 8},"
    " \"playlist.tracks.*.duration\": {\"type\": \"int64\", \"min\": 0, \"default\": 0},"
    " \"playlist.total\": {\"type\": \"int64\", \"min\": 0, \"default\": 0},"
    " \"playlist.mode\": {\"type\": \"string\", \"choices\": [\"list\", \"grid\"], \"default\": \"list\"},"
    " \"ui.refresh\": {\"type\": \"event\"}}}";

static int calls = 0;
static void count(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  (void)bus, (void)note, (void)user_data;
  calls++;
}

static void refused_schemas(void) {
  ordo_bus *bus = NULL;
  EXPECT(ORDO_E_SCHEMA, ordo_bus_new_with_schema("{\"ordo-schema\": 1, \"keys\": {\"a\": {\"type\": \"float\"}}}", &bus));
  EXPECT_MESSAGE("schema entry \"a\": unknown type \"float\"");
  CHECK(bus == NULL);
  EXPECT(ORDO_E_SCHEMA, ordo_bus_new_with_schema("{", &bus));
  EXPECT_MESSAGE("JSON error at byte");
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_bus_new_with_schema(NULL, &bus));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_bus_new_with_schema(schema_text, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_bus_new_with_schema_file("/nonexistent/schema.json", &bus));
  EXPECT_MESSAGE("/nonexistent/schema.json");
  CHECK(bus == NULL);
  CHECK(strcmp(ordo_status_name(ORDO_E_SCHEMA), "ORDO_E_SCHEMA") == 0);
  CHECK(strcmp(ordo_status_name(ORDO_E_CONFLICT), "ORDO_E_CONFLICT") == 0);
}

static void from_file(void) {
  char path[] = "/tmp/ordo-schema-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs(schema_text, f);
  fclose(f);
  ordo_bus *bus = NULL;
  OK(ordo_bus_new_with_schema_file(path, &bus));
  char *text = NULL;
  OK(ordo_schema_json(bus, &text));
  CHECK(text != NULL && strstr(text, "\"playlist.mode\": {\"type\": \"string\", \"default\": \"list\"") != NULL);
  ordo_free(text);
  ordo_bus_free(bus);
  remove(path);
  /* A file that does not validate names the file. */
  strcpy(path, "/tmp/ordo-schema-XXXXXX");
  fd = mkstemp(path);
  CHECK(fd >= 0);
  f = fdopen(fd, "w");
  fputs("{\"ordo-schema\": 1, \"keys\": {\"a.**\": {\"type\": \"int64\"}}}", f);
  fclose(f);
  bus = NULL;
  EXPECT(ORDO_E_SCHEMA, ordo_bus_new_with_schema_file(path, &bus));
  EXPECT_MESSAGE(path);
  EXPECT_MESSAGE("'**' may not appear");
  CHECK(bus == NULL);
  remove(path);
}

static void enforced(void) {
  ordo_bus *bus = NULL;
  OK(ordo_bus_new_with_schema(schema_text, &bus));
  /* A bus without a schema reads back NULL. */
  ordo_bus *plain = ordo_bus_new();
  char *text = (char *)"x";
  OK(ordo_schema_json(plain, &text));
  CHECK(text == NULL);
  ordo_bus_free(plain);

  /* Registration. */
  const char *typo[] = {"playlist.tracks.*.duratoin"};
  ordo_contract_spec spec = {sizeof spec, "typo", typo, 1, NULL, 0, ORDO_NO_PRIORITY, 0, count, NULL, NULL};
  uint64_t id = 0;
  EXPECT(ORDO_E_SCHEMA, ordo_register(bus, &spec, &id));
  EXPECT_MESSAGE("did you mean \"playlist.tracks.*.duration\"?");
  const char *reads[] = {"playlist.**"};
  spec.reads = reads;
  OK(ordo_register(bus, &spec, &id));

  /* Defaults. */
  char *s = NULL;
  OK(ordo_get_string(bus, "playlist.mode", &s));
  CHECK(s != NULL && strcmp(s, "list") == 0);
  ordo_free(s);
  bool stored = true;
  OK(ordo_is_stored(bus, "playlist.mode", &stored));
  CHECK(!stored);
  int64_t n = -1;
  OK(ordo_get_int64(bus, "playlist.tracks.t1.duration", &n));
  CHECK(n == 0);

  /* Writes. */
  OK(ordo_begin(bus));
  EXPECT(ORDO_E_SCHEMA, ordo_set_string(bus, "playlist.titel", "x"));
  EXPECT_MESSAGE("did you mean \"playlist.title\"?");
  EXPECT(ORDO_E_TYPE_MISMATCH, ordo_set_string(bus, "playlist.total", "3"));
  EXPECT(ORDO_E_SCHEMA, ordo_set_int64(bus, "playlist.total", -1));
  EXPECT(ORDO_E_SCHEMA, ordo_set_string(bus, "playlist.mode", "tile"));
  EXPECT(ORDO_E_SCHEMA, ordo_set_string(bus, "playlist.title", "123456789"));
  EXPECT(ORDO_E_SCHEMA, ordo_set_bool(bus, "ui.refresh", true));
  EXPECT(ORDO_E_SCHEMA, ordo_touch(bus, "ui.refresh2"));
  EXPECT(ORDO_E_SCHEMA, ordo_remove(bus, "playlist.nothing"));
  EXPECT(ORDO_E_SCHEMA, ordo_remove_tree(bus, "playlist.trucks"));
  OK(ordo_touch(bus, "ui.refresh"));
  OK(ordo_set_string(bus, "playlist.mode", "grid"));

  /* Handles: declared keypaths and their prefixes only; writes checked. */
  ordo_handle *h = NULL;
  EXPECT(ORDO_E_SCHEMA, ordo_resolve(bus, "playlist.totl", &h));
  CHECK(h == NULL);
  OK(ordo_resolve(bus, "playlist.total", &h));
  EXPECT(ORDO_E_SCHEMA, ordo_handle_set_int64(h, -3));
  EXPECT(ORDO_E_TYPE_MISMATCH, ordo_handle_set_double(h, 1.0));
  OK(ordo_handle_set_int64(h, 4));
  ordo_handle *element = NULL;
  OK(ordo_resolve(bus, "playlist.tracks.t1", &element));
  EXPECT(ORDO_E_SCHEMA, ordo_handle_set_int64(element, 1));
  uint64_t txn = 0;
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 1);
  CHECK(calls == 1);
  OK(ordo_get_int64(bus, "playlist.total", &n));
  CHECK(n == 4);
  OK(ordo_is_stored(bus, "playlist.total", &stored));
  CHECK(stored);
  CHECK(ordo_counter(bus, "playlist.titel") == 0);
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_is_stored(bus, "playlist.total", NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_is_stored(NULL, "playlist.total", &stored));
  ordo_bus_free(bus);
}

int main(void) {
  refused_schemas();
  from_file();
  enforced();
  return check_report("test_schema");
}
