// CSQLite: the system SQLite (libsqlite3-dev) for OrdoStore.
//
// SQLITE_TRANSIENT is a cast macro (`((sqlite3_destructor_type)-1)`) that
// Swift cannot import; it is re-exported as a function here.
#ifndef ORDO_CSQLITE_SHIM_H
#define ORDO_CSQLITE_SHIM_H

#include <sqlite3.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>

static inline sqlite3_destructor_type ordo_sqlite_transient(void) { return SQLITE_TRANSIENT; }
static inline int ordo_errno(void) { return errno; }
// open(2) without the variadic mode argument.
static inline int ordo_open(const char *path, int flags, unsigned mode) { return open(path, flags, (mode_t)mode); }

#endif
