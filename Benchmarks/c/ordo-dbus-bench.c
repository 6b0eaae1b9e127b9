/*
 * ordo-dbus-bench: the D-Bus scenario of ordo-bench. Through one bus
 * daemon (the private one ordod starts), measures in the same rounds:
 *
 *   ordo_notify_per_s     Notify signals per second received by a remote
 *                         observer of "bench.k" while a driver connection
 *                         sends Commit calls that change it (at most WINDOW
 *                         calls awaiting their reply);
 *   raw_signals_per_s     the same observer receiving signals of the same
 *                         signature (o t as a{sv}) sent straight from the
 *                         driver connection with libdbus;
 *   ordo_roundtrip_us     from sending a Commit to receiving its Notify;
 *   raw_signal_us         from sending a raw signal to receiving it;
 *   get_roundtrip_us      a Get method call to the service and its reply.
 *
 * usage: ordo-dbus-bench ADDRESS SERVICE ROUNDS BATCH SAMPLES
 * prints one "name median" line per figure; exits non-zero on a D-Bus error.
 * Build: cc -O2 ordo-dbus-bench.c $(pkg-config --cflags --libs dbus-1)
 */
#define _POSIX_C_SOURCE 200809L
#include <dbus/dbus.h>

#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PATH "/dev/ordo/Bus"
#define IFACE "dev.ordo.Bus1"
#define RAW_IFACE "dev.ordo.Bench"
#define KEY "bench.k"
#define WINDOW 64
#define TIMEOUT_MS 10000

static const char *service;
static const char *observer_name;
static char contract_path[256];
static int64_t value;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *detail) {
  fprintf(stderr, "ordo-dbus-bench: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

static void check_oom(const void *p) {
  if (!p) die("out of memory", NULL);
}

static DBusConnection *connect_to(const char *address) {
  DBusError err;
  dbus_error_init(&err);
  DBusConnection *c = dbus_connection_open_private(address, &err);
  if (!c) die("connect", err.message);
  if (!dbus_bus_register(c, &err)) die("register on the bus", err.message);
  return c;
}

/* Appends {KEY: int64 v} as a{sv}. */
static void append_values(DBusMessageIter *it, int64_t v) {
  DBusMessageIter dict, entry, var;
  const char *key = KEY;
  dbus_message_iter_open_container(it, DBUS_TYPE_ARRAY, "{sv}", &dict);
  dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
  dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &key);
  dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "x", &var);
  dbus_message_iter_append_basic(&var, DBUS_TYPE_INT64, &v);
  dbus_message_iter_close_container(&entry, &var);
  dbus_message_iter_close_container(&dict, &entry);
  dbus_message_iter_close_container(it, &dict);
}

static void append_strings(DBusMessageIter *it, const char **items, int n) {
  DBusMessageIter arr;
  dbus_message_iter_open_container(it, DBUS_TYPE_ARRAY, "s", &arr);
  for (int i = 0; i < n; i++) dbus_message_iter_append_basic(&arr, DBUS_TYPE_STRING, &items[i]);
  dbus_message_iter_close_container(it, &arr);
}

/* Commit({KEY: v}, [], []) */
static DBusMessage *commit_message(int64_t v) {
  DBusMessage *m = dbus_message_new_method_call(service, PATH, IFACE, "Commit");
  check_oom(m);
  DBusMessageIter it;
  dbus_message_iter_init_append(m, &it);
  append_values(&it, v);
  append_strings(&it, NULL, 0);
  append_strings(&it, NULL, 0);
  return m;
}

/* A signal shaped like Notify (o t as a{sv}), sent straight to the observer. */
static DBusMessage *raw_message(int64_t v) {
  DBusMessage *m = dbus_message_new_signal("/dev/ordo/Bench", RAW_IFACE, "Notify");
  check_oom(m);
  dbus_message_set_destination(m, observer_name);
  DBusMessageIter it;
  dbus_message_iter_init_append(m, &it);
  const char *path = contract_path;
  dbus_uint64_t txn = (dbus_uint64_t)v;
  const char *changed[1] = {KEY};
  dbus_message_iter_append_basic(&it, DBUS_TYPE_OBJECT_PATH, &path);
  dbus_message_iter_append_basic(&it, DBUS_TYPE_UINT64, &txn);
  append_strings(&it, changed, 1);
  append_values(&it, v);
  return m;
}

