#pragma once
// The writer shared by the synthetic detection generators (detect_synth.hpp's shapes, scenes_synth.hpp's
// scenes): draws each image's size, calls the generator, writes the JPEG and its YOLO label file on all
// cores, then data.yaml. Layout: out/images/{train,val}/NNNNN.jpg, out/labels/{train,val}/NNNNN.txt,
// out/data.yaml. Image i is generated from its own seed (run seed, the generator's stream, i), so a set
// is identical for any number of threads.
#include <libreyolo/core/api.hpp>
#include <libreyolo/data/detect_synth.hpp>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace libreyolo::data {

// How a generator's image sizes are drawn: the long side uniform in [long_min, long_max] (whole pixels),
// the short side short_min..short_max of it, landscape with probability `landscape`. `square`: every image
// long_max x long_max, drawing nothing from the image's generator.
struct SynthSizes {
  int long_min = 0, long_max = 0;
  double short_min = 0.56, short_max = 1.0;
  double landscape = 0.75;
  bool square = false;
};

// Paints one image of h x w pixels from `rng` and returns it, with its labelled objects in `objects`.
using SynthDetectMaker = std::function<Image(int h, int w, std::mt19937_64& rng, std::vector<SynthObject>& objects)>;

namespace detail {

// "synth <what> option <key> = <value> is outside the allowed range <allowed>", as a ConfigError.
[[noreturn]] LIBREYOLO_INLINE void synth_option_error(const std::string& what, const std::string& key, const std::string& value,
                                                      const std::string& allowed);
// The checks every YOLO-layout generator shares: val_fraction in [0, 1), enough images for the splits,
// an output folder. `what` as above ("--task point").
LIBREYOLO_INLINE void validate_synth_split(const SynthOptions& o, const std::string& what);

// Writes the set (o.out must have been validated; prepare_synth_out is called here). `stream` separates
// the generators' seeds; `names` has one entry per class (data.yaml); `what` is the data.yaml comment's
// and the log line's description of the set (e.g. "--task detect --style scenes").
LIBREYOLO_INLINE void write_synth_detect_set(const SynthOptions& o, const SynthSizes& sizes, uint64_t stream,
                                             const SynthDetectMaker& make, const std::vector<std::string>& names,
                                             const std::string& what);

}  // namespace detail

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/synth_writer-inl.hpp>
#endif
