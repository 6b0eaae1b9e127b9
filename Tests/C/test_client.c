/* The C client (ordo_client_*) against a real ordod on a private
 * dbus-daemon, run under valgrind by Tests/DBus/test_c_client.py:
 *
 *   test_client ADDRESS [initial]
 *
 * Reads, commits, observer and writer contracts, the fd polled with
 * poll(), misuse calls, and the
 * service then the bus daemon going away: the test prints "stop-ordod" and
 * "stop-daemon" and waits for a line on stdin once each is stopped. With
 * "initial": only a notify-initial writer answering its initial call. */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static const char *address;

/* -- Helpers ------------------------------------------------------------- */

/* Dispatches until *flag is set (or 5 s pass), polling the client's fd. */
static void dispatch_until(ordo_client *c, const int *flag) {
  struct pollfd p = {ordo_client_fd(c), POLLIN, 0};
  for (int i = 0; i < 500 && !*flag; i++) {
    if (poll(&p, 1, 10) > 0) OK(ordo_client_dispatch(c, 0));
  }
  CHECK(*flag);
}

/* One commit of `keypath` = value from a second client on another thread,
 * while the main thread dispatches (a writer's pass waits for it). */
typedef struct committer {
  ordo_client *client;
  const char *keypath;
  int64_t value;
  ordo_status status;
  uint64_t txn;
  pthread_t thread;
} committer;

static void *commit_thread(void *arg) {
  committer *m = arg;
  ordo_writes *w = NULL;
  if (ordo_writes_new(&w) != ORDO_OK) return NULL;
  m->status = ordo_writes_set_int64(w, m->keypath, m->value);
  if (m->status == ORDO_OK) m->status = ordo_client_commit(m->client, w, &m->txn);
  ordo_writes_free(w);
  return NULL;
}

