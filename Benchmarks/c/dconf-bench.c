/*
 * dconf-bench: the dconf comparator of the durable-ordod scenario (SPEC §9,
 * §11; docs/storage.md). One run measures one target, dconf or ordod, on a
 * private dbus-daemon it starts (or peer to peer: --direct below), with
 * KEYS distinct keys under one directory, a writer (this process) and a
 * watcher (a child process) watching the directory:
 *
 *   (a) write-and-wait: each write waits for its acknowledgement
 *       (dconf_client_write_sync; Commit and its reply); writes/s until the
 *       last acknowledgement and notifications/s until the watcher has seen
 *       every key;
 *   (b) p50/p99 write→notification latency over the writes of (a): from the
 *       start of the write call to the watcher receiving the notification
 *       naming the key (CLOCK_MONOTONIC, shared by both processes);
 *   (c) a burst of KEYS writes without waiting (dconf_client_write_fast,
 *       which merges writes queued behind the one in flight, then
 *       dconf_client_sync; KEYS pipelined Commits, then their replies):
 *       writes/s until all are acknowledged, writes/s until the watcher has
 *       seen every key, and the number of notifications it received.
 *   (c, merged; ordod only) the same burst through a client-side merging
 *       writer with dconf's write_fast semantics (docs/dbus.md "Merging
 *       writes", OrdoDBus.MergingWriter): at most one Commit in flight; a
 *       write issued while none is goes out at once as its own Commit, the
 *       writes issued while one is in flight are merged into one pending
 *       batch (last value per key wins) sent as one Commit when the reply
 *       arrives. The writer looks for that reply (without waiting) before
 *       each write, as a client processing its replies as they come does.
 *       Same figures, plus the number of Commits sent.
 *
 * dconf: dconf-service is started with XDG_CONFIG_HOME and XDG_RUNTIME_DIR in
 * a fresh directory under --dir (its database is DIR/.../config/dconf/user);
 * both dconf clients are libdconf (GDBus). ordod: the --ordod program is
 * started with --address and --name and any --ordod-arg (for example
 * --ordod-arg=--state --ordod-arg=DIR/state.ordo later); both clients use
 * libdbus: Commit(a{sv} set, as touch, as remove) → t and a watcher contract
 * Register(s, as reads, as writes, a{sv}) → o receiving Notify(o, t, as,
 * a{sv}).
 *
 * Two more measurements:
 *   --committers N (ordod, no watcher): group commit. N processes, each with its own
 *       connection, commit --keys write-and-wait Commits each (keys of their
 *       own) at the same time; commits/s over all of them until the last
 *       acknowledgement. Against a durable ordod, N > 1 shares syncs.
 *   --target floor: what the bus daemon alone costs for a Commit: a trivial
 *       libdbus service (a child process) that sends what ordod sends and
 *       does nothing else: the watcher's Register makes it the destination
 *       of the signals; each Commit gets a Notify-shaped signal naming its
 *       key, sent to the watcher, then its reply (ordod's order): three
 *       messages through the daemon per write. Writer and watcher are the
 *       ordod ones, so (a), (b) and (c) are measured exactly as for ordod:
 *       the write-and-wait, latency and burst floors of any service behind
 *       this dbus-daemon.
 *   --target durable-floor: the same service made durable the simplest
 *       way: the Commits it reads from the socket at once share one sync
 *       (4 KiB written in place in a preallocated file of DIR and
 *       fdatasync'd, as --target sync below) before their Notify and
 *       reply go out. The floor of any durable service behind this
 *       dbus-daemon that syncs once per acknowledged write, measured as
 *       such a service runs: its idle gaps, wakeups and syncs together.
 *   --target sync: what one sync costs on the disk of DIR (no bus): a file
 *       made in DIR itself (where durable-bench.py puts the state file),
 *       4 MiB written and fsynced first, so that, as in SQLite's WAL once
 *       it has reached its size, every later write overwrites allocated
 *       blocks; then KEYS x ROUNDS times one 4 KiB block (aligned, the
 *       next one round the file) written in place and fdatasync'd, the
 *       system call SQLite makes for the WAL at each COMMIT (strace shows
 *       fdatasync); p50/p99/mean of write + fdatasync, in microseconds.
 *       With --pause-us N the thread sleeps N microseconds (nanosleep, not
 *       timed) before each write: a service that syncs once per
 *       write-and-wait write is idle for a round trip between its syncs,
 *       and a sync after an idle gap costs more here than one right after
 *       another (the idle virtual CPU and disk queue wake up for it).
 *
 * --direct (targets ordod, floor, durable-floor): the same measurements
 * peer to peer, with no bus daemon at all: the service listens on a socket
 * in the run's directory (DIR/dconf-bench-XXXXXX/direct) and the writer,
 * the watcher and the committers connect to it with
 * dbus_connection_open_private and no Hello (docs/dbus.md, "Direct
 * connections"). ordod runs with --no-bus --listen unix:path=SOCKET; the
 * floor services listen with dbus_server_listen and answer every
 * connection in one poll loop, the Notify going out on the connection the
 * watcher's Register came on. What the bus daemon adds to a write is the
 * difference between a target's two transports.
 *
 * --samples PATH: also writes every latency sample (microseconds, one per
 * line) to PATH: write->notification latencies (dconf, ordod) or
 * write+fdatasync times (sync).
 *
 * usage: dconf-bench --target dconf|ordod|floor|durable-floor|sync [--direct] [--keys N] [--rounds R]
 *          [--dir DIR] [--ordod PATH] [--ordod-arg ARG]... [--service NAME]
 *          [--dconf-service PATH] [--committers N] [--samples PATH] [--pause-us N]
 * Prints one JSON object on stdout; exits non-zero on any failure (every
 * write must be acknowledged and every key notified, or it fails).
 * Build: cc -O2 -Wall -Wextra -Werror dconf-bench.c \
 *          $(pkg-config --cflags --libs dconf dbus-1)
 */
#define _GNU_SOURCE
#include <dbus/dbus.h>
#include <dconf.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-dbus.h"

