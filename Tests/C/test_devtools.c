/* Devtools through the C ABI (ordo.h "Devtools"): ordo_get_contract_info
 * (unused reads and writes included), ordo_set_trace (order, because,
 * writes, refused writes, skipped contracts) and ordo_lint (findings in
 * pass order, with an example keypath). Under valgrind: the info block
 * is freed with one ordo_free, trace memory is the library's. */
#include <ordo.h>

#include "check.h"

#include <stdint.h>

static int has(const char *const *list, size_t n, const char *s) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(list[i], s) == 0) return 1;
  return 0;
}

static void norm_cb(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  (void)note;
  (void)user_data;
  int64_t v;
  ordo_get_int64(bus, "doc.count", &v);         /* reads one of its two read patterns */
  ordo_set_string(bus, "doc.title", "old");     /* writes the title back */
  ordo_set_int64(bus, "elsewhere", 1);          /* refused: outside its write set */
}

static int view_calls = 0;
static void view_cb(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  (void)bus;
  (void)note;
  (void)user_data;
  view_calls++;
}

struct seen {
  int traces;
  uint64_t txn;
  int committed;
  size_t n_steps;
  char names[8][32];
  ordo_trace_outcome outcomes[8];
  int norm_because_title, norm_wrote_title, norm_refused_elsewhere, log_because_count;
};

static void trace_cb(ordo_bus *bus, const ordo_trace *t, void *user_data) {
  (void)bus;
  struct seen *s = user_data;
  s->traces++;
  s->txn = t->txn;
  s->committed = t->committed;
  s->n_steps = t->n_steps;
  for (size_t i = 0; i < t->n_steps && i < 8; i++) {
    const ordo_trace_step *st = &t->steps[i];
    snprintf(s->names[i], sizeof s->names[i], "%s", st->name);
    s->outcomes[i] = st->outcome;
    if (strcmp(st->name, "norm") == 0) {
      s->norm_because_title = has(st->because, st->n_because, "doc.title");
      s->norm_wrote_title = has(st->writes, st->n_writes, "doc.title");
      s->norm_refused_elsewhere = st->n_refused == 1 && strncmp(st->refused[0], "elsewhere: CONTRACT_VIOLATION", 29) == 0;
    }
    if (strcmp(st->name, "log") == 0) s->log_because_count = has(st->because, st->n_because, "doc.count");
    if (st->outcome == ORDO_TRACE_CALLED) CHECK(st->failure == NULL);
  }
}

struct findings {
  size_t n;
  char lines[4][96];
  int message_names_both;
};

static void lint_cb(const ordo_lint_finding *f, void *user_data) {
  struct findings *s = user_data;
  if (s->n < 4) snprintf(s->lines[s->n], sizeof s->lines[s->n], "%s %s %s %s %s", f->earlier, f->reads, f->later, f->writes, f->keypath);
  s->n++;
  s->message_names_both = strstr(f->message, f->earlier) != NULL && strstr(f->message, f->later) != NULL &&
                          strstr(f->message, "STABILITY") != NULL;
}

/* ordo_lint: a later contract's wildcard write pattern that may write what
 * an earlier contract reads is found before any pass runs into it. */
static void test_lint(void) {
  ordo_bus *bus = ordo_bus_new();
  const char *header_reads[] = {"ui.title"};
  const char *layout_reads[] = {"doc.layout"};
  const char *layout_writes[] = {"ui.**"};
  /* Priority contracts: header first; layout may write all of ui. */
  ordo_contract_spec header = {sizeof(ordo_contract_spec), "header", header_reads, 1, NULL, 0, 1, 0, view_cb, NULL, NULL};
  ordo_contract_spec layout = {sizeof(ordo_contract_spec), "layout", layout_reads, 1, layout_writes, 1, 2, 0, view_cb, NULL, NULL};
  struct findings found;
  size_t count = 99;

  memset(&found, 0, sizeof found);
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_lint(NULL, lint_cb, &found, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_lint(bus, NULL, &found, NULL));
  EXPECT(ORDO_OK, ordo_lint(bus, lint_cb, &found, &count));
  CHECK(count == 0 && found.n == 0);

  EXPECT(ORDO_OK, ordo_register(bus, &header, NULL));
  EXPECT(ORDO_OK, ordo_register(bus, &layout, NULL));

  EXPECT(ORDO_OK, ordo_lint(bus, lint_cb, &found, &count));
  CHECK(count == 1 && found.n == 1);
  CHECK(strcmp(found.lines[0], "header ui.title layout ui.** ui.title") == 0);
  CHECK(found.message_names_both);
  ordo_bus_free(bus);
}