static void commit_from_thread(committer *m, ordo_client *client, const char *keypath, int64_t value) {
  m->client = client;
  m->keypath = keypath;
  m->value = value;
  m->status = ORDO_E_INTERNAL;
  m->txn = 0;
  CHECK(pthread_create(&m->thread, NULL, commit_thread, m) == 0);
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Waits for the test driver's go-ahead after printing `what`. */
static void handshake(const char *what) {
  char line[64];
  printf("%s\n", what);
  fflush(stdout);
  CHECK(fgets(line, sizeof line, stdin) != NULL);
}

/* -- Reads --------------------------------------------------------------- */

typedef struct seen {
  int n;
  char keys[16][64];
  int has_value[16];
  int64_t ints[16];
  uint64_t counters[16];
} seen;

static void collect(const char *keypath, const ordo_value *value, uint64_t counter, void *user_data) {
  seen *s = user_data;
  if (s->n == 16) return;
  snprintf(s->keys[s->n], sizeof s->keys[0], "%s", keypath);
  s->has_value[s->n] = value != NULL;
  s->ints[s->n] = value && value->type == ORDO_TYPE_INT64 ? value->i : -1;
  s->counters[s->n] = counter;
  s->n++;
}

static void test_commit_and_reads(ordo_client *c) {
  ordo_writes *w = NULL;
  uint64_t txn = 0, txn2 = 0, counter = 0;
  OK(ordo_writes_new(&w));
  OK(ordo_writes_set_int64(w, "t.a", 1));
  OK(ordo_writes_set_int64(w, "t.a", 2)); /* the last value wins */
  OK(ordo_writes_set_string(w, "t.s", "héllo"));
  OK(ordo_writes_set_double(w, "t.d", 2.5));
  OK(ordo_writes_set_bool(w, "t.flag", true));
  OK(ordo_writes_set_bytes(w, "t.raw", "\0\1\2", 3));
  OK(ordo_writes_set_bytes(w, "t.empty", NULL, 0));
  OK(ordo_writes_touch(w, "t.touched"));
  OK(ordo_client_commit(c, w, &txn));
  CHECK(txn > 0);

  ordo_value *v = NULL;
  OK(ordo_client_get(c, "t.a", &v, &counter));
  CHECK(v && v->type == ORDO_TYPE_INT64 && v->i == 2 && counter == 1);
  ordo_free(v);
  OK(ordo_client_get(c, "t.s", &v, NULL));
  CHECK(v && v->type == ORDO_TYPE_STRING && strcmp(v->s, "héllo") == 0 && v->len == strlen("héllo"));
  ordo_free(v);
  OK(ordo_client_get(c, "t.d", &v, NULL));
  CHECK(v && v->type == ORDO_TYPE_DOUBLE && v->d == 2.5);
  ordo_free(v);
  OK(ordo_client_get(c, "t.flag", &v, NULL));
  CHECK(v && v->type == ORDO_TYPE_BOOL && v->b);
  ordo_free(v);
  OK(ordo_client_get(c, "t.raw", &v, NULL));
  CHECK(v && v->type == ORDO_TYPE_BYTES && v->len == 3 && memcmp(v->bytes, "\0\1\2", 3) == 0);
  ordo_free(v);
  OK(ordo_client_get(c, "t.empty", &v, NULL));
  CHECK(v && v->type == ORDO_TYPE_BYTES && v->len == 0);
  ordo_free(v);
  v = NULL;
  EXPECT(ORDO_E_NOT_FOUND, ordo_client_get(c, "t.touched", &v, NULL));
  EXPECT(ORDO_E_NOT_FOUND, ordo_client_get(c, "t.nothing", &v, NULL));
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_client_get(c, "t..a", &v, NULL));
  CHECK(v == NULL);

  /* Snapshot: every keypath with a value or a counter, in keypath order. */
  seen s = {0};
  const char *all[] = {"t.**"};
  OK(ordo_client_snapshot(c, all, 1, collect, &s, &txn2));
  CHECK(txn2 == txn);
  CHECK(s.n == 7);
  CHECK(strcmp(s.keys[0], "t.a") == 0 && s.ints[0] == 2 && s.counters[0] == 1);
  CHECK(strcmp(s.keys[6], "t.touched") == 0 && !s.has_value[6] && s.counters[6] == 1);

  /* Changes since txn: a set and a removal. */
  OK(ordo_writes_clear(w));
  OK(ordo_writes_set_int64(w, "t.a", 3));
  OK(ordo_writes_remove(w, "t.d"));
  OK(ordo_client_commit(c, w, &txn2));
  CHECK(txn2 == txn + 1);
  memset(&s, 0, sizeof s);
  uint64_t last = 0;
  OK(ordo_client_changes(c, txn, all, 1, collect, &s, &last));
  CHECK(last == txn2);
  CHECK(s.n == 2);
  CHECK(strcmp(s.keys[0], "t.a") == 0 && s.ints[0] == 3 && s.counters[0] == 2);
  CHECK(strcmp(s.keys[1], "t.d") == 0 && !s.has_value[1]);
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_changes(c, last + 100, all, 1, collect, &s, NULL));

  /* A removed tree. */
  OK(ordo_writes_clear(w));
  OK(ordo_writes_remove_tree(w, "t"));
  OK(ordo_client_commit(c, w, NULL));
  EXPECT(ORDO_E_NOT_FOUND, ordo_client_get(c, "t.a", &v, NULL));

  char *epoch = NULL;
  OK(ordo_client_epoch(c, &epoch));
  CHECK(epoch && strlen(epoch) > 8);
  ordo_free(epoch);
  ordo_writes_free(w);
}

/* -- Observers ----------------------------------------------------------- */

typedef struct observed {
  int calls;
  int destroyed;
  uint64_t contract;
  uint64_t txn;
  size_t n_changed;
  int64_t total;
  char title[64];
  int title_missing;
} observed;

static void observe(ordo_client *client, const ordo_client_notification *note, void *user_data) {
  observed *o = user_data;
  (void)client;
  o->calls++;
  o->contract = note->contract;
  o->txn = note->txn;
  o->n_changed = note->n_changed;
  CHECK(note->changed[note->n_changed] == NULL);
  CHECK(note->writes == NULL);
  for (size_t i = 0; i < note->n_changed; i++) {
    const ordo_value *v = note->values[i];
    if (strcmp(note->changed[i], "playlist.total") == 0) {
      CHECK(v && v->type == ORDO_TYPE_INT64);
      if (v) o->total = v->i;
    } else if (strcmp(note->changed[i], "playlist.title") == 0) {
      o->title_missing = v == NULL;
      if (v) snprintf(o->title, sizeof o->title, "%s", v->s);
    }
  }
}

static void destroyed(void *user_data) { ((observed *)user_data)->destroyed++; }

/* An observer of `reads` recording into `o`. */
static ordo_client_contract_spec observer_spec(const char *name, const char *const *reads, size_t n, observed *o) {
  ordo_client_contract_spec spec = ORDO_CLIENT_CONTRACT_SPEC_INIT;
  spec.name = name;
  spec.reads = reads;
  spec.n_reads = n;
  spec.callback = observe;
  spec.user_data = o;
  spec.destroy = destroyed;
  return spec;
}

