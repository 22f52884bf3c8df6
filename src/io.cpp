// The compiled core's unit of include/libreyolo/io/: the definitions of its headers that keep them in a
// *-inl.hpp (core/api.hpp). Built into libreyolo_core (libreyolo::core when installed); a header-only
// program never compiles this file.
#include <libreyolo/core/api.hpp>
#if LIBREYOLO_HEADER_ONLY
#error "src/io.cpp belongs to the compiled core: compile it with LIBREYOLO_COMPILED_LIB defined"
#endif

#include <libreyolo/io/checkpoint-inl.hpp>
#include <libreyolo/io/original-inl.hpp>
#include <libreyolo/io/pickler-inl.hpp>
#include <libreyolo/io/pt_archive-inl.hpp>
#include <libreyolo/io/pyvalue-inl.hpp>
#include <libreyolo/io/unpickler-inl.hpp>
#include <libreyolo/io/zip-inl.hpp>
