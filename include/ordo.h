/*
 * ordo.h — the C interface of Ordo, a change-notification bus.
 *
 * A bus stores values under keypaths ("doc.items.3.title"), keeps a change
 * counter per keypath, and at the end of each write transaction calls every
 * contract whose read set changed exactly once, synchronously, in a
 * deterministic order: priority contracts (normalization -3, coordination -2,
 * computed data -1, view hierarchy 1, 2, 3 ...), then data contracts by
 * dependency level, then every-transaction contracts. The rules are in
 * SPEC.md; docs/c-api.md describes this interface in prose.
 *
 * Link with:   cc app.c $(pkg-config --cflags --libs ordo)
 *
 * Conventions that hold for every function below unless it says otherwise:
 *
 *  - Status. Every fallible function returns an ordo_status; ORDO_OK (0) is
 *    success. On failure nothing changed (the bus, the store and every out
 *    parameter are left as they were) and ordo_last_error_message() says
 *    precisely what was wrong on this thread.
 *  - Arguments. Passing NULL where a pointer is required returns
 *    ORDO_E_INVALID_ARGUMENT; it never crashes. Every string is a
 *    NUL-terminated UTF-8 string; a string that is not valid UTF-8 is
 *    refused (ORDO_E_INVALID_KEYPATH for keypaths and patterns,
 *    ORDO_E_INVALID_ARGUMENT otherwise). The library copies what it needs:
 *    no pointer passed in is kept after the call returns.
 *  - Keypaths. 1-32 segments of [A-Za-z0-9_-] joined by '.', at most 256
 *    bytes; anything else is ORDO_E_INVALID_KEYPATH. Patterns (read and write
 *    sets only) may also use '*' as a whole segment and '**' as the last one.
 *  - Threads. A bus may be used from any thread. Transactions are
 *    serialized: ordo_begin waits while another thread's transaction or
 *    notification pass runs. Reads never wait: from a thread that does not
 *    own the running transaction they see the last committed state.
 *  - Callbacks. Contract callbacks run synchronously on the committing
 *    thread, during ordo_commit (or ordo_register and ordo_rollback, see
 *    ORDO_NOTIFY_INITIAL), and may call back into the bus from that thread:
 *    read, write within their contract, begin/commit (joining the pass),
 *    register, unregister.
 *  - Contract rules. Inside a callback every read and write is checked
 *    against the running contract: ORDO_E_CONTRACT_VIOLATION for a keypath
 *    outside its sets, ORDO_E_STABILITY for a write that an earlier contract
 *    of the pass reads.
 *
 * This header is C99 and C++ compatible and includes only <stdbool.h>,
 * <stddef.h> and <stdint.h>.
 */
#ifndef ORDO_H
#define ORDO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The library version this header describes ("MAJOR.MINOR.PATCH"). The
 *  MAJOR number is the ABI version: the library's SONAME is libordo.so.MAJOR. */
#define ORDO_VERSION_MAJOR 1
#define ORDO_VERSION_MINOR 0
#define ORDO_VERSION_PATCH 0
#define ORDO_VERSION_STRING "1.0.0"

/** A bus: an opaque handle made by ordo_bus_new and freed by ordo_bus_free. */
typedef struct ordo_bus ordo_bus;

/** The result of every fallible function. The values are stable ABI. */
typedef enum ordo_status {
  /** Success. */
  ORDO_OK = 0,
  /** A NULL or out-of-range argument, a malformed contract spec, or a call
   *  in a state that does not allow it (ordo_rollback inside a callback). */
  ORDO_E_INVALID_ARGUMENT = 1,
  /** A malformed keypath or pattern; the message names it and the offending
   *  byte position. */
  ORDO_E_INVALID_KEYPATH = 2,
  /** The keypath holds a value of another type than the one asked for. */
  ORDO_E_TYPE_MISMATCH = 3,
  /** The keypath holds no value, or no contract has that id. */
  ORDO_E_NOT_FOUND = 4,
  /** A write, commit or rollback outside a transaction (and outside a
   *  contract callback). */
  ORDO_E_NO_TRANSACTION = 5,
  /** A callback read or wrote outside its contract's read/write sets. */
  ORDO_E_CONTRACT_VIOLATION = 6,
  /** A callback wrote a keypath that a contract placed before it in the pass
   *  reads (that contract's input is already stable). */
  ORDO_E_STABILITY = 7,
  /** Registering would make data contracts depend on each other in a cycle;
   *  the message names the contracts in the cycle. */
  ORDO_E_CYCLE = 8,
  /** The contract's position in the pass contradicts its dependencies. */
  ORDO_E_ORDER_CONFLICT = 9,
  /** A contract with that name is already registered on this bus. */
  ORDO_E_DUPLICATE_NAME = 10,
  /** A configured limit was reached. */
  ORDO_E_LIMIT = 11,
  /** A D-Bus failure (ordo_dbus_*, ordo_client_*). */
  ORDO_E_DBUS = 12,
  /** A persistence layer could not store the transaction; nothing of it was
   *  applied (a durable ordod, SPEC §11). */
  ORDO_E_STORAGE = 13,
  /** A write, value or contract the bus's schema does not allow, or a
   *  schema that does not validate (SPEC §14; docs/schema.md). The message
   *  names the keypath and the rule, and for an undeclared keypath the
   *  nearest declared one. */
  ORDO_E_SCHEMA = 14,
  /** A conditional commit found a keypath's counter other than expected;
   *  nothing was applied (SPEC §15). */
  ORDO_E_CONFLICT = 15,
  /** A bug in Ordo. Please report it with the message. */
  ORDO_E_INTERNAL = 99
} ordo_status;

/* ------------------------------------------------------------------------ */
/* Library and errors                                                        */
/* ------------------------------------------------------------------------ */

/** The library's version, e.g. "1.0.0" (compare with ORDO_VERSION_STRING to
 *  detect a header/library mismatch). Static storage: never free it.
 *  Thread-safe. Cannot fail. */
const char *ordo_version(void);

/** A human-readable message describing the last failure on the calling
 *  thread (the keypath, contract names, values involved ...). Never NULL: ""
 *  when nothing failed on this thread yet.
 *
 *  The message is thread-local and is only replaced by the next failure on
 *  the same thread (successful calls leave it alone, like errno), so read it
 *  right after a call returned a status other than ORDO_OK. The string
 *  belongs to the library and stays valid until the next failing call on
 *  this thread or the thread's exit; copy it to keep it. Cannot fail. */
const char *ordo_last_error_message(void);

/** The name of a status as written in this header: "ORDO_OK",
 *  "ORDO_E_CYCLE" ...; "ORDO_E_UNKNOWN" for a value that is not a status.
 *  Static storage: never free it. Thread-safe. Cannot fail. */
const char *ordo_status_name(ordo_status status);

/* ------------------------------------------------------------------------ */
/* Buses                                                                     */
/* ------------------------------------------------------------------------ */

/** Makes an empty bus. Free it with ordo_bus_free. Thread-safe. (Like every
 *  function here, it aborts the process if memory is exhausted while the
 *  library allocates its own objects.) */
ordo_bus *ordo_bus_new(void);

