#pragma once
// A second synthetic detection set, unlike detect_synth.hpp's (`libreyolo data synth --task detect
// --style scenes`), so that training fidelity is never judged on one generator:
// - textured backgrounds: value noise, wood-like stripes, tiles or a gradient, muted, with large
//   "furniture" rectangles of other textures;
// - other shapes: eight block and line glyphs (tee, ell, cup, bars, zed, chevron, keyhole, hourglass),
//   none of them a shape of the other generator;
// - a class is an appearance, not a shape: shape x finish, the finish being "plain" (solid colour with an
//   outline) or "dotted" (dots of a contrasting colour); colours are random and never tell the class;
// - distractors: ellipses, rings, irregular blobs and sticks, and class shapes in a finish that is no
//   class (stripes, checks, noise), none of them labelled;
// - occlusion: objects and distractors overlap; a label is the box of the object's pixels still visible,
//   and nothing is placed that would leave an earlier object less than 45% visible;
// - image sizes: the long side uniform in [5/12 imgsz, imgsz] (400-960 px at --imgsz 960), the short
//   side 0.6-1.0 of it, landscape 2 times in 3; 2-9 objects and 1-5 distractors per image.
// Layout and determinism as the other generator (synth_writer.hpp).
#include <libreyolo/core/api.hpp>
#include <libreyolo/data/synth_writer.hpp>

#include <array>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo::data {

inline constexpr int kScenesShapes = 8;
inline constexpr int kScenesMaxClasses = 2 * kScenesShapes;  // shape x finish
inline constexpr std::array<std::string_view, kScenesShapes> kScenesShapeNames = {
    "tee", "ell", "cup", "bars", "zed", "chevron", "keyhole", "hourglass"};
inline constexpr std::array<std::string_view, 2> kScenesFinishNames = {"plain", "dotted"};

// Class k is shape k / 2 in finish k % 2: "<shape>_<finish>".
LIBREYOLO_INLINE std::string scenes_class_name(int k);

// Whether the point (u, v) of the square [-1, 1]^2 is inside scenes shape `shape` (0 <= shape < 8).
LIBREYOLO_INLINE bool scenes_shape_inside(int shape, double u, double v);

// One scenes image (h x w) with its labelled objects, classes drawn from [0, classes).
LIBREYOLO_INLINE Image synth_scenes_image(int h, int w, int classes, std::mt19937_64& rng, std::vector<SynthObject>& objects);

// Writes the set: o.classes in [1, 16], o.imgsz (the long side's maximum) in [160, 8192].
LIBREYOLO_INLINE void synth_detect_scenes(const SynthOptions& o);

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/scenes_synth-inl.hpp>
#endif