#define ORDO_PATH "/dev/ordo/Bus"
#define ORDO_IFACE "dev.ordo.Bus1"
#define DCONF_NAME "ca.desrt.dconf"
#define TIMEOUT_S 60.0
#define MAX_CHILDREN 4

enum target { DCONF, ORDOD, FLOOR, DURABLE_FLOOR, SYNC };
static enum target target;
static long keys = 1000, rounds = 3;
static long pause_us = 0; /* --target sync: idle gap before each write */
static int direct;        /* --direct: peer to peer, no bus daemon */
static const char *service = "dev.ordo.Bus";
static char tmpdir[4096];
static pid_t children[MAX_CHILDREN];
static int nchildren;

static void cleanup(void) {
  /* GDBus (libdconf's session-bus connection) raises SIGTERM in this
   * process when the bus daemon goes away (exit-on-close). */
  signal(SIGTERM, SIG_IGN);
  for (int i = nchildren - 1; i >= 0; i--) {
    kill(children[i], SIGTERM);
    waitpid(children[i], NULL, 0);
  }
  nchildren = 0;
  if (tmpdir[0]) {
    pid_t p = fork();
    if (p == 0) {
      execlp("rm", "rm", "-rf", tmpdir, (char *)NULL);
      _exit(127);
    }
    if (p > 0) waitpid(p, NULL, 0);
    tmpdir[0] = 0;
  }
}

static void die(const char *what, const char *detail) {
  fprintf(stderr, "dconf-bench: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  cleanup();
  exit(1);
}

/* Starts argv with stdout on a pipe (returned in *out, or /dev/null when out
 * is NULL), stderr on /dev/null when `quiet`; the child dies with this
 * process. */
static pid_t spawn(char *const argv[], int *out, int quiet) {
  int p[2] = {-1, -1};
  if (out && pipe(p) != 0) die("pipe", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) die("fork", strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(out ? p[1] : null, 1);
    if (quiet) dup2(null, 2);
    if (out) {
      close(p[0]);
      close(p[1]);
    }
    execvp(argv[0], argv);
    fprintf(stderr, "dconf-bench: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  if (out) {
    close(p[1]);
    *out = p[0];
  }
  if (nchildren < MAX_CHILDREN) children[nchildren++] = pid;
  return pid;
}

/* One line from fd (without the newline), waiting at most TIMEOUT_S. */
static void read_line(int fd, char *buf, size_t size, const char *what) {
  size_t n = 0;
  double deadline = bench_now_s() + TIMEOUT_S;
  while (n + 1 < size) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) {
      if (bench_now_s() > deadline) die("timed out waiting for", what);
      continue;
    }
    char c;
    if (read(fd, &c, 1) != 1) die("no answer from", what);
    if (c == '\n') break;
    buf[n++] = c;
  }
  buf[n] = 0;
}

/* Starts a private dbus-daemon; returns its address (static buffer). */
static const char *start_bus(void) {
  static char address[1024];
  char conf[4200];
  snprintf(conf, sizeof conf, "%s/bus.conf", tmpdir);
  FILE *f = fopen(conf, "w");
  if (!f) die("cannot write", conf);
  fprintf(f,
          "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n"
          " \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n"
          "<busconfig><type>session</type><listen>unix:dir=%s</listen><auth>EXTERNAL</auth>\n"
          "<policy context=\"default\"><allow send_destination=\"*\" eavesdrop=\"true\"/>"
          "<allow eavesdrop=\"true\"/><allow own=\"*\"/></policy>\n"
          "<limit name=\"max_outgoing_bytes\">67108864</limit>\n"
          /* as the session bus (session.conf); the built-in default is 128 */
          "<limit name=\"max_replies_per_connection\">50000</limit></busconfig>\n",
          tmpdir);
  fclose(f);
  char conf_arg[4300];
  snprintf(conf_arg, sizeof conf_arg, "--config-file=%s", conf);
  char *argv[] = {"dbus-daemon", conf_arg, "--nofork", "--nopidfile", "--print-address=1", NULL};
  int out;
  spawn(argv, &out, 1); /* its stderr only says it cannot raise its fd limit */
  read_line(out, address, sizeof address, "dbus-daemon");
  return address;
}

/* Waits until the service `name` answers at `address`: until it owns the
 * name on the bus daemon there or, --direct, until its socket there takes
 * a connection. */
static void wait_for_service(const char *address, const char *name) {
  DBusError err;
  dbus_error_init(&err);
  double deadline = bench_now_s() + TIMEOUT_S;
  if (direct) {
    DBusConnection *c;
    while (!(c = dbus_connection_open_private(address, &err))) {
      dbus_error_free(&err);
      if (bench_now_s() > deadline) die("timed out waiting for the socket", address);
      usleep(10000);
    }
    dbus_connection_close(c);
    dbus_connection_unref(c);
    return;
  }
  DBusConnection *c = bench_connect(address, 0, die);
  while (!dbus_bus_name_has_owner(c, name, &err)) {
    if (dbus_error_is_set(&err)) die("NameHasOwner", err.message);
    if (bench_now_s() > deadline) die("timed out waiting for the service", name);
    usleep(10000);
  }
  dbus_connection_close(c);
  dbus_connection_unref(c);
}

/* ---- what the watcher reports, over a pipe ---- */

enum { REC_READY, REC_KEY, REC_NOTIFICATION };
typedef struct {
  int32_t kind;
  int32_t index; /* REC_KEY: the key (-1: the done marker); REC_NOTIFICATION: keys in it */
  double t;
} rec;

static int report_fd = -1;

static void report(int kind, int index) {
  rec r = {kind, index, bench_now_s()};
  if (write(report_fd, &r, sizeof r) != (ssize_t)sizeof r) _exit(3);
}

/* The key index in a name ending in kNNNN or "done" (-1); -2 otherwise. */
static int key_index(const char *name) {
  const char *tail = strrchr(name, target == DCONF ? '/' : '.');
  tail = tail ? tail + 1 : name;
  if (strcmp(tail, "done") == 0) return -1;
  if (tail[0] != 'k') return -2;
  char *end;
  long i = strtol(tail + 1, &end, 10);
  return *end == 0 && i >= 0 && i < keys ? (int)i : -2;
}

