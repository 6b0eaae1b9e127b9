/*
 * ordo-dbus-bench: the D-Bus scenario of ordo-bench, on the observer's side.
 * Through one bus daemon (the private one ordod starts), measures in the
 * same rounds:
 *
 *   ordo_notify_per_s     Notify signals per second received by a remote
 *                         observer of "bench.k" while the process that
 *                         publishes the bus (ordo-host-bench: a C program
 *                         hosting its bus through libordo.so and publishing
 *                         it with ordo_dbus_publish) commits transactions
 *                         changing it;
 *   raw_signals_per_s     the same observer receiving signals of the same
 *                         signature (o t as a{sv}) sent by a plain libdbus
 *                         connection of that same process, built the usual
 *                         way (dbus_message_new_signal, then the arguments);
 *   raw_body_first_per_s  the same, each signal built as OrdoDBus builds its
 *                         Notify (arguments first, then the header fields);
 *   ordo_commit_notify_per_s  the Notify rate when each change is a remote
 *                         Commit call to ordod from a driver connection of
 *                         this process (at most WINDOW calls awaiting their
 *                         reply): call, reply and signal, three messages
 *                         through the daemon per Notify;
 *   ordo_roundtrip_us     from sending a Commit to ordod to receiving its
 *                         Notify;
 *   raw_signal_us         from sending a raw signal (driver connection) to
 *                         receiving it;
 *   get_roundtrip_us      a Get method call to ordod and its reply;
 *   commit_wait_us        write and wait: a Commit call to ordod and its
 *                         reply.
 *
 * With --direct DIRECT_ADDRESS (ordod --listen, peer to peer, the same
 * ordod), the same rounds also measure the Commit→Notify rate, the
 * Commit→Notify trip, the Get round trip and the write-and-wait over a
 * driver and an observer connected there (observing their own keypath,
 * KEY_DIRECT, so that the two transports' signals never mix):
 * direct_commit_notify_per_s, direct_vs_daemon_notify (per-round ratio to
 * ordo_commit_notify_per_s), direct_roundtrip_us, direct_get_roundtrip_us,
 * direct_commit_wait_us.
 *
 * Every batch is checked: the observer must receive exactly the values the
 * producer sent (consecutive int64 values of bench.k, transaction ids
 * increasing, the right contract path), or the program fails.
 *
 * usage: ordo-dbus-bench [--direct DIRECT_ADDRESS] ADDRESS SERVICE ROUNDS BATCH SAMPLES [HOST_PROGRAM]
 * SERVICE is ordod's name; HOST_PROGRAM (ordo-host-bench) is started with
 * ADDRESS and HOST_NAME and driven through pipes. Without it, the first two
 * figures are not measured and raw_signals_per_s comes from the driver
 * connection. Prints one "name median" line per figure; exits non-zero on
 * any failure.
 * Build: cc -O2 ordo-dbus-bench.c $(pkg-config --cflags --libs dbus-1)
 */
#define _POSIX_C_SOURCE 200809L
#include <dbus/dbus.h>

#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-dbus.h"

#define PATH "/dev/ordo/Bus"
#define IFACE "dev.ordo.Bus1"
#define RAW_IFACE "dev.ordo.Bench"
#define KEY "bench.k"
#define KEY_DIRECT "bench.direct"
#define HOST_NAME "dev.ordo.BenchHost"
#define WINDOW 64
#define TIMEOUT_MS 10000

static const char *service;
static const char *observer_name;
static char contract_path[256];      /* the observer's contract at ordod */
static char direct_contract_path[256]; /* and over the direct connection */
static char host_contract_path[256]; /* and at the host */
static char ordod_unique[256], host_unique[256];
static const char *raw_path = contract_path; /* what raw signals carry */
static int64_t value; /* the driver's values (Commit calls and raw signals) */
static pid_t host_pid;
static FILE *host_in, *host_out;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "ordo-dbus-bench: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  if (host_pid > 0) kill(host_pid, SIGTERM);
  exit(1);
}

static void check_oom(const void *p) {
  if (!p) die("out of memory", NULL);
}

/* Commit({key: v}, [], []) */
static DBusMessage *commit_message(const char *key, int64_t v) {
  DBusMessage *m = dbus_message_new_method_call(service, PATH, IFACE, "Commit");
  check_oom(m);
  DBusMessageIter it;
  dbus_message_iter_init_append(m, &it);
  bench_append_values(&it, key, v);
  bench_append_strings(&it, NULL, 0);
  bench_append_strings(&it, NULL, 0);
  return m;
}