/* Reads what is available and counts the messages of interest. */
typedef struct {
  long notifies; /* Notify from the service */
  long raws;     /* raw signals */
  long replies;  /* method returns */
} counts;

static void drain(DBusConnection *c, counts *n) {
  dbus_connection_read_write(c, 0);
  DBusMessage *m;
  while ((m = dbus_connection_pop_message(c))) {
    int t = dbus_message_get_type(m);
    if (t == DBUS_MESSAGE_TYPE_SIGNAL) {
      if (dbus_message_is_signal(m, IFACE, "Notify")) n->notifies++;
      else if (dbus_message_is_signal(m, RAW_IFACE, "Notify")) n->raws++;
    } else if (t == DBUS_MESSAGE_TYPE_METHOD_RETURN) {
      n->replies++;
    } else if (t == DBUS_MESSAGE_TYPE_ERROR) {
      DBusError err;
      dbus_error_init(&err);
      dbus_set_error_from_message(&err, m);
      die("error reply", err.message);
    }
    dbus_message_unref(m);
  }
}

/* Waits until one of the connections has data (or fails after a timeout). */
static void wait_either(DBusConnection *a, DBusConnection *b) {
  int fa = -1, fb = -1;
  dbus_connection_get_unix_fd(a, &fa);
  dbus_connection_get_unix_fd(b, &fb);
  struct pollfd p[2] = {{fa, POLLIN, 0}, {fb, POLLIN, 0}};
  int r = poll(p, 2, TIMEOUT_MS);
  if (r == 0) die("timed out waiting for messages", NULL);
}

/* Sends `batch` messages from drv (Commit calls, at most WINDOW awaiting a
 * reply; or raw signals) and returns the rate at which obs receives what they
 * cause, per second. */
static double throughput(DBusConnection *drv, DBusConnection *obs, long batch, int raw) {
  counts d = {0, 0, 0}, o = {0, 0, 0};
  long sent = 0;
  double t0 = now_s();
  for (;;) {
    long received = raw ? o.raws : o.notifies;
    if (received >= batch && (raw || d.replies >= batch)) break;
    int progressed = 0;
    while (sent < batch && (raw || sent - d.replies < WINDOW)) {
      DBusMessage *m = raw ? raw_message(++value) : commit_message(++value);
      if (!dbus_connection_send(drv, m, NULL)) die("send", NULL);
      dbus_message_unref(m);
      sent++;
      progressed = 1;
    }
    if (progressed) dbus_connection_flush(drv);
    long before = d.replies + o.notifies + o.raws;
    drain(drv, &d);
    drain(obs, &o);
    if (d.replies + o.notifies + o.raws == before && !progressed) wait_either(drv, obs);
  }
  double t1 = now_s();
  return (double)batch / (t1 - t0);
}

/* One Commit → Notify (or raw signal) latency, in microseconds. */
static double latency(DBusConnection *drv, DBusConnection *obs, int raw) {
  counts d = {0, 0, 0}, o = {0, 0, 0};
  double t0 = now_s();
  DBusMessage *m = raw ? raw_message(++value) : commit_message(++value);
  if (!dbus_connection_send(drv, m, NULL)) die("send", NULL);
  dbus_message_unref(m);
  dbus_connection_flush(drv);
  double t1 = 0;
  while ((raw ? o.raws : o.notifies) < 1) {
    drain(obs, &o);
    if ((raw ? o.raws : o.notifies) >= 1) break;
    wait_either(obs, obs);
  }
  t1 = now_s();
  while (!raw && d.replies < 1) {
    drain(drv, &d);
    if (d.replies >= 1) break;
    wait_either(drv, drv);
  }
  return (t1 - t0) * 1e6;
}