static void key_name(char *buf, size_t size, long i) {
  if (target == DCONF) {
    if (i < 0) snprintf(buf, size, "/bench/done");
    else snprintf(buf, size, "/bench/k%04ld", i);
  } else {
    if (i < 0) snprintf(buf, size, "bench.done");
    else snprintf(buf, size, "bench.k%04ld", i);
  }
}

/* dconf watcher: one "changed" signal is one notification. */
static void dconf_changed(DConfClient *client, const gchar *prefix, const gchar *const *changes, const gchar *tag,
                          gpointer user) {
  (void)client;
  (void)tag;
  (void)user;
  int n = 0;
  char full[512];
  for (int i = 0; changes[i]; i++) {
    snprintf(full, sizeof full, "%s%s", prefix, changes[i]);
    int k = key_index(full);
    if (k != -2) report(REC_KEY, k);
    n++;
  }
  report(REC_NOTIFICATION, n);
}

static void dconf_watcher(void) {
  DConfClient *client = dconf_client_new();
  g_signal_connect(client, "changed", G_CALLBACK(dconf_changed), NULL);
  dconf_client_watch_sync(client, "/bench/");
  report(REC_READY, 0);
  GMainLoop *loop = g_main_loop_new(NULL, FALSE);
  g_main_loop_run(loop);
}

/* Registers the ordod watcher's contract: reads bench.**. */
static void register_watcher(DBusConnection *c) {
  DBusMessage *m = dbus_message_new_method_call(service, ORDO_PATH, ORDO_IFACE, "Register");
  bench_append_register(m, "dconf-bench-watcher", "bench.**");
  DBusError err;
  dbus_error_init(&err);
  DBusMessage *r = dbus_connection_send_with_reply_and_block(c, m, 10000, &err);
  if (!r) {
    fprintf(stderr, "dconf-bench: watcher: Register: %s\n", err.message);
    _exit(3);
  }
  dbus_message_unref(r);
  dbus_message_unref(m);
}

/* ordod watcher: a contract reading bench.**; one Notify is one
 * notification. */
static void ordod_watcher(const char *address) {
  DBusConnection *c = bench_connect(address, direct, die);
  DBusMessage *m;
  DBusMessageIter it;
  register_watcher(c);
  report(REC_READY, 0);
  while (dbus_connection_read_write(c, -1)) {
    while ((m = dbus_connection_pop_message(c))) {
      if (dbus_message_is_signal(m, ORDO_IFACE, "Notify") && strcmp(dbus_message_get_signature(m), "otasa{sv}") == 0) {
        DBusMessageIter sub;
        dbus_message_iter_init(m, &it);
        dbus_message_iter_next(&it);
        dbus_message_iter_next(&it);
        dbus_message_iter_recurse(&it, &sub);
        int n = 0;
        while (dbus_message_iter_get_arg_type(&sub) == DBUS_TYPE_STRING) {
          const char *k = NULL;
          dbus_message_iter_get_basic(&sub, &k);
          int idx = key_index(k);
          if (idx != -2) report(REC_KEY, idx);
          n++;
          dbus_message_iter_next(&sub);
        }
        report(REC_NOTIFICATION, n);
      }
      dbus_message_unref(m);
    }
  }
  _exit(0);
}

/* ---- the writer ---- */

static DConfClient *dconf_writer;
static DBusConnection *ordod_writer;
static int64_t next_value;

/* Writes key i (-1: the done marker) and waits for the acknowledgement;
 * ordod with `pipelined`: sends the Commit without waiting. */
static void write_key(long i, int pipelined) {
  char k[64];
  key_name(k, sizeof k, i);
  int64_t v = ++next_value;
  if (target == DCONF) {
    GError *error = NULL;
    if (!dconf_client_write_sync(dconf_writer, k, g_variant_new_int64(v), NULL, NULL, &error)) {
      die("dconf_client_write_sync", error ? error->message : k);
    }
  } else {
    DBusMessage *m = dbus_message_new_method_call(service, ORDO_PATH, ORDO_IFACE, "Commit");
    DBusMessageIter it;
    dbus_message_iter_init_append(m, &it);
    bench_append_values(&it, k, v);
    bench_append_strings(&it, NULL, 0);
    bench_append_strings(&it, NULL, 0);
    if (pipelined) {
      if (!dbus_connection_send(ordod_writer, m, NULL)) die("send", NULL);
    } else {
      DBusError err;
      dbus_error_init(&err);
      DBusMessage *r = dbus_connection_send_with_reply_and_block(ordod_writer, m, 30000, &err);
      if (!r) die("Commit", err.message);
      dbus_message_unref(r);
    }
    dbus_message_unref(m);
  }
}

/* ---- (c, merged): a merging writer over libdbus ---- */

static int64_t *pending_value;   /* by key index */
static char *pending_has;        /* by key index */
static long *pending_keys, npending;
static dbus_uint32_t in_flight_serial;
static int in_flight;
static long merged_commits;

/* Sends the pending batch as one Commit (if no Commit is in flight). */
static void merged_send(void) {
  if (in_flight || npending == 0) return;
  DBusMessage *m = dbus_message_new_method_call(service, ORDO_PATH, ORDO_IFACE, "Commit");
  DBusMessageIter it, dict, entry, var;
  dbus_message_iter_init_append(m, &it);
  dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "{sv}", &dict);
  for (long j = 0; j < npending; j++) {
    long i = pending_keys[j];
    char k[64];
    key_name(k, sizeof k, i);
    const char *kp = k;
    dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
    dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &kp);
    dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "x", &var);
    dbus_message_iter_append_basic(&var, DBUS_TYPE_INT64, &pending_value[i]);
    dbus_message_iter_close_container(&entry, &var);
    dbus_message_iter_close_container(&dict, &entry);
    pending_has[i] = 0;
  }
  dbus_message_iter_close_container(&it, &dict);
  bench_append_strings(&it, NULL, 0);
  bench_append_strings(&it, NULL, 0);
  npending = 0;
  if (!dbus_connection_send(ordod_writer, m, &in_flight_serial)) die("send", NULL);
  dbus_connection_flush(ordod_writer);
  dbus_message_unref(m);
  in_flight = 1;
  merged_commits++;
}