/* A signal shaped like Notify (o t as a{sv}), sent straight to the observer. */
static DBusMessage *raw_message(int64_t v) {
  DBusMessage *m = dbus_message_new_signal("/dev/ordo/Bench", RAW_IFACE, "Notify");
  check_oom(m);
  dbus_message_set_destination(m, observer_name);
  bench_append_notify(m, raw_path, KEY, v);
  return m;
}

/* What the observer received from one producer since the last reset. */
enum { FROM_ORDOD, FROM_HOST, FROM_RAW, FROM_DIRECT, SOURCES };
static const char *source_name[SOURCES] = {"ordod Notify", "host Notify", "raw signal", "ordod Notify (direct)"};

/* The keypath each source's signals carry. */
static const char *key_of(int src) { return src == FROM_DIRECT ? KEY_DIRECT : KEY; }

typedef struct {
  long count;
  int64_t first, last;
  uint64_t last_txn;
  const char *broken; /* why the sequence is wrong, or NULL */
} track;

static track tracks[SOURCES];

static void reset(int src) { memset(&tracks[src], 0, sizeof tracks[src]); }

/* Reads (o path, t txn, as changed, a{sv} values) and records the value of
 * the source's keypath: consecutive values, increasing transaction ids, the
 * expected path. */
static void record(DBusMessage *m, int src, const char *want_path) {
  track *t = &tracks[src];
  const char *path = NULL, *wrong;
  dbus_uint64_t txn = 0;
  int64_t v = 0;
  if ((wrong = bench_read_notify(m, key_of(src), &path, &txn, &v))) {
    t->broken = wrong;
    return;
  }
  if (strcmp(path, want_path) != 0) t->broken = "wrong contract path";
  else if (t->count > 0 && v != t->last + 1) t->broken = "values not consecutive";
  else if (t->count > 0 && txn <= t->last_txn) t->broken = "transaction ids not increasing";
  if (t->count == 0) t->first = v;
  t->last = v;
  t->last_txn = txn;
  t->count++;
}

/* Checks that `src` received exactly the values first..last. */
static void verify(int src, long batch, int64_t first, int64_t last) {
  track *t = &tracks[src];
  char msg[200];
  if (t->broken || t->count != batch || t->first != first || t->last != last) {
    snprintf(msg, sizeof msg, "%s: %s (received %ld, values %lld..%lld; sent %ld, values %lld..%lld)", source_name[src],
             t->broken ? t->broken : "not what was sent", t->count, (long long)t->first, (long long)t->last, batch,
             (long long)first, (long long)last);
    die("check failed", msg);
  }
}

/* Reads what is available, records the signals and counts the replies. */
static long replies;