int main(void) {
  ordo_bus *bus = ordo_bus_new();
  const char *norm_reads[] = {"doc.title", "doc.count"};
  const char *norm_writes[] = {"doc.title", "doc.sub.*"};
  ordo_contract_spec norm = ORDO_CONTRACT_SPEC_INIT;
  norm.name = "norm";
  norm.reads = norm_reads;
  norm.n_reads = 2;
  norm.writes = norm_writes;
  norm.n_writes = 2;
  norm.priority = -3;
  norm.callback = norm_cb;
  uint64_t norm_id = 0;
  EXPECT(ORDO_OK, ordo_register(bus, &norm, &norm_id));

  const char *view_reads[] = {"doc.title"};
  ordo_contract_spec view = ORDO_CONTRACT_SPEC_INIT;
  view.name = "view";
  view.reads = view_reads;
  view.n_reads = 1;
  view.callback = view_cb;
  EXPECT(ORDO_OK, ordo_register(bus, &view, NULL));
  ordo_contract_spec log = ORDO_CONTRACT_SPEC_INIT;
  log.name = "log";
  log.callback = view_cb;
  uint64_t log_id = 0;
  EXPECT(ORDO_OK, ordo_register(bus, &log, &log_id));

  EXPECT(ORDO_OK, ordo_begin(bus));
  EXPECT(ORDO_OK, ordo_set_string(bus, "doc.title", "old"));
  EXPECT(ORDO_OK, ordo_commit(bus, NULL));

  /* Argument checks. */
  ordo_contract_info *info = NULL;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_contract_info(NULL, norm_id, &info));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_get_contract_info(bus, norm_id, NULL));
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_contract_info(bus, 999, &info));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_set_trace(NULL, trace_cb, NULL));

  struct seen seen;
  memset(&seen, 0, sizeof seen);
  EXPECT(ORDO_OK, ordo_set_trace(bus, trace_cb, &seen));
  view_calls = 0;
  EXPECT(ORDO_OK, ordo_begin(bus));
  EXPECT(ORDO_OK, ordo_set_string(bus, "doc.title", "new"));
  EXPECT(ORDO_OK, ordo_set_int64(bus, "doc.count", 1));
  uint64_t txn = 0;
  EXPECT(ORDO_OK, ordo_commit(bus, &txn));
  CHECK(txn == 2);
  CHECK(seen.traces == 1);
  CHECK(seen.txn == 2);
  CHECK(seen.committed);
  CHECK(seen.n_steps == 3);
  CHECK(strcmp(seen.names[0], "norm") == 0 && seen.outcomes[0] == ORDO_TRACE_CALLED);
  CHECK(strcmp(seen.names[1], "view") == 0 && seen.outcomes[1] == ORDO_TRACE_UNCHANGED);
  CHECK(strcmp(seen.names[2], "log") == 0 && seen.outcomes[2] == ORDO_TRACE_CALLED);
  CHECK(seen.norm_because_title);
  CHECK(seen.norm_wrote_title);
  CHECK(seen.norm_refused_elsewhere);
  CHECK(seen.log_because_count);
  CHECK(view_calls == 1); /* only log */

  /* Usage: norm read doc.count and wrote doc.title, never read doc.title
   * through the bus nor wrote doc.sub.*. */
  EXPECT(ORDO_OK, ordo_get_contract_info(bus, norm_id, &info));
  CHECK(info->size == sizeof(ordo_contract_info));
  CHECK(info->id == norm_id);
  CHECK(strcmp(info->name, "norm") == 0);
  CHECK(info->kind == ORDO_KIND_PRIORITY && info->priority == -3);
  CHECK(info->position == 0);
  CHECK(info->calls == 2 && info->last_txn == 2);
  CHECK(info->n_reads == 2 && has(info->reads, info->n_reads, "doc.count"));
  CHECK(info->n_writes == 2 && has(info->writes, info->n_writes, "doc.sub.*"));
  CHECK(info->n_unused_reads == 1 && strcmp(info->unused_reads[0], "doc.title") == 0);
  CHECK(info->n_unused_writes == 1 && strcmp(info->unused_writes[0], "doc.sub.*") == 0);
  CHECK(info->reads[info->n_reads] == NULL);
  ordo_free(info);
  EXPECT(ORDO_OK, ordo_get_contract_info(bus, log_id, &info));
  CHECK(info->kind == ORDO_KIND_EVERY_TRANSACTION && info->priority == ORDO_NO_PRIORITY && info->n_reads == 0);
  ordo_free(info);

  /* Off again: no more traces. */
  EXPECT(ORDO_OK, ordo_set_trace(bus, NULL, NULL));
  EXPECT(ORDO_OK, ordo_begin(bus));
  EXPECT(ORDO_OK, ordo_set_int64(bus, "doc.count", 2));
  EXPECT(ORDO_OK, ordo_commit(bus, NULL));
  CHECK(seen.traces == 1);
  ordo_bus_free(bus);
  test_lint();
  return check_report("test_devtools");
}