static void test_observer(ordo_client *c) {
  observed o = {0};
  const char *reads[] = {"playlist.total", "playlist.title"};
  ordo_client_contract_spec spec = observer_spec("c-view", reads, 2, &o);
  spec.priority = 1;
  uint64_t id = 0, txn = 0;
  OK(ordo_client_register(c, &spec, &id));
  CHECK(id == 1);
  EXPECT(ORDO_E_DUPLICATE_NAME, ordo_client_register(c, &spec, NULL));

  /* One transaction, two keypaths: one call with both values. The
   * Notify was read while the commit waited for its reply: the fd shows
   * it all the same. */
  ordo_writes *w = NULL;
  OK(ordo_writes_new(&w));
  OK(ordo_writes_set_int64(w, "playlist.total", 300));
  OK(ordo_writes_set_string(w, "playlist.title", "Road trip"));
  OK(ordo_writes_set_int64(w, "playlist.other", 1));
  OK(ordo_client_commit(c, w, &txn));
  dispatch_until(c, &o.calls);
  CHECK(o.calls == 1 && o.contract == id && o.txn == txn && o.n_changed == 2);
  CHECK(o.total == 300 && strcmp(o.title, "Road trip") == 0);
  OK(ordo_client_dispatch(c, 100));
  CHECK(o.calls == 1);

  /* A removal comes with no value. */
  OK(ordo_writes_clear(w));
  OK(ordo_writes_remove(w, "playlist.title"));
  OK(ordo_client_commit(c, w, &txn));
  int two = 0;
  for (int i = 0; i < 500 && o.calls < 2; i++) OK(ordo_client_dispatch(c, 10));
  two = o.calls == 2;
  CHECK(two && o.txn == txn && o.n_changed == 1 && o.title_missing);

  EXPECT(ORDO_E_NOT_FOUND, ordo_client_unregister(c, 99));
  OK(ordo_client_unregister(c, id));
  CHECK(o.destroyed == 1);
  EXPECT(ORDO_E_NOT_FOUND, ordo_client_unregister(c, id));
  OK(ordo_client_commit(c, w, NULL)); /* removing again: no change */
  OK(ordo_writes_clear(w));
  OK(ordo_writes_set_int64(w, "playlist.total", 1));
  OK(ordo_client_commit(c, w, NULL));
  OK(ordo_client_dispatch(c, 100));
  CHECK(o.calls == 2 && o.destroyed == 1);
  ordo_writes_free(w);
}

/* -- A cached observer (ORDO_CLIENT_CACHE) --------------------------------- */

typedef struct cached {
  int calls;
  uint64_t txn[4], cache_txn[4];  /* by call, from 1 */
  seen all[4];                    /* the whole cache, read in each call */
  ordo_client *other;             /* commits during call 2 */
  int64_t title_now;              /* playlist2.title read from the service then */
} cached;

static void cached_view(ordo_client *client, const ordo_client_notification *note, void *user_data) {
  cached *v = user_data;
  if (++v->calls > 3) return;
  v->txn[v->calls] = note->txn;
  if (v->calls == 2) {
    /* Another process moves the title during this callback: the service
     * has it, the cache stays at note->txn. */
    committer m;
    commit_from_thread(&m, v->other, "playlist2.title", 99);
    CHECK(pthread_join(m.thread, NULL) == 0 && m.status == ORDO_OK);
    ordo_value *now = NULL;
    OK(ordo_client_get(client, "playlist2.title", &now, NULL));
    v->title_now = now ? now->i : -1;
    ordo_free(now);
  }
  const char *all[] = {"**"};
  OK(ordo_client_cached(client, note->contract, all, 1, collect, &v->all[v->calls], &v->cache_txn[v->calls]));
}

