#pragma once
// Definitions of semantic.hpp (core/api.hpp): included by semantic.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/semantic.hpp>

namespace libreyolo::data {

LIBREYOLO_INLINE SemanticBatch SemanticBatch::to(const torch::Device& device, bool non_blocking) const {
  return {images.to(device, non_blocking), masks.to(device, non_blocking)};
}

namespace detail {

LIBREYOLO_INLINE bool decode_mask_png(const std::vector<uint8_t>& data, MaskPng& out, std::string& why) {
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

LIBREYOLO_INLINE Image read_mask(const std::filesystem::path& path, int64_t nc, const std::map<int, int>* mapping) {
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

LIBREYOLO_INLINE void write_mask(const std::filesystem::path& path, const Image& mask) {
  if (mask.c != 1) throw DataError("write_mask '" + path.string() + "': a mask has one channel, got " + std::to_string(mask.c));
  write_png(path, mask);
}

LIBREYOLO_INLINE Image resize_nearest(const Image& src, int h, int w) {
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

LIBREYOLO_INLINE std::filesystem::path mask_path_for(const std::filesystem::path& image, const std::string& masks_dir) {
  const std::string s = image.string();
  const std::string from = "/images/";
  const size_t at = s.rfind(from);
  std::filesystem::path p =
      at == std::string::npos ? image : std::filesystem::path(s.substr(0, at) + "/" + masks_dir + "/" + s.substr(at + from.size()));
  return p.replace_extension(".png");
}

LIBREYOLO_INLINE std::pair<Image, Image> semantic_geometry(const Image& img, const Image& mask, int S, const SemanticDraw& d) {
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

LIBREYOLO_INLINE SemanticDraw draw_semantic(int h, int w, const SemanticAugment& a, std::mt19937_64& rng) {
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

LIBREYOLO_INLINE std::shared_ptr<SemanticDataset> SemanticDataset::open(const DatasetYaml& y, const std::string& split, const std::string& masks_dir,
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
  if (missing) {
    std::error_code ec;
    const bool labelled = missing == files.size() && std::filesystem::exists(label_path_for(files.front()), ec);
    throw DataError("dataset YAML '" + y.file.string() + "', split '" + split + "': " + std::to_string(missing) +
                    " image(s) have no mask (e.g. '" + first_missing + "'; masks mirror the images tree under '" +
                    masks_dir + "/', same stem, .png)" +
                    (labelled ? "; its images have YOLO label files (" + label_path_for(files.front()).string() +
                                    "): this looks like a detection or point dataset, for a detect or point model"
                              : std::string()));
  }
  log::info(split, ": ", d->items_.size(), " images with masks, ", d->nc_, " classes");
  const CacheMode mode = parse_cache_mode(aug.cache);
  d->cache_ = std::make_shared<ImageCache>(mode, d->items_.size(), aug.imgsz);
  return d;
}

LIBREYOLO_INLINE SemanticDataset::Sample SemanticDataset::get(size_t i, std::mt19937_64& rng, int /*epoch*/) const {
  const auto& it = items_.at(i);
  auto img = cache_->get(i, it.image, [&] { return read_image(it.image); });
  Image mask = read_mask(it.mask, nc_, mapping_.empty() ? nullptr : &mapping_);
  if (mask.h != img->h || mask.w != img->w)
    throw DataError("mask '" + it.mask.string() + "' is " + std::to_string(mask.w) + "x" + std::to_string(mask.h) +
                    " but its image '" + it.image.string() + "' is " + std::to_string(img->w) + "x" + std::to_string(img->h));
  auto [im, mk] = transform(*img, mask, rng);
  return {to_chw_tensor(im), mask_tensor(mk)};
}

LIBREYOLO_INLINE std::pair<Image, Image> SemanticDataset::transform(const Image& img, const Image& mask, std::mt19937_64& rng) const {
  const SemanticDraw d = draw_semantic(img.h, img.w, aug_, rng);
  auto out = semantic_geometry(img, mask, aug_.imgsz, d);
  if (aug_.train && aug_.hsv_prob > 0 && bernoulli(rng, aug_.hsv_prob)) hsv_augment(out.first, aug_.hsv_h, aug_.hsv_s, aug_.hsv_v, rng);
  return out;
}

LIBREYOLO_INLINE torch::Tensor SemanticDataset::mask_tensor(const Image& m) {
  return torch::from_blob(const_cast<uint8_t*>(m.px.data()), {m.h, m.w}, torch::kUInt8).to(torch::kInt64);
}

LIBREYOLO_INLINE SemanticDataset::Batch SemanticDataset::collate(std::vector<Sample>&& samples) {
  std::vector<torch::Tensor> images, masks;
  for (auto& s : samples) images.push_back(std::move(s.image)), masks.push_back(std::move(s.mask));
  return {torch::stack(images), torch::stack(masks)};
}

LIBREYOLO_INLINE void SemanticDataset::validate(const SemanticAugment& a) {
  auto bad = [](const std::string& key, double v, const char* allowed) {
    throw ConfigError("semantic augment " + key + " = " + log::cat(v) + " is outside " + allowed);
  };
  if (a.imgsz < 16) bad("imgsz", a.imgsz, "[16, inf)");
  if (!(a.fliplr >= 0 && a.fliplr <= 1)) bad("fliplr", a.fliplr, "[0, 1]");
  if (!(a.scale_lo > 0 && a.scale_lo <= a.scale_hi)) bad("scale_lo", a.scale_lo, "(0, scale_hi]");
  if (!(a.hsv_prob >= 0 && a.hsv_prob <= 1)) bad("hsv_prob", a.hsv_prob, "[0, 1]");
}

LIBREYOLO_INLINE SemanticYamlKeys load_semantic_keys(const DatasetYaml& y) {
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

LIBREYOLO_INLINE std::pair<Image, Image> synth_semantic_image(int h, int w, int classes, std::mt19937_64& rng) {
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

LIBREYOLO_INLINE void synth_semantic(const SynthOptions& o) {
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
