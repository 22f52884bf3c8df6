#pragma once
// Header-only or compiled: how the library's family-independent, non-template code is compiled.
//
// Header-only (the default, and what an installed `libreyolo::libreyolo` gives): every function is inline
// in its header, so `#include` is all a program needs.
//
// Compiled (`LIBREYOLO_COMPILED_LIB` defined, as linking `libreyolo_core` -- `libreyolo::core` when
// installed -- does): the headers that keep their definitions in a `*-inl.hpp` beside them declare those
// functions only, and the core's units, one per area (src/<area>.cpp, spdlog's layout), define them. Every
// other unit then compiles none of that code: with one unit per family (tools/, tests/kit) the checkpoint
// and `.pt` I/O, the profiler's analysis and writers, the plots, the optimizer and the configuration were
// otherwise compiled again in each unit (benchmarks/RESULTS.md, "CLI clean build").
//
// A function defined in a `*-inl.hpp` is declared and defined with LIBREYOLO_INLINE: `inline` when
// header-only, nothing when compiled (one strong definition, in the compiled unit).
#if defined(LIBREYOLO_COMPILED_LIB)
#define LIBREYOLO_INLINE
#define LIBREYOLO_HEADER_ONLY 0
#else
#define LIBREYOLO_INLINE inline
#define LIBREYOLO_HEADER_ONLY 1
#endif
