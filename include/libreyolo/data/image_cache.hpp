#pragma once
// Caches of decoded, resized images for the detection pipeline (cache=ram | disk).
//
// ram: each image is decoded and resized once (on first use, by whichever worker needs it) and
//      kept in memory; the caller checks the estimated size against the free memory first.
// disk: the resized pixels are written once to a raw file in a hidden folder next to the image
//      (<image folder>/.libreyolo_cache/<name>.<imgsz>.rgb), stamped with the source file's size
//      and mtime; a stale or unreadable file is rebuilt. If the folder cannot be written, the cache
//      says so once and the images are decoded every time instead.
// Both are thread-safe and give exactly the pixels an uncached load gives.
//
// DecodeBuffer: the last N decoded images, shared by all workers, with in-flight loads shared too
// (a second request for an image being decoded waits for that decode instead of repeating it).
// Mosaic partners are drawn near each sample in the epoch order, so they are mostly found here.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/atomic_file.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/data/image_ops.hpp>
#include <libreyolo/data/rng.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <deque>
#include <fstream>
#include <future>
#include <memory>
#include <unordered_map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace libreyolo::data {

enum class CacheMode { off, ram, disk };

LIBREYOLO_INLINE CacheMode parse_cache_mode(const std::string& s);

// Bytes of memory the kernel reports as available (MemAvailable), or 0 when unknown.
LIBREYOLO_INLINE uint64_t available_memory_bytes();

namespace detail {

struct DiskImageHeader {
  char magic[4] = {'L', 'R', 'Y', 'I'};
  int32_t version = 1, h = 0, w = 0, c = 0, imgsz = 0;
  uint64_t src_size = 0;
  int64_t src_mtime = 0;
};

LIBREYOLO_INLINE bool source_stamp(const std::filesystem::path& src, uint64_t& size, int64_t& mtime);

}  // namespace detail

class ImageCache {
 public:
  ImageCache(CacheMode mode, size_t n, int imgsz) : mode_(mode), imgsz_(imgsz), slots_(mode == CacheMode::ram ? n : 0) {}

  CacheMode mode() const { return mode_; }

  // The cached image i (source file `src`), or load() (which decodes and resizes) stored for next time.
  template <class Load>
  std::shared_ptr<const Image> get(size_t i, const std::filesystem::path& src, Load&& load) const {
    if (mode_ == CacheMode::ram) {
      {
        std::lock_guard<std::mutex> lk(stripe(i));
        if (slots_[i]) return slots_[i];
      }
      auto img = std::make_shared<const Image>(load());
      std::lock_guard<std::mutex> lk(stripe(i));
      if (!slots_[i]) slots_[i] = img;  // two workers may race on one image: the first one stays
      return slots_[i];
    }
    if (mode_ == CacheMode::disk && !disk_failed_.load()) {
      const auto file = disk_path(src, imgsz_);
      if (auto hit = read_disk(file, src)) return hit;
      auto img = std::make_shared<const Image>(load());
      write_disk(file, src, *img);
      return img;
    }
    return std::make_shared<const Image>(load());
  }

  // Where the disk cache keeps image `src` resized for `imgsz`.
  static std::filesystem::path disk_path(const std::filesystem::path& src, int imgsz);

  size_t cached_in_ram() const;

 private:
  std::mutex& stripe(size_t i) const { return locks_[i % locks_.size()]; }

  std::shared_ptr<const Image> read_disk(const std::filesystem::path& file, const std::filesystem::path& src) const;

  void write_disk(const std::filesystem::path& file, const std::filesystem::path& src, const Image& img) const;

  CacheMode mode_;
  int imgsz_;
  mutable std::vector<std::shared_ptr<const Image>> slots_;
  mutable std::array<std::mutex, 64> locks_;
  mutable std::atomic<bool> disk_failed_{false};
};

class DecodeBuffer {
 public:
  explicit DecodeBuffer(size_t capacity = 64) : capacity_(std::max<size_t>(1, capacity)) {}

  void set_capacity(size_t capacity);
  size_t capacity() const { return capacity_; }

  // The image for `key`, from the buffer or from load() (run once however many threads ask).
  // A load that throws is not kept: every waiter gets the exception, a later call tries again.
  template <class Load>
  std::shared_ptr<const Image> get(size_t key, Load&& load) {
    std::unique_lock<std::mutex> lk(mu_);
    if (auto it = map_.find(key); it != map_.end()) {
      auto fut = it->second;
      lk.unlock();
      ++hits_;
      return fut.get();
    }
    std::promise<std::shared_ptr<const Image>> promise;
    const auto mine = promise.get_future().share();
    map_.emplace(key, mine);
    fifo_.push_back(key);
    evict();
    lk.unlock();
    ++misses_;
    try {
      promise.set_value(std::make_shared<const Image>(load()));
    } catch (...) {
      promise.set_exception(std::current_exception());
      std::lock_guard<std::mutex> relock(mu_);
      map_.erase(key);
      throw;
    }
    return mine.get();
  }

  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  void evict();  // oldest first; holders of an evicted image keep it alive until they are done

  std::mutex mu_;
  size_t capacity_;
  std::unordered_map<size_t, std::shared_future<std::shared_ptr<const Image>>> map_;
  std::deque<size_t> fifo_;
  std::atomic<uint64_t> hits_{0}, misses_{0};
};

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/image_cache-inl.hpp>
#endif
