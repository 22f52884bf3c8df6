#pragma once
// Definitions of image.hpp (core/api.hpp): included by image.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/image.hpp>

namespace libreyolo::data {

namespace detail {

LIBREYOLO_INLINE ImageFormat sniff_format(const std::vector<uint8_t>& head) {
  static constexpr uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (head.size() >= 3 && head[0] == 0xFF && head[1] == 0xD8 && head[2] == 0xFF) return ImageFormat::jpeg;
  if (head.size() >= 8 && std::memcmp(head.data(), png_sig, 8) == 0) return ImageFormat::png;
  return ImageFormat::unknown;
}

LIBREYOLO_INLINE std::string not_an_image_reason(const std::vector<uint8_t>& head) {
  if (head.empty()) return "the file is empty (supported: JPEG, PNG)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "first bytes %02X %02X %02X %02X", head[0], head.size() > 1 ? head[1] : 0,
                head.size() > 2 ? head[2] : 0, head.size() > 3 ? head[3] : 0);
  return std::string("not a JPEG or PNG file (") + buf + "; supported: JPEG, PNG by content, whatever the extension)";
}

LIBREYOLO_INLINE bool read_bytes(const std::filesystem::path& path, uint64_t offset, uint64_t limit,
                                 std::vector<uint8_t>& out, std::string& why, uint64_t* file_size) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    why = "file does not exist";
    return false;
  }
  if (std::filesystem::is_directory(status)) {
    why = "is a directory, not an image file";
    return false;
  }
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) {
    why = "cannot get the file size: " + ec.message();
    return false;
  }
  if (file_size) *file_size = size;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    why = std::string("cannot open the file: ") + std::strerror(errno);
    return false;
  }
  offset = std::min(offset, size);
  const uint64_t n = limit == 0 ? size - offset : std::min(limit, size - offset);
  out.resize(static_cast<size_t>(n));
  in.seekg(static_cast<std::streamoff>(offset));
  if (n > 0 && !in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n))) {
    why = "read error after " + std::to_string(in.gcount()) + " of " + std::to_string(n) + " bytes";
    return false;
  }
  return true;
}

LIBREYOLO_INLINE std::string describe_decode_failure(ImageFormat f, const std::string& lib_message) {
  if (lib_message.rfind(too_many_pixels, 0) == 0) return lib_message;  // the pixel limit, not corruption
  return std::string(f == ImageFormat::jpeg ? "truncated or corrupt JPEG (libjpeg: " : "truncated or corrupt PNG (libpng: ") +
         lib_message + ")";
}

[[noreturn]] LIBREYOLO_INLINE void throw_image_error(const std::filesystem::path& path, const std::string& why) {
  throw DataError("image '" + path.string() + "': " + why);
}

LIBREYOLO_INLINE bool jpeg_tail_ok(const std::vector<uint8_t>& tail) {
  size_t n = tail.size();
  while (n > 2 && (tail[n - 1] == 0x00 || tail[n - 1] == '\n' || tail[n - 1] == '\r' || tail[n - 1] == ' ')) --n;
  return n >= 2 && tail[n - 2] == 0xFF && tail[n - 1] == 0xD9;
}

LIBREYOLO_INLINE bool png_tail_ok(const std::vector<uint8_t>& tail) {
  static constexpr uint8_t iend[8] = {'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
  for (size_t i = 0; i + 8 <= tail.size(); ++i)
    if (std::memcmp(&tail[i], iend, 8) == 0) return true;
  return false;
}

}  // namespace detail

LIBREYOLO_INLINE Image read_image(const std::filesystem::path& path, int min_side_hint) {
  std::vector<uint8_t> data;
  std::string why;
  if (!detail::read_bytes(path, 0, 0, data, why)) detail::throw_image_error(path, why);
  const ImageFormat fmt = detail::sniff_format(data);
  if (fmt == ImageFormat::unknown) detail::throw_image_error(path, detail::not_an_image_reason(data));
  Image img;
  const bool ok = fmt == ImageFormat::jpeg ? detail::decode_jpeg(data, min_side_hint, false, img, why)
                                           : detail::decode_png(data, false, img, why);
  if (!ok) detail::throw_image_error(path, detail::describe_decode_failure(fmt, why));
  if (img.empty()) detail::throw_image_error(path, "decoded to an empty image");
  return img;
}

