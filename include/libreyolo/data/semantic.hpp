#pragma once
// Semantic segmentation data, in the original's layout (its libreyolo/data semantic dataset):
//
//   dataset/images/{train,val}/*.jpg      masks/{train,val}/*.png   (same stem as the image)
//
// named by a dataset YAML with the common keys (path, train, val, names/nc: data/detect_yaml.hpp) and
//   masks_dir       the folder name that replaces `images` in each image path (default "masks");
//   label_mapping   optional {source_id: train_id}: mask values are remapped; unmapped ones become ignore.
// A mask is a lossless single-channel PNG (8-bit grey, palette: its indices, or 16-bit grey) of the
// image's size whose pixels are class ids in 0..nc-1 or 255 = ignore (excluded from loss and metric).
//
// The transform (the original's): training flips left-right (probability fliplr), draws a scale
// factor s from [scale_lo, scale_hi], resizes by min(S/h, S/w) * s (image bilinear, mask nearest),
// crops a random S x S window where the result overflows and pads bottom/right (image grey 114, mask
// ignore); HSV jitter (probability hsv_prob) touches the image only. Validation: s = 1, no flip, no HSV.
// The "stretch" mode (LingBot-Vision) resizes to S x S instead (flip only, no jitter, no padding).
// Geometry moves the mask with its pixels: every operation is applied to both, nearest-neighbour for
// the mask, so a class id never blends into another.
//
// Errors (DataError) name the file: a missing mask, a mask of another size, an RGB mask, a class id
// outside 0..nc-1 that is not the ignore value.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/data/augment.hpp>
#include <libreyolo/data/detect_yaml.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/image_cache.hpp>
#include <libreyolo/data/rng.hpp>
#include <libreyolo/data/synth.hpp>

#include <png.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <csetjmp>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace libreyolo::data {

inline constexpr int kIgnoreIndex = 255;

struct SemanticAugment {
  int imgsz = 512;
  bool train = true;
  double fliplr = 0.5;
  double scale_lo = 0.5, scale_hi = 2.0;  // scale jitter; lo == hi == 1 is off
  double hsv_prob = 0.0, hsv_h = 0.015, hsv_s = 0.7, hsv_v = 0.4;
  bool stretch = false;  // the original's resize_mode "stretch": resized to S x S, no scale jitter, no pad
  std::string cache = "off";  // off | ram | disk: the decoded image is cached (masks are re-read: cheap)
};

struct SemanticSample {
  torch::Tensor image;  // uint8 [3,S,S]
  torch::Tensor mask;   // int64 [S,S], class ids or 255
};

struct SemanticBatch {
  torch::Tensor images;  // uint8 [B,3,S,S]
  torch::Tensor masks;   // int64 [B,S,S]
  template <class F>
  void for_each_tensor(F&& f) {
    f(images);
    f(masks);
  }
  SemanticBatch to(const torch::Device& device, bool non_blocking = true) const;
};

// ---- masks -----------------------------------------------------------------------------------------

namespace detail {

struct MaskPng {
  int h = 0, w = 0;
  std::vector<uint16_t> v;  // row-major class values
};

// Decodes a single-channel PNG to its raw values: grey (1..16 bit) as is, palette as its indices.
// Returns false with `why` on error (an RGB PNG is an error: masks hold class ids, not colours).
LIBREYOLO_INLINE bool decode_mask_png(const std::vector<uint8_t>& data, MaskPng& out, std::string& why);

}  // namespace detail

// Reads a mask file to an 8-bit single-channel Image (c = 1) of class ids / 255. `nc` and the optional
// label mapping (source value -> train id; unmapped values become ignore) are applied and checked.
LIBREYOLO_INLINE Image read_mask(const std::filesystem::path& path, int64_t nc, const std::map<int, int>* mapping = nullptr);

// Writes a class-id mask (c = 1) as an 8-bit grey PNG.
LIBREYOLO_INLINE void write_mask(const std::filesystem::path& path, const Image& mask);