static void test_cache(ordo_client *c, ordo_client *other) {
  ordo_writes *w = NULL;
  OK(ordo_writes_new(&w));
  OK(ordo_writes_set_int64(w, "playlist2.title", 1));
  OK(ordo_writes_set_int64(w, "playlist2.tracks.1.duration", 10));
  OK(ordo_writes_set_int64(w, "playlist2.tracks.2.duration", 20));
  OK(ordo_writes_set_int64(w, "playlist2.tracks.2.rating", 5));
  OK(ordo_client_commit(c, w, NULL));

  cached v = {.other = other};
  const char *reads[] = {"playlist2.title", "playlist2.tracks.*.duration"};
  ordo_client_contract_spec spec = ORDO_CLIENT_CONTRACT_SPEC_INIT;
  spec.name = "c-cached";
  spec.reads = reads;
  spec.n_reads = 2;
  spec.flags = ORDO_CLIENT_CACHE; /* implies the initial call */
  spec.callback = cached_view;
  spec.user_data = &v;
  uint64_t id = 0, txn = 0;
  OK(ordo_client_register(c, &spec, &id));
  dispatch_until(c, &v.calls);
  /* The initial call: the whole read set, not the rating. */
  seen *first = &v.all[1];
  CHECK(v.cache_txn[1] == v.txn[1] && first->n == 3);
  CHECK(strcmp(first->keys[0], "playlist2.title") == 0 && first->ints[0] == 1);
  CHECK(strcmp(first->keys[1], "playlist2.tracks.1.duration") == 0 && first->ints[1] == 10);
  CHECK(strcmp(first->keys[2], "playlist2.tracks.2.duration") == 0 && first->ints[2] == 20);

  /* Track 2 removed as a tree, track 1 changed: the cache follows. */
  OK(ordo_writes_clear(w));
  OK(ordo_writes_set_int64(w, "playlist2.tracks.1.duration", 11));
  OK(ordo_writes_remove_tree(w, "playlist2.tracks.2"));
  OK(ordo_client_commit(c, w, &txn));
  for (int i = 0; i < 500 && v.calls < 3; i++) OK(ordo_client_dispatch(c, 10));
  CHECK(v.calls == 3 && v.txn[2] == txn && v.cache_txn[2] == txn);
  CHECK(v.title_now == 99);                                                /* the service's state then */
  CHECK(v.all[2].n == 2 && v.all[2].ints[0] == 1 && v.all[2].ints[1] == 11);  /* the cache: at txn */
  /* Call 3: the title's own transaction. */
  CHECK(v.txn[3] > txn && v.all[3].n == 2 && v.all[3].ints[0] == 99 && v.all[3].ints[1] == 11);
  const char *one[] = {"playlist2.tracks.*.duration"};
  seen some = {0};
  uint64_t at = 0;
  OK(ordo_client_cached(c, id, one, 1, collect, &some, &at));
  CHECK(some.n == 1 && strcmp(some.keys[0], "playlist2.tracks.1.duration") == 0 && at == v.txn[3]);

  /* Misuse. */
  const char *bad[] = {"a..b"};
  EXPECT(ORDO_E_NOT_FOUND, ordo_client_cached(c, 999, one, 1, collect, &some, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_cached(c, id, one, 1, NULL, NULL, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_cached(c, id, NULL, 1, collect, &some, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_cached(NULL, id, one, 1, collect, &some, NULL));
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_client_cached(c, id, bad, 1, collect, &some, NULL));
  ordo_client_contract_spec every = spec;
  every.name = "c-cached-every";
  every.n_reads = 0;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_register(c, &every, NULL));
  ordo_client_contract_spec plain = spec;
  plain.name = "c-plain";
  plain.flags = 0;
  uint64_t plain_id = 0;
  OK(ordo_client_register(c, &plain, &plain_id));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_cached(c, plain_id, one, 1, collect, &some, NULL));
  OK(ordo_client_unregister(c, plain_id));
  OK(ordo_client_unregister(c, id));
  EXPECT(ORDO_E_NOT_FOUND, ordo_client_cached(c, id, one, 1, collect, &some, NULL));
  ordo_writes_free(w);
}

/* -- Writers ------------------------------------------------------------- */

typedef struct writer {
  int calls;
  int initial_calls;
  ordo_writes *kept; /* the batch of the last call, used after it */
  ordo_status violation, commit, dispatch, free_status, expect, owned;
  int sleep_ms;
} writer;

static void add(const char *keypath, const ordo_value *value, uint64_t counter, void *user_data) {
  (void)keypath;
  (void)counter;
  if (value && value->type == ORDO_TYPE_INT64) *(int64_t *)user_data += value->i;
}

