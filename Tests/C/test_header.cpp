// ordo.h from C++: the header compiles as C++11 with -Wall -Wextra -Werror
// -pedantic, its declarations have C linkage (this links against libordo),
// and a callback written in C++ works (a captureless lambda converts to
// ordo_callback).
#include <ordo.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Recorder {
  std::vector<std::string> seen;
  int destroyed = 0;
};

int failures = 0;

void check(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "test_header.cpp: check failed: %s (last error: %s)\n", what, ordo_last_error_message());
    failures++;
  }
}

}  // namespace

int main() {
  ordo_bus *bus = ordo_bus_new();
  Recorder rec;
  const char *reads[] = {"doc.**"};
  ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
  spec.name = "cxx-view";
  spec.reads = reads;
  spec.n_reads = 1;
  spec.callback = [](ordo_bus *, const ordo_notification *note, void *user_data) {
    Recorder *r = static_cast<Recorder *>(user_data);
    for (size_t i = 0; i < note->n_changed; i++) r->seen.push_back(note->changed[i]);
  };
  spec.user_data = &rec;
  spec.destroy = [](void *user_data) { static_cast<Recorder *>(user_data)->destroyed++; };

  uint64_t id = 0, txn = 0;
  check(ordo_register(bus, &spec, &id) == ORDO_OK && id != 0, "register");
  check(ordo_begin(bus) == ORDO_OK, "begin");
  check(ordo_set_string(bus, "doc.title", "C++") == ORDO_OK, "set");
  check(ordo_commit(bus, &txn) == ORDO_OK && txn == 1, "commit");
  check(rec.seen.size() == 1 && rec.seen[0] == "doc.title", "notified");

  char *title = nullptr;
  check(ordo_get_string(bus, "doc.title", &title) == ORDO_OK && std::strcmp(title, "C++") == 0, "get");
  ordo_free(title);
  check(ordo_get_string(bus, "doc.missing", &title) == ORDO_E_NOT_FOUND, "not found");
  check(std::string(ordo_status_name(ORDO_E_NOT_FOUND)) == "ORDO_E_NOT_FOUND", "status name");

  check(ordo_unregister(bus, id) == ORDO_OK && rec.destroyed == 1, "unregister");
  ordo_bus_free(bus);
  check(rec.destroyed == 1, "destroy once");
  if (failures) return 1;
  std::printf("test_header.cpp: ok (ordo %s)\n", ordo_version());
  return 0;
}
