// The compiled core's unit of include/libreyolo/distributed/: the definitions of its headers that keep them in a
// *-inl.hpp (core/api.hpp). Built into libreyolo_core (libreyolo::core when installed); a header-only
// program never compiles this file.
#include <libreyolo/core/api.hpp>
#if LIBREYOLO_HEADER_ONLY
#error "src/distributed.cpp belongs to the compiled core: compile it with LIBREYOLO_COMPILED_LIB defined"
#endif

#include <libreyolo/distributed/process_group-inl.hpp>
#include <libreyolo/distributed/reducer-inl.hpp>
