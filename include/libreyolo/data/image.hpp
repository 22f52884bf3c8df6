#pragma once
// Image files: decode (JPEG via libjpeg-turbo, PNG via libpng; chosen by magic bytes, never by the
// extension), a cheap validity probe for dataset scans, and JPEG/PNG writers. Every failure is a
// DataError naming the file and the reason (missing, unreadable, not an image, truncated/corrupt).
// The Image type and its pixel operations live in image_ops.hpp (included).
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/atomic_file.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/data/detail/jpeg_codec.hpp>
#include <libreyolo/data/detail/png_codec.hpp>
#include <libreyolo/data/image_ops.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace libreyolo::data {

enum class ImageFormat { unknown, jpeg, png };

namespace detail {

LIBREYOLO_INLINE ImageFormat sniff_format(const std::vector<uint8_t>& head);

LIBREYOLO_INLINE std::string not_an_image_reason(const std::vector<uint8_t>& head);

// Reads up to `limit` bytes from `offset` (limit 0 = to the end). Returns false with `why` set.
LIBREYOLO_INLINE bool read_bytes(const std::filesystem::path& path, uint64_t offset, uint64_t limit,
                                 std::vector<uint8_t>& out, std::string& why, uint64_t* file_size = nullptr);

LIBREYOLO_INLINE std::string describe_decode_failure(ImageFormat f, const std::string& lib_message);

[[noreturn]] LIBREYOLO_INLINE void throw_image_error(const std::filesystem::path& path, const std::string& why);

// JPEG must end with the EOI marker FFD9; a few padding bytes (0x00, whitespace) after it are tolerated.
LIBREYOLO_INLINE bool jpeg_tail_ok(const std::vector<uint8_t>& tail);
// PNG must contain the IEND chunk (type "IEND" followed by its CRC AE 42 60 82) near its end.
LIBREYOLO_INLINE bool png_tail_ok(const std::vector<uint8_t>& tail);

}  // namespace detail

// Decodes a JPEG or PNG file to 8-bit RGB. min_side_hint > 0 lets a large JPEG decode at a DCT scale
// of 1/2, 1/4 or 1/8 (the smallest whose shorter side stays >= the hint); PNGs always decode at full size.
LIBREYOLO_INLINE Image read_image(const std::filesystem::path& path, int min_side_hint = 0);

// Cheap validity check for dataset scans: the header parses, and the file ends properly (JPEG: EOI
// marker FFD9; PNG: IEND chunk), which catches the common truncated download. Returns false and
// sets *why (if given) on failure; pixel data is not decoded, so it cannot catch corrupt scans.
LIBREYOLO_INLINE bool probe_image(const std::filesystem::path& path, std::string* why = nullptr);

namespace detail {
LIBREYOLO_INLINE void check_writable(const std::filesystem::path& path, const Image& img, const char* what);
LIBREYOLO_INLINE void write_file(const std::filesystem::path& path, const std::vector<uint8_t>& bytes);
}  // namespace detail

// Writes an RGB (or grey, c = 1) image as a baseline JPEG; quality in [1, 100].
LIBREYOLO_INLINE void write_jpeg(const std::filesystem::path& path, const Image& img, int quality = 90);

// Writes an RGB (or grey, c = 1) image as an 8-bit PNG (lossless).
LIBREYOLO_INLINE void write_png(const std::filesystem::path& path, const Image& img);

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/image-inl.hpp>
#endif
