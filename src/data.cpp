// The compiled core's unit of include/libreyolo/data/: the definitions of its headers that keep them in a
// *-inl.hpp (core/api.hpp). Built into libreyolo_core (libreyolo::core when installed); a header-only
// program never compiles this file.
#include <libreyolo/core/api.hpp>
#if LIBREYOLO_HEADER_ONLY
#error "src/data.cpp belongs to the compiled core: compile it with LIBREYOLO_COMPILED_LIB defined"
#endif

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
