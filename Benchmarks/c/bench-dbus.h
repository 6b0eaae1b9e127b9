/* The message bodies both D-Bus benchmark programs build (ordo-dbus-bench.c,
 * ordo-host-bench.c), so that their raw signals are the same as each other's
 * and as OrdoDBus's Notify `(o t as a{sv})`. */
#ifndef ORDO_BENCH_DBUS_H
#define ORDO_BENCH_DBUS_H

#include <dbus/dbus.h>
#include <stdint.h>

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

#endif
