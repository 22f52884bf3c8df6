#pragma once
// Definitions of label_cache.hpp (core/api.hpp): included by label_cache.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/label_cache.hpp>

namespace libreyolo::data {

LIBREYOLO_INLINE void require_class_ids_in_range(const LabelIndex& idx, const std::string& split) {
  if (idx.class_overflows == 0) return;
  throw DataError(split + ": " + idx.first_class_overflow +
                  (idx.class_overflows > 1 ? " (and " + std::to_string(idx.class_overflows - 1) + " more label file(s))" : "") +
                  "; the dataset YAML's 'names' list is too short for these labels: add the missing class names "
                  "(or fix the label files)");
}

namespace detail {

LIBREYOLO_INLINE bool parse_float(const std::string& tok, float& v) {
  const char* b = tok.data();
  const char* e = b + tok.size();
  auto [p, ec] = std::from_chars(b, e, v);
  return ec == std::errc() && p == e && std::isfinite(v);
}

LIBREYOLO_INLINE std::string parse_label_file(const std::filesystem::path& file, int nc, LabelEntry& entry, uint64_t& dups,
                                              std::string& dup_message, bool* class_overflow) {
  std::ifstream in(file);
  if (!in) return "label file '" + file.string() + "' cannot be opened";
  std::string line;
  std::set<std::array<float, 5>> seen;
  uint64_t clipped = 0, polygons = 0;
  static const char* field[5] = {"class", "cx", "cy", "w", "h"};
  // Clips v into [0, 1] when it is within the tolerance; false when it is further out.
  auto clip01 = [&](float& v) {
    if (v >= 0.f && v <= 1.f) return true;
    if (v < -label_clip_tolerance || v > 1.f + label_clip_tolerance) return false;
    v = std::clamp(v, 0.f, 1.f);
    ++clipped;
    return true;
  };
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    std::istringstream ss(line);
    std::vector<std::string> tok;
    for (std::string t; ss >> t;) tok.push_back(t);
    if (tok.empty()) continue;
    const std::string where = "label file '" + file.string() + "':" + std::to_string(line_no) + ": ";
    const bool polygon = tok.size() > 5;
    if (tok.size() < 5 || (polygon && (tok.size() % 2 == 0 || tok.size() < 7)))
      return where + "has " + std::to_string(tok.size()) +
             " fields, expected 5 (class cx cy w h, normalised) or a polygon (class x1 y1 x2 y2 x3 y3 ..., 7, 9, 11, ... fields)";
    std::array<float, 5> box{};
    if (!parse_float(tok[0], box[0])) return where + "field class = '" + tok[0] + "' is not a number";
    if (box[0] != std::floor(box[0]) || box[0] < 0)
      return where + "class id '" + tok[0] + "' is not an integer >= 0";
    if (box[0] >= static_cast<float>(nc)) {
      if (class_overflow) *class_overflow = true;
      return where + "class id '" + tok[0] + "' is outside [0, " + std::to_string(nc - 1) + "] (the dataset YAML has " +
             std::to_string(nc) + " names)";
    }
    if (!polygon) {
      for (int k = 1; k < 5; ++k)
        if (!parse_float(tok[k], box[k])) return where + "field " + field[k] + " = '" + tok[k] + "' is not a number";
      for (int k = 1; k < 5; ++k)
        if (!clip01(box[k]))
          return where + field[k] + " = " + tok[k] + " is outside [0, 1] (coordinates must be normalised; up to " +
                 "0.01 outside is clipped)";
    } else {
      float x0 = 1.f, y0 = 1.f, x1 = 0.f, y1 = 0.f;
      for (size_t k = 1; k < tok.size(); ++k) {
        float v = 0.f;
        const char* name = k % 2 ? "x" : "y";
        if (!parse_float(tok[k], v))
          return where + "polygon field " + std::to_string(k) + " (" + name + ") = '" + tok[k] + "' is not a number";
        if (!clip01(v))
          return where + "polygon " + name + " = " + tok[k] + " is outside [0, 1] (coordinates must be normalised; up to " +
                 "0.01 outside is clipped)";
        if (k % 2) x0 = std::min(x0, v), x1 = std::max(x1, v);
        else y0 = std::min(y0, v), y1 = std::max(y1, v);
      }
      box = {box[0], (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0};
      ++polygons;
    }
    if (box[3] <= 0.f || box[4] <= 0.f) return where + "the box has zero width or height (w, h must be > 0)";
    if (!seen.insert(box).second) {
      ++dups;
      continue;
    }
    entry.boxes.push_back(box);
  }
  std::string notes;
  if (dups) notes += std::to_string(dups) + " duplicate box(es) removed";
  if (clipped) notes += (notes.empty() ? "" : "; ") + std::to_string(clipped) + " coordinate(s) slightly outside [0, 1] clipped";
  if (polygons) notes += (notes.empty() ? "" : "; ") + std::to_string(polygons) + " polygon row(s) converted to boxes";
  if (!notes.empty()) dup_message = "label file '" + file.string() + "': " + notes;
  return {};
}

LIBREYOLO_INLINE bool image_size(const std::filesystem::path& path, int& h, int& w, std::string& why) {
  std::vector<uint8_t> head;
  if (!read_bytes(path, 0, 256 * 1024, head, why)) return false;
  Image header;
  const ImageFormat f = sniff_format(head);
  const bool ok = f == ImageFormat::jpeg ? decode_jpeg(head, 0, true, header, why) : decode_png(head, true, header, why);
  if (!ok || header.empty()) {  // a header beyond the first 256 KiB: decode the whole file once
    try {
      header = read_image(path);
    } catch (const Error& e) {
      why = e.what();
      return false;
    }
  }
  h = header.h, w = header.w;
  return true;
}

LIBREYOLO_INLINE LabelScan scan_one(const std::filesystem::path& image, int nc) {
  LabelScan s;
  s.entry.image = image.string();
  std::string why;
  if (!probe_image(image, &why) || !image_size(image, s.entry.h, s.entry.w, why)) {
    s.kind = LabelScan::bad_image;
    s.message = "skipping image '" + image.string() + "': " + why;
    return s;
  }
  const auto label = label_path_for(image);
  std::error_code ec;
  if (!std::filesystem::exists(label, ec)) return s;  // background image
  if (std::filesystem::is_directory(label, ec)) {  // an ifstream opens a directory and reads no line: 0 boxes
    s.kind = LabelScan::bad_label;
    s.message = "skipping image '" + image.string() + "': its label path '" + label.string() +
                "' is a directory; expected a label file (class cx cy w h per line)";
    return s;
  }
  std::string dup_msg;
  bool class_overflow = false;
  why = parse_label_file(label, nc, s.entry, s.duplicates, dup_msg, &class_overflow);
  if (!why.empty()) {
    s.kind = class_overflow ? LabelScan::bad_class : LabelScan::bad_label;
    s.entry.boxes.clear();
    s.message = "skipping image '" + image.string() + "': " + why;
  } else {
    s.message = dup_msg;
  }
  return s;
}

LIBREYOLO_INLINE uint64_t hash_bytes(uint64_t h, const void* data, size_t n) {  // FNV-1a, then mixed
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

LIBREYOLO_INLINE uint64_t hash_file_state(uint64_t h, const std::filesystem::path& p) {
  std::error_code ec;
  const std::string s = p.string();
  h = hash_bytes(h, s.data(), s.size() + 1);
  const uint64_t size = std::filesystem::file_size(p, ec);
  const uint64_t exists = ec ? 0 : 1;
  const int64_t mtime = exists ? std::filesystem::last_write_time(p, ec).time_since_epoch().count() : 0;
  const uint64_t v[3] = {exists, exists ? size : 0, static_cast<uint64_t>(mtime)};
  return hash_bytes(h, v, sizeof v);
}

LIBREYOLO_INLINE void ByteWriter::put_str(const std::string& s) {
  put<uint32_t>(static_cast<uint32_t>(s.size()));
  buf.insert(buf.end(), s.begin(), s.end());
}

LIBREYOLO_INLINE bool ByteReader::get_str(std::string& s) {
  uint32_t n = 0;
  if (!get(n) || pos + n > buf.size()) return false;
  s.assign(&buf[pos], n);
  pos += n;
  return true;
}

LIBREYOLO_INLINE bool read_label_cache(const std::filesystem::path& file, uint64_t hash, LabelIndex& out) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return false;
  std::vector<char> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (buf.size() < sizeof kLabelCacheMagic || std::memcmp(buf.data(), kLabelCacheMagic, sizeof kLabelCacheMagic) != 0)
    return false;
  ByteReader r{buf, sizeof kLabelCacheMagic};
  uint64_t h = 0, n = 0, n_msg = 0;
  LabelStats st;
  if (!r.get(h) || h != hash || !r.get(st) || !r.get(n) || !r.get(n_msg)) return false;
  std::vector<LabelEntry> entries(n);
  for (auto& e : entries) {
    uint32_t nb = 0;
    if (!r.get_str(e.image) || !r.get(e.h) || !r.get(e.w) || !r.get(nb)) return false;
    e.boxes.resize(nb);
    for (auto& b : e.boxes)
      if (!r.get(b)) return false;
  }
  std::vector<std::string> msgs(n_msg);
  for (auto& m : msgs)
    if (!r.get_str(m)) return false;
  uint64_t overflows = 0;
  std::string first_overflow;
  if (!r.get(overflows) || !r.get_str(first_overflow)) return false;
  if (r.pos != buf.size()) return false;
  out.class_overflows = overflows;
  out.first_class_overflow = std::move(first_overflow);
  out.entries = std::move(entries);
  out.messages = std::move(msgs);
  out.stats = st;
  return true;
}

LIBREYOLO_INLINE bool write_label_cache(const std::filesystem::path& file, uint64_t hash, const LabelIndex& idx) {
  ByteWriter w;
  w.buf.insert(w.buf.end(), kLabelCacheMagic, kLabelCacheMagic + sizeof kLabelCacheMagic);
  w.put(hash);
  w.put(idx.stats);
  w.put<uint64_t>(idx.entries.size());
  w.put<uint64_t>(idx.messages.size());
  for (const auto& e : idx.entries) {
    w.put_str(e.image);
    w.put(e.h);
    w.put(e.w);
    w.put<uint32_t>(static_cast<uint32_t>(e.boxes.size()));
    for (const auto& b : e.boxes) w.put(b);
  }
  for (const auto& m : idx.messages) w.put_str(m);
  w.put<uint64_t>(idx.class_overflows);
  w.put_str(idx.first_class_overflow);
  try {
    return atomic_file::write(file, "label cache", std::string_view(w.buf.data(), w.buf.size()),
                              {.remedy = "remove it", .tag = std::to_string(mix64(reinterpret_cast<uintptr_t>(&w)) % 1000000),
                               .sync = false}).empty();
  } catch (const OutputPathError&) {
    return false;  // not a regular file: left alone, the index is simply not cached
  }
}

// An image listed twice in a split (a list file, overlapping folders) is trained on twice per epoch, and
// two images with one label file (a.jpg and a.png) both get its boxes: said, not refused.
LIBREYOLO_INLINE void warn_repeated_images(const std::vector<std::filesystem::path>& images) {
  constexpr size_t kShown = 5;
  std::map<std::string, size_t> times;
  std::map<std::string, std::string> label_owner;  // label file -> the first image using it
  size_t repeated = 0, shared = 0;
  for (const auto& im : images) {
    const std::string key = im.lexically_normal().string();
    if (++times[key] == 2 && repeated++ < kShown)
      log::warn("image '", utf8::escaped(key), "' is listed more than once in this split (a list file or overlapping "
                "folders): it is used once per listing in each epoch");
    if (times[key] > 1) continue;
    const std::string label = label_path_for(im).lexically_normal().string();
    const auto [at, fresh] = label_owner.emplace(label, key);
    if (!fresh && shared++ < kShown)
      log::warn("images '", utf8::escaped(at->second), "' and '", utf8::escaped(key), "' share the label file '",
                utf8::escaped(label), "': both get its boxes (rename one of them if they are different pictures)");
  }
  if (repeated > kShown) log::warn("... and ", repeated - kShown, " more image(s) listed more than once");
  if (shared > kShown) log::warn("... and ", shared - kShown, " more image(s) sharing a label file");
}

LIBREYOLO_INLINE void require_label_files(const std::vector<std::filesystem::path>& images, const std::string& split,
                                          const std::filesystem::path& yaml_file, const char* task) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& im : images)
    if (fs::exists(label_path_for(im), ec)) return;
  if (images.empty()) return;
  const fs::path label = label_path_for(images.front());
  const fs::path folder = label.parent_path();
  const std::string head = "dataset YAML '" + yaml_file.string() + "', split '" + split + "': none of its " +
                           std::to_string(images.size()) + " images has a label file (for '" + images.front().string() +
                           "' expected '" + label.string() + "')";
  if (fs::is_directory(folder, ec)) {  // labels/ is there but empty for this split: all background images
    log::warn(head, ": every image is a background image, so the ", task, " model has no object to learn or find");
    return;
  }
  std::string hint;
  const std::string s = images.front().string();
  if (const size_t at = s.rfind("/images/"); at != std::string::npos && fs::is_directory(s.substr(0, at) + "/masks", ec))
    hint = "; '" + s.substr(0, at) + "/masks' holds masks: this looks like a semantic segmentation dataset (give it to a "
           "semantic model)";
  throw DataError(head + " and the folder '" + folder.string() + "' does not exist; a " + task +
                  " dataset needs YOLO label files (class cx cy w h per line) under labels/, mirroring images/" + hint);
}

