#pragma once
// Synthetic datasets for demos and tests (no public data can be downloaded here).
//
// Classification: each class is a distinct shape with a class-tied texture, drawn with a random
// colour, position, scale and rotation over a cluttered background (gradient, noise, distractor
// lines and irregular blobs). Shape and texture make the classes learnable; clutter and random
// colours keep them from being trivial. Everything is seeded per image: deterministic per seed.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/progress.hpp>
#include <libreyolo/data/draw.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/rng.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo::data {

// How hard the images are. The defaults were checked for learnability through Loader<ClassifyFolder>
// with the default ClassifyAugment: a ResNet-18 from scratch (64 px, 10 classes x 48 train images,
// batch 16, AdamW 1e-3 cosine, 10 epochs, CPU LibTorch 1.13) reached 96.7% / 92.5% val top-1 on two
// data seeds. Full-circle rotation (rotation_max = pi) dropped that to ~50%: small sets cannot learn
// rotation invariance in 300 steps, so turns are kept small by default.
struct SynthStyle {
  double object_min = 0.7, object_max = 0.95;  // object box side as a fraction of the image
  double aspect_max = 1.15;                    // box aspect ratio in [1/aspect_max, aspect_max]
  double rotation_max = 0.2;                   // object turned uniformly in [-rotation_max, rotation_max] rad
  double background_mute = 0.8;                // background colours pulled this far towards grey
  int distractor_lines_max = 2, distractor_blobs_max = 2;
  double occluder_p = 0.0;                     // chance of a thin line across the object
  int noise = 4;                               // final per-pixel noise amplitude
};

struct SynthOptions {
  std::string task = "classify";
  std::filesystem::path out;
  int images = 600;
  int imgsz = 64;
  int classes = 10;
  uint64_t seed = 0;
  double val_fraction = 0.2;
  SynthStyle style;  // image difficulty; the defaults are the checked ones
  double progress_interval = 30;  // seconds between plain progress lines (core/progress.hpp)
};

inline constexpr int kSynthMaxClasses = 16;

// Folder / class names of the synthetic shapes, in shape-index order.
inline constexpr std::array<std::string_view, kSynthMaxClasses> kSynthShapeNames = {
    "circle", "square", "triangle", "star",    "cross", "ring",       "hexagon", "diamond",
    "crescent", "ellipse", "pentagon", "arrow", "heart", "semicircle", "frame",   "trapezoid"};

struct BoxF {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// Draws shape k (0 <= k < 16, see kSynthShapeNames) into `box`: the shape is defined inside the unit
// disk, turned by `rotation` radians, then stretched to the box, so it never leaves the box.
// Returns the tight box of the painted pixels (what a detection generator uses as its label).
LIBREYOLO_INLINE PixelBox draw_class_shape(Image& img, int k, const BoxF& box, double rotation, const Texture& tex);

// The texture tied to class k (kind and period; colours, placement and turn come from the caller).
LIBREYOLO_INLINE Texture synth_class_texture(int k, Rgb base, Rgb pattern, PointF centre, double rotation, int imgsz);

namespace detail {

LIBREYOLO_INLINE Rgb random_colour(std::mt19937_64& rng);
LIBREYOLO_INLINE Rgb toward_grey(Rgb c, double t);
// A colour at least 128 away from c in every channel, so a texture's pattern is always visible.
LIBREYOLO_INLINE Rgb contrasting(Rgb c);

// Gradient + noise background with distractors: thin lines and small irregular blobs (none of
// them a class shape, all much smaller than the object).
LIBREYOLO_INLINE void synth_background(Image& img, std::mt19937_64& rng, const SynthStyle& st);

}  // namespace detail

// One synthetic classification image of shape class `cls` (imgsz x imgsz RGB).
LIBREYOLO_INLINE Image synth_classify_image(int cls, int imgsz, std::mt19937_64& rng, const SynthStyle& st = {});

namespace detail {

LIBREYOLO_INLINE void validate_synth(const SynthOptions& o);

// Refuses to write into a non-empty folder that an earlier synth run did not create (never clobbers
// user data); a previous synthetic set is replaced whole so no stale class folders remain.
LIBREYOLO_INLINE void prepare_synth_out(const std::filesystem::path& out);

}  // namespace detail

// Writes out/train/<class>/NNNNN.jpg and out/val/<class>/NNNNN.jpg. Image i has class i % classes,
// so classes are balanced; the first round(val_fraction * n_class) images of each class go to val.
LIBREYOLO_INLINE void synth_classify(const SynthOptions& o);

// Detection sets: defined in detect_synth.hpp, which the end of this file includes.
// long_side_min > 0: image long sides uniform in [long_side_min, imgsz]; 0: exactly imgsz.
LIBREYOLO_INLINE void synth_detect(const SynthOptions& o, int long_side_min = 0);

// Dispatches on o.task: classify or detect.
LIBREYOLO_INLINE void synth(const SynthOptions& o);

}  // namespace libreyolo::data

#include <libreyolo/data/detect_synth.hpp>

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/synth-inl.hpp>
#endif