/* Computes playlist.total from playlist.tracks.*.duration. */
static void compute_total(ordo_client *client, const ordo_client_notification *note, void *user_data) {
  writer *wr = user_data;
  wr->calls++;
  if (note->n_changed == 0) wr->initial_calls++;
  CHECK(note->writes != NULL);
  int64_t sum = 0;
  const char *durations[] = {"playlist.tracks.*.duration"};
  OK(ordo_client_snapshot(client, durations, 1, add, &sum, NULL));
  OK(ordo_writes_set_int64(note->writes, "playlist.total", sum));
  wr->violation = ordo_writes_set_int64(note->writes, "playlist.title", 1);
  wr->expect = ordo_writes_expect_counter(note->writes, "playlist.total", 0);
  wr->owned = ordo_writes_set_owned(note->writes, true);
  wr->commit = ordo_client_commit(client, note->writes, NULL);
  ordo_writes *other = NULL;
  OK(ordo_writes_new(&other));
  wr->commit = ordo_client_commit(client, other, NULL);
  ordo_writes_free(other);
  wr->dispatch = ordo_client_dispatch(client, 0);
  ordo_writes_free(note->writes); /* ignored: the client's */
  wr->kept = note->writes;
  if (wr->sleep_ms) sleep_ms(wr->sleep_ms);
}

typedef struct refusal {
  int calls;
  uint64_t contract;
  ordo_status status;
} refusal;

static void refused(ordo_client *client, uint64_t contract, uint64_t txn, ordo_status status, const char *message,
                    void *user_data) {
  refusal *r = user_data;
  (void)client;
  (void)txn;
  CHECK(message && message[0]);
  fprintf(stderr, "refused: %s\n", message);
  r->calls++;
  r->contract = contract;
  r->status = status;
}

static int64_t get_int(ordo_client *c, const char *keypath) {
  ordo_value *v = NULL;
  int64_t x = -1;
  OK(ordo_client_get(c, keypath, &v, NULL));
  if (v && v->type == ORDO_TYPE_INT64) x = v->i;
  ordo_free(v);
  return x;
}

/* The writer's spec: playlist.total from the durations. */
static ordo_client_contract_spec total_spec(const char *name, writer *wr) {
  static const char *reads[] = {"playlist.tracks.*.duration"};
  static const char *writes[] = {"playlist.total"};
  ordo_client_contract_spec spec = ORDO_CLIENT_CONTRACT_SPEC_INIT;
  spec.name = name;
  spec.reads = reads;
  spec.n_reads = 1;
  spec.writes = writes;
  spec.n_writes = 1;
  spec.priority = -1;
  spec.timeout_ms = 3000;
  spec.callback = compute_total;
  spec.user_data = wr;
  return spec;
}

static void set_durations(ordo_client *c) {
  ordo_writes *w = NULL;
  OK(ordo_writes_new(&w));
  OK(ordo_writes_set_int64(w, "playlist.tracks.a.duration", 200));
  OK(ordo_writes_set_int64(w, "playlist.tracks.b.duration", 100));
  OK(ordo_client_commit(c, w, NULL));
  ordo_writes_free(w);
}

static void test_writer(ordo_client *c, ordo_client *other) {
  writer wr = {0};
  refusal r = {0};
  OK(ordo_client_set_complete_error(c, refused, &r));
  set_durations(c);
  ordo_client_contract_spec spec = total_spec("c-total", &wr);
  uint64_t id = 0;
  OK(ordo_client_register(c, &spec, &id));

  /* A commit from another client on another thread (as from another
   * process): the pass waits for this writer, whose answer joins it. */
  committer m;
  commit_from_thread(&m, other, "playlist.tracks.c.duration", 50);
  dispatch_until(c, &wr.calls);
  CHECK(pthread_join(m.thread, NULL) == 0);
  OK(m.status);
  CHECK(wr.calls == 1 && wr.initial_calls == 0);
  CHECK(get_int(c, "playlist.total") == 350);
  CHECK(r.calls == 0);
  EXPECT(ORDO_E_CONTRACT_VIOLATION, wr.violation);
  EXPECT(ORDO_E_INVALID_ARGUMENT, wr.expect);
  EXPECT(ORDO_E_INVALID_ARGUMENT, wr.owned);
  EXPECT(ORDO_E_INVALID_ARGUMENT, wr.commit);
  EXPECT(ORDO_E_INVALID_ARGUMENT, wr.dispatch);
  /* After the callback, its batch refuses everything. */
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_writes_set_int64(wr.kept, "playlist.total", 1));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_writes_clear(wr.kept));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_commit(c, wr.kept, NULL));
  OK(ordo_client_unregister(c, id));

  /* An answer after the timeout is refused: the complete-error callback
   * says so. */
  spec = total_spec("c-slow", &wr);
  spec.timeout_ms = 100;
  wr.sleep_ms = 400;
  OK(ordo_client_register(c, &spec, &id));
  commit_from_thread(&m, other, "playlist.tracks.d.duration", 1);
  for (int i = 0; i < 300 && r.calls == 0; i++) OK(ordo_client_dispatch(c, 10));
  CHECK(pthread_join(m.thread, NULL) == 0);
  /* The late answer shows the writer alive: the service calls it again as
   * an initial call (writers converge), which is late too. */
  CHECK(r.calls >= 1 && r.contract == id);
  EXPECT(ORDO_E_DBUS, r.status);
  OK(ordo_client_unregister(c, id));
  OK(ordo_client_set_complete_error(c, NULL, NULL));
}

