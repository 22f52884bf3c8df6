#pragma once
// Definitions of image_cache.hpp (core/api.hpp): included by image_cache.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/image_cache.hpp>

namespace libreyolo::data {

LIBREYOLO_INLINE CacheMode parse_cache_mode(const std::string& s) {
  if (s == "off" || s == "false" || s.empty()) return CacheMode::off;
  if (s == "ram" || s == "true") return CacheMode::ram;
  if (s == "disk") return CacheMode::disk;
  throw ConfigError("cache = '" + s + "' is not allowed (allowed: off, ram, disk)");
}

LIBREYOLO_INLINE uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

namespace detail {

LIBREYOLO_INLINE bool source_stamp(const std::filesystem::path& src, uint64_t& size, int64_t& mtime) {
  std::error_code ec;
  size = std::filesystem::file_size(src, ec);
  if (ec) return false;
  mtime = std::filesystem::last_write_time(src, ec).time_since_epoch().count();
  return !ec;
}

}  // namespace detail

LIBREYOLO_INLINE std::filesystem::path ImageCache::disk_path(const std::filesystem::path& src, int imgsz) {
  return src.parent_path() / ".libreyolo_cache" / (src.filename().string() + "." + std::to_string(imgsz) + ".rgb");
}

LIBREYOLO_INLINE size_t ImageCache::cached_in_ram() const {
  size_t n = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    std::lock_guard<std::mutex> lk(stripe(i));
    n += slots_[i] != nullptr;
  }
  return n;
}

LIBREYOLO_INLINE std::shared_ptr<const Image> ImageCache::read_disk(const std::filesystem::path& file, const std::filesystem::path& src) const {
  std::ifstream in(file, std::ios::binary);
  if (!in) return nullptr;
  detail::DiskImageHeader hd, want;
  uint64_t size = 0;
  int64_t mtime = 0;
  if (!in.read(reinterpret_cast<char*>(&hd), sizeof hd) || std::memcmp(hd.magic, want.magic, 4) != 0 ||
      hd.version != want.version || hd.imgsz != imgsz_ || hd.c != 3 || hd.h <= 0 || hd.w <= 0 ||
      !detail::source_stamp(src, size, mtime) || hd.src_size != size || hd.src_mtime != mtime)
    return nullptr;
  auto img = std::make_shared<Image>(hd.h, hd.w, 3);
  if (!in.read(reinterpret_cast<char*>(img->px.data()), static_cast<std::streamsize>(img->px.size()))) return nullptr;
  if (in.peek() != std::char_traits<char>::eof()) return nullptr;  // a longer file is not ours
  return img;
}

LIBREYOLO_INLINE void ImageCache::write_disk(const std::filesystem::path& file, const std::filesystem::path& src, const Image& img) const {
  detail::DiskImageHeader hd;
  hd.h = img.h, hd.w = img.w, hd.c = img.c, hd.imgsz = imgsz_;
  if (!detail::source_stamp(src, hd.src_size, hd.src_mtime)) return;
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  // Atomically (a unique temporary name per thread, then rename): readers never see a half-written
  // file, and a cache path that is not a regular file is left alone.
  const auto tid = std::hash<std::thread::id>{}(std::this_thread::get_id());
  bool ok = !ec;
  if (ok) {
    try {
      ok = atomic_file::write(file, "image cache", [&](const atomic_file::ByteSink& sink) {
        sink(&hd, sizeof hd);
        sink(img.px.data(), img.px.size());
      }, {.remedy = "remove it", .tag = std::to_string(mix64(tid) % 1000000007u), .sync = false}).empty();
    } catch (const OutputPathError&) {
      ok = false;
    }
  }
  if (!ok) {
    if (!disk_failed_.exchange(true))
      log::warn("cache=disk: cannot write '", file.string(), "' (folder not writable?); images are decoded every ",
                "time instead");
  }
}

LIBREYOLO_INLINE void DecodeBuffer::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lk(mu_);
  capacity_ = std::max<size_t>(1, capacity);
  evict();
}

LIBREYOLO_INLINE void DecodeBuffer::evict() {  // oldest first; holders of an evicted image keep it alive until they are done
  while (map_.size() > capacity_ && !fifo_.empty()) {
    map_.erase(fifo_.front());
    fifo_.pop_front();
  }
}

}  // namespace libreyolo::data
