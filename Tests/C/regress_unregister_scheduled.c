/* Regression check for a core leak (found by these tests and by the core's
 * fuzzer; fixed in the core by 85f86d0):
 *
 * A contract unregistered during a pass while it is scheduled (here "content",
 * removed by "root" before its turn) was skipped by the pass without clearing
 * its trigger list. ContractState.triggers kept the keypath's KeyNode, whose
 * cached reader list kept the ContractState: a retain cycle, broken only by
 * the next write to that keypath. When the bus was freed before, the contract
 * and its callback closure leaked. Run under valgrind's leak check. */
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