/* Takes the replies that arrived (waiting up to timeout_ms); sends the
 * pending batch once the Commit in flight is answered. */
static void merged_poll(int timeout_ms) {
  if (!dbus_connection_read_write(ordod_writer, timeout_ms)) die("the connection to ordod closed", NULL);
  DBusMessage *m;
  while ((m = dbus_connection_pop_message(ordod_writer))) {
    int t = dbus_message_get_type(m);
    if ((t == DBUS_MESSAGE_TYPE_METHOD_RETURN || t == DBUS_MESSAGE_TYPE_ERROR) && in_flight &&
        dbus_message_get_reply_serial(m) == in_flight_serial) {
      if (t == DBUS_MESSAGE_TYPE_ERROR) die("merged Commit failed", dbus_message_get_error_name(m));
      in_flight = 0;
    }
    dbus_message_unref(m);
  }
  merged_send();
}

/* One merged write of key i. */
static void merged_write(long i) {
  merged_poll(0);
  if (!pending_has[i]) {
    pending_has[i] = 1;
    pending_keys[npending++] = i;
  }
  pending_value[i] = ++next_value; /* the last write of a key wins */
  merged_send();
}

/* Waits until every merged write is acknowledged. */
static void merged_flush(void) {
  double deadline = bench_now_s() + TIMEOUT_S;
  while (in_flight || npending) {
    if (bench_now_s() > deadline) die("timed out waiting for the merged Commits", NULL);
    merged_poll(1000);
  }
}

/* Reads watcher records until the done marker; fills seen[i] with the
 * first notification time of key i; returns the notification count and
 * the time of the last new key in *last_key. */
static long collect(int fd, double *seen, double *last_key) {
  long notifications = 0;
  int done = 0;
  for (long i = 0; i < keys; i++) seen[i] = 0;
  *last_key = 0;
  double deadline = bench_now_s() + TIMEOUT_S;
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) {
      if (bench_now_s() > deadline) die("timed out waiting for the watcher's notifications", NULL);
      continue;
    }
    rec r;
    if (read(fd, &r, sizeof r) != (ssize_t)sizeof r) die("the watcher stopped", NULL);
    if (r.kind == REC_NOTIFICATION) {
      if (done) return notifications; /* the done marker's own notification */
      notifications++;
    } else if (r.kind == REC_KEY && r.index == -1) {
      done = 1;
    } else if (r.kind == REC_KEY && r.index >= 0 && seen[r.index] == 0) {
      seen[r.index] = r.t;
      if (r.t > *last_key) *last_key = r.t;
    }
  }
}

/* Writes the done marker (waiting for its acknowledgement). */
static void done_marker(void) { write_key(-1, 0); }

/* Writes the samples to `path` (one per line), unless path is NULL. */
static void write_samples(const char *path, const double *xs, long n) {
  if (!path) return;
  FILE *f = fopen(path, "w");
  if (!f) die("cannot write", path);
  for (long i = 0; i < n; i++) fprintf(f, "%.1f\n", xs[i]);
  if (fclose(f) != 0) die("cannot write", path);
}

static double quantile(double *xs, long n, double q) {
  qsort(xs, (size_t)n, sizeof *xs, bench_by_value);
  long i = (long)(q * (double)(n - 1) + 0.5);
  return xs[i];
}

/* ---- group commit and the daemon's floor ---- */