/** Makes an empty bus that enforces a schema (SPEC §14, docs/schema.md),
 *  given as its JSON text (NUL-terminated UTF-8). With a schema, a write of
 *  an undeclared keypath, a value outside its declaration's constraints or
 *  a set of an event is ORDO_E_SCHEMA, a value of another type
 *  ORDO_E_TYPE_MISMATCH, a contract whose pattern matches no declared
 *  keypath ORDO_E_SCHEMA at ordo_register, and a read of a declared keypath
 *  without a stored value returns its default (ordo_is_stored tells them
 *  apart). Handles resolve only declared keypaths and prefixes of them.
 *  Free the bus with ordo_bus_free. Thread-safe.
 *
 *  Returns ORDO_OK and *out, ORDO_E_INVALID_ARGUMENT (a NULL argument, text
 *  that is not UTF-8), or ORDO_E_SCHEMA (the schema does not validate; the
 *  message names the entry and the problem); *out is untouched on failure. */
ordo_status ordo_bus_new_with_schema(const char *schema_json, ordo_bus **out);

/** ordo_bus_new_with_schema with the JSON text read from the file at
 *  `path`. Returns the same, and ORDO_E_INVALID_ARGUMENT naming the path and
 *  the reason when the file cannot be read. */
ordo_status ordo_bus_new_with_schema_file(const char *path, ordo_bus **out);

/** The schema the bus enforces, as JSON text in its canonical form (keys
 *  sorted, one per line: the same schema always gives the same text), or
 *  NULL in *out for a bus made without a schema. Free the text with
 *  ordo_free. Returns ORDO_OK or ORDO_E_INVALID_ARGUMENT (a NULL argument). */
ordo_status ordo_schema_json(ordo_bus *bus, char **out);

/** Whether `keypath` holds a stored value (*out true), as opposed to no
 *  value or its schema default (*out false), which ordo_get_* return alike.
 *  Read like ordo_get_int64 (contract rules inside a callback). */
ordo_status ordo_is_stored(ordo_bus *bus, const char *keypath, bool *out);

/** Frees a bus: unregisters every contract (calling each contract's destroy
 *  function once, on this thread), stops a D-Bus publication, and frees the
 *  bus's memory. NULL is ignored.
 *
 *  Caller's bugs (undefined behaviour, not detected): freeing a bus twice,
 *  freeing it during a notification pass or from a callback, freeing it
 *  while another thread still uses it, or using it afterwards. */
void ordo_bus_free(ordo_bus *bus);

/** The last transaction id assigned: that of the last committed transaction
 *  that changed something, or, while a notification pass runs, of that pass
 *  (0 if none yet). Returns 0 (and sets the message) for a NULL bus.
 *  Thread-safe. */
uint64_t ordo_transaction_id(ordo_bus *bus);

/* ------------------------------------------------------------------------ */
/* Transactions                                                              */
/* ------------------------------------------------------------------------ */

/** Begins a write transaction on the calling thread, or joins the one this
 *  thread has open (begin/commit pairs nest), or, from a callback, joins the
 *  running pass. Waits while another thread's transaction runs.
 *  Returns ORDO_OK, or ORDO_E_INVALID_ARGUMENT (bus NULL). */
ordo_status ordo_begin(ordo_bus *bus);

/** Commits. The outermost commit runs the notification pass on the calling
 *  thread (contract callbacks are called from inside this function) and
 *  returns when it has finished. *out_txn (out_txn may be NULL) receives the
 *  transaction id: 0 if nothing changed, and 0 for an inner commit.
 *  Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT (bus NULL),
 *  ORDO_E_NO_TRANSACTION (no matching ordo_begin on this thread),
 *  ORDO_E_CONFLICT (a condition of ordo_expect_counter did not hold: nothing
 *  was applied), or ORDO_E_STORAGE (a persistence layer refused it). */
ordo_status ordo_commit(ordo_bus *bus, uint64_t *out_txn);

/** Discards every write of the whole (outermost) transaction, whatever the
 *  nesting depth; nothing is notified and no counter changes (contracts
 *  registered in it with ORDO_NOTIFY_INITIAL are then called, as if
 *  registered outside a transaction). The remaining
 *  inner ordo_commit/ordo_rollback calls then return ORDO_E_NO_TRANSACTION.
 *  Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT (bus NULL; or inside a callback:
 *  a pass cannot be undone), or ORDO_E_NO_TRANSACTION. */
ordo_status ordo_rollback(ordo_bus *bus);

/* ------------------------------------------------------------------------ */
/* Conditions and owned values (SPEC §15)                                    */
/* ------------------------------------------------------------------------ */

/** Makes the transaction open on the calling thread conditional: its
 *  outermost ordo_commit applies it only if keypath's counter is still
 *  `counter` (0: never changed). When a condition does not hold, nothing of
 *  the transaction is applied, no pass runs, no id is used, and ordo_commit
 *  returns ORDO_E_CONFLICT with a message naming the keypath, the expected
 *  and the current counter. Transactions are serialized, so the condition
 *  guards a read made before ordo_begin (read the value and its counter,
 *  then begin, expect, write, commit; retry on ORDO_E_CONFLICT).
 *  Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT (a NULL argument; inside a
 *  callback, whose pass cannot be refused), ORDO_E_INVALID_KEYPATH, or
 *  ORDO_E_NO_TRANSACTION (no transaction open on this thread). */
ordo_status ordo_expect_counter(ordo_bus *bus, const char *keypath, uint64_t counter);

/** An owner of stored values: what the sets of a transaction begun with
 *  ordo_begin_owned store belongs to it, and ordo_owner_free removes those
 *  values in one transaction, with a normal pass (a provider's values
 *  vanish with it). Made by ordo_owner_new, freed by ordo_owner_free. */
typedef struct ordo_owner ordo_owner;

/** Makes an owner on bus; `name` (UTF-8, copied) names it in messages and
 *  listings. Returns ORDO_OK and *out, or ORDO_E_INVALID_ARGUMENT (a NULL
 *  argument, a name that is not UTF-8); *out is untouched on failure.
 *  Thread-safe. */
ordo_status ordo_owner_new(ordo_bus *bus, const char *name, ordo_owner **out);

/** Begins a write transaction (or joins the one this thread has open, like
 *  ordo_begin) whose sets, from here to the ordo_commit that closes this
 *  begin, store values that belong to `owner`. A later plain write of such
 *  a keypath, by anyone, ends its ownership; an owned write by another
 *  owner hands it over; touch and removals store nothing and only end
 *  ownership. Returns ORDO_OK, or ORDO_E_INVALID_ARGUMENT (a NULL argument,
 *  an owner of another bus, or inside a callback: a callback's writes
 *  belong to its contract). An owner already freed is a caller's bug, as
 *  for ordo_owner_free. */
ordo_status ordo_begin_owned(ordo_bus *bus, ordo_owner *owner);

/** Frees an owner and removes every value it holds, in one transaction
 *  with a normal pass: the calling thread's open transaction if it has one,
 *  the end of the running pass when called from a callback, else a
 *  transaction of its own, committed before this returns. NULL is ignored.
 *  Freeing an owner after its bus is harmless (there is nothing left to
 *  remove). Caller's bugs: freeing an owner twice or using it afterwards. */
void ordo_owner_free(ordo_owner *owner);

