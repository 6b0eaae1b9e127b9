/* The message bodies both D-Bus benchmark programs build (ordo-dbus-bench.c,
 * ordo-host-bench.c), so that their raw signals are the same as each other's
 * and as OrdoDBus's Notify `(o t as a{sv})`; how the observers read them
 * (ordo-dbus-bench.c, ordo-client-bench.c); and the connection every
 * benchmark program opens. */
#ifndef ORDO_BENCH_DBUS_H
#define ORDO_BENCH_DBUS_H

#include <dbus/dbus.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A private connection to the bus daemon at address, registered on it, or,
 * direct, to a peer's socket there (peer to peer: no registration); on a
 * failure calls fail(what, libdbus' message), which does not return. */
static inline DBusConnection *bench_connect(const char *address, int direct,
                                            void (*fail)(const char *what, const char *detail)) {
  DBusError err;
  dbus_error_init(&err);
  DBusConnection *c = dbus_connection_open_private(address, &err);
  if (!c) fail("connect", err.message);
  if (!direct && !dbus_bus_register(c, &err)) fail("register on the bus", err.message);
  return c;
}

static inline int bench_by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of n figures (sorts them). */
static inline double bench_median(double *xs, long n) {
  qsort(xs, (size_t)n, sizeof *xs, bench_by_value);
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

/* Seconds on the monotonic clock. */
static inline double bench_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Appends n strings as `as`. */
static inline void bench_append_strings(DBusMessageIter *it, const char **items, int n) {
  DBusMessageIter arr;
  dbus_message_iter_open_container(it, DBUS_TYPE_ARRAY, "s", &arr);
  for (int i = 0; i < n; i++) dbus_message_iter_append_basic(&arr, DBUS_TYPE_STRING, &items[i]);
  dbus_message_iter_close_container(it, &arr);
}

/* Appends {key: int64 v} as `a{sv}`. */
static inline void bench_append_values(DBusMessageIter *it, const char *key, int64_t v) {
  DBusMessageIter dict, entry, var;
  dbus_message_iter_open_container(it, DBUS_TYPE_ARRAY, "{sv}", &dict);
  dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
  dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &key);
  dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "x", &var);
  dbus_message_iter_append_basic(&var, DBUS_TYPE_INT64, &v);
  dbus_message_iter_close_container(&entry, &var);
  dbus_message_iter_close_container(&dict, &entry);
  dbus_message_iter_close_container(it, &dict);
}

/* Appends the arguments of Register for an observer named name reading one
 * pattern: (name, [read], [], {}). */
static inline void bench_append_register(DBusMessage *m, const char *name, const char *read) {
  DBusMessageIter it, opts;
  const char *reads[1] = {read};
  dbus_message_iter_init_append(m, &it);
  dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &name);
  bench_append_strings(&it, reads, 1);
  bench_append_strings(&it, NULL, 0);
  dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "{sv}", &opts);
  dbus_message_iter_close_container(&it, &opts);
}

/* Appends the body of a Notify-shaped signal to message m: contract path,
 * transaction v, [key], {key: v}. */
static inline void bench_append_notify(DBusMessage *m, const char *path, const char *key, int64_t v) {
  DBusMessageIter it;
  dbus_uint64_t txn = (dbus_uint64_t)v;
  const char *changed[1] = {key};
  dbus_message_iter_init_append(m, &it);
  dbus_message_iter_append_basic(&it, DBUS_TYPE_OBJECT_PATH, &path);
  dbus_message_iter_append_basic(&it, DBUS_TYPE_UINT64, &txn);
  bench_append_strings(&it, changed, 1);
  bench_append_values(&it, key, v);
}

/* Reads a Notify-shaped signal (o path, t txn, as changed, a{sv} values):
 * its path, its txn and the int64 value of key. Returns NULL, or what is
 * wrong with it. */
static inline const char *bench_read_notify(DBusMessage *m, const char *key, const char **path, dbus_uint64_t *txn,
                                            int64_t *v) {
  DBusMessageIter it, sub, entry, var;
  const char *k = NULL;
  int found = 0;
  if (strcmp(dbus_message_get_signature(m), "otasa{sv}") != 0) return "wrong signature";
  dbus_message_iter_init(m, &it);
  dbus_message_iter_get_basic(&it, path);
  dbus_message_iter_next(&it);
  dbus_message_iter_get_basic(&it, txn);
  dbus_message_iter_next(&it);
  dbus_message_iter_recurse(&it, &sub);
  if (dbus_message_iter_get_arg_type(&sub) != DBUS_TYPE_STRING) return "no changed keypath";
  dbus_message_iter_next(&it);
  dbus_message_iter_recurse(&it, &sub);
  while (dbus_message_iter_get_arg_type(&sub) == DBUS_TYPE_DICT_ENTRY) {
    dbus_message_iter_recurse(&sub, &entry);
    dbus_message_iter_get_basic(&entry, &k);
    dbus_message_iter_next(&entry);
    dbus_message_iter_recurse(&entry, &var);
    if (strcmp(k, key) == 0 && dbus_message_iter_get_arg_type(&var) == DBUS_TYPE_INT64) {
      dbus_message_iter_get_basic(&var, v);
      found = 1;
    }
    dbus_message_iter_next(&sub);
  }
  return found ? NULL : "no int64 value of the key";
}

#endif
