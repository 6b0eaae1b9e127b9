// CDBus: libdbus for Swift.
//
// Swift cannot import function-like or cast macros (`DBUS_TYPE_STRING` is
// `((int) 's')`) nor variadic functions, so this header re-exports the
// constants the bridge needs as `static const int` and wraps the few calls
// whose C shape is awkward from Swift (basic-type iterator access, epoll with
// its packed struct, eventfd).
#ifndef ORDO_CDBUS_SHIM_H
#define ORDO_CDBUS_SHIM_H

#include <dbus/dbus.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/un.h>

// Type codes.
static const int ORDO_DBUS_TYPE_INVALID = DBUS_TYPE_INVALID;
static const int ORDO_DBUS_TYPE_BYTE = DBUS_TYPE_BYTE;
static const int ORDO_DBUS_TYPE_BOOLEAN = DBUS_TYPE_BOOLEAN;
static const int ORDO_DBUS_TYPE_INT16 = DBUS_TYPE_INT16;
static const int ORDO_DBUS_TYPE_UINT16 = DBUS_TYPE_UINT16;
static const int ORDO_DBUS_TYPE_INT32 = DBUS_TYPE_INT32;
static const int ORDO_DBUS_TYPE_UINT32 = DBUS_TYPE_UINT32;
static const int ORDO_DBUS_TYPE_INT64 = DBUS_TYPE_INT64;
static const int ORDO_DBUS_TYPE_UINT64 = DBUS_TYPE_UINT64;
static const int ORDO_DBUS_TYPE_DOUBLE = DBUS_TYPE_DOUBLE;
static const int ORDO_DBUS_TYPE_STRING = DBUS_TYPE_STRING;
static const int ORDO_DBUS_TYPE_OBJECT_PATH = DBUS_TYPE_OBJECT_PATH;
static const int ORDO_DBUS_TYPE_SIGNATURE = DBUS_TYPE_SIGNATURE;
static const int ORDO_DBUS_TYPE_UNIX_FD = DBUS_TYPE_UNIX_FD;
static const int ORDO_DBUS_TYPE_ARRAY = DBUS_TYPE_ARRAY;
static const int ORDO_DBUS_TYPE_VARIANT = DBUS_TYPE_VARIANT;
static const int ORDO_DBUS_TYPE_STRUCT = DBUS_TYPE_STRUCT;
static const int ORDO_DBUS_TYPE_DICT_ENTRY = DBUS_TYPE_DICT_ENTRY;

// Message types.
static const int ORDO_DBUS_MESSAGE_TYPE_METHOD_CALL = DBUS_MESSAGE_TYPE_METHOD_CALL;
static const int ORDO_DBUS_MESSAGE_TYPE_METHOD_RETURN = DBUS_MESSAGE_TYPE_METHOD_RETURN;
static const int ORDO_DBUS_MESSAGE_TYPE_ERROR = DBUS_MESSAGE_TYPE_ERROR;
static const int ORDO_DBUS_MESSAGE_TYPE_SIGNAL = DBUS_MESSAGE_TYPE_SIGNAL;

// Names and timeouts.
static const unsigned int ORDO_DBUS_NAME_FLAG_DO_NOT_QUEUE = DBUS_NAME_FLAG_DO_NOT_QUEUE;
static const int ORDO_DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER = DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER;
static const int ORDO_DBUS_REQUEST_NAME_REPLY_ALREADY_OWNER = DBUS_REQUEST_NAME_REPLY_ALREADY_OWNER;
static const int ORDO_DBUS_TIMEOUT_INFINITE = DBUS_TIMEOUT_INFINITE;
static const int ORDO_DBUS_TIMEOUT_USE_DEFAULT = DBUS_TIMEOUT_USE_DEFAULT;
static const long ORDO_DBUS_MAXIMUM_MESSAGE_LENGTH = DBUS_MAXIMUM_MESSAGE_LENGTH;

// Basic-type iterator access.
static inline dbus_bool_t ordo_iter_append_string(DBusMessageIter *it, int type, const char *s) {
  return dbus_message_iter_append_basic(it, type, &s);
}
static inline dbus_bool_t ordo_iter_append_bool(DBusMessageIter *it, dbus_bool_t v) {
  return dbus_message_iter_append_basic(it, DBUS_TYPE_BOOLEAN, &v);
}
static inline dbus_bool_t ordo_iter_append_int32(DBusMessageIter *it, int32_t v) {
  return dbus_message_iter_append_basic(it, DBUS_TYPE_INT32, &v);
}
static inline dbus_bool_t ordo_iter_append_uint32(DBusMessageIter *it, uint32_t v) {
  return dbus_message_iter_append_basic(it, DBUS_TYPE_UINT32, &v);
}
static inline dbus_bool_t ordo_iter_append_int64(DBusMessageIter *it, int64_t v) {
  return dbus_message_iter_append_basic(it, DBUS_TYPE_INT64, &v);
}
static inline dbus_bool_t ordo_iter_append_uint64(DBusMessageIter *it, uint64_t v) {
  return dbus_message_iter_append_basic(it, DBUS_TYPE_UINT64, &v);
}
static inline dbus_bool_t ordo_iter_append_double(DBusMessageIter *it, double v) {
  return dbus_message_iter_append_basic(it, DBUS_TYPE_DOUBLE, &v);
}
static inline dbus_bool_t ordo_iter_append_bytes(DBusMessageIter *it, const uint8_t *p, int n) {
  DBusMessageIter sub;
  if (!dbus_message_iter_open_container(it, DBUS_TYPE_ARRAY, "y", &sub)) return 0;
  if (n > 0 && !dbus_message_iter_append_fixed_array(&sub, DBUS_TYPE_BYTE, &p, n)) {
    dbus_message_iter_abandon_container(it, &sub);
    return 0;
  }
  return dbus_message_iter_close_container(it, &sub);
}

