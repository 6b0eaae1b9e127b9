/*
 * ordo-client-bench: the C client of libordo (ordo_client_*) against a plain
 * libdbus client doing the same work through the same dbus-daemon and the
 * same ordod, in the same rounds:
 *
 *   client_notify_per_s  Notify signals per second an observer registered
 *                        with ordo_client_register takes in: a driver
 *                        connection commits BATCH changes of its keypath
 *                        (each a Commit, at most WINDOW awaiting their
 *                        reply), then the observer, which read nothing
 *                        meanwhile, dispatches until it has every
 *                        notification, each value checked;
 *   raw_notify_per_s     the same for an observer written with libdbus the
 *                        usual way (Register call, dbus_connection_read_write
 *                        and pop_message, each Notify decoded and checked);
 *   client_get_us        a Get through ordo_client_get (value freed);
 *   raw_get_us           the same Get as a blocking libdbus call, decoded.
 *
 * The ratios (client_vs_raw, get_vs_raw) are medians of per-round ratios;
 * the order of the two sides alternates from round to round.
 *
 * usage: ordo-client-bench ADDRESS SERVICE ROUNDS BATCH SAMPLES
 * Prints one "name value" line per figure; exits non-zero on any failure.
 * Build: cc -O2 ordo-client-bench.c $(pkg-config --cflags --libs ordo dbus-1)
 */
#define _POSIX_C_SOURCE 200809L
#include <dbus/dbus.h>
#include <ordo.h>

#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-dbus.h"

#define PATH "/dev/ordo/Bus"
#define IFACE "dev.ordo.Bus1"
#define CLIENT_KEY "bench.client"
#define RAW_KEY "bench.raw"
#define WINDOW 64
#define TIMEOUT_MS 10000

static const char *service;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "ordo-client-bench: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

static DBusMessage *call_message(const char *member) {
  DBusMessage *m = dbus_message_new_method_call(service, PATH, IFACE, member);
  if (!m) die("out of memory", NULL);
  return m;
}

static DBusMessage *call(DBusConnection *c, DBusMessage *m) {
  DBusError err;
  dbus_error_init(&err);
  DBusMessage *r = dbus_connection_send_with_reply_and_block(c, m, TIMEOUT_MS, &err);
  dbus_message_unref(m);
  if (!r) die("call", err.message);
  return r;
}

/* Commits key = first .. first + n - 1, one Commit each, at most WINDOW
 * awaiting their reply; returns when every reply is in. */
static void commit_series(DBusConnection *driver, const char *key, int64_t first, long n) {
  DBusPendingCall *pending[WINDOW];
  long sent = 0, done = 0;
  while (done < n) {
    while (sent < n && sent - done < WINDOW) {
      DBusMessage *m = call_message("Commit");
      DBusMessageIter it;
      dbus_message_iter_init_append(m, &it);
      bench_append_values(&it, key, first + sent);
      bench_append_strings(&it, NULL, 0);
      bench_append_strings(&it, NULL, 0);
      if (!dbus_connection_send_with_reply(driver, m, &pending[sent % WINDOW], TIMEOUT_MS) || !pending[sent % WINDOW])
        die("send Commit", NULL);
      dbus_message_unref(m);
      sent++;
    }
    DBusPendingCall *p = pending[done % WINDOW];
    dbus_pending_call_block(p);
    DBusMessage *r = dbus_pending_call_steal_reply(p);
    if (!r || dbus_message_get_type(r) != DBUS_MESSAGE_TYPE_METHOD_RETURN) die("Commit failed", r ? dbus_message_get_error_name(r) : NULL);
    dbus_message_unref(r);
    dbus_pending_call_unref(p);
    done++;
  }
}

/* What an observer received: consecutive values of its key. */
typedef struct series {
  long count;
  int64_t next;
  const char *broken;
} series;

static void expect(series *s, int64_t v) {
  if (v != s->next) s->broken = "values not consecutive";
  s->next = v + 1;
  s->count++;
}

