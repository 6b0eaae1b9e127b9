/* Contracts through the C ABI: the SPEC's seed ordering, notifications,
 * re-entrant callbacks (read, write within the contract, the runtime rules,
 * register and unregister from a callback), ORDO_NOTIFY_INITIAL inside and
 * outside a pass, destroy exactly once, and several threads. */
#define _POSIX_C_SOURCE 200809L
#include <ordo.h>

#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* A call log and a generic contract                                         */
/* ------------------------------------------------------------------------ */

typedef struct contract contract;
typedef void (*action_fn)(ordo_bus *bus, const ordo_notification *note, contract *self);

struct contract {
  const char *name;
  uint64_t id;
  int calls;
  int destroyed;
  action_fn action;
  void *extra;
};

static char call_log[4096];

/* Appends "name[k1,k2]" (changed keypaths sorted) to the log. */
static void log_call(const char *name, const ordo_notification *note) {
  const char *sorted[32];
  size_t i, j, n = note->n_changed < 32 ? note->n_changed : 32;
  CHECK(note->changed != NULL);
  CHECK(note->changed[note->n_changed] == NULL);
  for (i = 0; i < n; i++) sorted[i] = note->changed[i];
  for (i = 1; i < n; i++)
    for (j = i; j > 0 && strcmp(sorted[j - 1], sorted[j]) > 0; j--) {
      const char *t = sorted[j];
      sorted[j] = sorted[j - 1];
      sorted[j - 1] = t;
    }
  if (call_log[0]) strcat(call_log, " ");
  strcat(call_log, name);
  strcat(call_log, "[");
  for (i = 0; i < n; i++) {
    if (i) strcat(call_log, ",");
    strcat(call_log, sorted[i]);
  }
  strcat(call_log, "]");
}

/* The calls logged since the last check must be exactly `want`. */
#define EXPECT_CALLS(want)                                                        \
  do {                                                                            \
    check_count++;                                                                \
    if (strcmp(call_log, (want)) != 0) {                                          \
      check_failures++;                                                           \
      fprintf(stderr, "%s:%d: calls were\n  %s\nexpected\n  %s\n", __FILE__,      \
              __LINE__, call_log, (want));                                        \
    }                                                                             \
    call_log[0] = '\0';                                                           \
  } while (0)

static void on_notify(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  contract *c = (contract *)user_data;
  log_call(c->name, note);
  c->calls++;
  CHECK(c->destroyed == 0);
  CHECK(ordo_current_contract(bus) == note->contract);
  if (c->id) CHECK(note->contract == c->id);
  if (c->action) c->action(bus, note, c);
}

static void on_destroy(void *user_data) { ((contract *)user_data)->destroyed++; }

/* Registers c; returns the status and fills c->id on success. */
static ordo_status reg(ordo_bus *bus, contract *c, const char *const *reads, size_t n_reads,
                       const char *const *writes, size_t n_writes, int32_t priority, uint32_t flags) {
  ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
  uint64_t id = 0;
  ordo_status st;
  spec.name = c->name;
  spec.reads = reads;
  spec.n_reads = n_reads;
  spec.writes = writes;
  spec.n_writes = n_writes;
  spec.priority = priority;
  spec.flags = flags;
  spec.callback = on_notify;
  spec.user_data = c;
  spec.destroy = on_destroy;
  st = ordo_register(bus, &spec, &id);
  if (st == ORDO_OK) {
    CHECK(id != 0);
    c->id = id;
  }
  return st;
}

#define LIST(...) (const char *const[]){__VA_ARGS__}, (sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))
#define NONE NULL, 0
#define DATA ORDO_NO_PRIORITY

static char *get_string(ordo_bus *bus, const char *k) {
  char *s = NULL;
  OK(ordo_get_string(bus, k, &s));
  return s;
}

/* ------------------------------------------------------------------------ */
/* The seed ordering (SPEC §4, Origin)                                       */
/* ------------------------------------------------------------------------ */

static void normalize(ordo_bus *bus, const ordo_notification *note, contract *self) {
  (void)note;
  (void)self;
  OK(ordo_set_string(bus, "doc.items", "a,b"));
}
static void coordinate(ordo_bus *bus, const ordo_notification *note, contract *self) {
  (void)note;
  (void)self;
  OK(ordo_set_string(bus, "ui.layout", "grid"));
}
static void compute(ordo_bus *bus, const ordo_notification *note, contract *self) {
  char *items = get_string(bus, "doc.items");
  (void)note;
  (void)self;
  /* The normalizer's write is visible: its output is stable. */
  CHECK(items && strcmp(items, "a,b") == 0);
  ordo_free(items);
  OK(ordo_set_int64(bus, "doc.count", 2));
}
static void root_view(ordo_bus *bus, const ordo_notification *note, contract *self) {
  (void)note;
  (void)self;
  OK(ordo_set_int64(bus, "ui.panels", 3));
}
static void summarize(ordo_bus *bus, const ordo_notification *note, contract *self) {
  int64_t n = 0;
  (void)note;
  (void)self;
  OK(ordo_get_int64(bus, "doc.count", &n));
  OK(ordo_set_int64(bus, "doc.summary", n * 10));
}