LIBREYOLO_INLINE bool probe_image(const std::filesystem::path& path, std::string* why) {
  constexpr uint64_t head_bytes = 64 * 1024, tail_bytes = 32;
  std::vector<uint8_t> head, tail;
  std::string reason;
  uint64_t size = 0;
  auto fail = [&](std::string r) {
    if (why) *why = std::move(r);
    return false;
  };
  if (!detail::read_bytes(path, 0, head_bytes, head, reason, &size)) return fail(reason);
  const ImageFormat fmt = detail::sniff_format(head);
  if (fmt == ImageFormat::unknown) return fail(detail::not_an_image_reason(head));
  if (!detail::read_bytes(path, size > tail_bytes ? size - tail_bytes : 0, 0, tail, reason)) return fail(reason);
  if (fmt == ImageFormat::jpeg && !detail::jpeg_tail_ok(tail))
    return fail("truncated JPEG: the file does not end with the EOI marker FFD9");
  if (fmt == ImageFormat::png && !detail::png_tail_ok(tail))
    return fail("truncated PNG: the IEND chunk is missing at the end of the file");
  Image header;
  bool ok = fmt == ImageFormat::jpeg ? detail::decode_jpeg(head, 0, true, header, reason)
                                     : detail::decode_png(head, true, header, reason);
  if (!ok && size > head.size()) {  // headers (EXIF thumbnails, big text chunks) may exceed the head
    if (!detail::read_bytes(path, 0, 0, head, reason)) return fail(reason);
    ok = fmt == ImageFormat::jpeg ? detail::decode_jpeg(head, 0, true, header, reason)
                                  : detail::decode_png(head, true, header, reason);
  }
  if (!ok) return fail(detail::describe_decode_failure(fmt, reason));
  if (header.empty()) return fail("the header declares an empty image");
  // The full-size dimensions (a JPEG header is read at scale 1 here).
  if (auto v = detail::pixel_limit_violation(static_cast<uint64_t>(header.w), static_cast<uint64_t>(header.h)); !v.empty())
    return fail(v);
  return true;
}

namespace detail {

LIBREYOLO_INLINE void check_writable(const std::filesystem::path& path, const Image& img, const char* what) {
  if (img.empty() || (img.c != 3 && img.c != 1) || img.px.size() != static_cast<size_t>(img.h) * img.w * img.c)
    throw DataError(std::string(what) + " '" + path.string() + "': cannot write a " + std::to_string(img.h) + "x" +
                    std::to_string(img.w) + "x" + std::to_string(img.c) + " image with " +
                    std::to_string(img.px.size()) + " bytes (need h, w > 0, c = 1 or 3, h*w*c bytes)");
}

LIBREYOLO_INLINE void write_file(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  atomic_file::write_or_throw<DataError>(
      path, "image", std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace detail

LIBREYOLO_INLINE void write_jpeg(const std::filesystem::path& path, const Image& img, int quality) {
  detail::check_writable(path, img, "write_jpeg");
  if (quality < 1 || quality > 100)
    throw DataError("write_jpeg '" + path.string() + "': quality " + std::to_string(quality) + " is outside [1, 100]");
  std::vector<uint8_t> bytes;
  std::string why;
  if (!detail::encode_jpeg(img, quality, bytes, why)) throw DataError("write_jpeg '" + path.string() + "': " + why);
  detail::write_file(path, bytes);
}

LIBREYOLO_INLINE void write_png(const std::filesystem::path& path, const Image& img) {
  detail::check_writable(path, img, "write_png");
  std::vector<uint8_t> bytes;
  std::string why;
  if (!detail::encode_png(img, bytes, why)) throw DataError("write_png '" + path.string() + "': " + why);
  detail::write_file(path, bytes);
}

}  // namespace libreyolo::data
