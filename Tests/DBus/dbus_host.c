/* A C program that publishes its own Ordo bus over D-Bus (ordo_dbus_publish)
 * and serves it from a poll() loop on ordo_dbus_fd + ordo_dbus_dispatch.
 * Tests/DBus/test_dbus.py drives it with Python/busctl clients.
 *
 *   dbus_host ADDRESS NAME
 *
 * Local contracts (so that remote observers meet priorities and data levels):
 *   "double"   priority -3, reads in.raw, writes in.norm = 2 * in.raw
 *   "sum"      data, reads in.norm, writes calc.sum = in.norm + 1   (calc.sum has level 1)
 *   "control"  data, reads ctl.*: ctl.burst = N starts a thread that commits
 *              bg.n = 1..N from outside the dispatch thread; ctl.local = N
 *              makes the main loop, once ordo_dbus_fd is idle, commit
 *              loc.n = 1..N itself, between two dispatches, then wait on
 *              ordo_dbus_fd with no timeout (the Notify signals must go out
 *              without any other event);
 *              ctl.quit ends.
 * Prints "ready" once published, "bye" before a clean exit.
 */
#include <ordo.h>

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int quit_requested;
static long long burst_count;
static pthread_t burst_thread;
static int burst_started;
static long long local_count;

#define CHECK(expr)                                                                  \
  do {                                                                               \
    ordo_status st_ = (expr);                                                        \
    if (st_ != ORDO_OK) {                                                            \
      fprintf(stderr, "dbus_host: %s failed: %d %s\n", #expr, (int)st_,              \
              ordo_last_error_message());                                            \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static void on_double(ordo_bus *bus, const ordo_notification *note, void *user) {
  int64_t raw = 0;
  (void)note;
  (void)user;
  if (ordo_get_int64(bus, "in.raw", &raw) == ORDO_OK) CHECK(ordo_set_int64(bus, "in.norm", raw * 2));
}

static void on_sum(ordo_bus *bus, const ordo_notification *note, void *user) {
  int64_t norm = 0;
  (void)note;
  (void)user;
  if (ordo_get_int64(bus, "in.norm", &norm) == ORDO_OK) CHECK(ordo_set_int64(bus, "calc.sum", norm + 1));
}

static void *burst(void *arg) {
  ordo_bus *bus = arg;
  for (long long i = 1; i <= burst_count; i++) {
    uint64_t txn = 0;
    CHECK(ordo_begin(bus));
    CHECK(ordo_set_int64(bus, "bg.n", i));
    CHECK(ordo_commit(bus, &txn));
  }
  return NULL;
}

static void on_control(ordo_bus *bus, const ordo_notification *note, void *user) {
  (void)user;
  for (size_t i = 0; i < note->n_changed; i++) {
    if (strcmp(note->changed[i], "ctl.quit") == 0) quit_requested = 1;
    if (strcmp(note->changed[i], "ctl.local") == 0) {
      int64_t n = 0;
      CHECK(ordo_get_int64(bus, "ctl.local", &n));
      local_count = n;
    }
    if (strcmp(note->changed[i], "ctl.burst") == 0 && !burst_started) {
      int64_t n = 0;
      CHECK(ordo_get_int64(bus, "ctl.burst", &n));
      burst_count = n;
      burst_started = 1;
      if (pthread_create(&burst_thread, NULL, burst, bus) != 0) exit(1);
    }
  }
}

static void expect(ordo_status got, ordo_status want, const char *what) {
  if (got != want) {
    fprintf(stderr, "dbus_host: %s: got %d, want %d (%s)\n", what, (int)got, (int)want, ordo_last_error_message());
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: dbus_host ADDRESS NAME\n");
    return 2;
  }
  ordo_bus *bus = ordo_bus_new();

  /* Misuse first: each is an error code with a message, never a crash. */
  expect(ordo_dbus_publish(NULL, argv[1], argv[2]), ORDO_E_INVALID_ARGUMENT, "publish(NULL bus)");
  if (ordo_dbus_fd(NULL) != -1 || ordo_dbus_fd(bus) != -1) {
    fprintf(stderr, "dbus_host: ordo_dbus_fd before publish is not -1\n");
    return 1;
  }
  expect(ordo_dbus_dispatch(bus, 0), ORDO_E_DBUS, "dispatch before publish");
  expect(ordo_dbus_dispatch(NULL, 0), ORDO_E_INVALID_ARGUMENT, "dispatch(NULL)");
  expect(ordo_dbus_publish(bus, "\xff\xfe", argv[2]), ORDO_E_INVALID_ARGUMENT, "publish(invalid UTF-8 address)");
  expect(ordo_dbus_publish(bus, "unix:path=/nonexistent/ordo-test", argv[2]), ORDO_E_DBUS, "publish(bad address)");
  if (strlen(ordo_last_error_message()) == 0) return 1;

  CHECK(ordo_dbus_publish(bus, argv[1], argv[2]));
  expect(ordo_dbus_publish(bus, argv[1], argv[2]), ORDO_E_DBUS, "publish twice");

  const char *r_double[] = {"in.raw"}, *w_double[] = {"in.norm"};
  const char *r_sum[] = {"in.norm"}, *w_sum[] = {"calc.sum"};
  const char *r_ctl[] = {"ctl.*"};
  ordo_contract_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.size = sizeof spec;
  spec.name = "double";
  spec.reads = r_double;
  spec.n_reads = 1;
  spec.writes = w_double;
  spec.n_writes = 1;
  spec.priority = -3;
  spec.callback = on_double;
  CHECK(ordo_register(bus, &spec, NULL));
  spec.name = "sum";
  spec.reads = r_sum;
  spec.writes = w_sum;
  spec.priority = ORDO_NO_PRIORITY;
  spec.callback = on_sum;
  CHECK(ordo_register(bus, &spec, NULL));
  spec.name = "control";
  spec.reads = r_ctl;
  spec.writes = NULL;
  spec.n_writes = 0;
  spec.callback = on_control;
  CHECK(ordo_register(bus, &spec, NULL));

  int fd = ordo_dbus_fd(bus);
  if (fd < 0) {
    fprintf(stderr, "dbus_host: ordo_dbus_fd: %s\n", ordo_last_error_message());
    return 1;
  }
  printf("ready\n");
  fflush(stdout);

  int timeout = 1000;
  while (!quit_requested) {
    struct pollfd p = {fd, POLLIN, 0};
    int n = poll(&p, 1, timeout);
    timeout = 1000;
    if (n < 0) continue;
    CHECK(ordo_dbus_dispatch(bus, 0));
    if (local_count > 0) {
      /* Commits on the dispatching thread, outside ordo_dbus_dispatch, once
         the connection is idle (as after a timer or a UI event). */
      struct pollfd idle = {fd, POLLIN, 0};
      while (poll(&idle, 1, 0) > 0) CHECK(ordo_dbus_dispatch(bus, 0));
      for (long long i = 1; i <= local_count; i++) {
        CHECK(ordo_begin(bus));
        CHECK(ordo_set_int64(bus, "loc.n", i));
        CHECK(ordo_commit(bus, NULL));
      }
      local_count = 0;
      timeout = -1;
    }
  }
  if (burst_started) pthread_join(burst_thread, NULL);
  /* Let the last Notify signals go out, then stop publishing with the bus. */
  CHECK(ordo_dbus_dispatch(bus, 0));
  ordo_bus_free(bus);
  printf("bye\n");
  return 0;
}