static void test_seed_order(void) {
  ordo_bus *bus = ordo_bus_new();
  contract content = {"content", 0, 0, 0, NULL, NULL};
  contract summary_view = {"summary-view", 0, 0, 0, NULL, NULL};
  contract child = {"child-view", 0, 0, 0, NULL, NULL};
  contract root = {"root-view", 0, 0, 0, root_view, NULL};
  contract computed = {"computed", 0, 0, 0, compute, NULL};
  contract coord = {"coordinate", 0, 0, 0, coordinate, NULL};
  contract norm = {"normalize", 0, 0, 0, normalize, NULL};
  contract summary = {"summary", 0, 0, 0, summarize, NULL};
  uint64_t txn = 0;
  int64_t n = 0;

  /* Registered in an order unlike the pass order. */
  OK(reg(bus, &content, LIST("doc.count", "doc.title"), NONE, DATA, 0));
  OK(reg(bus, &summary_view, LIST("doc.summary"), NONE, DATA, 0));
  OK(reg(bus, &child, LIST("ui.panels"), NONE, 2, 0));
  OK(reg(bus, &root, LIST("ui.layout"), LIST("ui.panels"), 1, 0));
  OK(reg(bus, &computed, LIST("doc.items"), LIST("doc.count"), -1, 0));
  OK(reg(bus, &coord, LIST("doc.items", "doc.mode"), LIST("ui.layout"), -2, 0));
  OK(reg(bus, &norm, LIST("doc.items"), LIST("doc.items"), -3, 0));
  OK(reg(bus, &summary, LIST("doc.count"), LIST("doc.summary"), DATA, 0));

  OK(ordo_begin(bus));
  OK(ordo_set_string(bus, "doc.items", "b,a,a"));
  OK(ordo_set_string(bus, "doc.title", "Songs"));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 1);
  /* normalization -> coordination -> computed data -> view hierarchy (by
   * depth) -> view content (data contracts by level: summary-view, which
   * reads what summary writes, comes after it). */
  EXPECT_CALLS("normalize[doc.items] coordinate[doc.items] computed[doc.items] root-view[ui.layout] "
               "child-view[ui.panels] content[doc.count,doc.title] summary[doc.count] "
               "summary-view[doc.summary]");
  OK(ordo_get_int64(bus, "doc.summary", &n));
  CHECK(n == 20);
  CHECK(ordo_counter(bus, "doc.items") == 1);

  OK(ordo_begin(bus));
  OK(ordo_set_string(bus, "doc.title", "Albums"));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 2);
  EXPECT_CALLS("content[doc.title]");

  OK(ordo_begin(bus));
  OK(ordo_set_string(bus, "doc.mode", "edit"));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 3);
  EXPECT_CALLS("coordinate[doc.mode]");

  /* The normalizer restoring the old value cancels the change: the
   * transaction keeps its id and the contracts after it are not called. */
  OK(ordo_begin(bus));
  OK(ordo_set_string(bus, "doc.items", "b,a"));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 4);
  EXPECT_CALLS("normalize[doc.items]");
  CHECK(ordo_counter(bus, "doc.items") == 1);

  ordo_bus_free(bus);
  CHECK(content.destroyed == 1 && summary_view.destroyed == 1 && child.destroyed == 1 && root.destroyed == 1 &&
        computed.destroyed == 1 && coord.destroyed == 1 && norm.destroyed == 1 && summary.destroyed == 1);
}

/* ------------------------------------------------------------------------ */
/* Re-entrant callbacks and the runtime rules (SPEC §5)                      */
/* ------------------------------------------------------------------------ */

