// Part 2 of the compiled build's unit of the library's family-independent code (include/libreyolo/core/api.hpp,
// core/compiled_units.hpp): the definitions of the headers split into declarations and a *-inl.hpp.
#define LIBREYOLO_COMPILED_PART 2
#include <libreyolo/core/compiled_units.hpp>
