/* The playlist model (examples/schema/playlist.json) through its generated
 * accessors (playlist_model.h, made by `ordoctl codegen --c`): handles
 * resolved once, records for the tracks, a computed total.
 *
 *   cc -Wall -Wextra -o playlist playlist.c $(pkg-config --cflags --libs ordo)
 *   ./playlist ../../schema/playlist.json
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "playlist_model.h"

/* The application: the model and the ids of the tracks it added. */
typedef struct app {
    playlist_model m;
    const char *ids[3];
    int title_views;
} app;

static void check(ordo_status st, const char *what) {
    if (st != ORDO_OK) {
        fprintf(stderr, "%s: %s\n", what, ordo_status_name(st));
        exit(1);
    }
}

/* Computed data: the total of the tracks' durations (reading a record needs
 * its whole element in the read set). */
static void total(ordo_bus *bus, const ordo_notification *note, void *user_data) {
    (void)bus;
    (void)note;
    app *a = (app *)user_data;
    int64_t sum = 0;
    for (size_t i = 0; i < sizeof a->ids / sizeof a->ids[0]; i++) {
        playlist_model_playlist_tracks_record r;
        if (playlist_model_playlist_tracks_get(&a->m, a->ids[i], &r) != ORDO_OK) continue;
        sum += r.duration;
        playlist_model_playlist_tracks_record_free(&r);
    }
    check(playlist_model_set_playlist_total(&a->m, sum), "set total");
}

/* A view of the titles: called only when a title changes. */
static void titles(ordo_bus *bus, const ordo_notification *note, void *user_data) {
    (void)bus;
    (void)note;
    ((app *)user_data)->title_views++;
}

/* Registers a contract reading one pattern. */
static void contract(ordo_bus *bus, const char *name, const char *reads, const char *const *writes, size_t n_writes,
                     ordo_callback callback, app *a) {
    ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
    spec.name = name;
    spec.reads = &reads;
    spec.n_reads = 1;
    spec.writes = writes;
    spec.n_writes = n_writes;
    spec.callback = callback;
    spec.user_data = a;
    check(ordo_register(bus, &spec, NULL), name);
}

static void add(app *a, const char *id, const char *title, int64_t duration) {
    playlist_model_playlist_tracks_record r;
    memset(&r, 0, sizeof r);
    r.title = (char *)title;
    r.duration = duration;
    check(playlist_model_playlist_tracks_set(&a->m, id, &r), "set a track");
}

static int64_t total_now(const app *a) {
    int64_t t = -1;
    check(playlist_model_get_playlist_total(&a->m, &t), "get total");
    return t;
}

int main(int argc, char **argv) {
    ordo_bus *bus = NULL;
    check(ordo_bus_new_with_schema_file(argc > 1 ? argv[1] : "../../schema/playlist.json", &bus), "bus");
    app a;
    memset(&a, 0, sizeof a);
    a.ids[0] = "t1";
    a.ids[1] = "t2";
    a.ids[2] = "t3";
    const char *failed = NULL;
    ordo_status st = playlist_model_init(&a.m, bus, &failed);
    if (st != ORDO_OK) {
        fprintf(stderr, "%s: %s\n", failed, ordo_status_name(st));
        return 1;
    }

    const char *total_writes[] = {ordo_handle_keypath(a.m.playlist_total)};
    contract(bus, "total", PLAYLIST_MODEL_PLAYLIST_TRACKS_TREE, total_writes, 1, total, &a);
    contract(bus, "titles", PLAYLIST_MODEL_PLAYLIST_TRACKS_ANY_TITLE, NULL, 0, titles, &a);

    check(ordo_begin(bus), "begin");
    add(&a, "t1", "Intro", 200);
    add(&a, "t2", "Drive", 340);
    add(&a, "t3", "Outro", 95);
    check(playlist_model_set_playlist_selection(&a.m, "t2"), "select");
    check(ordo_commit(bus, NULL), "commit");
    printf("after adding 3 tracks: total = %lld, title views = %d\n", (long long)total_now(&a), a.title_views);

    /* Rewriting a record with a new duration only: the title is unchanged. */
    playlist_model_playlist_tracks_record drive;
    check(playlist_model_playlist_tracks_get(&a.m, "t2", &drive), "get t2");
    drive.duration = 300;
    check(ordo_begin(bus), "begin");
    check(playlist_model_playlist_tracks_set(&a.m, "t2", &drive), "set t2");
    check(ordo_commit(bus, NULL), "commit");
    playlist_model_playlist_tracks_record_free(&drive);
    printf("after shortening t2: total = %lld, title views = %d\n", (long long)total_now(&a), a.title_views);

    /* Removing an element removes its subtree. */
    check(ordo_begin(bus), "begin");
    check(playlist_model_playlist_tracks_remove(&a.m, "t3"), "remove t3");
    check(ordo_commit(bus, NULL), "commit");
    playlist_model_playlist_tracks_record gone;
    st = playlist_model_playlist_tracks_get(&a.m, "t3", &gone);
    printf("after removing t3: t3 = %s, total = %lld\n", ordo_status_name(st), (long long)total_now(&a));

    char *selected = NULL;
    check(playlist_model_get_playlist_selection(&a.m, &selected), "get selection");
    playlist_model_playlist_tracks_record r;
    check(playlist_model_playlist_tracks_get(&a.m, selected, &r), "get the selected track");
    printf("selected: %s\n", r.title);
    playlist_model_playlist_tracks_record_free(&r);
    ordo_free(selected);

    check(ordo_begin(bus), "begin");
    check(playlist_model_touch_ui_refresh(&a.m), "refresh");
    check(ordo_commit(bus, NULL), "commit");
    printf("refresh counter = %llu\n", (unsigned long long)ordo_handle_counter(a.m.ui_refresh));
    ordo_bus_free(bus);
    return 0;
}
