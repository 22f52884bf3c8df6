// The compiled build's one unit of the library's family-independent code (include/libreyolo/core/api.hpp):
// the definitions of every header split into declarations and a *-inl.hpp.
#include <libreyolo/core/compiled_units.hpp>
