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
  SemanticBatch to(const torch::Device& device, bool non_blocking = true) const {
    return {images.to(device, non_blocking), masks.to(device, non_blocking)};
  }
};

// ---- masks -----------------------------------------------------------------------------------------

namespace detail {

struct MaskPng {
  int h = 0, w = 0;
  std::vector<uint16_t> v;  // row-major class values
};

// Decodes a single-channel PNG to its raw values: grey (1..16 bit) as is, palette as its indices.
// Returns false with `why` on error (an RGB PNG is an error: masks hold class ids, not colours).
inline bool decode_mask_png(const std::vector<uint8_t>& data, MaskPng& out, std::string& why) {
  PngIo io;
  std::vector<png_bytep> rows;
  std::vector<uint8_t> buf;
  io.in = &data;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, lry_png_error, lry_png_warning);
  if (!png) {
    why = "libpng could not allocate a reader";
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    why = "libpng could not allocate an info struct";
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    why = io.message;
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, &io, lry_png_read);
  png_read_info(png, info);
  out.w = static_cast<int>(png_get_image_width(png, info));
  out.h = static_cast<int>(png_get_image_height(png, info));
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  if (color != PNG_COLOR_TYPE_GRAY && color != PNG_COLOR_TYPE_PALETTE) {
    std::snprintf(io.message, sizeof io.message,
                  "has %s pixels; a mask must be single-channel class ids (PNG grey or palette)",
                  color == PNG_COLOR_TYPE_RGB ? "RGB" : color == PNG_COLOR_TYPE_RGB_ALPHA ? "RGBA" : "grey+alpha");
    png_error(png, io.message);
  }
  if (auto v = pixel_limit_violation(static_cast<uint64_t>(out.w), static_cast<uint64_t>(out.h)); !v.empty())
    png_error(png, v.c_str());
  if (depth < 8) png_set_packing(png);  // 1/2/4-bit values (or indices) to one byte each, not rescaled
  if (depth == 16) png_set_swap(png);   // little-endian uint16 in memory
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t rb = png_get_rowbytes(png, info);
  const size_t bpp = depth == 16 ? 2 : 1;
  if (rb != static_cast<size_t>(out.w) * bpp) png_error(png, "unsupported mask PNG layout");
  buf.resize(rb * static_cast<size_t>(out.h));
  rows.resize(static_cast<size_t>(out.h));
  for (int y = 0; y < out.h; ++y) rows[y] = &buf[static_cast<size_t>(y) * rb];
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  out.v.resize(static_cast<size_t>(out.h) * out.w);
  for (size_t i = 0; i < out.v.size(); ++i)
    out.v[i] = bpp == 2 ? static_cast<uint16_t>(buf[2 * i] | (buf[2 * i + 1] << 8)) : buf[i];
  return true;
}

}  // namespace detail

// Reads a mask file to an 8-bit single-channel Image (c = 1) of class ids / 255. `nc` and the optional
// label mapping (source value -> train id; unmapped values become ignore) are applied and checked.
inline Image read_mask(const std::filesystem::path& path, int64_t nc, const std::map<int, int>* mapping = nullptr) {
  std::vector<uint8_t> data;
  std::string why;
  if (!detail::read_bytes(path, 0, 0, data, why)) throw DataError("mask '" + path.string() + "': " + why);
  if (detail::sniff_format(data) != ImageFormat::png)
    throw DataError("mask '" + path.string() + "': not a PNG file (masks must be lossless single-channel PNGs)");
  detail::MaskPng m;
  if (!detail::decode_mask_png(data, m, why)) throw DataError("mask '" + path.string() + "': " + why);
  Image out(m.h, m.w, 1);
  for (size_t i = 0; i < m.v.size(); ++i) {
    int v = m.v[i];
    if (mapping) {
      auto it = mapping->find(v);
      v = it == mapping->end() ? kIgnoreIndex : it->second;
    }
    if (v != kIgnoreIndex && (v < 0 || v >= nc))
      throw DataError("mask '" + path.string() + "': pixel (" + std::to_string(i % m.w) + ", " + std::to_string(i / m.w) +
                      ") holds class id " + std::to_string(v) + ", outside 0.." + std::to_string(nc - 1) +
                      " (ignore = 255); remap source ids with the dataset YAML's label_mapping");
    out.px[i] = static_cast<uint8_t>(v);
  }
  return out;
}

