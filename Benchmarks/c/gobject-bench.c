/*
 * gobject-bench: the comparator of the c-abi workloads that a C programmer
 * would otherwise use, GObject property notification (glib's gobject-2.0),
 * for ordo-bench's c-gobject scenario. Independent of Ordo: it does not link
 * libordo. ordo-bench drives it through a pipe, in the same rounds as
 * ordo-c-bench.
 *
 *   gobject-bench N
 *       makes N objects of class BenchItem (one per property of the model:
 *       Ordo's keypath "model.item<i>.value" is object i's property
 *       "value", an int64), each with one handler connected by detail
 *       ("notify::value"), and changes every property once, then prints
 *       "ready". Then reads command lines:
 *
 *   set OPS          OPS "transactions", each setting every object's
 *                    property once with g_object_set (a new value each
 *                    transaction): the property looked up by name, as
 *                    Ordo's keypath strings are
 *   pspec OPS        the same through the idiomatic typed setter:
 *                    bench_item_set_value stores the field and notifies with
 *                    g_object_notify_by_pspec (the property resolved once,
 *                    as Ordo's handles are)
 *   freeze OPS       OPS batches, each: g_object_freeze_notify on every
 *                    object, BATCH (10) rounds of g_object_set on every
 *                    object (each a new value), g_object_thaw_notify on
 *                    every object
 *   batch OPS        the same writes without freeze/thaw
 *   scale OPS        OPS "commits", each 10 g_object_set on 10 distinct
 *                    objects drawn at random among the N (the draw is made
 *                    before the clock starts)
 *
 *   Each command prints "NS CALLS": the elapsed nanoseconds and the total
 *   handler calls so far. EOF ends the program.
 *
 * Build: cc -O2 gobject-bench.c $(pkg-config --cflags --libs gobject-2.0)
 */
#define _POSIX_C_SOURCE 200809L
#include <glib-object.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench-common.h"

/* BenchItem: one int64 property "value", notified explicitly by its setter
 * (G_PARAM_EXPLICIT_NOTIFY), only when the value changes. */
#define BENCH_TYPE_ITEM (bench_item_get_type())
G_DECLARE_FINAL_TYPE(BenchItem, bench_item, BENCH, ITEM, GObject)

struct _BenchItem {
  GObject parent_instance;
  gint64 value;
};

G_DEFINE_TYPE(BenchItem, bench_item, G_TYPE_OBJECT)

enum { PROP_VALUE = 1, N_PROPS };
static GParamSpec *props[N_PROPS];

static void bench_item_set_value(BenchItem *self, gint64 value) {
  if (self->value == value) return;
  self->value = value;
  g_object_notify_by_pspec(G_OBJECT(self), props[PROP_VALUE]);
}

static void bench_item_set_property(GObject *object, guint id, const GValue *value, GParamSpec *pspec) {
  if (id == PROP_VALUE)
    bench_item_set_value(BENCH_ITEM(object), g_value_get_int64(value));
  else
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
}

static void bench_item_get_property(GObject *object, guint id, GValue *value, GParamSpec *pspec) {
  if (id == PROP_VALUE)
    g_value_set_int64(value, BENCH_ITEM(object)->value);
  else
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
}

static void bench_item_class_init(BenchItemClass *klass) {
  GObjectClass *object_class = G_OBJECT_CLASS(klass);
  object_class->set_property = bench_item_set_property;
  object_class->get_property = bench_item_get_property;
  props[PROP_VALUE] = g_param_spec_int64("value", "Value", "The item's value", G_MININT64, G_MAXINT64, -1,
                                         G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties(object_class, N_PROPS, props);
}

static void bench_item_init(BenchItem *self) { self->value = -1; }

static void on_notify(GObject *object, GParamSpec *pspec, gpointer user_data) {
  (void)object;
  (void)pspec;
  ++*(uint64_t *)user_data;
}

int main(int argc, char **argv) {
  if (argc != 2 || atoi(argv[1]) < GROUP) {
    fprintf(stderr, "usage: gobject-bench N  (N >= %d; then command lines on stdin)\n", GROUP);
    return 64;
  }
  size_t n = (size_t)atoi(argv[1]);
  BenchItem **items = calloc(n, sizeof *items);
  if (!items) return 1;
  uint64_t calls = 0;
  uint64_t rng = (uint64_t)n;
  for (size_t i = 0; i < n; i++) {
    items[i] = g_object_new(BENCH_TYPE_ITEM, NULL);
    g_signal_connect(items[i], "notify::value", G_CALLBACK(on_notify), &calls);
  }
  /* One change of every property with the handlers connected, as
   * ordo-c-bench makes one of every keypath before the measurement. */
  for (size_t i = 0; i < n; i++) g_object_set(items[i], "value", (gint64)0, NULL);
  if (calls != n) {
    fprintf(stderr, "gobject-bench: the warm-up made %llu calls\n", (unsigned long long)calls);
    return 1;
  }
  calls = 0;
  printf("ready\n");
  fflush(stdout);

  gint64 value = 0;
  char word[32];
  long ops;
  while (bench_read_command(word, &ops, NULL, "gobject-bench")) {
    uint64_t t0 = 0, t1 = 0;
    if (strcmp(word, "set") == 0) {
      t0 = bench_now_ns();
      for (long t = 0; t < ops; t++) {
        value++;
        for (size_t i = 0; i < n; i++) g_object_set(items[i], "value", value, NULL);
      }
      t1 = bench_now_ns();
    } else if (strcmp(word, "pspec") == 0) {
      t0 = bench_now_ns();
      for (long t = 0; t < ops; t++) {
        value++;
        for (size_t i = 0; i < n; i++) bench_item_set_value(items[i], value);
      }
      t1 = bench_now_ns();
    } else if (strcmp(word, "freeze") == 0 || strcmp(word, "batch") == 0) {
      int freeze = strcmp(word, "freeze") == 0;
      t0 = bench_now_ns();
      for (long t = 0; t < ops; t++) {
        if (freeze)
          for (size_t i = 0; i < n; i++) g_object_freeze_notify(G_OBJECT(items[i]));
        for (int b = 0; b < BATCH; b++) {
          value++;
          for (size_t i = 0; i < n; i++) g_object_set(items[i], "value", value, NULL);
        }
        if (freeze)
          for (size_t i = 0; i < n; i++) g_object_thaw_notify(G_OBJECT(items[i]));
      }
      t1 = bench_now_ns();
    } else if (strcmp(word, "scale") == 0) {
      size_t *picks = bench_draw_groups(&rng, ops, n, "gobject-bench");
      t0 = bench_now_ns();
      for (long t = 0; t < ops; t++) {
        const size_t *g = picks + (size_t)t * GROUP;
        value++;
        for (int j = 0; j < GROUP; j++) g_object_set(items[g[j]], "value", value, NULL);
      }
      t1 = bench_now_ns();
      free(picks);
    } else {
      fprintf(stderr, "gobject-bench: unknown command %s\n", word);
      return 64;
    }
    bench_answer(t1 - t0, calls);
  }
  for (size_t i = 0; i < n; i++) g_object_unref(items[i]);
  free(items);
  return 0;
}
