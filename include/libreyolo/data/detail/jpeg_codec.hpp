#pragma once
// JPEG decode/encode through libjpeg(-turbo) on in-memory buffers. libjpeg reports fatal errors by
// calling error_exit, which must not return: we longjmp back to the caller's setjmp. No C++
// exception ever crosses libjpeg's C frames, and every C++ object of a function that calls setjmp
// is constructed before the setjmp, so the longjmp skips no destructor.
#include <libreyolo/data/image_ops.hpp>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <jpeglib.h>

namespace libreyolo::data::detail {

struct JpegErrorManager {
  jpeg_error_mgr pub;        // must be first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {0};
};

extern "C" inline void lry_jpeg_error_exit(j_common_ptr cinfo) {
  auto* mgr = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, mgr->message);
  std::longjmp(mgr->jump, 1);
}

// libjpeg only *warns* on a premature end of data (and pads with a fake EOI), so a truncated file
// would decode "successfully" with grey rows: every warning (level < 0) is fatal here.
extern "C" inline void lry_jpeg_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace messages
  auto* mgr = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, mgr->message);
  std::longjmp(mgr->jump, 1);
}

inline void install_jpeg_errors(JpegErrorManager& mgr) {
  jpeg_std_error(&mgr.pub);
  mgr.pub.error_exit = lry_jpeg_error_exit;
  mgr.pub.emit_message = lry_jpeg_emit_message;
}

// Adobe CMYK/YCCK JPEGs store inverted ink values; libjpeg cannot turn them into RGB itself.
inline void cmyk_rows_to_rgb(const uint8_t* cmyk, uint8_t* rgb, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i) {
    const int k = cmyk[4 * i + 3];
    for (int ch = 0; ch < 3; ++ch) rgb[3 * i + ch] = static_cast<uint8_t>((cmyk[4 * i + ch] * k + 127) / 255);
  }
}

// Picks the smallest DCT scale 1/8, 1/4, 1/2 whose shorter output side stays >= min_side.
inline void choose_jpeg_scale(jpeg_decompress_struct& cinfo, int min_side) {
  if (min_side <= 0) return;
  for (unsigned denom : {8u, 4u, 2u}) {
    cinfo.scale_num = 1;
    cinfo.scale_denom = denom;
    jpeg_calc_output_dimensions(&cinfo);
    if (static_cast<int>(std::min(cinfo.output_width, cinfo.output_height)) >= min_side) return;
  }
  cinfo.scale_num = 1;
  cinfo.scale_denom = 1;
}

// Decodes `data` into `out` (RGB). Returns false and fills `why` on any libjpeg error or warning.
// header_only: parse the header (dimensions in out.h/out.w) without decoding pixels.
inline bool decode_jpeg(const std::vector<uint8_t>& data, int min_side, bool header_only, Image& out,
                        std::string& why) {
  jpeg_decompress_struct cinfo;
  JpegErrorManager mgr;
  std::vector<uint8_t> cmyk_row;
  cinfo.err = &mgr.pub;
  install_jpeg_errors(mgr);
  if (setjmp(mgr.jump)) {
    why = mgr.message;
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, const_cast<unsigned char*>(data.data()), static_cast<unsigned long>(data.size()));
  jpeg_read_header(&cinfo, TRUE);
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  choose_jpeg_scale(cinfo, min_side);
  jpeg_calc_output_dimensions(&cinfo);
  out.h = static_cast<int>(cinfo.output_height);
  out.w = static_cast<int>(cinfo.output_width);
  out.c = 3;
  if (header_only) {
    jpeg_destroy_decompress(&cinfo);
    return true;
  }
  // The full-size dimensions, whatever the DCT scale: the limit is on what the file declares.
  if (auto v = pixel_limit_violation(cinfo.image_width, cinfo.image_height); !v.empty()) {
    why = v;  // before any pixel is allocated
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  out.px.resize(static_cast<size_t>(out.h) * out.w * 3);
  if (cmyk) cmyk_row.resize(static_cast<size_t>(out.w) * 4);
  jpeg_start_decompress(&cinfo);
  while (cinfo.output_scanline < cinfo.output_height) {
    uint8_t* dst = &out.px[static_cast<size_t>(cinfo.output_scanline) * out.w * 3];
    JSAMPROW row = cmyk ? cmyk_row.data() : dst;
    jpeg_read_scanlines(&cinfo, &row, 1);
    if (cmyk) cmyk_rows_to_rgb(cmyk_row.data(), dst, static_cast<size_t>(out.w));
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

// Encodes an RGB (c = 3) or grey (c = 1) image into `out`. Returns false and fills `why` on error.
inline bool encode_jpeg(const Image& img, int quality, std::vector<uint8_t>& out, std::string& why) {
  jpeg_compress_struct cinfo;
  JpegErrorManager mgr;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  cinfo.err = &mgr.pub;
  install_jpeg_errors(mgr);
  if (setjmp(mgr.jump)) {
    why = mgr.message;
    jpeg_destroy_compress(&cinfo);
    std::free(buffer);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(img.w);
  cinfo.image_height = static_cast<JDIMENSION>(img.h);
  cinfo.input_components = img.c;
  cinfo.in_color_space = img.c == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&img.px[static_cast<size_t>(cinfo.next_scanline) * img.row_bytes()]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  try {
    out.assign(buffer, buffer + size);
  } catch (...) {
    std::free(buffer);
    throw;
  }
  std::free(buffer);
  return true;
}

}  // namespace libreyolo::data::detail