// Writes a class-id mask (c = 1) as an 8-bit grey PNG.
inline void write_mask(const std::filesystem::path& path, const Image& mask) {
  if (mask.c != 1) throw DataError("write_mask '" + path.string() + "': a mask has one channel, got " + std::to_string(mask.c));
  write_png(path, mask);
}

// Nearest-neighbour resize (pixel centres, as torch's nearest / PIL NEAREST): for masks.
inline Image resize_nearest(const Image& src, int h, int w) {
  if (src.empty() || h <= 0 || w <= 0)
    throw Error("resize_nearest: cannot resize a " + std::to_string(src.h) + "x" + std::to_string(src.w) + " image to " +
                std::to_string(h) + "x" + std::to_string(w));
  Image dst(h, w, src.c);
  std::vector<int> xs(static_cast<size_t>(w));
  for (int x = 0; x < w; ++x) xs[x] = std::min(src.w - 1, static_cast<int>(std::floor((x + 0.5) * src.w / w)));
  for (int y = 0; y < h; ++y) {
    const int sy = std::min(src.h - 1, static_cast<int>(std::floor((y + 0.5) * src.h / h)));
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < src.c; ++ch) dst.at(y, x, ch) = src.at(sy, xs[x], ch);
  }
  return dst;
}

// The mask of an image: the last "/images/" of its path becomes "/<masks_dir>/", the extension .png.
inline std::filesystem::path mask_path_for(const std::filesystem::path& image, const std::string& masks_dir = "masks") {
  const std::string s = image.string();
  const std::string from = "/images/";
  const size_t at = s.rfind(from);
  std::filesystem::path p =
      at == std::string::npos ? image : std::filesystem::path(s.substr(0, at) + "/" + masks_dir + "/" + s.substr(at + from.size()));
  return p.replace_extension(".png");
}

// One geometric draw of the training transform.
struct SemanticDraw {
  bool stretch = false;  // resize to S x S (aspect not kept); scale and crop unused
  bool flip = false;
  double scale = 1.0;
  int crop_y = 0, crop_x = 0;  // top-left of the S x S window in the resized image (0 when it fits)
};

// The transform applied to an image and its mask with one draw (the round-trip tests call it directly).
// Letterbox: content at the top-left, padding at the bottom/right.
inline std::pair<Image, Image> semantic_geometry(const Image& img, const Image& mask, int S, const SemanticDraw& d) {
  if (img.h != mask.h || img.w != mask.w)
    throw DataError("semantic_geometry: image " + std::to_string(img.h) + "x" + std::to_string(img.w) + " and mask " +
                    std::to_string(mask.h) + "x" + std::to_string(mask.w) + " differ in size");
  Image im = img, mk = mask;
  if (d.flip) flip_lr(im), flip_lr(mk);
  if (d.stretch) {
    if (im.h != S || im.w != S) im = resize_bilinear(im, S, S), mk = resize_nearest(mk, S, S);
    return {std::move(im), std::move(mk)};
  }
  const double ratio = std::min(double(S) / im.h, double(S) / im.w) * d.scale;
  const int nh = std::max(1, static_cast<int>(std::lround(im.h * ratio)));
  const int nw = std::max(1, static_cast<int>(std::lround(im.w * ratio)));
  if (nh != im.h || nw != im.w) {
    im = resize_bilinear(im, nh, nw);
    mk = resize_nearest(mk, nh, nw);
  }
  if (nh > S || nw > S) {
    const int ch = std::min(S, nh), cw = std::min(S, nw);
    im = crop(im, d.crop_y, d.crop_x, ch, cw);
    mk = crop(mk, d.crop_y, d.crop_x, ch, cw);
  }
  if (im.h == S && im.w == S) return {std::move(im), std::move(mk)};
  Image ci(S, S, 3, kLetterboxFill), cm(S, S, 1, static_cast<uint8_t>(kIgnoreIndex));
  paste(ci, im, 0, 0);
  paste(cm, mk, 0, 0);
  return {std::move(ci), std::move(cm)};
}