/* ------------------------------------------------------------------------ */
/* Writes                                                                    */
/* ------------------------------------------------------------------------ */
/* Writes happen inside a transaction (ordo_begin ... ordo_commit) or inside a
 * contract callback. Each returns ORDO_OK or:
 *   ORDO_E_INVALID_ARGUMENT    bus, keypath or a required value pointer NULL,
 *                              or a string value that is not valid UTF-8;
 *   ORDO_E_INVALID_KEYPATH     malformed keypath (patterns are not allowed);
 *   ORDO_E_NO_TRANSACTION      outside a transaction and outside a callback;
 *   ORDO_E_CONTRACT_VIOLATION  (in a callback) outside the write set;
 *   ORDO_E_STABILITY           (in a callback) an earlier contract reads it.
 * Setting a value equal to the current one (same type and content; doubles
 * compared bit for bit) is no change. */

/** Sets keypath to a bool. */
ordo_status ordo_set_bool  (ordo_bus *bus, const char *keypath, bool value);
/** Sets keypath to a signed 64-bit integer. */
ordo_status ordo_set_int64 (ordo_bus *bus, const char *keypath, int64_t value);
/** Sets keypath to a double (any bit pattern, NaNs included). */
ordo_status ordo_set_double(ordo_bus *bus, const char *keypath, double value);
/** Sets keypath to a copy of the NUL-terminated UTF-8 string utf8 (required;
 *  "" is the empty string). */
ordo_status ordo_set_string(ordo_bus *bus, const char *keypath, const char *utf8);
/** Sets keypath to a copy of len bytes at data. data may be NULL only when
 *  len is 0 (empty bytes). */
ordo_status ordo_set_bytes (ordo_bus *bus, const char *keypath, const void *data, size_t len);
/** Marks keypath changed without storing a value, for values that live in
 *  the host program: its counter rises and its readers are notified. */
ordo_status ordo_touch     (ordo_bus *bus, const char *keypath);
/** Removes keypath's value (no change if it holds none). */
ordo_status ordo_remove    (ordo_bus *bus, const char *keypath);
/** Removes the values of keypath and of every descendant. In a callback the
 *  write set must allow keypath and all its descendants (e.g. "k.**"),
 *  otherwise ORDO_E_CONTRACT_VIOLATION. */
ordo_status ordo_remove_tree(ordo_bus *bus, const char *keypath);

/* ------------------------------------------------------------------------ */
/* Reads                                                                     */
/* ------------------------------------------------------------------------ */
/* Each getter returns ORDO_OK and writes its out parameters, or leaves them
 * untouched and returns:
 *   ORDO_E_INVALID_ARGUMENT    bus, keypath or an out pointer NULL;
 *   ORDO_E_INVALID_KEYPATH     malformed keypath;
 *   ORDO_E_NOT_FOUND           keypath holds no value;
 *   ORDO_E_TYPE_MISMATCH       keypath holds a value of another type
 *                              (the message names both types);
 *   ORDO_E_CONTRACT_VIOLATION  (in a callback) outside the running
 *                              contract's read and write sets;
 *   ORDO_E_INTERNAL            (ordo_get_string, ordo_get_bytes) malloc
 *                              failed for the copy.
 * From the thread that owns the running transaction (or pass) a getter sees
 * its uncommitted writes; other threads see the last committed value. */

/** The type of a value, as reported by ordo_get_type. */
typedef enum ordo_type {
  ORDO_TYPE_BOOL = 1,
  ORDO_TYPE_INT64 = 2,
  ORDO_TYPE_DOUBLE = 3,
  ORDO_TYPE_STRING = 4,
  ORDO_TYPE_BYTES = 5
} ordo_type;

/** The type of keypath's value (never ORDO_E_TYPE_MISMATCH). */
ordo_status ordo_get_type  (ordo_bus *bus, const char *keypath, ordo_type *out);
/** Reads a bool. */
ordo_status ordo_get_bool  (ordo_bus *bus, const char *keypath, bool *out);
/** Reads a signed 64-bit integer. */
ordo_status ordo_get_int64 (ordo_bus *bus, const char *keypath, int64_t *out);
/** Reads a double. */
ordo_status ordo_get_double(ordo_bus *bus, const char *keypath, double *out);
/** Reads a string: *out receives a newly allocated NUL-terminated UTF-8
 *  copy that the caller owns and frees with ordo_free. (A string stored
 *  through another surface may contain NUL characters; C sees it up to the
 *  first one.) */
ordo_status ordo_get_string(ordo_bus *bus, const char *keypath, char **out);
/** Reads bytes: *out receives a newly allocated copy of the *len bytes that
 *  the caller owns and frees with ordo_free. *out is never NULL on success,
 *  even for empty bytes (*len == 0). */
ordo_status ordo_get_bytes (ordo_bus *bus, const char *keypath, void **out, size_t *len);

/** Frees memory returned by ordo_get_string or ordo_get_bytes. NULL is
 *  ignored. Any thread. */
void        ordo_free(void *p);

/** The number of committed transactions that changed keypath itself (0 if
 *  never). It never goes back. On error (bus or keypath NULL, malformed
 *  keypath, or in a callback a keypath the contract may not read) it returns
 *  0 and sets the error message; use ordo_get_counter to tell errors apart. */
uint64_t    ordo_counter(ordo_bus *bus, const char *keypath);

/** ordo_counter with a status: *out receives the counter. Returns ORDO_OK,
 *  ORDO_E_INVALID_ARGUMENT, ORDO_E_INVALID_KEYPATH or
 *  ORDO_E_CONTRACT_VIOLATION (never ORDO_E_NOT_FOUND: a keypath never
 *  changed has counter 0). */
ordo_status ordo_get_counter(ordo_bus *bus, const char *keypath, uint64_t *out);

/* ------------------------------------------------------------------------ */
/* Handles (SPEC §13)                                                        */
/* ------------------------------------------------------------------------ */

/** A keypath resolved once. Writes and reads through a handle skip parsing,
 *  hashing and the table lookup, and obey every rule that the same call with
 *  the keypath string obeys (transactions, contract read and write sets,
 *  stability, net change): the ordo_handle_* functions are the ordo_*
 *  functions of the same name with the bus and keypath replaced by the handle.
 *
 *  Ownership: the bus owns its handles. Nothing is freed by the caller; a
 *  handle is valid until ordo_bus_free of its bus (using it afterwards is the
 *  caller's bug, like using the freed bus). Resolving the same keypath twice
 *  gives the same pointer. A NULL handle is ORDO_E_INVALID_ARGUMENT. Any
 *  thread may use a handle, like its bus. */
typedef struct ordo_handle ordo_handle;

/** Resolves keypath into *out (no value is written, nothing changes).
 *  Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT (bus, keypath or out NULL) or
 *  ORDO_E_INVALID_KEYPATH (patterns are not keypaths). */
ordo_status ordo_resolve(ordo_bus *bus, const char *keypath, ordo_handle **out);
/** The handle's keypath, owned by the handle (NULL for a NULL handle). */
const char *ordo_handle_keypath(const ordo_handle *handle);

/** Writes through a handle: as ordo_set_bool … ordo_remove. */
ordo_status ordo_handle_set_bool  (ordo_handle *handle, bool value);
ordo_status ordo_handle_set_int64 (ordo_handle *handle, int64_t value);
ordo_status ordo_handle_set_double(ordo_handle *handle, double value);
ordo_status ordo_handle_set_string(ordo_handle *handle, const char *utf8);
ordo_status ordo_handle_set_bytes (ordo_handle *handle, const void *data, size_t len);
ordo_status ordo_handle_touch     (ordo_handle *handle);
ordo_status ordo_handle_remove    (ordo_handle *handle);