/* One Get(KEY) method round trip, in microseconds. */
static double get_roundtrip(DBusConnection *drv) {
  DBusMessage *m = dbus_message_new_method_call(service, PATH, IFACE, "Get");
  check_oom(m);
  const char *key = KEY;
  dbus_message_append_args(m, DBUS_TYPE_STRING, &key, DBUS_TYPE_INVALID);
  DBusError err;
  dbus_error_init(&err);
  double t0 = now_s();
  DBusMessage *r = dbus_connection_send_with_reply_and_block(drv, m, TIMEOUT_MS, &err);
  double t1 = now_s();
  if (!r) die("Get", err.message);
  dbus_message_unref(r);
  dbus_message_unref(m);
  return (t1 - t0) * 1e6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *xs, long n) {
  qsort(xs, (size_t)n, sizeof *xs, cmp);
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: ordo-dbus-bench ADDRESS SERVICE ROUNDS BATCH SAMPLES\n");
    return 64;
  }
  const char *address = argv[1];
  service = argv[2];
  long rounds = atol(argv[3]), batch = atol(argv[4]), samples = atol(argv[5]);
  if (rounds <= 0 || batch <= 0 || samples <= 0) die("ROUNDS, BATCH and SAMPLES must be positive", NULL);

  DBusConnection *drv = connect_to(address);
  DBusConnection *obs = connect_to(address);
  observer_name = dbus_bus_get_unique_name(obs);

  /* The observer: Register("bench-observer", [KEY], [], {}). */
  DBusMessage *m = dbus_message_new_method_call(service, PATH, IFACE, "Register");
  check_oom(m);
  DBusMessageIter it, opts;
  const char *name = "bench-observer";
  const char *reads[1] = {KEY};
  dbus_message_iter_init_append(m, &it);
  dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &name);
  append_strings(&it, reads, 1);
  append_strings(&it, NULL, 0);
  dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "{sv}", &opts);
  dbus_message_iter_close_container(&it, &opts);
  DBusError err;
  dbus_error_init(&err);
  DBusMessage *r = dbus_connection_send_with_reply_and_block(obs, m, TIMEOUT_MS, &err);
  if (!r) die("Register", err.message);
  const char *path = NULL;
  if (!dbus_message_get_args(r, &err, DBUS_TYPE_OBJECT_PATH, &path, DBUS_TYPE_INVALID)) die("Register reply", err.message);
  snprintf(contract_path, sizeof contract_path, "%s", path);
  dbus_message_unref(r);
  dbus_message_unref(m);

  /* Warm-up. */
  throughput(drv, obs, batch / 4 + 1, 0);
  throughput(drv, obs, batch / 4 + 1, 1);

  double *ordo_rate = calloc((size_t)rounds, sizeof(double));
  double *raw_rate = calloc((size_t)rounds, sizeof(double));
  double *ordo_lat = calloc((size_t)(rounds * samples), sizeof(double));
  double *raw_lat = calloc((size_t)(rounds * samples), sizeof(double));
  double *get_lat = calloc((size_t)(rounds * samples), sizeof(double));
  check_oom(ordo_rate && raw_rate && ordo_lat && raw_lat && get_lat ? ordo_rate : NULL);
  for (long i = 0; i < rounds; i++) {
    ordo_rate[i] = throughput(drv, obs, batch, 0);
    raw_rate[i] = throughput(drv, obs, batch, 1);
    for (long s = 0; s < samples; s++) {
      ordo_lat[i * samples + s] = latency(drv, obs, 0);
      raw_lat[i * samples + s] = latency(drv, obs, 1);
      get_lat[i * samples + s] = get_roundtrip(drv);
    }
  }
  printf("ordo_notify_per_s %.1f\n", median(ordo_rate, rounds));
  printf("raw_signals_per_s %.1f\n", median(raw_rate, rounds));
  printf("ordo_roundtrip_us %.2f\n", median(ordo_lat, rounds * samples));
  printf("raw_signal_us %.2f\n", median(raw_lat, rounds * samples));
  printf("get_roundtrip_us %.2f\n", median(get_lat, rounds * samples));
  fflush(stdout);
  dbus_connection_close(drv);
  dbus_connection_close(obs);
  dbus_connection_unref(drv);
  dbus_connection_unref(obs);
  return 0;
}
