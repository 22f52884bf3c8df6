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
#include <libreyolo/data/augment-inl.hpp>
#include <libreyolo/data/classify-inl.hpp>
#include <libreyolo/data/detect-inl.hpp>
#include <libreyolo/data/detect_synth-inl.hpp>
#include <libreyolo/data/detect_yaml-inl.hpp>
#include <libreyolo/data/draw-inl.hpp>
#include <libreyolo/data/image-inl.hpp>
#include <libreyolo/data/image_cache-inl.hpp>
#include <libreyolo/data/image_ops-inl.hpp>
#include <libreyolo/data/label_cache-inl.hpp>
#include <libreyolo/data/point-inl.hpp>
#include <libreyolo/data/semantic-inl.hpp>
#include <libreyolo/data/synth-inl.hpp>