static void strict_normalizer(ordo_bus *bus, const ordo_notification *note, contract *self) {
  char *title = get_string(bus, "doc.title");
  char *slug = NULL;
  int64_t i = 5;
  uint64_t txn = 9, counter = 9;
  (void)self;
  CHECK(note->n_changed == 1 && strcmp(note->changed[0], "doc.title") == 0);
  CHECK(ordo_transaction_id(bus) == note->txn);

  /* Reads outside the read and write sets. */
  EXPECT(ORDO_E_CONTRACT_VIOLATION, ordo_get_int64(bus, "other.x", &i));
  EXPECT_MESSAGE("strict");
  EXPECT_MESSAGE("other.x");
  CHECK(i == 5);
  EXPECT(ORDO_E_CONTRACT_VIOLATION, ordo_get_counter(bus, "other.x", &counter));
  CHECK(counter == 9);
  CHECK(ordo_counter(bus, "other.x") == 0);
  EXPECT_MESSAGE("other.x");
  /* Reading a keypath of the write set is allowed (it holds no value yet). */
  EXPECT(ORDO_E_NOT_FOUND, ordo_get_string(bus, "doc.slug", &slug));
  CHECK(slug == NULL);
  /* Writes outside the write set. */
  EXPECT(ORDO_E_CONTRACT_VIOLATION, ordo_set_int64(bus, "other.x", 1));
  EXPECT_MESSAGE("strict");
  EXPECT(ORDO_E_CONTRACT_VIOLATION, ordo_touch(bus, "other.x"));
  EXPECT(ORDO_E_CONTRACT_VIOLATION, ordo_remove(bus, "other.x"));
  /* remove_tree needs a pattern covering the whole tree. */
  EXPECT(ORDO_E_CONTRACT_VIOLATION, ordo_remove_tree(bus, "doc"));
  EXPECT_MESSAGE("doc.**");
  /* A pass cannot be undone; begin/commit join it. */
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_rollback(bus));
  EXPECT_MESSAGE("rollback");
  OK(ordo_begin(bus));
  OK(ordo_set_string(bus, "doc.slug", "songs"));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 0);
  /* Write within the contract. */
  CHECK(title != NULL);
  if (title && strcmp(title, "  Songs") == 0) OK(ordo_set_string(bus, "doc.title", "Songs"));
  ordo_free(title);
}

static void late_view(ordo_bus *bus, const ordo_notification *note, contract *self) {
  char *slug = get_string(bus, "doc.slug");
  (void)note;
  (void)self;
  CHECK(slug && strcmp(slug, "songs") == 0);
  ordo_free(slug);
  /* doc.title is read by "strict", placed before: stable. */
  EXPECT(ORDO_E_STABILITY, ordo_set_string(bus, "doc.title", "x"));
  EXPECT_MESSAGE("strict");
  EXPECT_MESSAGE("doc.title");
  OK(ordo_set_bool(bus, "doc.viewed", true));
}

static void every(ordo_bus *bus, const ordo_notification *note, contract *self) {
  char *s = get_string(bus, "doc.title"); /* may read anything */
  (void)note;
  (void)self;
  ordo_free(s);
  EXPECT(ORDO_E_CONTRACT_VIOLATION, ordo_set_int64(bus, "log.n", 1));
}

static void test_reentrant(void) {
  ordo_bus *bus = ordo_bus_new();
  contract strict = {"strict", 0, 0, 0, strict_normalizer, NULL};
  contract view = {"view", 0, 0, 0, late_view, NULL};
  contract log = {"log", 0, 0, 0, every, NULL};
  char *title;
  bool viewed = false;
  uint64_t txn = 0;

  OK(reg(bus, &log, NONE, NONE, 7 /* ignored */, 0));
  OK(reg(bus, &strict, LIST("doc.title"), LIST("doc.title", "doc.slug"), -3, 0));
  OK(reg(bus, &view, LIST("doc.title", "doc.slug"), LIST("doc.*"), 1, 0));

  OK(ordo_begin(bus));
  OK(ordo_set_string(bus, "doc.title", "  Songs"));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 1);
  EXPECT_CALLS("strict[doc.title] view[doc.slug,doc.title] log[doc.slug,doc.title,doc.viewed]");
  title = get_string(bus, "doc.title");
  CHECK(title && strcmp(title, "Songs") == 0);
  ordo_free(title);
  OK(ordo_get_bool(bus, "doc.viewed", &viewed));
  CHECK(viewed);
  /* The failed writes changed nothing. */
  CHECK(ordo_counter(bus, "other.x") == 0);
  CHECK(ordo_counter(bus, "doc.title") == 1);
  CHECK(ordo_current_contract(bus) == 0);
  ordo_bus_free(bus);
  CHECK(strict.destroyed == 1 && view.destroyed == 1 && log.destroyed == 1);
}

/* ------------------------------------------------------------------------ */
/* Registering and unregistering from callbacks (SPEC §5)                    */
/* ------------------------------------------------------------------------ */

static contract child = {"child", 0, 0, 0, NULL, NULL};
static contract too_early = {"too-early", 0, 0, 0, NULL, NULL};
static contract content = {"content", 0, 0, 0, NULL, NULL};

