// The layers' hot loops are written so that GCC vectorises them at -O3; a function marked
// TROUPE_NN_LAYER_CLONES is compiled twice, for AVX2 and for the x86-64 baseline, and the loader
// picks one for the CPU (an ifunc). Inline helpers it calls are compiled into each clone.
// The AVX2 clone reduces in wider vectors, so its sums may differ in the last bits from the
// baseline's: results are the same bits run after run on one machine, not across CPU types.
#pragma once

// Defining TROUPE_NN_LAYER_CLONES empty (-DTROUPE_NN_LAYER_CLONES=) builds the baseline alone.
#ifndef TROUPE_NN_LAYER_CLONES
#if defined(__x86_64__)
#define TROUPE_NN_LAYER_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TROUPE_NN_LAYER_CLONES
#endif
#endif

// For helpers that a cloned function calls: inlined into each clone, so that they are compiled
// for its target too (an out-of-line copy is built for the baseline only).
#define TROUPE_NN_LAYER_INLINE inline __attribute__((always_inline))