/** Reads through a handle: as ordo_get_type … ordo_get_counter (strings and
 *  bytes are freed with ordo_free). */
ordo_status ordo_handle_get_type  (ordo_handle *handle, ordo_type *out);
ordo_status ordo_handle_get_bool  (ordo_handle *handle, bool *out);
ordo_status ordo_handle_get_int64 (ordo_handle *handle, int64_t *out);
ordo_status ordo_handle_get_double(ordo_handle *handle, double *out);
ordo_status ordo_handle_get_string(ordo_handle *handle, char **out);
ordo_status ordo_handle_get_bytes (ordo_handle *handle, void **out, size_t *len);
ordo_status ordo_handle_get_counter(ordo_handle *handle, uint64_t *out);
/** As ordo_counter: 0 on error (see ordo_last_error_message). */
uint64_t    ordo_handle_counter   (ordo_handle *handle);

/* ------------------------------------------------------------------------ */
/* Contracts                                                                 */
/* ------------------------------------------------------------------------ */

/** ordo_contract_spec.priority of a data contract (one without priority). */
#define ORDO_NO_PRIORITY INT32_MIN

/** Contract flags (ordo_contract_spec.flags). */
enum {
  /** Call the contract once with an empty changed list: during
   *  ordo_register outside any transaction (with the last committed
   *  transaction id; the callback's writes form a transaction of their own,
   *  committed when it returns); when registered from a callback, at its
   *  position later in the running pass (ORDO_E_ORDER_CONFLICT if that
   *  position is already past); while the registering thread has a
   *  transaction open (ordo_begin), not during ordo_register but once for
   *  that transaction: at its position in the pass of its outermost
   *  ordo_commit, or, when the transaction changes nothing or is rolled
   *  back, at the end of that ordo_commit or ordo_rollback as outside any
   *  transaction (docs/semantics.md). note->contract carries the new id
   *  before *out_id is written when the call happens during ordo_register. */
  ORDO_NOTIFY_INITIAL = 1u << 0
};

/** What a callback receives. It and everything it points to belong to the
 *  library and are valid only during the callback: copy what you keep. */
typedef struct ordo_notification {
  uint64_t txn;                 /* transaction id */
  uint64_t contract;            /* contract id */
  const char *const *changed;   /* written keypaths that affected the read set */
  size_t n_changed;
  /* changed is never NULL and changed[n_changed] is NULL. It lists the
   * keypaths (as written) changed by this transaction that affect the read
   * set; every changed keypath for an every-transaction contract; nothing
   * for an initial call (ORDO_NOTIFY_INITIAL). */
} ordo_notification;

/** A contract callback: called once per pass in which the contract's reads
 *  changed, on the committing thread, with the bus, the notification and the
 *  spec's user_data. It may call back into the bus (see the conventions at
 *  the top); it must not free the bus. */
typedef void (*ordo_callback)(ordo_bus *bus, const ordo_notification *note, void *user_data);

/** The declaration of a contract, for ordo_register. Start from
 *  ORDO_CONTRACT_SPEC_INIT so that size and priority are right.
 *
 *  size is versioning: set it to sizeof(ordo_contract_spec). A size smaller
 *  than this header's struct is refused (ORDO_E_INVALID_ARGUMENT); a larger
 *  one (a newer header) is accepted when every byte past the fields this
 *  library knows is zero (and size is at most 4096). */
typedef struct ordo_contract_spec {
  uint32_t size;                        /* sizeof(ordo_contract_spec) */
  const char *name;                     /* required; unique on the bus, 1-255 bytes */
  const char *const *reads;  size_t n_reads;   /* read patterns; none: every-transaction contract */
  const char *const *writes; size_t n_writes;  /* write patterns (permissions); may be empty */
  int32_t priority;                     /* ORDO_NO_PRIORITY: data contract */
  uint32_t flags;                       /* ORDO_NOTIFY_INITIAL or 0 */
  ordo_callback callback;               /* required */
  void *user_data;                      /* passed to callback and destroy; may be NULL */
  void (*destroy)(void *user_data);     /* called once when the contract is gone; may be NULL */
} ordo_contract_spec;

/** A spec with size set, no name, reads, writes, callback or user data,
 *  ORDO_NO_PRIORITY and no flags: `ordo_contract_spec s = ORDO_CONTRACT_SPEC_INIT;` */
#define ORDO_CONTRACT_SPEC_INIT \
  { (uint32_t)sizeof(ordo_contract_spec), NULL, NULL, 0, NULL, 0, ORDO_NO_PRIORITY, 0, NULL, NULL, NULL }

/** Registers a contract and writes its id (never 0) to *out_id (out_id may
 *  be NULL). Every string of the spec is copied. The arrays reads and writes
 *  may be NULL when their count is 0. A priority given to an
 *  every-transaction contract (no reads) is ignored.
 *
 *  Ownership of user_data: on success the contract owns it until it is gone
 *  — unregistered, or its bus freed — and then destroy(user_data) is called
 *  exactly once (if destroy is not NULL): by ordo_unregister, or, when the
 *  contract unregisters itself from its own callback, right after that
 *  callback returns; by ordo_bus_free for the contracts still registered.
 *  destroy must not call into the bus. On failure destroy is not called and
 *  the caller keeps user_data.
 *
 *  Returns ORDO_OK or:
 *    ORDO_E_INVALID_ARGUMENT  bus, spec, name or callback NULL; size too small
 *                             (or unknown nonzero fields past it); unknown
 *                             flags; a NULL array with a nonzero count or a
 *                             NULL element; an empty, too long or non-UTF-8
 *                             name; a write set on a contract with no reads;
 *    ORDO_E_INVALID_KEYPATH   a malformed pattern;
 *    ORDO_E_DUPLICATE_NAME    the name is taken on this bus;
 *    ORDO_E_CYCLE             data contracts would depend on each other in a
 *                             cycle (the message names them);
 *    ORDO_E_ORDER_CONFLICT    a priority contract reads what a data contract
 *                             may write; a contract reads what a later one
 *                             concretely writes; or, from a callback, an
 *                             initial call whose position is already past. */
ordo_status ordo_register  (ordo_bus *bus, const ordo_contract_spec *spec, uint64_t *out_id);

/** Unregisters a contract: it is not called afterwards, even later in the
 *  running pass, and its destroy function is called (see ordo_register).
 *  May be called from any callback, the contract's own included.
 *  Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT (bus NULL) or ORDO_E_NOT_FOUND
 *  (no contract with that id on this bus, e.g. already unregistered). */
ordo_status ordo_unregister(ordo_bus *bus, uint64_t id);

/** The id of the contract whose callback is running on the calling thread,
 *  or 0 (none; or bus NULL, which also sets the message). */
uint64_t    ordo_current_contract(ordo_bus *bus);

/* ------------------------------------------------------------------------ */
/* Resynchronization (SPEC §10)                                              */
/* ------------------------------------------------------------------------ */

/** A value as ordo_changes and ordo_snapshot report it: type says which
 *  field holds it.
 *  Strings and bytes are valid only during the callback. */
typedef struct ordo_value {
  ordo_type type;
  bool b;
  int64_t i;
  double d;
  const char *s;        /* NUL-terminated UTF-8 */
  const void *bytes;
  size_t len;           /* of bytes, or of s without its NUL */
} ordo_value;

