// The compiled core's unit of include/libreyolo/profile/: the definitions of its headers that keep them in a
// *-inl.hpp (core/api.hpp). Built into libreyolo_core (libreyolo::core when installed); a header-only
// program never compiles this file.
#include <libreyolo/core/api.hpp>
#if LIBREYOLO_HEADER_ONLY
#error "src/profile.cpp belongs to the compiled core: compile it with LIBREYOLO_COMPILED_LIB defined"
#endif

#include <libreyolo/profile/analysis-inl.hpp>
#include <libreyolo/profile/collector-inl.hpp>
#include <libreyolo/profile/kernel_names-inl.hpp>
#include <libreyolo/profile/lenses-inl.hpp>
#include <libreyolo/profile/report-inl.hpp>
#include <libreyolo/profile/report_text-inl.hpp>
#include <libreyolo/profile/step_timing-inl.hpp>
#include <libreyolo/profile/timeline_html-inl.hpp>
#include <libreyolo/profile/verdict-inl.hpp>
#include <libreyolo/profile/writers-inl.hpp>