/* A notify-initial writer: its initial call's answer brings the total in
 * line at once. */
static void test_initial_writer(ordo_client *c) {
  writer wr = {0};
  refusal r = {0};
  OK(ordo_client_set_complete_error(c, refused, &r));
  set_durations(c);
  ordo_client_contract_spec spec = total_spec("c-initial", &wr);
  spec.flags = ORDO_NOTIFY_INITIAL;
  uint64_t id = 0;
  OK(ordo_client_register(c, &spec, &id));
  dispatch_until(c, &wr.initial_calls);
  CHECK(wr.calls == 1);
  CHECK(r.calls == 0);
  CHECK(get_int(c, "playlist.total") == 300);
  OK(ordo_client_unregister(c, id));
}

/* -- Misuse -------------------------------------------------------------- */

static void nothing(ordo_client *client, const ordo_client_notification *note, void *user_data) {
  (void)client;
  (void)note;
  (void)user_data;
}

static void test_misuse(ordo_client *c) {
  ordo_client *none = NULL;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_connect_direct(NULL, &none));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_connect_direct("unix:path=/nonexistent", NULL));
  EXPECT(ORDO_E_DBUS, ordo_client_connect_direct("unix:path=/nonexistent/ordo-bus", &none));
  CHECK(none == NULL);
  ordo_writes *w = NULL;
  ordo_value *v = NULL;
  char *epoch = NULL;
  seen s = {0};
  const char *bad[] = {"a..b"};
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_connect(address, NULL, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_connect(address, "dev..ordo", &none));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_connect("unix:path=/\xff", NULL, &none));
  EXPECT(ORDO_E_DBUS, ordo_client_connect("unix:path=/nonexistent/ordo-socket", NULL, &none));
  CHECK(none == NULL);
  ordo_client_free(NULL);
  CHECK(ordo_client_fd(NULL) == -1);
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_dispatch(NULL, 0));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_commit(NULL, NULL, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_commit(c, NULL, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_get(NULL, "a", &v, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_get(c, NULL, &v, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_get(c, "a", NULL, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_snapshot(c, NULL, 0, NULL, NULL, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_snapshot(c, NULL, 1, collect, &s, NULL));
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_client_snapshot(c, bad, 1, collect, &s, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_changes(NULL, 0, NULL, 0, collect, &s, NULL));
  CHECK(s.n == 0);
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_epoch(c, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_epoch(NULL, &epoch));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_unregister(NULL, 1));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_set_complete_error(NULL, NULL, NULL));

  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_writes_new(NULL));
  ordo_writes_free(NULL);
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_writes_set_int64(NULL, "a", 1));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_writes_clear(NULL));
  OK(ordo_writes_new(&w));
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_writes_set_int64(w, "a.*", 1));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_writes_touch(w, NULL));
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_writes_remove(w, ""));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_writes_set_string(w, "a", NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_writes_set_string(w, "a", "\xc3"));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_writes_set_bytes(w, "a", NULL, 2));
  uint64_t txn = 99;
  OK(ordo_client_commit(c, w, &txn)); /* nothing in it */
  CHECK(txn == 0);
  ordo_writes_free(w);

  ordo_client_contract_spec spec = ORDO_CLIENT_CONTRACT_SPEC_INIT;
  const char *reads[] = {"x.y"};
  spec.reads = reads;
  spec.n_reads = 1;
  spec.callback = nothing;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_register(c, &spec, NULL)); /* no name */
  spec.name = "misuse";
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_register(NULL, &spec, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_register(c, NULL, NULL));
  spec.size = 8;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_register(c, &spec, NULL));
  spec.size = sizeof spec;
  spec.flags = 0x80;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_register(c, &spec, NULL));
  spec.flags = 0;
  spec.timeout_ms = 10; /* an observer is not waited for */
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_register(c, &spec, NULL));
  spec.timeout_ms = 0;
  spec.reads = bad;
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_client_register(c, &spec, NULL));
  spec.reads = NULL;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_register(c, &spec, NULL));
  spec.reads = reads;
  spec.callback = NULL;
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_register(c, &spec, NULL));
}