/** Called once per changed keypath by ordo_changes: value is NULL when the
 *  keypath holds no value (removed, or only touched); counter and
 *  changed_at are its counter and the id of the last transaction that
 *  changed it. */
typedef void (*ordo_change_callback)(const char *keypath, const ordo_value *value, uint64_t counter,
                                     uint64_t changed_at, void *user_data);

/** What changed after transaction since among the keypaths matching the
 *  patterns (one consistent read): callback is called for each, in keypath
 *  order, without the bus's lock; *out_txn (may be NULL) receives the last
 *  committed id, the since of the next catch-up. Returns ORDO_OK,
 *  ORDO_E_INVALID_ARGUMENT (bus or callback NULL, patterns NULL with a
 *  count, since after the last committed id: another epoch),
 *  ORDO_E_INVALID_KEYPATH, or in a callback ORDO_E_CONTRACT_VIOLATION. */
ordo_status ordo_changes(ordo_bus *bus, uint64_t since, const char *const *patterns, size_t n_patterns,
                         ordo_change_callback callback, void *user_data, uint64_t *out_txn);

/** Called once per keypath by ordo_snapshot: value is NULL when the
 *  keypath holds no value but has a counter (removed, or only touched);
 *  counter is what ordo_get_counter gives (a transaction counts once its
 *  pass has ended: a value first set in the calling thread's open
 *  transaction has 0). */
typedef void (*ordo_snapshot_callback)(const char *keypath, const ordo_value *value, uint64_t counter,
                                       void *user_data);

/** The keypaths matching the patterns that hold a stored value or have a
 *  counter, read at one moment (D-Bus Snapshot): callback is called for
 *  each, in keypath order, without the bus's lock. Schema defaults are not
 *  stored values: a declared keypath that holds none is not reported.
 *  *out_txn (may be NULL) receives the last committed id. From the thread
 *  that owns the running transaction or pass, the read sees that thread's
 *  writes (and *out_txn is the pass's id); from other threads, the last
 *  committed state. Inside a callback every pattern must be readable by the
 *  contract. Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT (bus or callback NULL,
 *  patterns NULL with a count, a NULL pattern), ORDO_E_INVALID_KEYPATH (a
 *  malformed pattern), or in a callback ORDO_E_CONTRACT_VIOLATION; on an
 *  error callback is not called. */
ordo_status ordo_snapshot(ordo_bus *bus, const char *const *patterns, size_t n_patterns,
                          ordo_snapshot_callback callback, void *user_data, uint64_t *out_txn);

/** The bus's epoch (a UUID; SPEC §10) in *out, freed with ordo_free.
 *  Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT or ORDO_E_INTERNAL. */
ordo_status ordo_get_epoch(ordo_bus *bus, char **out);

/* ------------------------------------------------------------------------ */
/* Devtools: contract information and pass traces (docs/devtools.md)         */
/* ------------------------------------------------------------------------ */

/** The phase a contract runs in. */
typedef enum ordo_contract_kind {
  ORDO_KIND_PRIORITY = 1,          /**< has a priority: runs first */
  ORDO_KIND_DATA = 2,              /**< no priority: runs by level */
  ORDO_KIND_EVERY_TRANSACTION = 3  /**< empty read set: runs last, every pass */
} ordo_contract_kind;

/** What ordo_get_contract_info reports. size is the number of bytes of the
 *  struct as this library fills it (fields may be added at the end). */
typedef struct ordo_contract_info {
  uint32_t size;
  uint64_t id;
  const char *name;
  ordo_contract_kind kind;
  int32_t priority;                 /* ORDO_NO_PRIORITY unless ORDO_KIND_PRIORITY */
  uint32_t level;                   /* data contracts; 0 otherwise */
  uint32_t position;                /* 0-based place in the pass order */
  uint64_t calls;                   /* callbacks made */
  uint64_t failures;                /* reported failures */
  uint64_t last_txn;                /* transaction of its last call, 0 if none */
  const char *const *reads;  size_t n_reads;
  const char *const *writes; size_t n_writes;
  /** Declared patterns its callbacks never read / wrote through the bus. */
  const char *const *unused_reads;  size_t n_unused_reads;
  const char *const *unused_writes; size_t n_unused_writes;
} ordo_contract_info;

/** Describes contract id in *out: one block, strings included, freed with
 *  ordo_free. Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT (bus or out NULL),
 *  ORDO_E_NOT_FOUND (no such contract) or ORDO_E_INTERNAL (out of memory). */
ordo_status ordo_get_contract_info(ordo_bus *bus, uint64_t id, ordo_contract_info **out);

/** What happened to one scheduled contract in a pass. */
typedef enum ordo_trace_outcome {
  ORDO_TRACE_CALLED = 0,       /**< its callback ran */
  ORDO_TRACE_FAILED = 1,       /**< its callback ran and failed (failure says why) */
  ORDO_TRACE_UNCHANGED = 2,    /**< not called: nothing that scheduled it still changed */
  ORDO_TRACE_UNREGISTERED = 3  /**< not called: unregistered before its turn */
} ordo_trace_outcome;

/** One scheduled contract of a pass, in pass order. */
typedef struct ordo_trace_step {
  uint64_t contract;
  const char *name;
  uint64_t txn;                        /* the id its callback received */
  ordo_trace_outcome outcome;
  bool initial;                        /* an initial call (ORDO_NOTIFY_INITIAL) */
  const char *const *because; size_t n_because;   /* keypaths that scheduled it */
  const char *const *writes;  size_t n_writes;    /* keypaths its callback wrote */
  const char *const *refused; size_t n_refused;   /* "keypath: CODE: message" */
  const char *failure;                 /* NULL unless ORDO_TRACE_FAILED */
  uint64_t duration_ns;                /* of its callback; 0 if not called */
} ordo_trace_step;

/** One notification pass. */
typedef struct ordo_trace {
  uint64_t txn;
  bool committed;                      /* false: an initial call's pass that changed nothing (no id),
                                          or not stored; a transaction whose pass cancelled every
                                          change keeps its id: true, n_changed 0 */
  const char *const *changed; size_t n_changed;
  const ordo_trace_step *steps; size_t n_steps;
  uint64_t duration_ns;
} ordo_trace;

/** Called after every pass, on the committing thread, without the bus's
 *  lock; the trace and its strings are valid only during the call. */
typedef void (*ordo_trace_callback)(ordo_bus *bus, const ordo_trace *trace, void *user_data);

/** Sets (or with callback NULL removes) the bus's trace callback. Without
 *  one, passes record nothing. Returns ORDO_OK or ORDO_E_INVALID_ARGUMENT
 *  (bus NULL). */
ordo_status ordo_set_trace(ordo_bus *bus, ordo_trace_callback callback, void *user_data);

/** One finding of ordo_lint: contract `later`, placed after `earlier` in
 *  the pass, has a write pattern that may write what `earlier` reads. Such
 *  a write fails with ORDO_E_STABILITY at run time; registration refuses
 *  only concrete writes (ORDO_E_ORDER_CONFLICT), not wildcard ones. */
typedef struct ordo_lint_finding {
  const char *earlier;  /* the contract placed first */
  const char *reads;    /* its read pattern the write may affect */
  const char *later;    /* the contract placed after it */
  const char *writes;   /* its write pattern */
  const char *keypath;  /* an example: allowed by writes, affects reads */
  const char *message;  /* the finding in one sentence */
} ordo_lint_finding;

