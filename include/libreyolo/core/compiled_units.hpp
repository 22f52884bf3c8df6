#pragma once
// Every `*-inl.hpp` of the library: the definitions that a compiled build (core/api.hpp,
// LIBREYOLO_COMPILED_LIB) compiles once, in the one unit that includes this header
// (cmake/libreyolo_core.cpp). A header-only build never includes this file: each header includes its own
// `*-inl.hpp`.
#include <libreyolo/core/api.hpp>
#if LIBREYOLO_HEADER_ONLY
#error "core/compiled_units.hpp is for the compiled build's one unit (define LIBREYOLO_COMPILED_LIB)"
#endif
// One line per header split into declarations and a -inl.hpp (keep sorted).
#include <libreyolo/plot/canvas-inl.hpp>
#include <libreyolo/plot/charts-inl.hpp>
#include <libreyolo/plot/curves-inl.hpp>
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