LIBREYOLO_INLINE void refuse_other_task_yaml(const DatasetYaml& y, const char* task) {
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(y.file.string());
  } catch (const YAML::Exception&) {
    return;  // load_dataset_yaml read it; nothing more to learn here
  }
  for (const char* key : {"masks_dir", "label_mapping"})
    if (const auto n = doc[key])
      throw DataError(yaml_where(y.file, n, key) + ": this key belongs to a semantic segmentation dataset (masks); a " +
                      task + " model reads YOLO label files under labels/; give a " + task +
                      " dataset YAML, or train a semantic model on this one");
}

}  // namespace detail

LIBREYOLO_INLINE std::filesystem::path label_cache_path(const std::vector<std::filesystem::path>& sources,
                                                        const std::vector<std::filesystem::path>& images) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const auto& s : sources) h = detail::hash_bytes(h, s.string().data(), s.string().size() + 1);
  const std::filesystem::path first = images.empty() ? sources.front() : label_path_for(images.front()).parent_path();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%08llx", static_cast<unsigned long long>(mix64(h) & 0xFFFFFFFFull));
  return first.parent_path() / (first.filename().string() + "." + hex + ".libreyolo.cache");
}

LIBREYOLO_INLINE LabelIndex build_label_index(const std::vector<std::filesystem::path>& images, int nc,
                                              const std::filesystem::path& cache_file, int threads) {
  if (nc < 1) throw ConfigError("build_label_index: nc = " + std::to_string(nc) + " must be >= 1");
  detail::warn_repeated_images(images);
  uint64_t hash = detail::hash_bytes(0xCBF29CE484222325ull, &nc, sizeof nc);
  for (const auto& im : images) hash = detail::hash_file_state(detail::hash_file_state(hash, im), label_path_for(im));
  LabelIndex idx;
  idx.cache_file = cache_file;
  if (!cache_file.empty() && detail::read_label_cache(cache_file, hash, idx)) {
    idx.from_cache = true;
    return idx;
  }
  std::vector<detail::LabelScan> scans(images.size());
  std::atomic<size_t> next{0}, done{0};
  progress::Bar bar("labels", static_cast<int64_t>(images.size()), 30, progress::choose_mode(30), "img");
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < images.size();) {
      scans[i] = detail::scan_one(images[i], nc);
      bar.update(static_cast<int64_t>(++done));
    }
  };
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n_threads = std::min<size_t>(threads > 0 ? static_cast<size_t>(threads) : std::min(8u, hw),
                                            std::max<size_t>(1, images.size() / 64));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n_threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  bar.finish();
  for (auto& s : scans) {
    if (s.kind == detail::LabelScan::bad_class && idx.class_overflows++ == 0)  // the reason, without "skipping image 'X': "
      idx.first_class_overflow = s.message.substr(std::min(s.message.size(), std::string("skipping image '").size() + s.entry.image.size() + 3));
    if (!s.message.empty()) idx.messages.push_back(std::move(s.message));
    idx.stats.duplicates += s.duplicates;
    if (s.kind == detail::LabelScan::bad_image) ++idx.stats.bad_images;
    if (s.kind == detail::LabelScan::bad_label || s.kind == detail::LabelScan::bad_class) ++idx.stats.bad_labels;
    if (s.kind != detail::LabelScan::ok) continue;
    ++idx.stats.images;
    idx.stats.boxes += s.entry.boxes.size();
    if (s.entry.boxes.empty()) ++idx.stats.backgrounds;
    idx.entries.push_back(std::move(s.entry));
  }
  if (!cache_file.empty() && !detail::write_label_cache(cache_file, hash, idx))
    log::warn("cannot write the label cache '", cache_file.string(), "' (folder not writable?); the split will be ",
              "scanned again next time");
  return idx;
}

LIBREYOLO_INLINE void log_label_summary(const std::string& split, const LabelIndex& idx) {
  constexpr size_t kShown = 20;
  for (size_t i = 0; i < idx.messages.size() && i < kShown; ++i) log::warn(idx.messages[i]);
  if (idx.messages.size() > kShown)
    log::warn("... and ", idx.messages.size() - kShown, " more label/image warnings (all in the label cache '",
              idx.cache_file.string(), "')");
  const auto& s = idx.stats;
  const uint64_t skipped = s.bad_images + s.bad_labels;
  log::info(split, ": ", s.images, " images, ", s.boxes, " boxes, ", s.backgrounds, " backgrounds, ", skipped,
            " skipped (", s.bad_images, " bad images, ", s.bad_labels, " bad label files), ", s.duplicates,
            " duplicate boxes removed", idx.from_cache ? " [label cache]" : "");
}

}  // namespace libreyolo::data