/** Called by ordo_lint once per finding; the finding and its strings are
 *  valid only during the call. */
typedef void (*ordo_lint_callback)(const ordo_lint_finding *finding, void *user_data);

/** Lists every pair of registered contracts where a later contract's write
 *  pattern may write what an earlier contract reads: callback is called
 *  for each, in pass order, without the bus's lock; *out_count (may be
 *  NULL) receives how many. Returns ORDO_OK or ORDO_E_INVALID_ARGUMENT
 *  (bus or callback NULL). */
ordo_status ordo_lint(ordo_bus *bus, ordo_lint_callback callback, void *user_data, size_t *out_count);

/* ------------------------------------------------------------------------ */
/* D-Bus                                                                     */
/* ------------------------------------------------------------------------ */

/** Publishes this bus over D-Bus from this process (interface dev.ordo.Bus1,
 *  object /dev/ordo/Bus; see docs/). address NULL = the session bus; name
 *  NULL = "dev.ordo.Bus". Then either call ordo_dbus_dispatch from your
 *  loop, or ordo_dbus_fd to poll yourself. ordo_bus_free stops the
 *  publication.
 *  Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT (bus NULL, a string that is not
 *  valid UTF-8, or a name that is not a valid D-Bus bus name, such as ""
 *  or "dev..ordo": nothing is connected), or ORDO_E_DBUS (cannot connect,
 *  name taken, already
 *  published, or D-Bus support not available in this build; the message
 *  says which). */
ordo_status ordo_dbus_publish (ordo_bus *bus, const char *address, const char *name);

/** A file descriptor that becomes readable when ordo_dbus_dispatch has work
 *  to do, for your own poll()/select() loop; -1 (with the error message set)
 *  when the bus is NULL or not published. Do not read it or close it. */
int         ordo_dbus_fd      (ordo_bus *bus);

/** Handles pending D-Bus work, waiting up to timeout_ms milliseconds for
 *  some (0: do not wait; negative: wait indefinitely).
 *  Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT (bus NULL) or ORDO_E_DBUS (not
 *  published, connection lost, or not available in this build). */
ordo_status ordo_dbus_dispatch(ordo_bus *bus, int timeout_ms);

/* ------------------------------------------------------------------------ */
/* C client: a bus served over D-Bus by another process (SPEC §15)           */
/* ------------------------------------------------------------------------ */
/* A client connects to a bus that ordod (or any program that called
 * ordo_dbus_publish) serves over D-Bus, registers observer and writer
 * contracts whose callbacks run from the program's own loop, commits, and
 * reads. Every call blocks until the service answers (the reply timeout is
 * 10 s). Callbacks run only inside ordo_client_dispatch, on its thread.
 *
 * Threads: a client is used by one thread at a time (the caller serializes
 * calls on one client); different clients are independent.
 *
 * Errors of the service arrive with the status of their name
 * (dev.ordo.Error.NotFound is ORDO_E_NOT_FOUND ...;
 * org.freedesktop.DBus.Error.InvalidArgs is ORDO_E_INVALID_ARGUMENT); a
 * service that is gone or does not answer, a lost connection, and any other
 * D-Bus error (dev.ordo.Error.AccessDenied ...) are ORDO_E_DBUS. The message
 * starts with the D-Bus error name. */

/** A connection to a served bus: made by ordo_client_connect, freed by
 *  ordo_client_free. */
typedef struct ordo_client ordo_client;

/** Connects to the bus daemon at `address` (NULL: directly to the service
 *  at ORDO_ADDRESS when that is set, as ordo_client_connect_direct, else
 *  the session bus of DBUS_SESSION_BUS_ADDRESS) and addresses the service
 *  `name` (NULL: "dev.ordo.Bus"; a unique name such as ":1.42" addresses
 *  one process).
 *  Nothing is asked of the service yet: a service that is not there makes
 *  the first call fail, not the connection.
 *  Returns ORDO_OK and *out, ORDO_E_INVALID_ARGUMENT (out NULL, a string
 *  that is not UTF-8, a name that is not a D-Bus bus name), or ORDO_E_DBUS
 *  (no session bus, the daemon cannot be reached). */
ordo_status ordo_client_connect(const char *address, const char *name, ordo_client **out);

/** Connects directly, peer to peer with no bus daemon, to a service's
 *  listening socket at `address` (`ordod --listen ADDRESS`, SPEC §16), e.g.
 *  "unix:path=/run/ordo/bus". Everything else is as ordo_client_connect.
 *  Returns ORDO_OK and *out, ORDO_E_INVALID_ARGUMENT (a NULL argument, an
 *  address that is not UTF-8) or ORDO_E_DBUS (nothing listens there, the
 *  service refused the connection). */
ordo_status ordo_client_connect_direct(const char *address, ordo_client **out);

/** Closes the connection (the service removes this client's contracts),
 *  calls the destroy function of every contract still registered, and
 *  frees the client and the writes of its notifications. NULL is ignored.
 *  Caller's bugs: freeing a client from one of its callbacks, twice, or
 *  using it afterwards. */
void ordo_client_free(ordo_client *client);

/** A batch of writes: sets, touches and removals, for ordo_client_commit,
 *  and the answer of a writer contract (ordo_client_notification.writes).
 *  The service applies a batch all or nothing, in this order: the sets,
 *  then the touches, then the removals (a keypath set twice keeps the last
 *  value). Each ordo_writes_* function checks its keypath at once
 *  (ORDO_E_INVALID_KEYPATH) and its value as ordo_set_* does
 *  (ORDO_E_INVALID_ARGUMENT for a NULL string, a string that is not UTF-8,
 *  NULL data with a length); the service checks the rest when the batch
 *  is sent. */
typedef struct ordo_writes ordo_writes;

/** Makes an empty batch, freed with ordo_writes_free. Returns ORDO_OK or
 *  ORDO_E_INVALID_ARGUMENT (out NULL). */
ordo_status ordo_writes_new(ordo_writes **out);
/** Frees a batch made by ordo_writes_new. NULL is ignored; the writes of a
 *  notification belong to the client and are not freed (the message says
 *  so). Caller's bug: freeing a batch twice. */
void        ordo_writes_free(ordo_writes *writes);
/** Empties a batch (to build the next one). */
ordo_status ordo_writes_clear(ordo_writes *writes);
/** Adds a set, a touch or a removal to a batch, as ordo_set_bool …
 *  ordo_remove_tree do in a transaction. In a writer's callback, a keypath
 *  outside the contract's write set is ORDO_E_CONTRACT_VIOLATION; after the
 *  callback returned, its writes refuse everything (ORDO_E_INVALID_ARGUMENT:
 *  the answer was sent). */
ordo_status ordo_writes_set_bool  (ordo_writes *writes, const char *keypath, bool value);
ordo_status ordo_writes_set_int64 (ordo_writes *writes, const char *keypath, int64_t value);
ordo_status ordo_writes_set_double(ordo_writes *writes, const char *keypath, double value);
ordo_status ordo_writes_set_string(ordo_writes *writes, const char *keypath, const char *utf8);
ordo_status ordo_writes_set_bytes (ordo_writes *writes, const char *keypath, const void *data, size_t len);
ordo_status ordo_writes_touch     (ordo_writes *writes, const char *keypath);
ordo_status ordo_writes_remove    (ordo_writes *writes, const char *keypath);
ordo_status ordo_writes_remove_tree(ordo_writes *writes, const char *keypath);