/* -- The service, then the bus daemon, going away -------------------------- */

/* CommitWith from C: a condition that holds, one that does not (nothing
 * applied), an owned value removed when its client's connection closes,
 * and the options refused on a writer's answer (test_writer checks that
 * through misuse of a notification's writes). */
static void test_conditions_and_owned(ordo_client *c) {
  ordo_writes *w = NULL;
  ordo_client *provider = NULL;
  ordo_value *v = NULL;
  uint64_t txn = 0, counter = 0;
  OK(ordo_writes_new(&w));
  OK(ordo_writes_set_int64(w, "cond.n", 1));
  OK(ordo_writes_expect_counter(w, "cond.n", 0));
  OK(ordo_client_commit(c, w, &txn));
  CHECK(txn > 0);
  OK(ordo_writes_clear(w));
  OK(ordo_writes_set_int64(w, "cond.n", 5));
  OK(ordo_writes_set_int64(w, "cond.other", 5));
  OK(ordo_writes_expect_counter(w, "cond.n", 0));
  EXPECT(ORDO_E_CONFLICT, ordo_client_commit(c, w, &txn));
  EXPECT_MESSAGE("\"cond.n\" was expected at counter 0 but is at 1");
  OK(ordo_client_get(c, "cond.n", &v, &counter));
  CHECK(v && v->type == ORDO_TYPE_INT64 && v->i == 1 && counter == 1);
  ordo_free(v);
  v = NULL;
  EXPECT(ORDO_E_NOT_FOUND, ordo_client_get(c, "cond.other", &v, NULL));
  /* ordo_writes_clear drops the condition with the writes. */
  OK(ordo_writes_clear(w));
  OK(ordo_writes_set_int64(w, "cond.n", 2));
  OK(ordo_client_commit(c, w, &txn));
  CHECK(txn > 0);
  EXPECT(ORDO_E_INVALID_KEYPATH, ordo_writes_expect_counter(w, "a..b", 0));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_writes_expect_counter(NULL, "k", 0));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_writes_set_owned(NULL, true));

  OK(ordo_client_connect(address, NULL, &provider));
  OK(ordo_writes_clear(w));
  OK(ordo_writes_set_string(w, "cond.owned", "here"));
  OK(ordo_writes_set_owned(w, true));
  OK(ordo_client_commit(provider, w, NULL));
  OK(ordo_client_get(c, "cond.owned", &v, NULL));
  CHECK(v && v->type == ORDO_TYPE_STRING);
  ordo_free(v);
  v = NULL;
  /* ... and the owned flag: this value stays when the provider goes. */
  OK(ordo_writes_clear(w));
  OK(ordo_writes_set_string(w, "cond.plain", "stays"));
  OK(ordo_client_commit(provider, w, NULL));
  ordo_client_free(provider);
  /* The service removes the value once it sees the connection close. */
  for (int i = 0; i < 200; i++) {
    if (ordo_client_get(c, "cond.owned", &v, NULL) == ORDO_E_NOT_FOUND) break;
    ordo_free(v);
    v = NULL;
    sleep_ms(10);
  }
  EXPECT(ORDO_E_NOT_FOUND, ordo_client_get(c, "cond.owned", &v, NULL));
  OK(ordo_client_get(c, "cond.plain", &v, NULL));
  CHECK(v && v->type == ORDO_TYPE_STRING && strcmp(v->s, "stays") == 0);
  ordo_free(v);
  v = NULL;
  ordo_writes_free(w);
}

typedef struct owners {
  int calls;
  int left; /* calls with owner NULL */
} owners;

static void owner_changed(ordo_client *client, const char *owner, void *user_data) {
  owners *s = user_data;
  (void)client;
  s->calls++;
  if (!owner) s->left++;
}

