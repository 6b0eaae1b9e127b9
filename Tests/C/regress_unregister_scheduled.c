/* Regression check for a core leak (reported; run by Tests/C/run.sh as a
 * known failure until the core is fixed):
 *
 * A contract unregistered during a pass while it is scheduled (here "content",
 * removed by "root" before its turn) is skipped by the pass without clearing
 * its trigger list. ContractState.triggers keeps the keypath's KeyNode, whose
 * cached reader list keeps the ContractState: a retain cycle. The next write
 * to that keypath refreshes the cache and breaks it; if the bus is freed
 * before, the contract (and its callback closure) leak.
 *
 * This program must pass valgrind's leak check once the core clears the
 * triggers of a contract it skips (or on unregister). */
#include <ordo.h>

#include <stdio.h>

static uint64_t content_id;

static void nop(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  (void)bus;
  (void)note;
  (void)user_data;
}

static void root(ordo_bus *bus, const ordo_notification *note, void *user_data) {
  (void)note;
  (void)user_data;
  if (ordo_unregister(bus, content_id) != ORDO_OK) fprintf(stderr, "unregister failed\n");
}

int main(void) {
  ordo_bus *bus = ordo_bus_new();
  ordo_contract_spec spec = ORDO_CONTRACT_SPEC_INIT;
  const char *reads[] = {"ui.mode"};
  spec.reads = reads;
  spec.n_reads = 1;
  spec.name = "content";
  spec.callback = nop;
  if (ordo_register(bus, &spec, &content_id) != ORDO_OK) return 1;
  spec.name = "root";
  spec.priority = 1;
  spec.callback = root;
  if (ordo_register(bus, &spec, NULL) != ORDO_OK) return 1;
  ordo_begin(bus);
  ordo_set_string(bus, "ui.mode", "list");
  if (ordo_commit(bus, NULL) != ORDO_OK) return 1;
  ordo_bus_free(bus);
  return 0;
}