/** Conditions and ownership of a commit (SPEC §15; a program's batch only:
 *  on a writer's notification writes they are ORDO_E_INVALID_ARGUMENT).
 *  ordo_writes_expect_counter adds a condition: ordo_client_commit applies
 *  the batch only if keypath's counter is still `counter` (0: never
 *  changed), else returns ORDO_E_CONFLICT naming the keypath and both
 *  counters, and nothing is applied. ordo_writes_set_owned(writes, true)
 *  makes the values the batch sets belong to this client's connection: the
 *  service removes them, in one transaction, when the connection closes.
 *  With either, the batch is sent as CommitWith. ordo_writes_clear resets
 *  both. Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT or ORDO_E_INVALID_KEYPATH. */
ordo_status ordo_writes_expect_counter(ordo_writes *writes, const char *keypath, uint64_t counter);
ordo_status ordo_writes_set_owned(ordo_writes *writes, bool owned);

/** Commits the batch as one transaction (D-Bus Commit); *out_txn (may be
 *  NULL) receives its id, 0 if nothing changed. The batch is left as it
 *  was (ordo_writes_clear empties it). Waits while a pass runs on the
 *  service: from a writer's callback, whose pass waits for it, it is
 *  refused (ORDO_E_INVALID_ARGUMENT). Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT
 *  (client or writes NULL, the writes of a notification), or the service's
 *  status (ORDO_E_TYPE_MISMATCH, ORDO_E_SCHEMA ..., ORDO_E_DBUS). */
ordo_status ordo_client_commit(ordo_client *client, const ordo_writes *writes, uint64_t *out_txn);

/** What a client contract's callback receives. It and everything it
 *  points to belong to the library and are valid only during the callback. */
/** What a client notification is (the same names as Swift's
 *  RemoteNotification.Kind and Python's Notification.kind). After the
 *  service restarts (a new owner of its name), the client registers its
 *  contracts again by itself and catches each observer up (SPEC §10): the
 *  first notification after that is ORDO_KIND_CHANGES (same epoch: every
 *  keypath of the read set changed meanwhile, with its value) or
 *  ORDO_KIND_SNAPSHOT (a new epoch: every keypath of the read set that has
 *  a counter; replace what you hold with its values). Each change is
 *  delivered once. Writers are called again as initial calls. */
typedef enum ordo_notification_kind {
  ORDO_KIND_NOTIFY = 0,
  ORDO_KIND_CHANGES = 1,
  ORDO_KIND_SNAPSHOT = 2
} ordo_notification_kind;

typedef struct ordo_client_notification {
  uint64_t txn;                       /* transaction id */
  uint64_t contract;                  /* the id ordo_client_register gave */
  const char *const *changed;         /* changed keypaths that affect the read set */
  size_t n_changed;                   /* changed[n_changed] is NULL; 0 for an initial call */
  const ordo_value *const *values;    /* values[i]: changed[i]'s value, NULL when it holds none */
  ordo_writes *writes;                /* a writer's answer (see below); NULL for an observer */
  ordo_notification_kind kind;        /* a Notify, or a catch-up after a restart */
} ordo_client_notification;

/** A client contract's callback, called from ordo_client_dispatch once per
 *  transaction that changed what it reads. It may call the client (get,
 *  snapshot, changes, register, unregister; a writer must not commit). A
 *  writer answers by adding to note->writes: when the callback returns, the
 *  writes are sent as its Complete and join the transaction (all or
 *  nothing; a refusal is reported to the callback of
 *  ordo_client_set_complete_error). */
typedef void (*ordo_client_callback)(ordo_client *client, const ordo_client_notification *note, void *user_data);

/** A client contract's flag, beside ORDO_NOTIFY_INITIAL. */
enum {
  /** Keep a cache of the read set (D-Bus Register option "cache"; implies
   *  ORDO_NOTIFY_INITIAL; refused for an empty read set): from its
   *  callback, ordo_client_cached reads every keypath of the read set as
   *  of note->txn, with no call to the service, where ordo_client_get and
   *  ordo_client_snapshot read the service's state now, which a later
   *  transaction may have moved (docs/dbus.md, "Consistent reads"). */
  ORDO_CLIENT_CACHE = 1u << 16
};

/** A client contract: like ordo_contract_spec, plus timeout_ms. Start from
 *  ORDO_CLIENT_CONTRACT_SPEC_INIT. A contract with writes is a writer: the
 *  service's pass waits for its answer (up to timeout_ms; 0: the service's
 *  default, 2000 ms) before calling the contracts after it, so the program
 *  must keep calling ordo_client_dispatch. size is versioning, as in
 *  ordo_contract_spec. */
typedef struct ordo_client_contract_spec {
  uint32_t size;                        /* sizeof(ordo_client_contract_spec) */
  const char *name;                     /* required; unique on the bus */
  const char *const *reads;  size_t n_reads;   /* read patterns; none: every transaction */
  const char *const *writes; size_t n_writes;  /* write patterns; some: a writer contract */
  int32_t priority;                     /* ORDO_NO_PRIORITY: data contract */
  uint32_t flags;                       /* ORDO_NOTIFY_INITIAL, ORDO_CLIENT_CACHE or 0 */
  uint32_t timeout_ms;                  /* writers only; 0: the service's default */
  ordo_client_callback callback;        /* required */
  void *user_data;                      /* passed to callback and destroy; may be NULL */
  void (*destroy)(void *user_data);     /* called once when the contract is gone; may be NULL */
} ordo_client_contract_spec;

/** A spec with size set, no name, reads, writes or callback,
 *  ORDO_NO_PRIORITY, no flags and the service's timeout. */
#define ORDO_CLIENT_CONTRACT_SPEC_INIT \
  { (uint32_t)sizeof(ordo_client_contract_spec), NULL, NULL, 0, NULL, 0, ORDO_NO_PRIORITY, 0, 0, NULL, NULL, NULL }

/** Registers a contract with the service (D-Bus Register) and writes its
 *  id (never 0; this client's numbering) to *out_id (may be NULL). Its
 *  callback runs from ordo_client_dispatch; an initial call
 *  (ORDO_NOTIFY_INITIAL) comes with the next dispatch. user_data belongs
 *  to the contract until it is gone (ordo_client_unregister,
 *  ordo_client_free), then destroy(user_data) is called once, after the
 *  callback if it is running; on failure destroy is not called.
 *  Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT (client, spec, name or callback
 *  NULL, size too small, unknown flags, timeout_ms on an observer, a NULL
 *  array with a count), ORDO_E_INVALID_KEYPATH, or the service's status
 *  (ORDO_E_DUPLICATE_NAME, ORDO_E_CYCLE, ORDO_E_ORDER_CONFLICT,
 *  ORDO_E_SCHEMA, ORDO_E_LIMIT, ORDO_E_DBUS ...). */
ordo_status ordo_client_register(ordo_client *client, const ordo_client_contract_spec *spec, uint64_t *out_id);