static void hierarchy_root(ordo_bus *bus, const ordo_notification *note, contract *self) {
  (void)self;
  if (note->txn == 1) {
    OK(reg(bus, &child, LIST("ui.mode"), NONE, 2, ORDO_NOTIFY_INITIAL));
    EXPECT(ORDO_E_ORDER_CONFLICT, reg(bus, &too_early, LIST("ui.mode"), NONE, -1, ORDO_NOTIFY_INITIAL));
    EXPECT_MESSAGE("too-early");
    CHECK(too_early.id == 0 && too_early.destroyed == 0);
  } else if (note->txn == 2) {
    OK(ordo_unregister(bus, content.id));
    /* destroyed right away: it is not running */
    CHECK(content.destroyed == 1);
    EXPECT(ORDO_E_NOT_FOUND, ordo_unregister(bus, content.id));
  }
}

static void check_initial(ordo_bus *bus, const ordo_notification *note, contract *self) {
  (void)bus;
  if (self->calls == 1) {
    CHECK(note->n_changed == 0);
    CHECK(note->changed != NULL && note->changed[0] == NULL);
    CHECK(note->txn == 1);
  }
}

static void test_register_during_pass(void) {
  ordo_bus *bus = ordo_bus_new();
  contract log = {"log", 0, 0, 0, NULL, NULL};
  contract root = {"root", 0, 0, 0, hierarchy_root, NULL};
  uint64_t txn = 0;
  child.action = check_initial;

  OK(reg(bus, &log, NONE, NONE, DATA, 0));
  OK(reg(bus, &content, LIST("ui.mode"), NONE, DATA, 0));
  OK(reg(bus, &root, LIST("ui.mode"), NONE, 1, 0));

  OK(ordo_begin(bus));
  OK(ordo_set_string(bus, "ui.mode", "list"));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 1);
  EXPECT_CALLS("root[ui.mode] child[] content[ui.mode] log[ui.mode]");
  CHECK(child.id != 0 && child.calls == 1);

  OK(ordo_begin(bus));
  OK(ordo_set_string(bus, "ui.mode", "grid"));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 2);
  EXPECT_CALLS("root[ui.mode] child[ui.mode] log[ui.mode]");
  CHECK(content.destroyed == 1 && content.calls == 1);

  /* Gone for good. */
  OK(ordo_begin(bus));
  OK(ordo_set_string(bus, "ui.mode", "list"));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 3);
  EXPECT_CALLS("root[ui.mode] child[ui.mode] log[ui.mode]");

  ordo_bus_free(bus);
  CHECK(log.destroyed == 1 && root.destroyed == 1 && child.destroyed == 1);
  CHECK(content.destroyed == 1 && too_early.destroyed == 0);
}

/* ------------------------------------------------------------------------ */
/* ORDO_NOTIFY_INITIAL outside a pass                                        */
/* ------------------------------------------------------------------------ */

static uint64_t initial_out_id;
static uint64_t initial_seen_contract;

static void initial_writer(ordo_bus *bus, const ordo_notification *note, contract *self) {
  (void)self;
  /* note->contract carries the new id before *out_id is written. */
  CHECK(initial_out_id == 777);
  CHECK(note->contract != 0);
  initial_seen_contract = note->contract;
  CHECK(note->n_changed == 0 && note->changed && note->changed[0] == NULL);
  CHECK(note->txn == 1); /* the last committed transaction */
  /* Its writes form a transaction of their own. */
  OK(ordo_set_int64(bus, "doc.b", 5));
}

static void test_initial_outside_pass(void) {
  ordo_bus *bus = ordo_bus_new();
  contract watcher = {"watcher", 0, 0, 0, NULL, NULL};
  contract init = {"init", 0, 0, 0, initial_writer, NULL};
  ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
  const char *reads[] = {"doc.a"};
  const char *writes[] = {"doc.b"};
  int64_t b = 0;

  OK(reg(bus, &watcher, LIST("doc.b"), NONE, DATA, 0));
  OK(ordo_begin(bus));
  OK(ordo_set_int64(bus, "doc.a", 1));
  OK(ordo_commit(bus, NULL));
  EXPECT_CALLS("");

  spec.name = init.name;
  spec.reads = reads;
  spec.n_reads = 1;
  spec.writes = writes;
  spec.n_writes = 1;
  spec.flags = ORDO_NOTIFY_INITIAL;
  spec.callback = on_notify;
  spec.user_data = &init;
  spec.destroy = on_destroy;
  initial_out_id = 777;
  OK(ordo_register(bus, &spec, &initial_out_id));
  CHECK(initial_out_id == initial_seen_contract);
  EXPECT_CALLS("init[] watcher[doc.b]");
  CHECK(ordo_transaction_id(bus) == 2);
  OK(ordo_get_int64(bus, "doc.b", &b));
  CHECK(b == 5);
  CHECK(ordo_counter(bus, "doc.b") == 1);

  /* Without the flag: no call. */
  {
    contract quiet = {"quiet", 0, 0, 0, NULL, NULL};
    OK(reg(bus, &quiet, LIST("doc.a"), NONE, DATA, 0));
    EXPECT_CALLS("");
    OK(ordo_unregister(bus, quiet.id));
    CHECK(quiet.destroyed == 1);
  }
  ordo_bus_free(bus);
  CHECK(watcher.destroyed == 1 && init.destroyed == 1);
}