/* -- The C client's observer ---------------------------------------------- */

static void on_client_notify(ordo_client *client, const ordo_client_notification *note, void *user_data) {
  (void)client;
  series *s = user_data;
  if (note->n_changed != 1 || !note->values[0] || note->values[0]->type != ORDO_TYPE_INT64) s->broken = "no int64 value";
  else expect(s, note->values[0]->i);
}

static double client_round(ordo_client *client, DBusConnection *driver, series *s, int64_t first, long batch) {
  commit_series(driver, CLIENT_KEY, first, batch);
  s->count = 0;
  s->next = first;
  struct pollfd p = {ordo_client_fd(client), POLLIN, 0};
  double t0 = bench_now_s();
  while (s->count < batch && !s->broken) {
    if (poll(&p, 1, TIMEOUT_MS) <= 0) die("the C client's observer", "no Notify within the timeout");
    if (ordo_client_dispatch(client, 0) != ORDO_OK) die("ordo_client_dispatch", ordo_last_error_message());
  }
  double t = bench_now_s() - t0;
  if (s->broken) die("the C client's observer", s->broken);
  return batch / t;
}

/* -- The libdbus observer -------------------------------------------------- */

/* Decodes a Notify and records the int64 of RAW_KEY. */
static void raw_record(DBusMessage *m, const char *want_path, series *s) {
  const char *path = NULL, *wrong;
  dbus_uint64_t txn = 0;
  int64_t v = 0;
  if ((wrong = bench_read_notify(m, RAW_KEY, &path, &txn, &v))) s->broken = wrong;
  else if (strcmp(path, want_path) != 0) s->broken = "wrong contract path";
  else expect(s, v);
}

static double raw_round(DBusConnection *observer, const char *path, DBusConnection *driver, series *s, int64_t first, long batch) {
  commit_series(driver, RAW_KEY, first, batch);
  s->count = 0;
  s->next = first;
  double t0 = bench_now_s();
  while (s->count < batch && !s->broken) {
    if (!dbus_connection_read_write(observer, TIMEOUT_MS)) die("the libdbus observer", "connection lost");
    DBusMessage *m;
    while ((m = dbus_connection_pop_message(observer))) {
      if (dbus_message_is_signal(m, IFACE, "Notify")) raw_record(m, path, s);
      dbus_message_unref(m);
    }
  }
  double t = bench_now_s() - t0;
  if (s->broken) die("the libdbus observer", s->broken);
  return batch / t;
}

/* -- Get ------------------------------------------------------------------- */

static double client_get_us(ordo_client *client) {
  ordo_value *v = NULL;
  double t0 = bench_now_s();
  if (ordo_client_get(client, CLIENT_KEY, &v, NULL) != ORDO_OK) die("ordo_client_get", ordo_last_error_message());
  double t = bench_now_s() - t0;
  if (v->type != ORDO_TYPE_INT64) die("ordo_client_get", "not an int64");
  ordo_free(v);
  return t * 1e6;
}