/** Unregisters a contract of this client: its callback is not called again
 *  and its destroy function runs (after its callback, when called from it).
 *  While the service is away (it left the bus and has not come back), the
 *  contract is only forgotten here, so that it is not registered again
 *  when the service returns: ORDO_OK. When a call to a present service
 *  fails, the contract is forgotten here all the same and ORDO_E_DBUS says
 *  why. Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT (client NULL),
 *  ORDO_E_NOT_FOUND (no such contract of this client) or ORDO_E_DBUS. */
ordo_status ordo_client_unregister(ordo_client *client, uint64_t id);

/** Called from ordo_client_dispatch when the service refused a writer's
 *  answer (a write outside the rules, a timeout passed: none of its writes
 *  was applied): the contract, the transaction, the status and the
 *  message (valid during the call). */
typedef void (*ordo_client_complete_error_callback)(ordo_client *client, uint64_t contract, uint64_t txn,
                                                    ordo_status status, const char *message, void *user_data);

/** Sets (or with callback NULL removes) the client's complete-error
 *  callback. Returns ORDO_OK or ORDO_E_INVALID_ARGUMENT (client NULL). */
ordo_status ordo_client_set_complete_error(ordo_client *client, ordo_client_complete_error_callback callback,
                                           void *user_data);

/** Called from ordo_client_dispatch when the service's name changes owner
 *  (ordod stopped, restarted, or another process took the name) or the
 *  connection is lost (the bus daemon gone; ordod gone behind a direct
 *  connection), from the client's first ordo_client_register on: owner is
 *  NULL when the service left or the connection was lost, else the new
 *  owner's unique name (over a direct connection opened again: its
 *  address), valid during the call, once the contracts are registered
 *  again and caught up. */
typedef void (*ordo_client_owner_callback)(ordo_client *client, const char *owner, void *user_data);

/** Sets (or with callback NULL removes) the client's owner-change
 *  callback. Returns ORDO_OK or ORDO_E_INVALID_ARGUMENT (client NULL). */
ordo_status ordo_client_set_owner_change(ordo_client *client, ordo_client_owner_callback callback, void *user_data);

/** Whether the client registers its contracts again, and catches its
 *  observers up, when the service's name gets a new owner, and opens a
 *  lost connection again at the same address (true by default). Off, the
 *  contracts end with the owner or the connection that held them: when it
 *  leaves, each one's destroy function runs and its id is unknown from
 *  then on; the program registers again (its owner-change callback tells
 *  when) and catches up itself with ordo_client_changes or
 *  ordo_client_snapshot (SPEC §10); a lost connection stays lost. Returns
 *  ORDO_OK or ORDO_E_INVALID_ARGUMENT (client NULL). */
ordo_status ordo_client_set_reconnect(ordo_client *client, bool reconnect);

/** How long a lost connection is tried again, every 100 ms (the client's
 *  fd brings the program's loop to ordo_client_dispatch for each try),
 *  before ordo_client_dispatch gives up with ORDO_E_DBUS: timeout_ms
 *  milliseconds from the loss, 0 for ever; 30000 by default. Any call
 *  made meanwhile also tries once, without waiting. Returns ORDO_OK or
 *  ORDO_E_INVALID_ARGUMENT (client NULL, timeout_ms negative). */
ordo_status ordo_client_set_reconnect_timeout(ordo_client *client, int timeout_ms);

/** A file descriptor that is readable when ordo_client_dispatch has work
 *  (a signal arrived, or was read while another call waited for its
 *  reply), for the program's poll()/epoll/GLib loop; it stays the same for
 *  the client's life. -1 (with the message set) for a NULL client. Do not
 *  read it or close it. */
int         ordo_client_fd(ordo_client *client);

/** Receives what the service sent, waiting up to timeout_ms milliseconds
 *  for something (0: do not wait; negative: wait until something comes),
 *  and calls the callbacks of the notifications received, writers' answers
 *  included. While a lost connection is opened again it tries once per
 *  call (and waits up to timeout_ms for it). Returns ORDO_OK,
 *  ORDO_E_INVALID_ARGUMENT (client NULL; from a callback) or ORDO_E_DBUS
 *  (the connection is lost for good: without reconnection, or past the
 *  reconnect timeout). */
ordo_status ordo_client_dispatch(ordo_client *client, int timeout_ms);

/** The value and counter of a keypath (D-Bus Get): *out receives the value
 *  in one block, its string or bytes included, freed with ordo_free;
 *  *out_counter (may be NULL) its counter. Returns ORDO_OK,
 *  ORDO_E_INVALID_ARGUMENT (client, keypath or out NULL),
 *  ORDO_E_INVALID_KEYPATH, ORDO_E_NOT_FOUND (no value) or ORDO_E_DBUS. */
ordo_status ordo_client_get(ordo_client *client, const char *keypath, ordo_value **out, uint64_t *out_counter);

/** The keypaths matching the patterns that hold a value or have a counter,
 *  read at one moment (D-Bus Snapshot), as ordo_snapshot reports them: the
 *  callback once per keypath, in keypath order; *out_txn (may be NULL) the
 *  last committed id. Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT,
 *  ORDO_E_INVALID_KEYPATH or ORDO_E_DBUS; on an error callback is not
 *  called. */
ordo_status ordo_client_snapshot(ordo_client *client, const char *const *patterns, size_t n_patterns,
                                 ordo_snapshot_callback callback, void *user_data, uint64_t *out_txn);

/** What changed after transaction since among the keypaths matching the
 *  patterns (D-Bus Changes, SPEC §10): the callback once per keypath, in
 *  keypath order, value NULL for one that holds none (removed, touched);
 *  *out_txn (may be NULL) the last committed id, the since of the next
 *  catch-up. since after the last committed id is ORDO_E_INVALID_ARGUMENT
 *  (another epoch: take a snapshot). Returns as ordo_client_snapshot. */
ordo_status ordo_client_changes(ordo_client *client, uint64_t since, const char *const *patterns, size_t n_patterns,
                                ordo_snapshot_callback callback, void *user_data, uint64_t *out_txn);

/** A cached contract's read set (ORDO_CLIENT_CACHE) as of the last
 *  notification it received, read in this process: the callback once per
 *  keypath of the cache that matches one of the patterns ("**": all) and
 *  holds a value, in keypath order, with counter 0 (a Notify carries no
 *  counters); *out_txn (may be NULL) the transaction the cache is at. From
 *  the contract's callback that is note->txn. After a restart of the
 *  service the cache is refilled by the contract's next (initial) call,
 *  whose kind is ORDO_KIND_CHANGES (with the keypaths whose value moved;
 *  no call when none did) or ORDO_KIND_SNAPSHOT. Returns ORDO_OK,
 *  ORDO_E_INVALID_ARGUMENT (client, callback or an array NULL, a contract
 *  registered without ORDO_CLIENT_CACHE), ORDO_E_INVALID_KEYPATH or
 *  ORDO_E_NOT_FOUND (no such contract of this client); on an error
 *  callback is not called. */
ordo_status ordo_client_cached(ordo_client *client, uint64_t contract, const char *const *patterns, size_t n_patterns,
                               ordo_snapshot_callback callback, void *user_data, uint64_t *out_txn);

/** The served bus's epoch (a UUID, SPEC §10) in *out, freed with ordo_free.
 *  Returns ORDO_OK, ORDO_E_INVALID_ARGUMENT or ORDO_E_DBUS. */
ordo_status ordo_client_epoch(ordo_client *client, char **out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ORDO_H */