/* ------------------------------------------------------------------------ */
/* destroy exactly once                                                      */
/* ------------------------------------------------------------------------ */

typedef struct owned {
  int after_unregister; /* written after the contract unregistered itself */
  int *destroy_count;
  int destroy_saw_after;
} owned;

static void owned_destroy(void *user_data) {
  owned *o = (owned *)user_data;
  (*o->destroy_count)++;
  /* destroy runs after the callback has returned */
  if (o->after_unregister != 1) fprintf(stderr, "destroy ran before the callback returned\n"), exit(1);
  free(o);
}

static void self_unregister(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  owned *o = (owned *)user_data;
  OK(ordo_unregister(bus, note->contract));
  EXPECT(ORDO_E_NOT_FOUND, ordo_unregister(bus, note->contract));
  /* Still ours until we return (valgrind would flag a use after free). */
  CHECK(*o->destroy_count == 0);
  o->after_unregister = 1;
}

static contract victim = {"victim", 0, 0, 0, NULL, NULL};
static void killer(ordo_bus *bus, const ordo_notification *note, contract *self) {
  (void)note;
  if (self->calls > 1) return;
  OK(ordo_unregister(bus, victim.id));
  CHECK(victim.destroyed == 1);
}

/* Nested initial calls: outer's initial callback registers inner, whose
 * initial callback unregisters outer while outer's callback still runs. */
static contract outer = {"outer", 0, 0, 0, NULL, NULL};
static contract inner = {"inner", 0, 0, 0, NULL, NULL};
static void inner_action(ordo_bus *bus, const ordo_notification *note, contract *self) {
  (void)note;
  if (self->calls > 1) return;
  CHECK(outer.id != 0);
  OK(ordo_unregister(bus, outer.id));
  CHECK(outer.destroyed == 0); /* outer's callback is still running */
}
static void outer_action(ordo_bus *bus, const ordo_notification *note, contract *self) {
  (void)self;
  outer.id = note->contract;
  OK(reg(bus, &inner, LIST("doc.a"), NONE, DATA, ORDO_NOTIFY_INITIAL));
  CHECK(outer.destroyed == 0);
}

static void nop(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  (void)bus;
  (void)note;
  CHECK(user_data == NULL);
}

static void test_destroy(void) {
  ordo_bus *bus = ordo_bus_new();
  int destroys = 0;
  owned *o = (owned *)calloc(1, sizeof *o);
  ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
  const char *reads[] = {"doc.a"};
  contract k = {"killer", 0, 0, 0, killer, NULL};
  contract plain = {"plain", 0, 0, 0, NULL, NULL};
  uint64_t id = 0, txn = 0;

  o->destroy_count = &destroys;
  spec.name = "self";
  spec.reads = reads;
  spec.n_reads = 1;
  spec.callback = self_unregister;
  spec.user_data = o;
  spec.destroy = owned_destroy;
  OK(ordo_register(bus, &spec, &id));
  OK(reg(bus, &k, LIST("doc.a"), NONE, -1, 0));
  OK(reg(bus, &victim, LIST("doc.a"), NONE, DATA, 0));
  OK(reg(bus, &plain, LIST("doc.a"), NONE, DATA, 0));

  OK(ordo_begin(bus));
  OK(ordo_set_int64(bus, "doc.a", 1));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 1);
  /* self ran (and went), killer removed victim before its turn. */
  EXPECT_CALLS("killer[doc.a] plain[doc.a]");
  CHECK(destroys == 1);
  CHECK(victim.calls == 0 && victim.destroyed == 1);
  EXPECT(ORDO_E_NOT_FOUND, ordo_unregister(bus, id));

  /* Unregistered from outside: destroyed by ordo_unregister. */
  OK(ordo_unregister(bus, plain.id));
  CHECK(plain.destroyed == 1);
  EXPECT(ORDO_E_NOT_FOUND, ordo_unregister(bus, plain.id));
  CHECK(plain.destroyed == 1);

  /* Nested initial calls. */
  outer.action = outer_action;
  inner.action = inner_action;
  OK(reg(bus, &outer, LIST("doc.a"), NONE, DATA, ORDO_NOTIFY_INITIAL));
  EXPECT_CALLS("outer[] inner[]");
  CHECK(outer.destroyed == 1 && inner.destroyed == 0);

  /* NULL user_data and destroy are fine. */
  spec.name = "no-data";
  spec.callback = nop;
  spec.user_data = NULL;
  spec.destroy = NULL;
  OK(ordo_register(bus, &spec, &id));
  OK(ordo_begin(bus));
  OK(ordo_set_int64(bus, "doc.a", 2));
  OK(ordo_commit(bus, &txn));
  CHECK(txn == 2);
  EXPECT_CALLS("killer[doc.a] inner[doc.a]");
  OK(ordo_unregister(bus, id));

  ordo_bus_free(bus);
  CHECK(k.destroyed == 1 && inner.destroyed == 1 && outer.destroyed == 1 && victim.destroyed == 1);
  CHECK(destroys == 1);
}

