/*
 * ordo-host-bench: the publishing side of the D-Bus scenario (dbus). A
 * process that hosts its own Ordo bus and publishes it with
 * ordo_dbus_publish, as an application (or ordod) does, and, beside it, a
 * minimal raw libdbus sender: the two producers the scenario compares,
 * in one process, started the same way and measured by the same observer.
 *
 *   ordo-host-bench ADDRESS NAME
 *
 * Publishes a fresh bus as NAME on the bus daemon at ADDRESS, opens a
 * second, plain libdbus connection (the raw sender), prints "ready", then
 * serves from a poll() loop on stdin and ordo_dbus_fd (ordo_dbus_dispatch)
 * and reads commands on stdin, one per line:
 *
 *   dest DEST PATH   where raw signals go: DEST the observer's unique name,
 *                    PATH the contract path its Notify signals carry (so
 *                    that raw signals are the same size); prints "ok".
 *   ordo N           commits N transactions, one after the other, each
 *                    setting "bench.k" to the next int64 value, through the
 *                    public C API (begin, set, commit). The pass of each
 *                    commit sends the Notify of the remote observer of
 *                    bench.k: on the thread that dispatches, OrdoDBus hands
 *                    it to libdbus at once; what the socket does not take
 *                    at once goes out from the poll loop (ordo_dbus_fd,
 *                    ordo_dbus_dispatch), as in any host.
 *   raw N            sends N signals of Notify's signature (o t as a{sv}):
 *                    (PATH, v, ["bench.k"], {"bench.k": <int64 v>}) for the
 *                    next values v, with dbus_connection_send, then flushes.
 *                    Each is built the usual way: dbus_message_new_signal,
 *                    dbus_message_set_destination, then the arguments.
 *   raw-body-first N the same signals built as OrdoDBus builds its Notify:
 *                    dbus_message_new, the arguments, then path, interface,
 *                    member and destination (libdbus rewrites the header
 *                    for every top-level argument; an almost empty header
 *                    makes that about twice as cheap).
 *
 * Both print "ok FIRST LAST" (the first and last value sent) when done; the
 * observer (ordo-dbus-bench) checks it received exactly those, in order.
 * Values come from one counter shared by both commands. EOF ends the
 * program. Exits non-zero on any failure.
 *
 * Build: cc -O2 ordo-host-bench.c $(pkg-config --cflags --libs ordo dbus-1)
 */
#define _POSIX_C_SOURCE 200809L
#include <dbus/dbus.h>
#include <ordo.h>

#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench-dbus.h"

#define KEY "bench.k"

static void die(const char *what, const char *detail) {
  fprintf(stderr, "ordo-host-bench: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

static void check(ordo_status st, const char *what) {
  if (st != ORDO_OK) {
    fprintf(stderr, "ordo-host-bench: %s: %s: %s\n", what, ordo_status_name(st), ordo_last_error_message());
    exit(1);
  }
}

static DBusConnection *raw_conn;
static char raw_dest[256];
static char raw_path[256];

/* One raw signal shaped like Notify, straight to the observer; body_first:
 * its header fields set after its arguments. */
static void send_raw(int64_t v, int body_first) {
  DBusMessage *m = body_first ? dbus_message_new(DBUS_MESSAGE_TYPE_SIGNAL)
                              : dbus_message_new_signal("/dev/ordo/Bench", "dev.ordo.Bench", "Notify");
  if (!m) die("out of memory", NULL);
  if (!body_first) dbus_message_set_destination(m, raw_dest);
  bench_append_notify(m, raw_path, KEY, v);
  if (body_first && !(dbus_message_set_path(m, "/dev/ordo/Bench") && dbus_message_set_interface(m, "dev.ordo.Bench") &&
                      dbus_message_set_member(m, "Notify") && dbus_message_set_destination(m, raw_dest)))
    die("out of memory", NULL);
  if (!dbus_connection_send(raw_conn, m, NULL)) die("send", "out of memory");
  dbus_message_unref(m);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: ordo-host-bench ADDRESS NAME  (then commands on stdin)\n");
    return 64;
  }
  ordo_bus *bus = ordo_bus_new();
  if (!bus) die("ordo_bus_new failed", NULL);
  check(ordo_dbus_publish(bus, argv[1], argv[2]), "ordo_dbus_publish");
  int fd = ordo_dbus_fd(bus);
  if (fd < 0) die("ordo_dbus_fd", ordo_last_error_message());

  DBusError err;
  dbus_error_init(&err);
  raw_conn = dbus_connection_open_private(argv[1], &err);
  if (!raw_conn) die("connect", err.message);
  if (!dbus_bus_register(raw_conn, &err)) die("register on the bus", err.message);

  /* bench.k holds a value before the first measured commit. */
  int64_t value = 0;
  check(ordo_begin(bus), "begin");
  check(ordo_set_int64(bus, KEY, value), "set");
  check(ordo_commit(bus, NULL), "commit");

  printf("ready\n");
  fflush(stdout);

  char line[600];
  size_t used = 0;
  for (;;) {
    struct pollfd p[2] = {{0, POLLIN, 0}, {fd, POLLIN, 0}};
    if (poll(p, 2, 1000) < 0) continue;
    if (p[1].revents) check(ordo_dbus_dispatch(bus, 0), "ordo_dbus_dispatch");
    if (!p[0].revents) continue;
    ssize_t n = read(0, line + used, sizeof line - 1 - used);
    if (n <= 0) break;
    used += (size_t)n;
    char *nl;
    while ((nl = memchr(line, '\n', used))) {
      *nl = 0;
      long count = 0;
      if (sscanf(line, "ordo %ld", &count) == 1 && count > 0) {
        int64_t first = value + 1;
        for (long i = 0; i < count; i++) {
          check(ordo_begin(bus), "begin");
          check(ordo_set_int64(bus, KEY, ++value), "set");
          check(ordo_commit(bus, NULL), "commit");
        }
        printf("ok %lld %lld\n", (long long)first, (long long)value);
      } else if ((sscanf(line, "raw %ld", &count) == 1 || sscanf(line, "raw-body-first %ld", &count) == 1) && count > 0) {
        int body_first = line[3] == '-';
        if (!raw_dest[0]) die("raw before dest", NULL);
        int64_t first = value + 1;
        for (long i = 0; i < count; i++) send_raw(++value, body_first);
        dbus_connection_flush(raw_conn);
        printf("ok %lld %lld\n", (long long)first, (long long)value);
      } else if (sscanf(line, "dest %255s %255s", raw_dest, raw_path) == 2) {
        printf("ok\n");
      } else {
        die("unknown command", line);
      }
      fflush(stdout);
      used -= (size_t)(nl + 1 - line);
      memmove(line, nl + 1, used);
    }
    if (used == sizeof line - 1) die("command too long", NULL);
  }
  /* Let the last Notify signals go out, then stop publishing with the bus. */
  check(ordo_dbus_dispatch(bus, 0), "ordo_dbus_dispatch");
  ordo_bus_free(bus);
  dbus_connection_close(raw_conn);
  dbus_connection_unref(raw_conn);
  return 0;
}
