// The compiled core's unit of include/libreyolo/eval/: the definitions of its headers that keep them in a
// *-inl.hpp (core/api.hpp). Built into libreyolo_core (libreyolo::core when installed); a header-only
// program never compiles this file.
#include <libreyolo/core/api.hpp>
#if LIBREYOLO_HEADER_ONLY
#error "src/eval.cpp belongs to the compiled core: compile it with LIBREYOLO_COMPILED_LIB defined"
#endif

#include <libreyolo/eval/detection-inl.hpp>
#include <libreyolo/eval/point-inl.hpp>
#include <libreyolo/eval/semantic-inl.hpp>