/* ------------------------------------------------------------------------ */
/* Threads                                                                   */
/* ------------------------------------------------------------------------ */

#define ROUNDS 200

typedef struct worker {
  ordo_bus *bus;
  const char *key;
  int ok;
  uint64_t last_txn;
} worker;

static pthread_mutex_t calls_lock = PTHREAD_MUTEX_INITIALIZER;
static int threaded_calls = 0;
static int threaded_wrong = 0;
static pthread_key_t committing;

static void count_call(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  /* Called on the committing thread, for its own keypath. */
  const worker *w = (const worker *)pthread_getspecific(committing);
  (void)bus;
  (void)user_data;
  pthread_mutex_lock(&calls_lock);
  threaded_calls++;
  if (w == NULL || note->n_changed != 1 || strcmp(note->changed[0], w->key) != 0) threaded_wrong++;
  pthread_mutex_unlock(&calls_lock);
}

static void *work(void *arg) {
  worker *w = (worker *)arg;
  int i;
  uint64_t txn = 0;
  int64_t v = 0;
  pthread_setspecific(committing, w);
  w->ok = 1;
  for (i = 0; i < ROUNDS; i++) {
    if (ordo_begin(w->bus) != ORDO_OK || ordo_set_int64(w->bus, w->key, i + 1) != ORDO_OK ||
        ordo_commit(w->bus, &txn) != ORDO_OK || txn <= w->last_txn) {
      w->ok = 0;
      break;
    }
    w->last_txn = txn;
  }
  if (ordo_get_int64(w->bus, w->key, &v) != ORDO_OK || v != ROUNDS) w->ok = 0;
  /* A failure on this thread sets this thread's message only. */
  if (ordo_set_int64(w->bus, w->key, 1) != ORDO_E_NO_TRANSACTION) w->ok = 0;
  if (strstr(ordo_last_error_message(), w->key) == NULL) w->ok = 0;
  return NULL;
}

typedef struct handoff {
  ordo_bus *bus;
  pthread_mutex_t m;
  pthread_cond_t c;
  int stage;
  int begun;
  int64_t seen_before_commit;
} handoff;

static void wait_stage(handoff *h, int stage) {
  pthread_mutex_lock(&h->m);
  while (h->stage < stage) pthread_cond_wait(&h->c, &h->m);
  pthread_mutex_unlock(&h->m);
}
static void set_stage(handoff *h, int stage) {
  pthread_mutex_lock(&h->m);
  h->stage = stage;
  pthread_cond_broadcast(&h->c);
  pthread_mutex_unlock(&h->m);
}

static void *reader(void *arg) {
  handoff *h = (handoff *)arg;
  wait_stage(h, 1);
  /* Another thread's transaction is open: reads see the committed state. */
  ordo_get_int64(h->bus, "shared.x", &h->seen_before_commit);
  set_stage(h, 2);
  /* begin waits until that transaction is committed. */
  ordo_begin(h->bus);
  pthread_mutex_lock(&h->m);
  h->begun = 1;
  pthread_mutex_unlock(&h->m);
  ordo_set_int64(h->bus, "shared.x", 3);
  ordo_commit(h->bus, NULL);
  return NULL;
}

