// libFuzzer's driver, called from a fuzz target's own `main`. SwiftPM links
// an executable's `main` to its module's entry point, so a fuzz target built
// through SwiftPM has a `main` of its own (an `@main` type) that hands the
// command line and its input function to libFuzzer; libFuzzer itself comes
// from -sanitize=fuzzer. A header, no types, nothing to link.
#ifndef ORDO_LIBFUZZER_H
#define ORDO_LIBFUZZER_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*test_one_input)(const uint8_t *data, size_t size));

/// Runs libFuzzer on `test_one_input` with the program's arguments.
static inline int ordo_fuzz_main(int argc, char **argv, int (*test_one_input)(const uint8_t *data, size_t size)) {
  return LLVMFuzzerRunDriver(&argc, &argv, test_one_input);
}

#endif