// Draws the geometry for an h x w image (flip, scale, crop offsets), in the original's order.
inline SemanticDraw draw_semantic(int h, int w, const SemanticAugment& a, std::mt19937_64& rng) {
  SemanticDraw d;
  d.stretch = a.stretch;
  if (!a.train) return d;
  d.flip = bernoulli(rng, a.fliplr);
  if (a.stretch) return d;
  d.scale = a.scale_lo == a.scale_hi ? a.scale_lo : uniform(rng, a.scale_lo, a.scale_hi);
  const double ratio = std::min(double(a.imgsz) / h, double(a.imgsz) / w) * d.scale;
  const int nh = std::max(1, static_cast<int>(std::lround(h * ratio)));
  const int nw = std::max(1, static_cast<int>(std::lround(w * ratio)));
  if (nh > a.imgsz || nw > a.imgsz) {
    d.crop_y = static_cast<int>(randint(rng, 0, std::max(0, nh - a.imgsz)));
    d.crop_x = static_cast<int>(randint(rng, 0, std::max(0, nw - a.imgsz)));
  }
  return d;
}

// One split of a semantic dataset; satisfies the Loader's Dataset contract.
class SemanticDataset {
 public:
  using Sample = SemanticSample;
  using Batch = SemanticBatch;

  static std::shared_ptr<SemanticDataset> open(const DatasetYaml& y, const std::string& split, const std::string& masks_dir,
                                               const std::map<int, int>& mapping, SemanticAugment aug) {
    validate(aug);
    auto d = std::make_shared<SemanticDataset>();
    d->aug_ = aug;
    d->nc_ = static_cast<int64_t>(y.names.size());
    d->mapping_ = mapping;
    d->split_ = split;
    if (d->nc_ > kIgnoreIndex)
      throw DataError("dataset YAML '" + y.file.string() + "': " + std::to_string(d->nc_) +
                      " classes; semantic masks allow at most 255 (0..254, 255 = ignore)");
    const auto files = split_image_files(y.split(split));
    if (files.empty()) throw DataError("dataset YAML '" + y.file.string() + "', split '" + split + "': no images found");
    size_t missing = 0;
    std::string first_missing;
    for (const auto& f : files) {
      auto m = mask_path_for(f, masks_dir);
      if (!std::filesystem::exists(m)) {
        if (!missing++) first_missing = m.string();
        continue;
      }
      d->items_.push_back({f, m});
    }
    if (missing)
      throw DataError("dataset YAML '" + y.file.string() + "', split '" + split + "': " + std::to_string(missing) +
                      " image(s) have no mask (e.g. '" + first_missing + "'; masks mirror the images tree under '" +
                      masks_dir + "/', same stem, .png)");
    log::info(split, ": ", d->items_.size(), " images with masks, ", d->nc_, " classes");
    const CacheMode mode = parse_cache_mode(aug.cache);
    d->cache_ = std::make_shared<ImageCache>(mode, d->items_.size(), aug.imgsz);
    return d;
  }

  size_t size() const { return items_.size(); }
  int64_t num_classes() const { return nc_; }
  const SemanticAugment& augment() const { return aug_; }
  const std::filesystem::path& file(size_t i) const { return items_.at(i).image; }
  const std::filesystem::path& mask_file(size_t i) const { return items_.at(i).mask; }

  Sample get(size_t i, std::mt19937_64& rng, int /*epoch*/) const {
    const auto& it = items_.at(i);
    auto img = cache_->get(i, it.image, [&] { return read_image(it.image); });
    Image mask = read_mask(it.mask, nc_, mapping_.empty() ? nullptr : &mapping_);
    if (mask.h != img->h || mask.w != img->w)
      throw DataError("mask '" + it.mask.string() + "' is " + std::to_string(mask.w) + "x" + std::to_string(mask.h) +
                      " but its image '" + it.image.string() + "' is " + std::to_string(img->w) + "x" + std::to_string(img->h));
    auto [im, mk] = transform(*img, mask, rng);
    return {to_chw_tensor(im), mask_tensor(mk)};
  }

  // The whole transform: geometry (image and mask), then HSV on the image only.
  std::pair<Image, Image> transform(const Image& img, const Image& mask, std::mt19937_64& rng) const {
    const SemanticDraw d = draw_semantic(img.h, img.w, aug_, rng);
    auto out = semantic_geometry(img, mask, aug_.imgsz, d);
    if (aug_.train && aug_.hsv_prob > 0 && bernoulli(rng, aug_.hsv_prob)) hsv_augment(out.first, aug_.hsv_h, aug_.hsv_s, aug_.hsv_v, rng);
    return out;
  }