static void test_threads(void) {
  ordo_bus *bus = ordo_bus_new();
  worker a = {NULL, "thread.a", 0, 0}, b = {NULL, "thread.b", 0, 0};
  pthread_t ta, tb, tr;
  ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
  const char *reads[] = {"thread.*"};
  handoff h;
  struct timespec pause = {0, 50 * 1000 * 1000};
  int64_t x = 0;
  int begun;

  pthread_key_create(&committing, NULL);
  pthread_setspecific(committing, &a);
  spec.name = "threads";
  spec.reads = reads;
  spec.n_reads = 1;
  spec.callback = count_call;
  OK(ordo_register(bus, &spec, NULL));

  /* This thread's message survives the other threads' failures. */
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_touch(bus, "main..thread"));
  a.bus = b.bus = bus;
  CHECK(pthread_create(&ta, NULL, work, &a) == 0);
  CHECK(pthread_create(&tb, NULL, work, &b) == 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  CHECK(a.ok && b.ok);
  CHECK(threaded_calls == 2 * ROUNDS);
  CHECK(threaded_wrong == 0);
  CHECK(ordo_transaction_id(bus) == 2 * ROUNDS);
  EXPECT_MESSAGE("main..thread");

  /* Serialized transactions and committed reads. */
  memset(&h, 0, sizeof h);
  h.bus = bus;
  pthread_mutex_init(&h.m, NULL);
  pthread_cond_init(&h.c, NULL);
  OK(ordo_begin(bus));
  OK(ordo_set_int64(bus, "shared.x", 1));
  OK(ordo_commit(bus, NULL));
  OK(ordo_begin(bus));
  OK(ordo_set_int64(bus, "shared.x", 2));
  CHECK(pthread_create(&tr, NULL, reader, &h) == 0);
  set_stage(&h, 1);
  wait_stage(&h, 2);
  nanosleep(&pause, NULL);
  pthread_mutex_lock(&h.m);
  begun = h.begun;
  pthread_mutex_unlock(&h.m);
  CHECK(begun == 0);
  CHECK(h.seen_before_commit == 1);
  OK(ordo_commit(bus, NULL));
  pthread_join(tr, NULL);
  CHECK(h.begun == 1);
  OK(ordo_get_int64(bus, "shared.x", &x));
  CHECK(x == 3);
  pthread_mutex_destroy(&h.m);
  pthread_cond_destroy(&h.c);

  ordo_bus_free(bus);
  pthread_key_delete(committing);
}

/* Unregistration from another thread while a thread commits (the callback
 * entry and exit take no lock once the contract has its id; the bus's
 * transaction orders them against the unregistration): no call after
 * ordo_unregister returns, destroy exactly once and never during a call. */
typedef struct {
  ordo_bus *bus;
  pthread_mutex_t m;
  int calls, calls_after_unregister, destroys, unregistered, stop, running, destroyed_while_running;
} cross;

static int cross_get(cross *x, const int *field) {
  pthread_mutex_lock(&x->m);
  int v = *field;
  pthread_mutex_unlock(&x->m);
  return v;
}

static void cross_call(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  (void)bus;
  (void)note;
  cross *x = (cross *)user_data;
  pthread_mutex_lock(&x->m);
  x->running++;
  x->calls++;
  if (x->unregistered) x->calls_after_unregister++;
  pthread_mutex_unlock(&x->m);
  sched_yield();
  pthread_mutex_lock(&x->m);
  x->running--;
  pthread_mutex_unlock(&x->m);
}

static void cross_destroy(void *user_data) {
  cross *x = (cross *)user_data;
  pthread_mutex_lock(&x->m);
  if (x->running != 0) x->destroyed_while_running++;
  x->destroys++;
  pthread_mutex_unlock(&x->m);
}

static void *cross_commit(void *arg) {
  cross *x = (cross *)arg;
  int64_t v = 0;
  while (!cross_get(x, &x->stop)) {
    uint64_t txn = 0;
    if (ordo_begin(x->bus) != ORDO_OK) break;
    if (ordo_set_int64(x->bus, "cross.k", ++v) != ORDO_OK) break;
    if (ordo_commit(x->bus, &txn) != ORDO_OK) break;
  }
  return NULL;
}

static void test_unregister_from_another_thread(void) {
  for (int round = 0; round < 10; round++) {
    cross x;
    memset(&x, 0, sizeof x);
    pthread_mutex_init(&x.m, NULL);
    x.bus = ordo_bus_new();
    ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
    const char *reads[] = {"cross.k"};
    uint64_t id = 0;
    spec.name = "cross";
    spec.reads = reads;
    spec.n_reads = 1;
    spec.callback = cross_call;
    spec.user_data = &x;
    spec.destroy = cross_destroy;
    OK(ordo_register(x.bus, &spec, &id));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, cross_commit, &x) == 0);
    while (cross_get(&x, &x.calls) < 20 + round * 5) sched_yield();
    OK(ordo_unregister(x.bus, id));
    pthread_mutex_lock(&x.m);
    x.unregistered = 1;
    pthread_mutex_unlock(&x.m);
    CHECK(cross_get(&x, &x.destroys) == 1);
    /* Let the committing thread run more transactions, then stop it. */
    for (int i = 0; i < 200; i++) sched_yield();
    pthread_mutex_lock(&x.m);
    x.stop = 1;
    pthread_mutex_unlock(&x.m);
    pthread_join(t, NULL);
    CHECK(x.calls_after_unregister == 0);
    CHECK(x.destroyed_while_running == 0);
    CHECK(x.destroys == 1);
    ordo_bus_free(x.bus);
    CHECK(x.destroys == 1);
    pthread_mutex_destroy(&x.m);
  }
}

