// doctest's CHECK after c10's: c10's logging header defines a CHECK(cond) macro of its own, so a unit that
// includes LibTorch headers after doctest needs doctest's back. No include guard on purpose: each inclusion
// re-establishes it (in a unity build, where every file of a test area is one unit, doctest.h itself is
// included once).
#include <doctest/doctest.h>

#undef CHECK
#define CHECK(...) DOCTEST_CHECK(__VA_ARGS__)