static inline const char *ordo_iter_get_string(DBusMessageIter *it) {
  const char *s = NULL;
  dbus_message_iter_get_basic(it, &s);
  return s;
}
static inline dbus_bool_t ordo_iter_get_bool(DBusMessageIter *it) {
  dbus_bool_t v = 0;
  dbus_message_iter_get_basic(it, &v);
  return v;
}
static inline int32_t ordo_iter_get_int32(DBusMessageIter *it) {
  int32_t v = 0;
  dbus_message_iter_get_basic(it, &v);
  return v;
}
static inline uint32_t ordo_iter_get_uint32(DBusMessageIter *it) {
  uint32_t v = 0;
  dbus_message_iter_get_basic(it, &v);
  return v;
}
static inline int64_t ordo_iter_get_int64(DBusMessageIter *it) {
  int64_t v = 0;
  dbus_message_iter_get_basic(it, &v);
  return v;
}
static inline uint64_t ordo_iter_get_uint64(DBusMessageIter *it) {
  uint64_t v = 0;
  dbus_message_iter_get_basic(it, &v);
  return v;
}
static inline double ordo_iter_get_double(DBusMessageIter *it) {
  double v = 0;
  dbus_message_iter_get_basic(it, &v);
  return v;
}
// The bytes of an `ay` the iterator points into (inside the array).
static inline const uint8_t *ordo_iter_get_bytes(DBusMessageIter *array_sub, int *n) {
  const uint8_t *p = NULL;
  *n = 0;
  dbus_message_iter_get_fixed_array(array_sub, &p, n);
  return p;
}

// epoll without the packed struct.
static inline int ordo_epoll_ctl(int ep, int op, int fd, uint32_t events) {
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.events = events;
  ev.data.fd = fd;
  return epoll_ctl(ep, op, fd, &ev);
}
// Waits; writes up to max (fd, events) pairs; returns the count or -1.
static inline int ordo_epoll_wait(int ep, int *fds, uint32_t *events, int max, int timeout_ms) {
  struct epoll_event evs[64];
  if (max > 64) max = 64;
  int n = epoll_wait(ep, evs, max, timeout_ms);
  for (int i = 0; i < n; i++) {
    fds[i] = evs[i].data.fd;
    events[i] = evs[i].events;
  }
  return n;
}
static const uint32_t ORDO_EPOLLIN = EPOLLIN;
static const uint32_t ORDO_EPOLLOUT = EPOLLOUT;
static const uint32_t ORDO_EPOLLERR = EPOLLERR;
static const uint32_t ORDO_EPOLLHUP = EPOLLHUP;
static const int ORDO_EPOLL_CTL_ADD = EPOLL_CTL_ADD;
static const int ORDO_EPOLL_CTL_MOD = EPOLL_CTL_MOD;
static const int ORDO_EPOLL_CTL_DEL = EPOLL_CTL_DEL;
static inline int ordo_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }
static inline int ordo_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }
static inline int ordo_timerfd(void) { return timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK); }
// Makes a timerfd readable once, ms milliseconds from now; 0 disarms it.
static inline int ordo_timerfd_arm(int fd, int ms) {
  struct itimerspec t = {{0, 0}, {ms / 1000, (long)(ms % 1000) * 1000000L}};
  return timerfd_settime(fd, 0, &t, NULL);
}
static inline int ordo_errno(void) { return errno; }

// Direct connections (a DBusServer's peers).

// Lets the server authenticate peers with EXTERNAL only: their identity
// comes from the socket's credentials (SO_PEERCRED), never from a cookie.
static inline dbus_bool_t ordo_server_external_only(DBusServer *server) {
  const char *mechanisms[] = {"EXTERNAL", NULL};
  return dbus_server_set_auth_mechanisms(server, mechanisms);
}
// The peer's groups as the kernel recorded them when it connected: its
// primary group (SO_PEERCRED) first, then its supplementary groups
// (SO_PEERGROUPS), as the bus daemon reports them; -1 where the kernel does
// not report them. Writes at most max gids and returns how many there are.
static inline int ordo_peer_groups(int fd, uint32_t *gids, int max) {
#ifdef SO_PEERGROUPS
  // struct ucred's layout (declared by glibc only with _GNU_SOURCE, which
  // this module must not define: its system headers would differ from
  // other modules').
  struct { pid_t pid; uid_t uid; gid_t gid; } cred;
  socklen_t clen = sizeof cred;
  if (max < 1 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) return -1;
  gids[0] = cred.gid;
  socklen_t len = (socklen_t)((max - 1) * (int)sizeof(gid_t));
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, gids + 1, &len) < 0) {
    if (errno == ERANGE) return 1 + (int)(len / sizeof(gid_t));
    return -1;
  }
  return 1 + (int)(len / sizeof(gid_t));
#else
  (void)fd; (void)gids; (void)max;
  return -1;
#endif
}
// Whether a process accepts connections on the Unix socket at path:
// 1 yes, 0 no (nothing listens: a stale socket file), -1 the connect
// failed otherwise (errno says why).
static inline int ordo_unix_socket_alive(const char *path) {
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof addr.sun_path) { errno = ENAMETOOLONG; return -1; }
  strcpy(addr.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int r = connect(fd, (struct sockaddr *)&addr, sizeof addr);
  int e = errno;
  close(fd);
  if (r == 0 || e == EAGAIN) return 1;
  if (e == ECONNREFUSED) return 0;
  errno = e;
  return -1;
}

// The process environment (a C global Swift 6 will not read directly).
extern char **environ;
static inline char **ordo_environ(void) { return environ; }

#endif
