/*
 * A processor hint for the core (Sources/Ordo), which Swift cannot spell:
 * start fetching the cache line at an address without waiting for it.
 * No types, no calls, nothing to link: the compiler turns each function
 * into one instruction (prefetcht0 on x86-64, prfm on arm64), or into
 * nothing where the target has none. A prefetch never faults and never
 * holds up the instructions after it, where a load whose value is used
 * does: see docs/architecture.md ("A processor hint") and
 * docs/performance.md.
 */
#ifndef ORDO_CACHE_HINT_H
#define ORDO_CACHE_HINT_H

/* Starts fetching the line at p, to be read soon. */
static inline __attribute__((always_inline)) void ordo_prefetch(const void *p) { __builtin_prefetch(p, 0, 3); }

/* Starts fetching the line at p, to be written soon. */
static inline __attribute__((always_inline)) void ordo_prefetch_for_write(const void *p) { __builtin_prefetch(p, 1, 3); }

#endif
