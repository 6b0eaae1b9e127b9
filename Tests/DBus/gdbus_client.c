/* A C client of dev.ordo.Bus1 through the code gdbus-codegen generates from
 * docs/dev.ordo.Bus1.xml (Tests/DBus/test_gdbus_codegen.py builds and runs
 * it against a real ordod):
 *
 *   gdbus-codegen --interface-prefix dev.ordo. --c-namespace Ordo \
 *       --generate-c-code ordo-bus1 docs/dev.ordo.Bus1.xml
 *   cc gdbus_client.c ordo-bus1.c $(pkg-config --cflags --libs gio-2.0 gio-unix-2.0)
 *
 * Usage: gdbus_client ADDRESS. It registers an observer of doc.*, commits
 * doc.title and doc.count in one transaction, prints the Notify it receives
 * through the generated "contract-notify" signal (the XML's
 * org.gtk.GDBus.C.Name: a plain "notify" would be GObject's own signal),
 * reads doc.count back with Get, unregisters and prints "done". Exits 1 with
 * a message on any error, 2 when no Notify arrives within 10 s. */
#include <stdio.h>
#include <stdlib.h>

#include "ordo-bus1.h"

static GMainLoop *loop;
static int notified;
/* The observer's contract path (Register's answer). */
static gchar *path;

/* One line per Notify: its transaction, its changed keypaths and values. */
static void on_contract_notify(OrdoBus1 *proxy, const gchar *contract, guint64 txn, const gchar *const *changed,
                               GVariant *values, gpointer user_data) {
  (void)proxy;
  (void)user_data;
  printf("notify %s txn=%" G_GUINT64_FORMAT, g_strcmp0(contract, path) == 0 ? "mine" : contract, txn);
  for (const gchar *const *k = changed; *k != NULL; k++) {
    GVariant *v = g_variant_lookup_value(values, *k, NULL);
    gchar *text = v != NULL ? g_variant_print(v, TRUE) : g_strdup("(none)");
    printf(" %s=%s", *k, text);
    g_free(text);
    if (v != NULL) g_variant_unref(v);
  }
  printf("\n");
  fflush(stdout);
  notified++;
  g_main_loop_quit(loop);
}

static gboolean on_timeout(gpointer user_data) {
  (void)user_data;
  g_main_loop_quit(loop);
  return G_SOURCE_REMOVE;
}

static void check(gboolean ok, GError *error, const char *what) {
  if (ok) return;
  fprintf(stderr, "gdbus_client: %s: %s\n", what, error != NULL ? error->message : "failed");
  exit(1);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gdbus_client ADDRESS\n");
    return 1;
  }
  GError *error = NULL;
  GDBusConnection *bus = g_dbus_connection_new_for_address_sync(
      argv[1], G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION, NULL, NULL,
      &error);
  check(bus != NULL, error, "connect");
  OrdoBus1 *proxy = ordo_bus1_proxy_new_sync(bus, G_DBUS_PROXY_FLAGS_DO_NOT_LOAD_PROPERTIES, "dev.ordo.Bus", "/dev/ordo/Bus",
                                             NULL, &error);
  check(proxy != NULL, error, "proxy");
  g_signal_connect(proxy, "contract-notify", G_CALLBACK(on_contract_notify), NULL);

  const gchar *reads[] = {"doc.*", NULL};
  const gchar *none[] = {NULL};
  GVariantDict options;
  g_variant_dict_init(&options, NULL);
  check(ordo_bus1_call_register_sync(proxy, "gdbus-view", reads, none, g_variant_dict_end(&options), &path, NULL, &error),
        error, "Register");

  GVariantBuilder set;
  g_variant_builder_init(&set, G_VARIANT_TYPE("a{sv}"));
  g_variant_builder_add(&set, "{sv}", "doc.title", g_variant_new_string("Songs"));
  g_variant_builder_add(&set, "{sv}", "doc.count", g_variant_new_int64(3));
  guint64 txn = 0;
  check(ordo_bus1_call_commit_sync(proxy, g_variant_builder_end(&set), none, none, &txn, NULL, &error), error, "Commit");
  printf("committed txn=%" G_GUINT64_FORMAT "\n", txn);

  /* Signals are delivered from the main loop. */
  loop = g_main_loop_new(NULL, FALSE);
  guint timer = g_timeout_add_seconds(10, on_timeout, NULL);
  g_main_loop_run(loop);
  if (notified == 0) {
    fprintf(stderr, "gdbus_client: no Notify within 10 s\n");
    return 2;
  }
  g_source_remove(timer);

  GVariant *value = NULL;
  guint64 counter = 0;
  check(ordo_bus1_call_get_sync(proxy, "doc.count", &value, &counter, NULL, &error), error, "Get");
  /* The generated code hands the `v` over as it came: a variant holding the value. */
  GVariant *inner = g_variant_get_variant(value);
  printf("get doc.count=%" G_GINT64_FORMAT " counter=%" G_GUINT64_FORMAT "\n", g_variant_get_int64(inner), counter);
  g_variant_unref(inner);
  g_variant_unref(value);
  check(ordo_bus1_call_unregister_sync(proxy, path, NULL, &error), error, "Unregister");
  printf("done\n");

  g_free(path);
  g_main_loop_unref(loop);
  g_object_unref(proxy);
  g_object_unref(bus);
  return 0;
}