static double raw_get_us(DBusConnection *c) {
  DBusMessage *m = call_message("Get");
  const char *key = CLIENT_KEY;
  dbus_message_append_args(m, DBUS_TYPE_STRING, &key, DBUS_TYPE_INVALID);
  double t0 = bench_now_s();
  DBusMessage *r = call(c, m);
  DBusMessageIter it, var;
  int64_t v = 0;
  dbus_uint64_t counter = 0;
  dbus_message_iter_init(r, &it);
  dbus_message_iter_recurse(&it, &var);
  if (dbus_message_iter_get_arg_type(&var) != DBUS_TYPE_INT64) die("Get", "not an int64");
  dbus_message_iter_get_basic(&var, &v);
  dbus_message_iter_next(&it);
  dbus_message_iter_get_basic(&it, &counter);
  double t = bench_now_s() - t0;
  dbus_message_unref(r);
  return t * 1e6;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: ordo-client-bench ADDRESS SERVICE ROUNDS BATCH SAMPLES\n");
    return 2;
  }
  const char *address = argv[1];
  service = argv[2];
  int rounds = atoi(argv[3]), samples = atoi(argv[5]);
  long batch = atol(argv[4]);
  if (rounds < 1 || batch < 1 || samples < 1) die("ROUNDS, BATCH and SAMPLES must be positive", NULL);

  DBusConnection *driver = bench_connect(address, 0, die), *observer = bench_connect(address, 0, die);
  ordo_client *client = NULL;
  if (ordo_client_connect(address, service, &client) != ORDO_OK) die("ordo_client_connect", ordo_last_error_message());

  /* The libdbus observer's contract. */
  DBusMessage *m = call_message("Register");
  bench_append_register(m, "bench-raw-observer", RAW_KEY);
  DBusMessage *r = call(observer, m);
  const char *raw_path = NULL;
  if (!dbus_message_get_args(r, NULL, DBUS_TYPE_OBJECT_PATH, &raw_path, DBUS_TYPE_INVALID)) die("Register", "no path");
  char path[256];
  snprintf(path, sizeof path, "%s", raw_path);
  dbus_message_unref(r);

  /* The C client's contract. */
  series cs = {0, 0, NULL}, rs = {0, 0, NULL};
  const char *client_reads[1] = {CLIENT_KEY};
  ordo_client_contract_spec spec = ORDO_CLIENT_CONTRACT_SPEC_INIT;
  spec.name = "bench-client-observer";
  spec.reads = client_reads;
  spec.n_reads = 1;
  spec.callback = on_client_notify;
  spec.user_data = &cs;
  if (ordo_client_register(client, &spec, NULL) != ORDO_OK) die("ordo_client_register", ordo_last_error_message());

  double *client_rate = calloc((size_t)rounds, sizeof(double)), *raw_rate = calloc((size_t)rounds, sizeof(double));
  double *rate_ratio = calloc((size_t)rounds, sizeof(double));
  double *cget = calloc((size_t)samples, sizeof(double)), *rget = calloc((size_t)samples, sizeof(double));
  double *get_ratio = calloc((size_t)samples, sizeof(double));
  if (!client_rate || !raw_rate || !rate_ratio || !cget || !rget || !get_ratio) die("out of memory", NULL);
  int64_t next = 1;
  for (int i = 0; i < rounds; i++) {
    if (i % 2 == 0) {
      client_rate[i] = client_round(client, driver, &cs, next, batch);
      raw_rate[i] = raw_round(observer, path, driver, &rs, next, batch);
    } else {
      raw_rate[i] = raw_round(observer, path, driver, &rs, next, batch);
      client_rate[i] = client_round(client, driver, &cs, next, batch);
    }
    next += batch;
    rate_ratio[i] = client_rate[i] / raw_rate[i];
  }
  for (int i = 0; i < samples; i++) {
    if (i % 2 == 0) {
      cget[i] = client_get_us(client);
      rget[i] = raw_get_us(driver);
    } else {
      rget[i] = raw_get_us(driver);
      cget[i] = client_get_us(client);
    }
    get_ratio[i] = cget[i] / rget[i];
  }
  printf("client_notify_per_s %.1f\n", bench_median(client_rate, rounds));
  printf("raw_notify_per_s %.1f\n", bench_median(raw_rate, rounds));
  printf("client_vs_raw %.4f\n", bench_median(rate_ratio, rounds));
  printf("client_get_us %.2f\n", bench_median(cget, samples));
  printf("raw_get_us %.2f\n", bench_median(rget, samples));
  printf("get_vs_raw %.4f\n", bench_median(get_ratio, samples));

  free(client_rate);
  free(raw_rate);
  free(rate_ratio);
  free(cget);
  free(rget);
  free(get_ratio);
  ordo_client_free(client);
  dbus_connection_close(driver);
  dbus_connection_unref(driver);
  dbus_connection_close(observer);
  dbus_connection_unref(observer);
  return 0;
}
