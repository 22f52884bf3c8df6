#pragma once
// The test-only family list: families compiled and checked like the registered ones -- the conformance
// suite runs over them (kit/test_examples.cpp) -- that are no part of the library: the examples of
// docs/adding-a-family.md. The format of include/libreyolo/families/list.hpp, `LIBREYOLO_FAMILY(<folder>,
// <Type>)`, with each family's header included here.
#include "kit/tiny_family.hpp"

#define LRY_TEST_FAMILIES(LIBREYOLO_FAMILY) \
  LIBREYOLO_FAMILY(tiny, TinyFamily)