static void test_going_away(ordo_client *c) {
  observed o = {0};
  const char *reads[] = {"gone.x"};
  ordo_client_contract_spec spec = observer_spec("c-gone", reads, 1, &o);
  uint64_t id = 0, kept = 0;
  OK(ordo_client_register(c, &spec, &id));
  spec.name = "c-kept";
  OK(ordo_client_register(c, &spec, &kept));
  owners seen_c = {0}, seen_q = {0};
  OK(ordo_client_set_owner_change(c, owner_changed, &seen_c));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_set_owner_change(NULL, owner_changed, NULL));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_set_reconnect(NULL, false));
  /* A client without reconnection: its contract ends with the owner. */
  ordo_client *q = NULL;
  observed qo = {0};
  uint64_t qid = 0;
  OK(ordo_client_connect(address, NULL, &q));
  OK(ordo_client_set_reconnect(q, false));
  OK(ordo_client_set_owner_change(q, owner_changed, &seen_q));
  ordo_client_contract_spec qspec = observer_spec("q-view", reads, 1, &qo);
  OK(ordo_client_register(q, &qspec, &qid));

  handshake("stop-ordod");
  for (int i = 0; i < 500 && seen_q.calls == 0; i++) OK(ordo_client_dispatch(q, 10));
  CHECK(seen_q.calls == 1 && seen_q.left == 1 && qo.destroyed == 1 && qo.calls == 0);
  EXPECT(ORDO_E_NOT_FOUND, ordo_client_unregister(q, qid));
  ordo_client_free(q);
  CHECK(qo.destroyed == 1);
  ordo_value *v = NULL;
  ordo_writes *w = NULL;
  char *epoch = NULL;
  OK(ordo_writes_new(&w));
  OK(ordo_writes_set_int64(w, "gone.x", 1));
  EXPECT(ORDO_E_DBUS, ordo_client_get(c, "gone.x", &v, NULL));
  EXPECT(ORDO_E_DBUS, ordo_client_commit(c, w, NULL));
  EXPECT(ORDO_E_DBUS, ordo_client_epoch(c, &epoch));
  spec.name = "c-late";
  EXPECT(ORDO_E_DBUS, ordo_client_register(c, &spec, NULL));
  for (int i = 0; i < 500 && seen_c.calls == 0; i++) OK(ordo_client_dispatch(c, 10));
  CHECK(seen_c.calls == 1 && seen_c.left == 1 && o.destroyed == 0);
  /* The service is gone: the contract, set aside to be registered again
   * when it comes back, is forgotten here; there is nothing to confirm. */
  OK(ordo_client_unregister(c, id));
  CHECK(o.destroyed == 1);
  EXPECT(ORDO_E_NOT_FOUND, ordo_client_unregister(c, id));

  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_set_reconnect_timeout(NULL, 300));
  EXPECT(ORDO_E_INVALID_ARGUMENT, ordo_client_set_reconnect_timeout(c, -1));
  OK(ordo_client_set_reconnect_timeout(c, 300));
  handshake("stop-daemon");
  /* The connection to the bus daemon is lost: the client tries it again,
   * its fd readable for each try (every 100 ms), until the reconnect
   * timeout; the service had left already, so nobody is told again. */
  struct pollfd p = {ordo_client_fd(c), POLLIN, 0};
  ordo_status st = ORDO_OK;
  int tries = 0;
  while (st == ORDO_OK && tries < 100) {
    CHECK(poll(&p, 1, 5000) == 1);
    st = ordo_client_dispatch(c, 0);
    tries++;
  }
  EXPECT(ORDO_E_DBUS, st);
  CHECK(tries >= 3);
  CHECK(seen_c.calls == 1);
  EXPECT(ORDO_E_DBUS, ordo_client_dispatch(c, 0));
  EXPECT(ORDO_E_DBUS, ordo_client_get(c, "gone.x", &v, NULL));
  EXPECT(ORDO_E_DBUS, ordo_client_commit(c, w, NULL));
  CHECK(v == NULL && epoch == NULL && o.calls == 0);
  ordo_writes_free(w);
  ordo_client_free(c); /* destroys c-kept */
  CHECK(o.destroyed == 2);
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: test_client ADDRESS [initial]\n");
    return 2;
  }
  address = argv[1];
  ordo_client *c = NULL, *other = NULL;
  OK(ordo_client_connect(address, NULL, &c));
  OK(ordo_client_connect(address, "dev.ordo.Bus", &other));
  if (!c || !other) return check_report("test_client");
  CHECK(ordo_client_fd(c) >= 0);
  if (argc == 3) {
    test_initial_writer(c);
    ordo_client_free(other);
    ordo_client_free(c);
    return check_report("test_client initial");
  }
  test_misuse(c);
  test_commit_and_reads(c);
  test_observer(c);
  test_cache(c, other);
  test_writer(c, other);
  test_conditions_and_owned(c);
  ordo_client_free(other);
  test_going_away(c);
  return check_report("test_client");
}
