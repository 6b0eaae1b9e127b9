/* Follows a playlist served over D-Bus: prints playlist.title and
 * playlist.total once per transaction that changes either, from the
 * program's own poll() loop.
 *
 *   cc -Wall -Wextra -o follow follow.c $(pkg-config --cflags --libs ordo)
 *   ./follow [ADDRESS]        (default: the session bus; ordod serves there)
 *
 * Then, in another shell:  ordoctl set "playlist.title=s:Road trip" playlist.total=300
 * Stops on SIGINT or SIGTERM, or when the connection to the bus is lost. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <ordo.h>

static volatile sig_atomic_t stopping = 0;

static void on_signal(int sig) {
  (void)sig;
  stopping = 1;
}

/* What the program shows. */
typedef struct header {
  char title[256];
  int64_t total;
} header;

static void pick(const char *keypath, const ordo_value *value, uint64_t counter, void *user_data) {
  header *h = user_data;
  (void)counter;
  if (strcmp(keypath, "playlist.title") == 0 && value->type == ORDO_TYPE_STRING) {
    snprintf(h->title, sizeof h->title, "%s", value->s);
  } else if (strcmp(keypath, "playlist.total") == 0 && value->type == ORDO_TYPE_INT64) {
    h->total = value->i;
  }
}

/* Called once at start (the initial call) and then once per transaction
 * that changed the title, the total or both. The client keeps both as of
 * note->txn (ORDO_CLIENT_CACHE), so the line shows one transaction's
 * title with the same transaction's total, even when only one changed and
 * later transactions have already moved the other on the service. */
static void show(ordo_client *client, const ordo_client_notification *note, void *user_data) {
  (void)user_data;
  header h = {"", 0};
  const char *all[] = {"**"};
  if (ordo_client_cached(client, note->contract, all, 1, pick, &h, NULL) != ORDO_OK) {
    fprintf(stderr, "follow: %s\n", ordo_last_error_message());
    return;
  }
  /* After ordod restarted, the client caught up by itself: this one call
   * covers everything that changed meanwhile. */
  printf("txn %" PRIu64 ": %s, %" PRId64 " s%s\n", note->txn, h.title, h.total,
         note->kind == ORDO_KIND_NOTIFY ? "" : " (caught up)");
  fflush(stdout);
}

int main(int argc, char **argv) {
  /* follow [ADDRESS] (a bus daemon's; none: ORDO_ADDRESS, else the session
   * bus) or follow --direct ADDRESS (ordod --listen's socket). */
  int direct = argc > 2 && strcmp(argv[1], "--direct") == 0;
  const char *address = direct ? argv[2] : argc > 1 ? argv[1] : NULL;
  const char *reads[] = {"playlist.title", "playlist.total"};
  ordo_client *client = NULL;
  if ((direct ? ordo_client_connect_direct(address, &client) : ordo_client_connect(address, NULL, &client)) != ORDO_OK) {
    fprintf(stderr, "follow: %s\n", ordo_last_error_message());
    return 1;
  }
  ordo_client_contract_spec spec = ORDO_CLIENT_CONTRACT_SPEC_INIT;
  spec.name = "follow";
  spec.reads = reads;
  spec.n_reads = 2;
  spec.priority = 1;               /* a view */
  spec.flags = ORDO_CLIENT_CACHE;  /* and an initial call */
  spec.callback = show;
  if (ordo_client_register(client, &spec, NULL) != ORDO_OK) {
    fprintf(stderr, "follow: %s\n", ordo_last_error_message());
    ordo_client_free(client);
    return 1;
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  /* The program's own loop: poll the client's fd (beside any other input
   * it has) and dispatch when it is readable. */
  struct pollfd fds[1] = {{ordo_client_fd(client), POLLIN, 0}};
  int status = 0;
  while (!stopping) {
    int n = poll(fds, 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0 && ordo_client_dispatch(client, 0) != ORDO_OK) {
      fprintf(stderr, "follow: %s\n", ordo_last_error_message());
      status = 1;
      break;
    }
  }
  ordo_client_free(client);
  return status;
}