  static torch::Tensor mask_tensor(const Image& m) {
    return torch::from_blob(const_cast<uint8_t*>(m.px.data()), {m.h, m.w}, torch::kUInt8).to(torch::kInt64);
  }

  static Batch collate(std::vector<Sample>&& samples) {
    std::vector<torch::Tensor> images, masks;
    for (auto& s : samples) images.push_back(std::move(s.image)), masks.push_back(std::move(s.mask));
    return {torch::stack(images), torch::stack(masks)};
  }

 private:
  struct Item {
    std::filesystem::path image, mask;
  };
  static void validate(const SemanticAugment& a) {
    auto bad = [](const std::string& key, double v, const char* allowed) {
      throw ConfigError("semantic augment " + key + " = " + log::cat(v) + " is outside " + allowed);
    };
    if (a.imgsz < 16) bad("imgsz", a.imgsz, "[16, inf)");
    if (!(a.fliplr >= 0 && a.fliplr <= 1)) bad("fliplr", a.fliplr, "[0, 1]");
    if (!(a.scale_lo > 0 && a.scale_lo <= a.scale_hi)) bad("scale_lo", a.scale_lo, "(0, scale_hi]");
    if (!(a.hsv_prob >= 0 && a.hsv_prob <= 1)) bad("hsv_prob", a.hsv_prob, "[0, 1]");
  }

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
inline SemanticYamlKeys load_semantic_keys(const DatasetYaml& y) {
  SemanticYamlKeys k;
  YAML::Node root;
  try {
    root = YAML::LoadFile(y.file.string());
  } catch (const std::exception& e) {
    throw DataError("dataset YAML '" + y.file.string() + "': " + e.what());
  }
  if (auto m = root["masks_dir"]) {
    if (!m.IsScalar() || m.as<std::string>().empty())
      throw DataError(detail::yaml_where(y.file, m, "masks_dir") + ": must be a folder name (default: masks)");
    k.masks_dir = m.as<std::string>();
  }
  if (auto lm = root["label_mapping"]) {
    if (!lm.IsMap()) throw DataError(detail::yaml_where(y.file, lm, "label_mapping") + ": must be a map {source_id: train_id}");
    const int nc = static_cast<int>(y.names.size());
    for (auto it = lm.begin(); it != lm.end(); ++it) {
      int s = 0, t = 0;
      try {
        s = it->first.as<int>();
        t = it->second.as<int>();
      } catch (const std::exception&) {
        throw DataError(detail::yaml_where(y.file, it->first, "label_mapping") + ": entries must be integers source_id: train_id");
      }
      if (s < 0 || s > 65535 || !((t >= 0 && t < nc) || t == kIgnoreIndex))
        throw DataError(detail::yaml_where(y.file, it->first, "label_mapping") + ": " + std::to_string(s) + ": " +
                        std::to_string(t) + " (source ids 0..65535, train ids 0.." + std::to_string(nc - 1) + " or 255)");
      k.label_mapping[s] = t;
    }
  }
  return k;
}

// ---- the synthetic set (`libreyolo data synth --task semantic`) ------------------------------------
// JPEGs of 1-4 textured class shapes (synth.hpp's shapes and textures) over cluttered backgrounds, each
// with its mask: the shape's pixels hold its class id, the rest the background class (the last one, as
// the original's polygon fallback appends it). Long side imgsz, short side 0.56-1.0 of it, so the
// letterbox pads (ignore) show up in training. Layout: out/images/{train,val}/NNNNN.jpg,
// out/masks/{train,val}/NNNNN.png, out/data.yaml (masks_dir: masks). Deterministic per seed.

// One synthetic image (h x w) and its mask (c = 1): classes 0..classes-1, background = classes.
inline std::pair<Image, Image> synth_semantic_image(int h, int w, int classes, std::mt19937_64& rng) {
  Image img(h, w, 3);
  SynthStyle st;
  detail::synth_background(img, rng, st);
  Image mask(h, w, 1, static_cast<uint8_t>(classes));
  const int n = static_cast<int>(randint(rng, 1, 4));
  const double short_side = std::min(h, w);
  for (int k = 0; k < n; ++k) {
    const double side = short_side * uniform(rng, 0.25, 0.6);
    const double aspect = std::exp(uniform(rng, -std::log(1.3), std::log(1.3)));
    const double bw = std::min(w - 1.0, side * std::sqrt(aspect)), bh = std::min(h - 1.0, side / std::sqrt(aspect));
    const double x0 = uniform(rng, 0, w - bw), y0 = uniform(rng, 0, h - bh);
    const BoxF box{x0, y0, x0 + bw, y0 + bh};
    const int cls = static_cast<int>(randint(rng, 0, classes - 1));
    const double rotation = uniform(rng, -std::numbers::pi / 6, std::numbers::pi / 6);
    const Rgb base = detail::random_colour(rng);
    const Texture tex = synth_class_texture(cls, base, detail::contrasting(base), {x0 + bw / 2, y0 + bh / 2}, rotation,
                                            static_cast<int>(std::max(8.0, std::max(bw, bh) / 0.75)));
    draw_class_shape(img, cls, box, rotation, tex);
    const auto id = static_cast<uint8_t>(cls);
    draw_class_shape(mask, cls, box, rotation, Texture::solid({id, id, id}));  // the same pixels, as ids
  }
  add_noise(img, st.noise, rng);
  return {std::move(img), std::move(mask)};
}

inline void synth_semantic(const SynthOptions& o) {
  namespace fs = std::filesystem;
  auto bad = [](const std::string& key, const std::string& v, const char* allowed) {
    throw ConfigError("synth --task semantic option " + key + " = " + v + " is outside the allowed range " + allowed);
  };
  if (o.classes < 1 || o.classes > kSynthMaxClasses) bad("classes", std::to_string(o.classes), "[1, 16]");
  if (o.imgsz < 32 || o.imgsz > 4096) bad("imgsz", std::to_string(o.imgsz), "[32, 4096]");
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) bad("val_fraction", log::cat(o.val_fraction), "[0, 1)");
  if (o.images < (o.val_fraction > 0 ? 2 : 1)) bad("images", std::to_string(o.images), "[2, inf) (train and val)");
  if (o.out.empty()) throw ConfigError("synth option out is empty: give the folder to write the dataset to");
  detail::prepare_synth_out(o.out);
  for (const char* d : {"images", "masks"}) fs::remove_all(o.out / d);
  const int n_val = o.val_fraction > 0 ? std::clamp(static_cast<int>(std::lround(o.val_fraction * o.images)), 1, o.images - 1) : 0;
  for (const char* split : {"train", "val"}) {
    fs::create_directories(o.out / "images" / split);
    fs::create_directories(o.out / "masks" / split);
  }
  for (int i = 0; i < o.images; ++i) {
    std::mt19937_64 rng(sample_seed(o.seed, 0x5E3A, static_cast<uint64_t>(i)));
    const int L = o.imgsz;
    const int s = static_cast<int>(std::lround(L * uniform(rng, 0.56, 1.0)));
    const bool landscape = bernoulli(rng, 0.75);
    auto [img, mask] = synth_semantic_image(landscape ? s : L, landscape ? L : s, o.classes, rng);
    char stem[32];
    std::snprintf(stem, sizeof stem, "%05d", i);
    const char* split = i < n_val ? "val" : "train";
    write_jpeg(o.out / "images" / split / (std::string(stem) + ".jpg"), img, 92);
    write_mask(o.out / "masks" / split / (std::string(stem) + ".png"), mask);
  }
  std::ofstream yaml(o.out / "data.yaml");
  yaml << "# written by libreyolo data synth --task semantic (seed " << o.seed << ")\n"
       << "# no 'path' key: the dataset root is this file's folder\n"
       << "train: images/train\n"
       << "val: " << (n_val > 0 ? "images/val" : "images/train") << "\n"
       << "masks_dir: masks\n"
       << "nc: " << o.classes + 1 << "\n"
       << "names:\n";
  for (int k = 0; k < o.classes; ++k) yaml << "  " << k << ": " << kSynthShapeNames[k] << "\n";
  yaml << "  " << o.classes << ": background\n";
  if (!yaml) throw DataError("cannot write '" + (o.out / "data.yaml").string() + "'");
  log::info("synth: wrote ", o.images, " semantic images with masks (", n_val, " val) of ", o.classes,
            " shape classes + background to ", o.out.string());
}

}  // namespace libreyolo::data
