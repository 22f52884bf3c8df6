#pragma once
// PNG decode/encode through libpng on in-memory buffers. libpng errors longjmp back to our setjmp
// (C++ exceptions never cross libpng's C frames); every C++ object of a function that calls setjmp
// is constructed before it. libpng *warnings* are benign (e.g. an odd sRGB profile) and ignored.
#include <libreyolo/data/image_ops.hpp>

#include <csetjmp>
#include <cstring>
#include <string>
#include <vector>

#include <png.h>

namespace libreyolo::data::detail {

struct PngIo {
  const std::vector<uint8_t>* in = nullptr;  // decoding: source bytes
  size_t pos = 0;
  std::vector<uint8_t>* out = nullptr;       // encoding: destination bytes
  char message[256] = {0};
};

extern "C" inline void lry_png_error(png_structp png, png_const_charp msg) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::strncpy(io->message, msg ? msg : "unknown libpng error", sizeof(io->message) - 1);
  png_longjmp(png, 1);
}
extern "C" inline void lry_png_warning(png_structp, png_const_charp) {}

extern "C" inline void lry_png_read(png_structp png, png_bytep dst, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (io->pos + n > io->in->size()) png_error(png, "unexpected end of file (truncated PNG)");
  std::memcpy(dst, io->in->data() + io->pos, n);
  io->pos += n;
}
extern "C" inline void lry_png_write(png_structp png, png_bytep src, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  bool ok = true;
  try {
    io->out->insert(io->out->end(), src, src + n);
  } catch (...) {  // never let bad_alloc unwind through libpng
    ok = false;
  }
  if (!ok) png_error(png, "out of memory while encoding PNG");
}
extern "C" inline void lry_png_flush(png_structp) {}

// Converts whatever libpng reads (grey, grey+alpha, palette, 1/2/4/16-bit, RGBA) to 8-bit RGB.
inline void request_rgb8(png_structp png, png_infop info) {
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  png_set_expand(png);  // palette -> RGB, grey < 8 bit -> 8 bit, tRNS -> alpha
  if (depth == 16) {
#if defined(PNG_READ_SCALE_16_TO_8_SUPPORTED)
    png_set_scale_16(png);
#else
    png_set_strip_16(png);
#endif
  }
  png_set_strip_alpha(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
}

// Decodes `data` into `out` (RGB). Returns false and fills `why` on error.
// header_only: parse the chunks before the image data (dimensions in out.h/out.w) only.
inline bool decode_png(const std::vector<uint8_t>& data, bool header_only, Image& out, std::string& why) {
  PngIo io;
  std::vector<png_bytep> rows;
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
  out.c = 3;
  if (header_only) {
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
  }
  if (auto v = pixel_limit_violation(static_cast<uint64_t>(out.w), static_cast<uint64_t>(out.h)); !v.empty()) {
    why = v;  // before any pixel is allocated
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  request_rgb8(png, info);
  if (png_get_channels(png, info) != 3 || png_get_rowbytes(png, info) != static_cast<size_t>(out.w) * 3)
    png_error(png, "unsupported PNG layout after conversion to 8-bit RGB");
  out.px.resize(static_cast<size_t>(out.h) * out.w * 3);
  rows.resize(static_cast<size_t>(out.h));
  for (int y = 0; y < out.h; ++y) rows[y] = &out.px[static_cast<size_t>(y) * out.w * 3];
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);  // reads up to IEND, so a file cut after the pixel data still fails
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

// Encodes an RGB (c = 3) or grey (c = 1) image into `out`. Returns false and fills `why` on error.
inline bool encode_png(const Image& img, std::vector<uint8_t>& out, std::string& why) {
  PngIo io;
  std::vector<png_bytep> rows(static_cast<size_t>(img.h));
  io.out = &out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &io, lry_png_error, lry_png_warning);
  if (!png) {
    why = "libpng could not allocate a writer";
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    why = "libpng could not allocate an info struct";
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    why = io.message;
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, &io, lry_png_write, lry_png_flush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(img.w), static_cast<png_uint_32>(img.h), 8,
               img.c == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < img.h; ++y) rows[y] = const_cast<png_bytep>(&img.px[static_cast<size_t>(y) * img.row_bytes()]);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace libreyolo::data::detail
