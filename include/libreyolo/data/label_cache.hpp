#pragma once
// The label index of a detection split: for every usable image its size and its boxes, built once
// (images probed and label files parsed on several threads) and cached in a binary file next to
// the labels. The cache is keyed by a hash of every image and label file's path, size and mtime
// (and the class count), so any change to the files rebuilds it.
//
// What happens to bad input (all counted, and reported in the split's one-line summary):
//   - a listed image that is missing, unreadable, not an image or truncated: the image is SKIPPED,
//     with a warning naming the file and the reason;
//   - a label line with the wrong number of fields (5: class cx cy w h; or a polygon, class and 3+
//     x y points, which becomes its bounding box), a field that is not a number, a class id that is
//     not an integer >= 0, a coordinate more than 0.01 outside [0, 1] (closer ones are clipped), or
//     w or h = 0: the image is SKIPPED (a partly read label file would be a silently wrong label),
//     with a warning naming file:line, the bad value and what is allowed;
//   - a class id >= nc (the YAML's names list is too short): skipped and counted as above, and
//     recorded, so the dataset refuses the split (require_class_ids_in_range) instead of training on;
//   - duplicate boxes (identical lines) in one file: the copies are REMOVED, with a warning;
//   - an image without a label file, or with an empty one: kept as a background image (no boxes).
// Only when no usable image remains is the split an error (DataError).
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/atomic_file.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/progress.hpp>
#include <libreyolo/data/detect_yaml.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/rng.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace libreyolo::data {

struct LabelEntry {
  std::string image;                        // image path
  int h = 0, w = 0;                         // full image size (pixels)
  std::vector<std::array<float, 5>> boxes;  // class, cx, cy, w, h (normalised to [0, 1])
};

struct LabelStats {
  uint64_t images = 0;          // usable images (with or without boxes)
  uint64_t boxes = 0;
  uint64_t backgrounds = 0;     // usable images without boxes (no label file, or an empty one)
  uint64_t bad_images = 0;      // skipped: missing / unreadable / truncated image
  uint64_t bad_labels = 0;      // skipped: malformed label file
  uint64_t duplicates = 0;      // duplicate boxes removed
};

struct LabelIndex {
  std::vector<LabelEntry> entries;
  LabelStats stats;
  std::vector<std::string> messages;  // one per skip / duplicate removal, replayed from the cache
  std::filesystem::path cache_file;
  bool from_cache = false;
  // Label files with a class id >= nc (counted in bad_labels too): the names list is too short, which
  // the dataset turns into an error (require_class_ids_in_range) instead of training on without them.
  uint64_t class_overflows = 0;
  std::string first_class_overflow;
};

// DataError when some label file uses a class id beyond the names list.
LIBREYOLO_INLINE void require_class_ids_in_range(const LabelIndex& idx, const std::string& split);

namespace detail {

// Outcome of reading one image + label pair.
struct LabelScan {
  enum Kind : uint8_t { ok, bad_image, bad_label, bad_class } kind = ok;
  LabelEntry entry;
  uint64_t duplicates = 0;
  std::string message;
};

LIBREYOLO_INLINE bool parse_float(const std::string& tok, float& v);

// How far outside [0, 1] a normalised coordinate may stray and still be clipped to it (float rounding
// in exporters: 1.0000001, -1e-7), as Ultralytics tolerates; beyond it the label file is refused.
inline constexpr float label_clip_tolerance = 0.01f;

// Parses a label file into entry.boxes; returns "" or the reason the file is unusable. A row is a box
// (class cx cy w h) or a polygon (class x1 y1 x2 y2 x3 y3 ..., at least 3 points), which becomes its
// bounding box, as the original does. A class id >= nc sets *class_overflow (the names list is too
// short: a dataset error, not one bad image) and returns its reason.
LIBREYOLO_INLINE std::string parse_label_file(const std::filesystem::path& file, int nc, LabelEntry& entry, uint64_t& dups,
                                              std::string& dup_message, bool* class_overflow = nullptr);

// Image size from its header (probe_image has already vouched for the file).
LIBREYOLO_INLINE bool image_size(const std::filesystem::path& path, int& h, int& w, std::string& why);

LIBREYOLO_INLINE LabelScan scan_one(const std::filesystem::path& image, int nc);

LIBREYOLO_INLINE uint64_t hash_bytes(uint64_t h, const void* data, size_t n);  // FNV-1a, then mixed

LIBREYOLO_INLINE uint64_t hash_file_state(uint64_t h, const std::filesystem::path& p);

// 02: polygons, clipping and the class-count error (an 01 cache holds those images as skipped).
inline constexpr char kLabelCacheMagic[8] = {'L', 'R', 'Y', 'L', 'B', 'L', '0', '2'};

// Binary writer/reader for the cache: little helpers over a byte buffer.
struct ByteWriter {
  std::vector<char> buf;
  template <class T> void put(const T& v) {
    const char* p = reinterpret_cast<const char*>(&v);
    buf.insert(buf.end(), p, p + sizeof(T));
  }
  void put_str(const std::string& s);
};
struct ByteReader {
  const std::vector<char>& buf;
  size_t pos = 0;
  template <class T> bool get(T& v) {
    if (pos + sizeof(T) > buf.size()) return false;
    std::memcpy(&v, &buf[pos], sizeof(T));
    pos += sizeof(T);
    return true;
  }
  bool get_str(std::string& s);
};

LIBREYOLO_INLINE bool read_label_cache(const std::filesystem::path& file, uint64_t hash, LabelIndex& out);

// Atomic write (temporary file + rename); false when the folder is not writable.
LIBREYOLO_INLINE bool write_label_cache(const std::filesystem::path& file, uint64_t hash, const LabelIndex& idx);

}  // namespace detail

// Where a split's label cache lives: next to the first image's label folder, named after that
// folder plus a hash of the split's sources (so splits sharing a label folder do not collide).
LIBREYOLO_INLINE std::filesystem::path label_cache_path(const std::vector<std::filesystem::path>& sources,
                                                        const std::vector<std::filesystem::path>& images);

// Builds (or reads from the cache) the label index of `images`. `threads` <= 0: up to 8 threads.
LIBREYOLO_INLINE LabelIndex build_label_index(const std::vector<std::filesystem::path>& images, int nc,
                                              const std::filesystem::path& cache_file, int threads = 0);

// Logs the skip/duplicate messages (the first 20, then a count) and the split's one-line summary.
LIBREYOLO_INLINE void log_label_summary(const std::string& split, const LabelIndex& idx);

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/label_cache-inl.hpp>
#endif