/* ------------------------------------------------------------------------ */
/* Notifications with several keypaths (the trampoline's reusable buffer)    */
/* ------------------------------------------------------------------------ */

enum { MANY_MAX = 400 };

typedef struct {
  char *keys[MANY_MAX]; /* the keypaths written by the current transaction */
  size_t n;             /* how many */
  int calls;
  int wrong;
  ordo_bus *bus;
} many_expect;

/* Both contracts must receive exactly the written keypaths, in the order
 * they were written, NULL-terminated, and be able to use them to call back
 * into the bus while the notification is alive. */
static void on_many(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  many_expect *e = (many_expect *)user_data;
  size_t i;
  int64_t v = 0;
  e->calls++;
  if (bus != e->bus || note->changed == NULL || note->n_changed != e->n || note->changed[note->n_changed] != NULL) {
    e->wrong++;
    return;
  }
  for (i = 0; i < e->n; i++)
    if (strcmp(note->changed[i], e->keys[i]) != 0) e->wrong++;
  /* A read re-enters the bus; the keypaths stay valid after it. */
  if (ordo_get_int64(bus, note->changed[0], &v) != ORDO_OK || v != (int64_t)e->n) e->wrong++;
  for (i = 0; i < e->n; i++)
    if (strcmp(note->changed[i], e->keys[i]) != 0) e->wrong++;
}

/* One transaction writing n keypaths: "big.s<i>" (short: Swift's inline
 * small strings) when long is 0, else "big.l<i>.xxx…" of about long bytes. */
static void many_round(ordo_bus *bus, many_expect *a, many_expect *b, size_t n, size_t long_bytes) {
  size_t i;
  for (i = 0; i < a->n; i++) free(a->keys[i]);
  a->n = b->n = n;
  for (i = 0; i < n; i++) {
    char *k = malloc(257);
    CHECK(k != NULL);
    if (!k) return;
    snprintf(k, 257, long_bytes ? "big.l%zu." : "big.s%zu", i);
    if (long_bytes) {
      size_t len = strlen(k);
      while (len < long_bytes && len < 250) k[len++] = 'x';
      k[len] = '\0';
    }
    a->keys[i] = b->keys[i] = k;
  }
  a->calls = b->calls = 0;
  OK(ordo_begin(bus));
  for (i = 0; i < n; i++) OK(ordo_set_int64(bus, a->keys[i], (int64_t)n));
  OK(ordo_commit(bus, NULL));
  CHECK(a->calls == 1 && b->calls == 1);
  CHECK(a->wrong == 0 && b->wrong == 0);
}

static void test_many_keypaths(void) {
  ordo_bus *bus = ordo_bus_new();
  many_expect reader = {{0}, 0, 0, 0, bus}, every = {{0}, 0, 0, 0, bus};
  ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
  const char *reads[] = {"big.**"};
  size_t i;
  spec.name = "many-reader";
  spec.reads = reads;
  spec.n_reads = 1;
  spec.callback = on_many;
  spec.user_data = &reader;
  OK(ordo_register(bus, &spec, NULL));
  spec.name = "many-every";
  spec.reads = NULL;
  spec.n_reads = 0;
  spec.user_data = &every;
  OK(ordo_register(bus, &spec, NULL));
  many_round(bus, &reader, &every, 2, 0);   /* small strings */
  many_round(bus, &reader, &every, 5, 40);  /* grows the buffer */
  many_round(bus, &reader, &every, 3, 0);   /* reuses it */
  /* About 100 KB of keypaths: a buffer past what a contract keeps. */
  many_round(bus, &reader, &every, MANY_MAX, 250);
  many_round(bus, &reader, &every, 7, 120); /* a fresh buffer after it */
  many_round(bus, &reader, &every, 1, 0);   /* the single-keypath path */
  many_round(bus, &reader, &every, 2, 250);
  for (i = 0; i < reader.n; i++) free(reader.keys[i]);
  ordo_bus_free(bus);
}

int main(void) {
  test_seed_order();
  test_reentrant();
  test_register_during_pass();
  test_initial_outside_pass();
  test_destroy();
  test_threads();
  test_unregister_from_another_thread();
  test_many_keypaths();
  return check_report("test_contracts");
}