static void drain(DBusConnection *c) {
  dbus_connection_read_write(c, 0);
  DBusMessage *m;
  while ((m = dbus_connection_pop_message(c))) {
    int t = dbus_message_get_type(m);
    if (t == DBUS_MESSAGE_TYPE_SIGNAL) {
      const char *sender = dbus_message_get_sender(m);
      if (dbus_message_is_signal(m, IFACE, "Notify") && !sender) {
        /* Peer to peer: only ordod sends on that connection. */
        record(m, FROM_DIRECT, direct_contract_path);
      } else if (dbus_message_is_signal(m, IFACE, "Notify")) {
        if (strcmp(sender, ordod_unique) == 0) record(m, FROM_ORDOD, contract_path);
        else if (strcmp(sender, host_unique) == 0) record(m, FROM_HOST, host_contract_path);
      } else if (dbus_message_is_signal(m, RAW_IFACE, "Notify")) {
        record(m, FROM_RAW, raw_path);
      }
    } else if (t == DBUS_MESSAGE_TYPE_METHOD_RETURN) {
      replies++;
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

/* Sends `batch` Commit calls (at most WINDOW awaiting a reply; src
 * FROM_ORDOD or FROM_DIRECT) or raw signals (FROM_RAW) from drv, and
 * returns the rate at which obs receives what they cause, per second. */
static double throughput(DBusConnection *drv, DBusConnection *obs, long batch, int src) {
  int raw = src == FROM_RAW;
  reset(src);
  replies = 0;
  int64_t first = value + 1;
  long sent = 0;
  double t0 = bench_now_s();
  for (;;) {
    if (tracks[src].count >= batch && (raw || replies >= batch)) break;
    int progressed = 0;
    while (sent < batch && (raw || sent - replies < WINDOW)) {
      DBusMessage *m = raw ? raw_message(++value) : commit_message(key_of(src), ++value);
      if (!dbus_connection_send(drv, m, NULL)) die("send", NULL);
      dbus_message_unref(m);
      sent++;
      progressed = 1;
    }
    if (progressed) dbus_connection_flush(drv);
    long before = replies + tracks[src].count;
    drain(drv);
    drain(obs);
    if (replies + tracks[src].count == before && !progressed) wait_either(drv, obs);
  }
  double t1 = bench_now_s();
  verify(src, batch, first, value);
  return (double)batch / (t1 - t0);
}

/* Asks the host to produce `batch` signals ("ordo": commits on its bus;
 * "raw", "raw-body-first": plain libdbus signals) and returns the rate at
 * which obs receives them, per second, from the command to the last signal. */
static double host_throughput(DBusConnection *obs, const char *command, long batch) {
  int src = strncmp(command, "raw", 3) == 0 ? FROM_RAW : FROM_HOST;
  reset(src);
  double t0 = bench_now_s();
  fprintf(host_in, "%s %ld\n", command, batch);
  fflush(host_in);
  while (tracks[src].count < batch) {
    long before = tracks[src].count;
    drain(obs);
    if (tracks[src].count == before) wait_either(obs, obs);
  }
  double t1 = bench_now_s();
  char line[128];
  long long first = 0, last = 0;
  if (!fgets(line, sizeof line, host_out) || sscanf(line, "ok %lld %lld", &first, &last) != 2) {
    die("ordo-host-bench did not answer", command);
  }
  verify(src, batch, first, last);
  return (double)batch / (t1 - t0);
}

/* One Commit → Notify (or raw signal) latency, in microseconds. */
static double latency(DBusConnection *drv, DBusConnection *obs, int src) {
  int raw = src == FROM_RAW;
  reset(src);
  replies = 0;
  int64_t v = ++value;
  double t0 = bench_now_s();
  DBusMessage *m = raw ? raw_message(v) : commit_message(key_of(src), v);
  if (!dbus_connection_send(drv, m, NULL)) die("send", NULL);
  dbus_message_unref(m);
  dbus_connection_flush(drv);
  while (tracks[src].count < 1) {
    drain(obs);
    if (tracks[src].count >= 1) break;
    wait_either(obs, obs);
  }
  double t1 = bench_now_s();
  while (!raw && replies < 1) {
    drain(drv);
    if (replies >= 1) break;
    wait_either(drv, drv);
  }
  verify(src, 1, v, v);
  return (t1 - t0) * 1e6;
}

/* One call and its reply, in microseconds; takes m. */
static double call_roundtrip(DBusConnection *drv, DBusMessage *m) {
  DBusError err;
  dbus_error_init(&err);
  double t0 = bench_now_s();
  DBusMessage *r = dbus_connection_send_with_reply_and_block(drv, m, TIMEOUT_MS, &err);
  double t1 = bench_now_s();
  if (!r) die(dbus_message_get_member(m), err.message);
  dbus_message_unref(r);
  dbus_message_unref(m);
  return (t1 - t0) * 1e6;
}

/* One Get(KEY) method round trip, in microseconds. */
static double get_roundtrip(DBusConnection *drv) {
  DBusMessage *m = dbus_message_new_method_call(service, PATH, IFACE, "Get");
  check_oom(m);
  const char *key = KEY;
  dbus_message_append_args(m, DBUS_TYPE_STRING, &key, DBUS_TYPE_INVALID);
  return call_roundtrip(drv, m);
}

/* Write and wait: one Commit of `src`'s keypath and its reply, in
 * microseconds; then its Notify is awaited (untimed) and checked. */
static double commit_wait(DBusConnection *drv, DBusConnection *obs, int src) {
  reset(src);
  int64_t v = ++value;
  double us = call_roundtrip(drv, commit_message(key_of(src), v));
  while (tracks[src].count < 1) {
    drain(obs);
    if (tracks[src].count >= 1) break;
    wait_either(obs, obs);
  }
  verify(src, 1, v, v);
  return us;
}

/* Register(name, [key], [], {}) at `dest`; stores the contract path and the
 * unique name of the service that answered ("" peer to peer). */
static void register_observer(DBusConnection *obs, const char *dest, const char *name, const char *key, char *path_out,
                              char *unique_out) {
  DBusMessage *m = dbus_message_new_method_call(dest, PATH, IFACE, "Register");
  check_oom(m);
  bench_append_register(m, name, key);
  DBusError err;
  dbus_error_init(&err);
  DBusMessage *r = dbus_connection_send_with_reply_and_block(obs, m, TIMEOUT_MS, &err);
  if (!r) die("Register", err.message);
  const char *path = NULL;
  if (!dbus_message_get_args(r, &err, DBUS_TYPE_OBJECT_PATH, &path, DBUS_TYPE_INVALID)) die("Register reply", err.message);
  snprintf(path_out, 256, "%s", path);
  const char *sender = dbus_message_get_sender(r);
  snprintf(unique_out, 256, "%s", sender ? sender : "");
  dbus_message_unref(r);
  dbus_message_unref(m);
}

/* Starts the host program with pipes to its stdin and stdout. */
static void start_host(const char *program, const char *address) {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) die("pipe", NULL);
  host_pid = fork();
  if (host_pid < 0) die("fork", NULL);
  if (host_pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    execl(program, program, address, HOST_NAME, (char *)NULL);
    perror(program);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  host_in = fdopen(in[1], "w");
  host_out = fdopen(out[0], "r");
  check_oom(host_in && host_out ? host_in : NULL);
  char line[128];
  if (!fgets(line, sizeof line, host_out) || strcmp(line, "ready\n") != 0) die("ordo-host-bench did not start", program);
}

int main(int argc, char **argv) {
  const char *direct_address = NULL;
  if (argc > 2 && strcmp(argv[1], "--direct") == 0) {
    direct_address = argv[2];
    argv += 2;
    argc -= 2;
  }
  if (argc != 6 && argc != 7) {
    fprintf(stderr, "usage: ordo-dbus-bench [--direct DIRECT_ADDRESS] ADDRESS SERVICE ROUNDS BATCH SAMPLES [HOST_PROGRAM]\n");
    return 64;
  }
  const char *address = argv[1];
  service = argv[2];
  long rounds = atol(argv[3]), batch = atol(argv[4]), samples = atol(argv[5]);
  if (rounds <= 0 || batch <= 0 || samples <= 0) die("ROUNDS, BATCH and SAMPLES must be positive", NULL);
  signal(SIGPIPE, SIG_IGN);

  DBusConnection *drv = bench_connect(address, 0, die);
  DBusConnection *obs = bench_connect(address, 0, die);
  observer_name = dbus_bus_get_unique_name(obs);
  register_observer(obs, service, "bench-observer", KEY, contract_path, ordod_unique);
  DBusConnection *drv_direct = NULL, *obs_direct = NULL;
  if (direct_address) {
    char none[256];
    drv_direct = bench_connect(direct_address, 1, die);
    obs_direct = bench_connect(direct_address, 1, die);
    register_observer(obs_direct, service, "bench-observer-direct", KEY_DIRECT, direct_contract_path, none);
  }
  if (argc == 7) {
    start_host(argv[6], address);
    register_observer(obs, HOST_NAME, "bench-observer", KEY, host_contract_path, host_unique);
    raw_path = host_contract_path;
    char line[128];
    fprintf(host_in, "dest %s %s\n", observer_name, host_contract_path);
    fflush(host_in);
    if (!fgets(line, sizeof line, host_out) || strcmp(line, "ok\n") != 0) die("ordo-host-bench: dest", NULL);
  }
  int hosted = host_pid > 0;

  /* Warm-up. */
  long warm = batch / 4 + 1;
  throughput(drv, obs, warm, FROM_ORDOD);
  if (direct_address) throughput(drv_direct, obs_direct, warm, FROM_DIRECT);
  if (hosted) {
    host_throughput(obs, "ordo", warm);
    host_throughput(obs, "raw", warm);
    host_throughput(obs, "raw-body-first", warm);
  } else {
    throughput(drv, obs, warm, FROM_RAW);
  }

  double *ordo_rate = calloc((size_t)rounds, sizeof(double));
  double *raw_rate = calloc((size_t)rounds, sizeof(double));
  double *commit_rate = calloc((size_t)rounds, sizeof(double));
  double *tuned_rate = calloc((size_t)rounds, sizeof(double));
  double *ordo_lat = calloc((size_t)(rounds * samples), sizeof(double));
  double *raw_lat = calloc((size_t)(rounds * samples), sizeof(double));
  double *get_lat = calloc((size_t)(rounds * samples), sizeof(double));
  double *wait_lat = calloc((size_t)(rounds * samples), sizeof(double));
  double *direct_rate = calloc((size_t)rounds, sizeof(double));
  double *direct_lat = calloc((size_t)(rounds * samples), sizeof(double));
  double *direct_get = calloc((size_t)(rounds * samples), sizeof(double));
  double *direct_wait = calloc((size_t)(rounds * samples), sizeof(double));
  check_oom(ordo_rate && raw_rate && commit_rate && tuned_rate && ordo_lat && raw_lat && get_lat && wait_lat && direct_rate &&
                    direct_lat && direct_get && direct_wait
                ? ordo_rate
                : NULL);
  for (long i = 0; i < rounds; i++) {
    if (hosted) {
      /* Rotate which producer goes first, so none always follows another. */
      for (int k = 0; k < 3; k++) {
        switch ((i + k) % 3) {
        case 0: ordo_rate[i] = host_throughput(obs, "ordo", batch); break;
        case 1: raw_rate[i] = host_throughput(obs, "raw", batch); break;
        default: tuned_rate[i] = host_throughput(obs, "raw-body-first", batch); break;
        }
      }
    } else {
      raw_rate[i] = throughput(drv, obs, batch, FROM_RAW);
    }
    commit_rate[i] = throughput(drv, obs, batch, FROM_ORDOD);
    if (direct_address) direct_rate[i] = throughput(drv_direct, obs_direct, batch, FROM_DIRECT);
    for (long s = 0; s < samples; s++) {
      ordo_lat[i * samples + s] = latency(drv, obs, FROM_ORDOD);
      raw_lat[i * samples + s] = latency(drv, obs, FROM_RAW);
      get_lat[i * samples + s] = get_roundtrip(drv);
      wait_lat[i * samples + s] = commit_wait(drv, obs, FROM_ORDOD);
      if (direct_address) {
        direct_lat[i * samples + s] = latency(drv_direct, obs_direct, FROM_DIRECT);
        direct_get[i * samples + s] = get_roundtrip(drv_direct);
        direct_wait[i * samples + s] = commit_wait(drv_direct, obs_direct, FROM_DIRECT);
      }
    }
  }
  /* The per-round ratio, steadier than the ratio of medians on a loaded machine. */
  double *ratio = calloc((size_t)rounds, sizeof(double));
  double *commit_ratio = calloc((size_t)rounds, sizeof(double));
  double *tuned_ratio = calloc((size_t)rounds, sizeof(double));
  double *direct_ratio = calloc((size_t)rounds, sizeof(double));
  check_oom(ratio && commit_ratio && tuned_ratio && direct_ratio ? ratio : NULL);
  for (long i = 0; i < rounds; i++) {
    ratio[i] = ordo_rate[i] / raw_rate[i];
    commit_ratio[i] = commit_rate[i] / raw_rate[i];
    tuned_ratio[i] = hosted ? ordo_rate[i] / tuned_rate[i] : 0;
    direct_ratio[i] = direct_rate[i] / commit_rate[i];
  }
  if (hosted) {
    printf("ordo_notify_per_s %.1f\n", bench_median(ordo_rate, rounds));
    printf("ordo_vs_raw %.4f\n", bench_median(ratio, rounds));
    printf("raw_body_first_per_s %.1f\n", bench_median(tuned_rate, rounds));
    printf("ordo_vs_raw_body_first %.4f\n", bench_median(tuned_ratio, rounds));
  }
  printf("raw_signals_per_s %.1f\n", bench_median(raw_rate, rounds));
  printf("ordo_commit_notify_per_s %.1f\n", bench_median(commit_rate, rounds));
  printf("ordo_commit_vs_raw %.4f\n", bench_median(commit_ratio, rounds));
  printf("ordo_roundtrip_us %.2f\n", bench_median(ordo_lat, rounds * samples));
  printf("raw_signal_us %.2f\n", bench_median(raw_lat, rounds * samples));
  printf("get_roundtrip_us %.2f\n", bench_median(get_lat, rounds * samples));
  printf("commit_wait_us %.2f\n", bench_median(wait_lat, rounds * samples));
  if (direct_address) {
    printf("direct_commit_notify_per_s %.1f\n", bench_median(direct_rate, rounds));
    printf("direct_vs_daemon_notify %.4f\n", bench_median(direct_ratio, rounds));
    printf("direct_roundtrip_us %.2f\n", bench_median(direct_lat, rounds * samples));
    printf("direct_get_roundtrip_us %.2f\n", bench_median(direct_get, rounds * samples));
    printf("direct_commit_wait_us %.2f\n", bench_median(direct_wait, rounds * samples));
  }
  fflush(stdout);
  if (hosted) {
    fclose(host_in);
    int status = 0;
    if (waitpid(host_pid, &status, 0) != host_pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      host_pid = 0;
      die("ordo-host-bench did not exit cleanly", NULL);
    }
    fclose(host_out);
  }
  DBusConnection *all[4] = {drv, obs, drv_direct, obs_direct};
  for (int k = 0; k < 4; k++) {
    if (!all[k]) continue;
    dbus_connection_close(all[k]);
    dbus_connection_unref(all[k]);
  }
  return 0;
}
