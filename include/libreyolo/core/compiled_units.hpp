#pragma once
// Every `*-inl.hpp` of the library: the definitions that a compiled build (core/api.hpp,
// LIBREYOLO_COMPILED_LIB) compiles once, in the one unit that includes this header
// (cmake/libreyolo_core.cpp). A header-only build never includes this file: each header includes its own
// `*-inl.hpp`.
#include <libreyolo/core/api.hpp>
#if LIBREYOLO_HEADER_ONLY
#error "core/compiled_units.hpp is for the compiled build's one unit (define LIBREYOLO_COMPILED_LIB)"
#endif
// One line per header split into declarations and a -inl.hpp (keep sorted), in two parts: a unit that
// defines LIBREYOLO_COMPILED_PART as 1 or 2 compiles that part only, otherwise both. The in-tree build
// compiles part 1 (most of the code) beside the precompiled header and the small part 2 with it, in place
// of an empty anchor unit (cmake/libreyolo_core_*.cpp): on 2 cores that packs the clean build best.
#if !defined(LIBREYOLO_COMPILED_PART) || LIBREYOLO_COMPILED_PART == 1
#include <libreyolo/core/config-inl.hpp>
#include <libreyolo/core/log-inl.hpp>
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
#include <libreyolo/data/scenes_synth-inl.hpp>
#include <libreyolo/data/semantic-inl.hpp>
#include <libreyolo/data/synth-inl.hpp>
#include <libreyolo/data/synth_writer-inl.hpp>
#include <libreyolo/distributed/process_group-inl.hpp>
#include <libreyolo/distributed/reducer-inl.hpp>
#include <libreyolo/eval/detection-inl.hpp>
#include <libreyolo/eval/point-inl.hpp>
#include <libreyolo/eval/semantic-inl.hpp>
#include <libreyolo/io/original-inl.hpp>
#include <libreyolo/io/pickler-inl.hpp>
#include <libreyolo/io/pt_archive-inl.hpp>
#include <libreyolo/io/pyvalue-inl.hpp>
#include <libreyolo/io/unpickler-inl.hpp>
#include <libreyolo/io/zip-inl.hpp>
#include <libreyolo/precision/grad_scaler-inl.hpp>
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
#endif
#if !defined(LIBREYOLO_COMPILED_PART) || LIBREYOLO_COMPILED_PART == 2
#include <libreyolo/io/checkpoint-inl.hpp>
#include <libreyolo/plot/canvas-inl.hpp>
#include <libreyolo/plot/charts-inl.hpp>
#include <libreyolo/plot/curves-inl.hpp>
#include <libreyolo/train/ema-inl.hpp>
#include <libreyolo/train/optimizer-inl.hpp>
#include <libreyolo/train/run_dir-inl.hpp>
#endif
