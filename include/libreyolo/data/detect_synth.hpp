#pragma once
// Synthetic detection datasets (`libreyolo data synth --task detect`): JPEGs of 1-6 objects each,
// drawn from the class shapes and textures of synth.hpp at several sizes (small ones too), some
// overlapping (never hiding much of another), over the cluttered backgrounds of the classification
// sets; the long side is imgsz and the aspect random, so sizes look like real photos.
// Layout: out/images/{train,val}/NNNNN.jpg, out/labels/{train,val}/NNNNN.txt, out/data.yaml.
// Labels are the tight boxes of the painted pixels. Deterministic per seed; written on all cores.
// synth.hpp declares synth_detect (for its task dispatch) and includes this file at its end.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/progress.hpp>
#include <libreyolo/data/synth.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numbers>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace libreyolo::data {

struct SynthObject {
  int cls = 0;
  PixelBox box;  // painted pixels [x0, x1) x [y0, y1)
};

// Object size limits as fractions of the image's shorter side.
struct SynthDetectStyle {
  int objects_min = 1, objects_max = 6;
  double side_min = 0.06, side_max = 0.55;  // log-uniform, so small objects are common
  double max_covered = 0.35;                // no object may cover more than this of another's box
  SynthStyle background;                    // clutter, noise (synth.hpp)
};

namespace detail {
LIBREYOLO_INLINE double box_cover_fraction(const BoxF& a, const BoxF& b);  // overlap / the smaller area
}  // namespace detail

// One synthetic detection image (h x w) with its objects; classes drawn from [0, classes).
LIBREYOLO_INLINE Image synth_detect_image(int h, int w, int classes, std::mt19937_64& rng, std::vector<SynthObject>& objects,
                                          const SynthDetectStyle& st = {});

namespace detail {
LIBREYOLO_INLINE void validate_synth_detect(const SynthOptions& o, int long_min);
}  // namespace detail

// Writes the dataset. Image sizes: long side uniform in [long_side_min, imgsz] (0: exactly imgsz),
// short side 0.56-1.0 of it, landscape 3 times in 4. The first round(val_fraction * images) go to val.
LIBREYOLO_INLINE void synth_detect(const SynthOptions& o, int long_side_min);  // default in synth.hpp

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/detect_synth-inl.hpp>
#endif