// Nearest-neighbour resize (pixel centres, as torch's nearest / PIL NEAREST): for masks.
LIBREYOLO_INLINE Image resize_nearest(const Image& src, int h, int w);

// The mask of an image: the last "/images/" of its path becomes "/<masks_dir>/", the extension .png.
LIBREYOLO_INLINE std::filesystem::path mask_path_for(const std::filesystem::path& image, const std::string& masks_dir = "masks");

// One geometric draw of the training transform.
struct SemanticDraw {
  bool stretch = false;  // resize to S x S (aspect not kept); scale and crop unused
  bool flip = false;
  double scale = 1.0;
  int crop_y = 0, crop_x = 0;  // top-left of the S x S window in the resized image (0 when it fits)
};

// The transform applied to an image and its mask with one draw (the round-trip tests call it directly).
// Letterbox: content at the top-left, padding at the bottom/right.
LIBREYOLO_INLINE std::pair<Image, Image> semantic_geometry(const Image& img, const Image& mask, int S, const SemanticDraw& d);

// Draws the geometry for an h x w image (flip, scale, crop offsets), in the original's order.
LIBREYOLO_INLINE SemanticDraw draw_semantic(int h, int w, const SemanticAugment& a, std::mt19937_64& rng);

// One split of a semantic dataset; satisfies the Loader's Dataset contract.
class SemanticDataset {
 public:
  using Sample = SemanticSample;
  using Batch = SemanticBatch;

  static std::shared_ptr<SemanticDataset> open(const DatasetYaml& y, const std::string& split, const std::string& masks_dir,
                                               const std::map<int, int>& mapping, SemanticAugment aug);

  size_t size() const { return items_.size(); }
  int64_t num_classes() const { return nc_; }
  const SemanticAugment& augment() const { return aug_; }
  const std::filesystem::path& file(size_t i) const { return items_.at(i).image; }
  const std::filesystem::path& mask_file(size_t i) const { return items_.at(i).mask; }

  Sample get(size_t i, std::mt19937_64& rng, int /*epoch*/) const;

  // The whole transform: geometry (image and mask), then HSV on the image only.
  std::pair<Image, Image> transform(const Image& img, const Image& mask, std::mt19937_64& rng) const;

  static torch::Tensor mask_tensor(const Image& m);

  static Batch collate(std::vector<Sample>&& samples);

 private:
  struct Item {
    std::filesystem::path image, mask;
  };
  static void validate(const SemanticAugment& a);

  SemanticAugment aug_;
  int64_t nc_ = 0;
  std::map<int, int> mapping_;
  std::string split_;
  std::vector<Item> items_;
  std::shared_ptr<ImageCache> cache_;
};

// The semantic keys of a dataset YAML (masks_dir, label_mapping), read beside load_dataset_yaml.
struct SemanticYamlKeys {
  std::string masks_dir = "masks";
  std::map<int, int> label_mapping;
};
LIBREYOLO_INLINE SemanticYamlKeys load_semantic_keys(const DatasetYaml& y);

// ---- the synthetic set (`libreyolo data synth --task semantic`) ------------------------------------
// JPEGs of 1-4 textured class shapes (synth.hpp's shapes and textures) over cluttered backgrounds, each
// with its mask: the shape's pixels hold its class id, the rest the background class (the last one, as
// the original's polygon fallback appends it). Long side imgsz, short side 0.56-1.0 of it, so the
// letterbox pads (ignore) show up in training. Layout: out/images/{train,val}/NNNNN.jpg,
// out/masks/{train,val}/NNNNN.png, out/data.yaml (masks_dir: masks). Deterministic per seed.

// One synthetic image (h x w) and its mask (c = 1): classes 0..classes-1, background = classes.
LIBREYOLO_INLINE std::pair<Image, Image> synth_semantic_image(int h, int w, int classes, std::mt19937_64& rng);

LIBREYOLO_INLINE void synth_semantic(const SynthOptions& o);

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/semantic-inl.hpp>
#endif