/* N processes committing write-and-wait at once; prints the JSON line. */
static void group_commit(const char *address, long committers) {
  int go[2];
  if (pipe(go) != 0) die("pipe", strerror(errno));
  pid_t pids[64];
  for (long c = 0; c < committers; c++) {
    pid_t pid = fork();
    if (pid < 0) die("fork", strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      close(go[1]);
      nchildren = 0;
      tmpdir[0] = 0;
      DBusConnection *conn = bench_connect(address, direct, die);
      char b;
      if (read(go[0], &b, 1) < 0) _exit(2);
      for (long i = 0; i < keys; i++) {
        char k[64];
        snprintf(k, sizeof k, "group.c%ld.k%04ld", c, i % 100);
        DBusMessage *m = dbus_message_new_method_call(service, ORDO_PATH, ORDO_IFACE, "Commit");
        DBusMessageIter it;
        dbus_message_iter_init_append(m, &it);
        bench_append_values(&it, k, i + 1);
        bench_append_strings(&it, NULL, 0);
        bench_append_strings(&it, NULL, 0);
        DBusError err;
        dbus_error_init(&err);
        DBusMessage *r = dbus_connection_send_with_reply_and_block(conn, m, 30000, &err);
        if (!r) {
          fprintf(stderr, "dconf-bench: committer %ld: Commit: %s\n", c, err.message);
          _exit(1);
        }
        dbus_message_unref(r);
        dbus_message_unref(m);
      }
      _exit(0);
    }
    pids[c] = pid;
  }
  close(go[0]);
  usleep(300000); /* every committer connected */
  double t0 = bench_now_s();
  close(go[1]);
  for (long c = 0; c < committers; c++) {
    int status;
    if (waitpid(pids[c], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) die("a committer failed", NULL);
  }
  double t = bench_now_s() - t0;
  printf("{\"target\": \"ordod\", \"committers\": %ld, \"commits_per_committer\": %ld, \"commits_per_s\": %.1f}\n",
         committers, keys, (double)(committers * keys) / t);
}

/* The durable floor's file: a 4 MiB file made in `dir` and unlinked at
 * once (it stays open), written and fsynced whole, so that each later 4 KiB
 * write overwrites allocated blocks, as SQLite's WAL does once it has its
 * size (ordod writes its WAL to that size when it opens the state file). */
#define SYNC_FILE_BLOCKS 1024
static int sync_file(const char *dir, char *block) {
  char path[4200];
  snprintf(path, sizeof path, "%s/dconf-bench-sync-XXXXXX", dir);
  int fd = mkstemp(path);
  if (fd < 0) die("cannot make a file in", dir);
  unlink(path);
  memset(block, 0x5a, 4096);
  for (long b = 0; b < SYNC_FILE_BLOCKS; b++) {
    if (pwrite(fd, block, 4096, (off_t)b * 4096) != 4096) die("pwrite", strerror(errno));
  }
  if (fsync(fd) != 0) die("fsync", strerror(errno));
  return fd;
}

/* One 4 KiB block written in place (the next one round the file) and
 * fdatasync'd: the system calls SQLite makes for the WAL at each COMMIT. */
static void sync_block(int fd, char *block, long i) {
  block[0] = (char)i;
  if (pwrite(fd, block, 4096, (off_t)(i % SYNC_FILE_BLOCKS) * 4096) != 4096) die("pwrite", strerror(errno));
  if (fdatasync(fd) != 0) die("fdatasync", strerror(errno));
}

/* The trivial service of --target floor: what ordod sends, with no work
 * behind it. A Register makes its sender the watcher (reply only); any other
 * call (a Commit) gets a Notify-shaped signal naming the call's first key,
 * sent to the watcher, and then its reply: ordod's messages in ordod's
 * order (an observer's Notify before the Commit's reply, docs/dbus.md).
 * With `sync_fd` (--target durable-floor) it is durable the simplest way:
 * the Commits of one read from the socket(s) share one sync_block() before
 * their messages go out (group commit, as ordod's). Through the bus daemon
 * the watcher is a unique name on the one connection; over direct
 * connections (--direct) it is the connection its Register came on. */
enum { FLOOR_BATCH = 256 };
typedef struct {
  DBusConnection *conn;
  DBusMessage *m;
} floor_out;
static struct {
  DBusConnection *conn; /* NULL until a Register */
  char name[256];       /* its unique name through the bus daemon; "" direct */
} floor_watcher;
static floor_out floor_queue[2 * FLOOR_BATCH];
static int floor_queued, floor_commits;
static dbus_uint64_t floor_txn;

/* Answers the calls c has read, up to a full queue: the replies (and a
 * Commit's Notify) go to floor_queue. */
static void floor_answer(DBusConnection *c) {
  DBusMessage *m;
  while (floor_queued + 2 <= 2 * FLOOR_BATCH && (m = dbus_connection_pop_message(c))) {
    if (dbus_message_get_type(m) == DBUS_MESSAGE_TYPE_METHOD_CALL) {
      DBusMessage *r = dbus_message_new_method_return(m);
      if (dbus_message_is_method_call(m, ORDO_IFACE, "Register")) {
        const char *sender = dbus_message_get_sender(m);
        floor_watcher.conn = c;
        snprintf(floor_watcher.name, sizeof floor_watcher.name, "%s", sender ? sender : "");
        const char *path = "/dev/ordo/Bus/contract/1";
        dbus_message_append_args(r, DBUS_TYPE_OBJECT_PATH, &path, DBUS_TYPE_INVALID);
      } else {
        floor_txn++;
        floor_commits++;
        dbus_message_append_args(r, DBUS_TYPE_UINT64, &floor_txn, DBUS_TYPE_INVALID);
        DBusMessageIter it;
        dbus_message_iter_init(m, &it);
        const char *key = "k";
        if (dbus_message_iter_get_arg_type(&it) == DBUS_TYPE_ARRAY) {
          DBusMessageIter a, e;
          dbus_message_iter_recurse(&it, &a);
          if (dbus_message_iter_get_arg_type(&a) == DBUS_TYPE_DICT_ENTRY) {
            dbus_message_iter_recurse(&a, &e);
            dbus_message_iter_get_basic(&e, &key);
          }
        }
        if (floor_watcher.conn) {
          DBusMessage *sig = dbus_message_new_signal(ORDO_PATH, ORDO_IFACE, "Notify");
          if (floor_watcher.name[0]) dbus_message_set_destination(sig, floor_watcher.name);
          bench_append_notify(sig, "/dev/ordo/Bus/contract/1", key, (int64_t)floor_txn);
          floor_queue[floor_queued++] = (floor_out){floor_watcher.conn, sig};
        }
      }
      floor_queue[floor_queued++] = (floor_out){c, r};
    }
    dbus_message_unref(m);
  }
}

/* Sends what floor_answer() queued, after one sync of the Commits among
 * it when durable. */
static void floor_send(int sync_fd, char *block, long *syncs) {
  if (floor_commits > 0 && sync_fd >= 0) sync_block(sync_fd, block, (*syncs)++);
  for (int i = 0; i < floor_queued; i++) {
    dbus_connection_send(floor_queue[i].conn, floor_queue[i].m, NULL);
    dbus_message_unref(floor_queue[i].m);
  }
  floor_queued = floor_commits = 0;
}

/* --direct: the connections the DBusServer accepted, and the watches of
 * the server's listening socket and of those connections (libdbus's, for
 * its main loop: here one poll loop). */
enum { FLOOR_PEERS = 16, FLOOR_WATCHES = 4 * FLOOR_PEERS };
static DBusWatch *floor_watches[FLOOR_WATCHES];
static DBusConnection *floor_peers[FLOOR_PEERS];
static int floor_npeers;

static dbus_bool_t floor_add_watch(DBusWatch *w, void *data) {
  (void)data;
  for (int i = 0; i < FLOOR_WATCHES; i++) {
    if (!floor_watches[i]) {
      floor_watches[i] = w;
      return TRUE;
    }
  }
  return FALSE;
}

static void floor_remove_watch(DBusWatch *w, void *data) {
  (void)data;
  for (int i = 0; i < FLOOR_WATCHES; i++) {
    if (floor_watches[i] == w) floor_watches[i] = NULL;
  }
}

static void floor_accept(DBusServer *server, DBusConnection *c, void *data) {
  (void)server;
  (void)data;
  if (floor_npeers == FLOOR_PEERS) return; /* not kept: libdbus closes it */
  if (!dbus_connection_set_watch_functions(c, floor_add_watch, floor_remove_watch, NULL, NULL, NULL)) return;
  floor_peers[floor_npeers++] = dbus_connection_ref(c);
}

/* Serves the floor at `address` peer to peer: each turn polls every
 * enabled watch (the listening socket, each connection's reading and,
 * while it has data to send, writing), lets libdbus handle the ready ones
 * and answers what the connections read (one sync for all of it when
 * durable). */
static void floor_serve_direct(const char *address, int sync_fd, char *block) {
  DBusError err;
  dbus_error_init(&err);
  DBusServer *server = dbus_server_listen(address, &err);
  if (!server) die("floor: listen", err.message);
  dbus_server_set_new_connection_function(server, floor_accept, NULL, NULL);
  if (!dbus_server_set_watch_functions(server, floor_add_watch, floor_remove_watch, NULL, NULL, NULL)) {
    die("floor: watch functions", NULL);
  }
  long syncs = 0;
  for (;;) {
    struct pollfd p[FLOOR_WATCHES];
    DBusWatch *watch_of[FLOOR_WATCHES];
    int np = 0, timeout = -1;
    for (int i = 0; i < FLOOR_WATCHES; i++) {
      DBusWatch *w = floor_watches[i];
      if (!w || !dbus_watch_get_enabled(w)) continue;
      unsigned flags = dbus_watch_get_flags(w);
      short events = (short)((flags & DBUS_WATCH_READABLE ? POLLIN : 0) | (flags & DBUS_WATCH_WRITABLE ? POLLOUT : 0));
      watch_of[np] = w;
      p[np++] = (struct pollfd){dbus_watch_get_unix_fd(w), events, 0};
    }
    for (int i = 0; i < floor_npeers; i++) {
      if (dbus_connection_get_dispatch_status(floor_peers[i]) == DBUS_DISPATCH_DATA_REMAINS) timeout = 0;
    }
    if (poll(p, (nfds_t)np, timeout) < 0 && errno != EINTR) die("floor: poll", strerror(errno));
    for (int i = 0; i < np; i++) {
      short r = p[i].revents;
      if (!r) continue;
      dbus_watch_handle(watch_of[i], (r & POLLIN ? DBUS_WATCH_READABLE : 0) | (r & POLLOUT ? DBUS_WATCH_WRITABLE : 0) |
                                         (r & POLLHUP ? DBUS_WATCH_HANGUP : 0) | (r & POLLERR ? DBUS_WATCH_ERROR : 0));
    }
    for (int i = 0; i < floor_npeers; i++) floor_answer(floor_peers[i]);
    floor_send(sync_fd, block, &syncs);
    for (int i = 0; i < floor_npeers; i++) {
      if (!dbus_connection_get_is_connected(floor_peers[i])) {
        if (floor_watcher.conn == floor_peers[i]) floor_watcher.conn = NULL;
        dbus_connection_unref(floor_peers[i]);
        floor_peers[i--] = floor_peers[--floor_npeers];
      }
    }
  }
}

/* The floor service at `address`: through the bus daemon (owning the
 * service's name) or, --direct, listening there; durable with `sync_dir`. */
static void floor_service(const char *address, const char *sync_dir) {
  static char block[4096] __attribute__((aligned(4096)));
  int fd = sync_dir ? sync_file(sync_dir, block) : -1;
  if (direct) floor_serve_direct(address, fd, block); /* does not return */
  DBusConnection *c = bench_connect(address, 0, die);
  DBusError err;
  dbus_error_init(&err);
  if (dbus_bus_request_name(c, service, DBUS_NAME_FLAG_DO_NOT_QUEUE, &err) != DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER) {
    die("floor: RequestName", err.message);
  }
  long syncs = 0;
  while (dbus_connection_read_write(c, -1)) {
    floor_answer(c);
    floor_send(fd, block, &syncs);
  }
  _exit(0);
}

/* --target sync: write + fdatasync of one 4 KiB block in place, in a file
 * of `dir` (see the top comment); prints the JSON line. */
static void sync_floor(const char *dir, const char *samples) {
  static char block[4096] __attribute__((aligned(4096)));
  int fd = sync_file(dir, block);
  long n = keys * rounds, warm = 100;
  double *xs = calloc((size_t)n, sizeof(double));
  if (!xs) die("out of memory", NULL);
  double sum = 0;
  for (long i = -warm; i < n; i++) {
    if (pause_us > 0) {
      struct timespec gap = {pause_us / 1000000, (pause_us % 1000000) * 1000};
      while (nanosleep(&gap, &gap) != 0 && errno == EINTR) {
      }
    }
    double t0 = bench_now_s();
    sync_block(fd, block, i + warm);
    double us = (bench_now_s() - t0) * 1e6;
    if (i >= 0) {
      xs[i] = us;
      sum += us;
    }
  }
  close(fd);
  write_samples(samples, xs, n);
  printf("{\"target\": \"sync\", \"syncs\": %ld, \"write_bytes\": 4096, \"sync_call\": \"fdatasync\", \"pause_us\": %ld, "
         "\"sync_mean_us\": %.1f, \"sync_p50_us\": %.1f, \"sync_p99_us\": %.1f}\n",
         n, pause_us, sum / (double)n, quantile(xs, n, 0.5), quantile(xs, n, 0.99));
  free(xs);
}

static void usage(void) {
  fprintf(stderr, "usage: dconf-bench --target dconf|ordod|floor|durable-floor|sync [--direct] [--keys N] [--rounds R]\n"
                  "         [--dir DIR] [--ordod PATH] [--ordod-arg ARG]... [--service NAME] [--dconf-service PATH]\n"
                  "         [--committers N] [--samples PATH] [--pause-us N]\n");
  exit(64);
}

int main(int argc, char **argv) {
  const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
  const char *ordod = NULL, *dconf_service = "/usr/libexec/dconf-service", *target_name = NULL, *samples = NULL;
  char *ordod_args[32];
  int nordod_args = 0;
  long committers = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--direct") == 0) {
      direct = 1;
      continue;
    }
    if (strncmp(a, "--", 2) != 0 || !v) usage();
    if (strcmp(a, "--target") == 0) target_name = v;
    else if (strcmp(a, "--keys") == 0) keys = atol(v);
    else if (strcmp(a, "--rounds") == 0) rounds = atol(v);
    else if (strcmp(a, "--dir") == 0) dir = v;
    else if (strcmp(a, "--ordod") == 0) ordod = v;
    else if (strcmp(a, "--ordod-arg") == 0 && nordod_args < 24) ordod_args[nordod_args++] = (char *)v;
    else if (strcmp(a, "--service") == 0) service = v;
    else if (strcmp(a, "--dconf-service") == 0) dconf_service = v;
    else if (strcmp(a, "--committers") == 0) committers = atol(v);
    else if (strcmp(a, "--samples") == 0) samples = v;
    else if (strcmp(a, "--pause-us") == 0) pause_us = atol(v);
    else usage();
    i++;
  }
  if (!target_name) usage();
  if (strcmp(target_name, "dconf") == 0) target = DCONF;
  else if (strcmp(target_name, "ordod") == 0) target = ORDOD;
  else if (strcmp(target_name, "floor") == 0) target = FLOOR;
  else if (strcmp(target_name, "durable-floor") == 0) target = DURABLE_FLOOR;
  else if (strcmp(target_name, "sync") == 0) target = SYNC;
  else usage();
  if (committers < 0 || committers > 64 || (committers > 0 && target != ORDOD)) die("--committers is 1…64, with --target ordod", NULL);
  if (target == ORDOD && !ordod) die("--target ordod needs --ordod PATH", NULL);
  if (keys < 1 || keys > 9999 || rounds < 1) die("--keys must be 1…9999 and --rounds positive", NULL);
  if (pause_us < 0 || pause_us > 1000000 || (pause_us > 0 && target != SYNC)) die("--pause-us is 0…1000000, with --target sync", NULL);
  if (direct && (target == DCONF || target == SYNC)) die("--direct is for --target ordod, floor or durable-floor", NULL);
  signal(SIGPIPE, SIG_IGN);
  if (target == SYNC) {
    sync_floor(dir, samples);
    fflush(stdout);
    return 0;
  }
  dbus_threads_init_default();

  snprintf(tmpdir, sizeof tmpdir, "%s/dconf-bench-XXXXXX", dir);
  if (!mkdtemp(tmpdir)) {
    tmpdir[0] = 0;
    die("cannot make a directory under", dir);
  }
  char config[4200], runtime[4200], statedir[4200];
  snprintf(config, sizeof config, "%s/config", tmpdir);
  snprintf(runtime, sizeof runtime, "%s/run", tmpdir);
  snprintf(statedir, sizeof statedir, "%s/state", tmpdir);
  mkdir(config, 0700);
  mkdir(runtime, 0700);
  mkdir(statedir, 0700);
  setenv("XDG_CONFIG_HOME", config, 1);
  setenv("XDG_RUNTIME_DIR", runtime, 1);
  setenv("ORDO_BENCH_DIR", statedir, 1); /* for --ordod-arg paths of the caller's choosing */
  /* --direct: the service's own socket, and no bus daemon at all. */
  char direct_address[4200];
  snprintf(direct_address, sizeof direct_address, "unix:path=%s/direct", tmpdir);
  if (direct && strlen(direct_address) - strlen("unix:path=") >= 108) die("the socket's path is too long", direct_address);
  const char *address = direct ? direct_address : start_bus();
  if (!direct) setenv("DBUS_SESSION_BUS_ADDRESS", address, 1);

  if (target == FLOOR || target == DURABLE_FLOOR) {
    pid_t f = fork();
    if (f < 0) die("fork", strerror(errno));
    if (f == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      nchildren = 0;
      tmpdir[0] = 0;
      floor_service(address, target == DURABLE_FLOOR ? dir : NULL);
    }
    children[nchildren++] = f;
    wait_for_service(address, service);
  } else if (target == DCONF) {
    char *sargv[] = {(char *)dconf_service, NULL};
    spawn(sargv, NULL, 0);
    wait_for_service(address, DCONF_NAME);
  } else {
    char *oargv[40];
    int n = 0;
    oargv[n++] = (char *)ordod;
    oargv[n++] = direct ? "--no-bus" : "--address";
    if (direct) oargv[n++] = "--listen";
    oargv[n++] = (char *)address;
    oargv[n++] = "--name";
    oargv[n++] = (char *)service;
    for (int i = 0; i < nordod_args; i++) oargv[n++] = ordod_args[i];
    oargv[n] = NULL;
    spawn(oargv, NULL, 0);
    wait_for_service(address, service);
    if (committers > 0) {
      group_commit(address, committers);
      fflush(stdout);
      cleanup();
      return 0;
    }
  }

  /* The watcher, a separate process (forked before any GLib object). */
  int rp[2];
  if (pipe(rp) != 0) die("pipe", strerror(errno));
  fcntl(rp[0], F_SETPIPE_SZ, 1 << 20);
  pid_t w = fork();
  if (w < 0) die("fork", strerror(errno));
  if (w == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    close(rp[0]);
    report_fd = rp[1];
    nchildren = 0;
    tmpdir[0] = 0;
    if (target == DCONF) dconf_watcher();
    else ordod_watcher(address);
    _exit(0);
  }
  children[nchildren++] = w;
  close(rp[1]);
  rec ready;
  struct pollfd p = {rp[0], POLLIN, 0};
  if (poll(&p, 1, (int)(TIMEOUT_S * 1000)) <= 0 || read(rp[0], &ready, sizeof ready) != (ssize_t)sizeof ready ||
      ready.kind != REC_READY) {
    die("the watcher did not start", NULL);
  }

  if (target == DCONF) dconf_writer = dconf_client_new();
  else ordod_writer = bench_connect(address, direct, die);

  double *seen = calloc((size_t)keys, sizeof(double));
  double *sent = calloc((size_t)keys, sizeof(double));
  double *latencies = calloc((size_t)(keys * rounds), sizeof(double));
  double *wait_writes = calloc((size_t)rounds, sizeof(double));
  double *wait_notes = calloc((size_t)rounds, sizeof(double));
  double *burst_acked = calloc((size_t)rounds, sizeof(double));
  double *burst_visible = calloc((size_t)rounds, sizeof(double));
  double *burst_notes = calloc((size_t)rounds, sizeof(double));
  double *merged_acked = calloc((size_t)rounds, sizeof(double));
  double *merged_visible = calloc((size_t)rounds, sizeof(double));
  double *merged_notes = calloc((size_t)rounds, sizeof(double));
  double *merged_sent = calloc((size_t)rounds, sizeof(double));
  pending_value = calloc((size_t)keys, sizeof(int64_t));
  pending_has = calloc((size_t)keys, 1);
  pending_keys = calloc((size_t)keys, sizeof(long));
  if (!merged_acked || !merged_visible || !merged_notes || !merged_sent || !pending_value || !pending_has || !pending_keys) {
    die("out of memory", NULL);
  }
  if (!seen || !sent || !latencies || !wait_writes || !wait_notes || !burst_acked || !burst_visible || !burst_notes) {
    die("out of memory", NULL);
  }
  long nlat = 0;

  /* Warm-up: every key once. */
  for (long i = 0; i < keys; i++) write_key(i, 0);
  done_marker();
  double last;
  collect(rp[0], seen, &last);

  for (long r = 0; r < rounds; r++) {
    /* (a) and (b) */
    double t0 = bench_now_s();
    for (long i = 0; i < keys; i++) {
      sent[i] = bench_now_s();
      write_key(i, 0);
    }
    double t_acked = bench_now_s();
    done_marker();
    long notes = collect(rp[0], seen, &last);
    for (long i = 0; i < keys; i++) {
      if (seen[i] == 0) die("write-and-wait: a key was never notified", NULL);
      latencies[nlat++] = (seen[i] - sent[i]) * 1e6;
    }
    if (notes < keys) die("write-and-wait: fewer notifications than writes", NULL);
    wait_writes[r] = (double)keys / (t_acked - t0);
    wait_notes[r] = (double)notes / (last - t0);

    /* (c) */
    t0 = bench_now_s();
    if (target == DCONF) {
      char k[64];
      for (long i = 0; i < keys; i++) {
        key_name(k, sizeof k, i);
        GError *error = NULL;
        if (!dconf_client_write_fast(dconf_writer, k, g_variant_new_int64(++next_value), &error)) {
          die("dconf_client_write_fast", error ? error->message : k);
        }
      }
      dconf_client_sync(dconf_writer);
    } else {
      for (long i = 0; i < keys; i++) write_key(i, 1);
      dbus_connection_flush(ordod_writer);
      long replies = 0;
      while (replies < keys) {
        if (!dbus_connection_read_write(ordod_writer, 30000)) die("the connection to ordod closed", NULL);
        DBusMessage *m;
        while ((m = dbus_connection_pop_message(ordod_writer))) {
          if (dbus_message_get_type(m) == DBUS_MESSAGE_TYPE_ERROR) die("Commit failed", dbus_message_get_error_name(m));
          if (dbus_message_get_type(m) == DBUS_MESSAGE_TYPE_METHOD_RETURN) replies++;
          dbus_message_unref(m);
        }
      }
    }
    t_acked = bench_now_s();
    done_marker();
    notes = collect(rp[0], seen, &last);
    for (long i = 0; i < keys; i++) {
      if (seen[i] == 0) die("burst: a key was never notified", NULL);
    }
    burst_acked[r] = (double)keys / (t_acked - t0);
    burst_visible[r] = (double)keys / (last - t0);
    burst_notes[r] = (double)notes;

    /* (c, merged) */
    if (target == ORDOD) {
      merged_commits = 0;
      t0 = bench_now_s();
      for (long i = 0; i < keys; i++) merged_write(i);
      merged_flush();
      t_acked = bench_now_s();
      done_marker();
      notes = collect(rp[0], seen, &last);
      for (long i = 0; i < keys; i++) {
        if (seen[i] == 0) die("merged burst: a key was never notified", NULL);
      }
      merged_acked[r] = (double)keys / (t_acked - t0);
      merged_visible[r] = (double)keys / (last - t0);
      merged_notes[r] = (double)notes;
      merged_sent[r] = (double)merged_commits;
    }
  }

  write_samples(samples, latencies, nlat);
  printf("{\"target\": \"%s\", \"keys\": %ld, \"rounds\": %ld, "
         "\"write_wait_writes_per_s\": %.1f, \"write_wait_notifications_per_s\": %.1f, "
         "\"latency_p50_us\": %.1f, \"latency_p99_us\": %.1f, "
         "\"burst_writes\": %ld, \"burst_acked_writes_per_s\": %.1f, \"burst_visible_writes_per_s\": %.1f, "
         "\"burst_notifications\": %.0f, \"transport\": \"%s\"",
         target_name, keys, rounds, quantile(wait_writes, rounds, 0.5), quantile(wait_notes, rounds, 0.5),
         quantile(latencies, nlat, 0.5), quantile(latencies, nlat, 0.99), keys, quantile(burst_acked, rounds, 0.5),
         quantile(burst_visible, rounds, 0.5), quantile(burst_notes, rounds, 0.5), direct ? "direct" : "daemon");
  if (target == FLOOR || target == DURABLE_FLOOR) printf(", \"messages_per_write\": 3");
  if (target == ORDOD) {
    printf(", \"merged_acked_writes_per_s\": %.1f, \"merged_visible_writes_per_s\": %.1f, "
           "\"merged_notifications\": %.0f, \"merged_commits\": %.0f",
           quantile(merged_acked, rounds, 0.5), quantile(merged_visible, rounds, 0.5),
           quantile(merged_notes, rounds, 0.5), quantile(merged_sent, rounds, 0.5));
  }
  printf("}\n");
  fflush(stdout);
  if (ordod_writer) {
    dbus_connection_close(ordod_writer);
    dbus_connection_unref(ordod_writer);
  }
  if (dconf_writer) g_object_unref(dconf_writer);
  cleanup();
  return 0;
}
