#pragma once
// Detection augmentations with their boxes: letterbox, 4-image mosaic, random perspective/affine
// (degrees, translate, scale, shear, perspective), HSV jitter, flips, mixup. The maths follows
// Ultralytics' random_perspective/Mosaic/LetterBox (defaults and box filtering), but pixels use
// half-pixel centres so that a box edge on a pixel boundary stays on the transformed boundary.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/data/image_ops.hpp>
#include <libreyolo/data/rng.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <random>
#include <vector>

namespace libreyolo::data {

// A labelled box in pixels of its image: [x1, x2) x [y1, y2).
struct DetBox {
  float cls = 0, x1 = 0, y1 = 0, x2 = 0, y2 = 0;
};
using DetBoxes = std::vector<DetBox>;

inline constexpr uint8_t kLetterboxFill = 114;  // the grey YOLO pads with

// Copies src into dst with src's top-left pixel at (y, x); parts outside dst are cut off.
LIBREYOLO_INLINE void paste(Image& dst, const Image& src, int y, int x);

struct LetterboxInfo {
  double scale_x = 1, scale_y = 1;  // resized size / input size, per axis
  int pad_x = 0, pad_y = 0;         // left and top padding
};

// Where a letterbox puts the resized image on its grey canvas: centred (Ultralytics' LetterBox), or in the
// top-left corner with the padding right and below (the originals' YOLOv9, YOLOX and RTMDet `preproc` in
// training, validation and predict, which also truncate the resized size: int(h * r), int(w * r)).
enum class LetterboxPlace { centre, top_left };

// Undoes a letterbox: boxes in the network input (from_hw) were made by resizing the original image
// (to_hw) by `ratio` and padding `pad_xy` on the left/top. Maps xyxy columns 0..3 back and clips them to
// the original image; other columns pass through.
LIBREYOLO_INLINE torch::Tensor unletterbox(const torch::Tensor& boxes, std::array<int64_t, 2> from_hw, std::array<int64_t, 2> to_hw,
                                           double ratio, std::array<double, 2> pad_xy);
// The same with a scale per axis (x, y): undoes stretch_resize as well as a letterbox.
LIBREYOLO_INLINE torch::Tensor unletterbox(const torch::Tensor& boxes, std::array<int64_t, 2> from_hw, std::array<int64_t, 2> to_hw,
                                           std::array<double, 2> ratio_xy, std::array<double, 2> pad_xy);

// Resizes img to fit out_h x out_w (fit > 0: a fit x fit square inside it, YOLO-NAS's 636 in 640; 0: the
// canvas itself) with its aspect ratio kept (never up when !scaleup), places it on a grey canvas (`place`)
// and moves the boxes along.
LIBREYOLO_INLINE Image letterbox(const Image& img, int out_h, int out_w, DetBoxes& boxes, LetterboxInfo* info = nullptr,
                                 bool scaleup = true, LetterboxPlace place = LetterboxPlace::centre, int fit = 0);
// Resizes img to exactly out_h x out_w (the aspect ratio is not kept: the originals' DETR validation and
// inference resize, val_resize=stretch) and scales the boxes per axis; no padding.
LIBREYOLO_INLINE Image stretch_resize(const Image& img, int out_h, int out_w, DetBoxes& boxes, LetterboxInfo* info = nullptr);

// ---- random perspective / affine ------------------------------------------------------------

using Mat3 = std::array<double, 9>;  // row-major 3x3

LIBREYOLO_INLINE Mat3 mat_mul(const Mat3& a, const Mat3& b);
inline constexpr Mat3 kIdentity3 = {1, 0, 0, 0, 1, 0, 0, 0, 1};

LIBREYOLO_INLINE Mat3 mat_inverse(const Mat3& m);

struct AffineParams {
  double degrees = 0, translate = 0.1, scale = 0.5, shear = 0, perspective = 0;
};

// Draws the transform of Ultralytics' random_perspective: M = T * S * R * P * C, where C moves the
// input centre to the origin, P is the perspective, R rotation and scale, S shear, T the translation
// to the output centre +- translate. `extra_scale` multiplies R's scale (multi-scale output).
// *box_scale receives the total scale, which the box filter compares areas with.
LIBREYOLO_INLINE Mat3 random_affine_matrix(int in_h, int in_w, int out_h, int out_w, const AffineParams& p, double extra_scale,
                                           std::mt19937_64& rng, double* box_scale = nullptr);

namespace detail {
LIBREYOLO_INLINE int floor_int(float v);
// Bilinear sample of an RGB image at continuous (u, v) in pixel-index units; neighbours outside
// the image count as `fill` (OpenCV's BORDER_CONSTANT). Weights are 11-bit fixed point.
LIBREYOLO_INLINE void sample_bilinear(const Image& src, float u, float v, uint8_t fill, uint8_t* out);
}  // namespace detail

// out(x, y) = src(M^-1 (x, y)) with bilinear sampling and grey outside; pixel centres at +0.5.
LIBREYOLO_INLINE Image warp_image(const Image& src, const Mat3& M, int out_h, int out_w, uint8_t fill = kLetterboxFill);

// One source of a composite canvas: an image covering the canvas region [rx0, rx1) x [ry0, ry1),
// its top-left at canvas (ox, oy), with sx, sy image pixels per canvas pixel. A canvas made of
// such tiles (a letterbox, a mosaic) is warped without ever being built, straight from the decoded
// images: one interpolation instead of resize + paste + warp.
struct WarpTile {
  const Image* img = nullptr;
  float rx0 = 0, ry0 = 0, rx1 = 0, ry1 = 0;
  float ox = 0, oy = 0;
  float sx = 1, sy = 1;
  bool visible() const { return rx1 > rx0 && ry1 > ry0; }  // anything of it left on the canvas
};

// `img` shown as a w x h block with its top-left at canvas (x, y), cut to the canvas cw x ch.
inline WarpTile place_tile(const Image& img, int w, int h, int x, int y, int cw, int ch) {
  WarpTile t;
  t.img = &img;
  t.ox = static_cast<float>(x), t.oy = static_cast<float>(y);
  t.sx = static_cast<float>(img.w) / w, t.sy = static_cast<float>(img.h) / h;
  t.rx0 = static_cast<float>(std::max(x, 0)), t.ry0 = static_cast<float>(std::max(y, 0));
  t.rx1 = static_cast<float>(std::min(x + w, cw)), t.ry1 = static_cast<float>(std::min(y + h, ch));
  return t;
}

namespace detail {
// Bilinear sample at (u, v) in pixel-index units, clamped to the image edges (no fill bleeds in).
LIBREYOLO_INLINE void sample_bilinear_clamped(const Image& src, float u, float v, uint8_t* out);
}  // namespace detail

namespace detail {
// The per-pixel form of warp_tiles (any transform, perspective included; the reference the
// affine fast path is tested against).
LIBREYOLO_INLINE void warp_tiles_generic(const std::vector<WarpTile>& tiles, const Mat3& inv, Image& out, uint8_t fill);

// Integer x in [0, n) with lo <= f0 + x * df < hi (f linear along the row), as [a, b).
LIBREYOLO_INLINE std::pair<int, int> row_interval(double f0, double df, double lo, double hi, int n);
}  // namespace detail

// out(x, y) = canvas(M^-1 (x, y)), the canvas being the tiles over a `fill` background. For affine
// transforms each row is cut into the spans each tile covers, and the span whose 2 x 2 neighbours
// are all inside the tile runs in 16.16 fixed point without tests (most of the pixels).
LIBREYOLO_INLINE Image warp_tiles(const std::vector<WarpTile>& tiles, const Mat3& M, int out_h, int out_w,
                                  uint8_t fill = kLetterboxFill);

// Ultralytics' box_candidates: keep a transformed box when both sides exceed wh_thr pixels, it kept
// more than area_thr of its (scaled) area after clipping, and its aspect ratio stays below ar_thr.
LIBREYOLO_INLINE bool box_candidate(const DetBox& before, double scale, const DetBox& after, double wh_thr = 2,
                                    double ar_thr = 100, double area_thr = 0.1);

// Maps each box's four corners through M, takes their bounding box, clips it to the output and
// keeps the box_candidate()s. `scale`: the transform's scale (for the area test).
LIBREYOLO_INLINE DetBoxes warp_boxes(const DetBoxes& boxes, const Mat3& M, int out_h, int out_w, double scale);

LIBREYOLO_INLINE bool is_identity(const Mat3& M);

// Draws a random perspective transform of `img` into out_h x out_w and applies it to pixels and
// boxes. The identity with equal sizes is skipped (bit-exact pass-through), as in Ultralytics.
LIBREYOLO_INLINE Image random_perspective(const Image& img, DetBoxes& boxes, int out_h, int out_w, const AffineParams& p,
                                          double extra_scale, std::mt19937_64& rng);

// ---- mosaic ------------------------------------------------------------------------------------

// Ultralytics' 4-image mosaic on a 2S x 2S grey canvas: tile 0 ends at the centre (xc, yc) from
// the top-left, tiles 1, 2, 3 start there towards the top-right, bottom-left, bottom-right; parts
// beyond the canvas are cut and the boxes clipped to it. Tiles are images of long side <= S.
LIBREYOLO_INLINE Image mosaic4(const std::array<const Image*, 4>& tiles, const std::array<const DetBoxes*, 4>& tile_boxes, int S,
                               int xc, int yc, DetBoxes& out_boxes);

// ---- colour, flips, mixup ------------------------------------------------------------------------

namespace detail {
// OpenCV's 8-bit RGB -> HSV (H in [0, 180)) with integer arithmetic and reciprocal tables.
struct HsvTables {
  std::array<int, 256> sdiv{}, hdiv{};
  HsvTables();
};
LIBREYOLO_INLINE const HsvTables& hsv_tables();
}  // namespace detail

namespace detail {
// Per-image lookup tables of the HSV jitter: gains applied to H, S, V, and the HSV -> RGB sector
// and position (in 30ths) of every jittered hue.
struct HsvJitterLut {
  std::array<uint8_t, 256> s{}, v{};
  std::array<uint8_t, 180> sector{}, f30{};
};
LIBREYOLO_INLINE HsvJitterLut hsv_jitter_lut(double rh, double rs, double rv);
// One pixel: OpenCV's integer RGB -> HSV, the tables, then HSV -> RGB in integers (the float
// formulas of OpenCV scaled by 255 * 30, rounded to nearest). Branch-free: the sector picks a
// permutation of (v, p, q, t) from a table instead of a switch.
LIBREYOLO_INLINE void hsv_jitter_pixel(const HsvJitterLut& L, const HsvTables& tb, int r, int g, int b, uint8_t& R, uint8_t& G,
                                       uint8_t& B);
// YOLOX's (and the original's YOLOv9) additive jitter: offsets u * gain, u ~ U(-1, 1), each channel
// kept with probability 1/2 and truncated to an integer; H wraps modulo 180, S and V are clipped.
LIBREYOLO_INLINE HsvJitterLut hsv_add_lut(int dh, int ds, int dv);
LIBREYOLO_INLINE HsvJitterLut draw_hsv_add(double h_gain, double s_gain, double v_gain, std::mt19937_64& rng);
LIBREYOLO_INLINE HsvJitterLut draw_hsv_jitter(double h_gain, double s_gain, double v_gain, std::mt19937_64& rng);
}  // namespace detail

// Same draws and gains as hsv_jitter (image_ops.hpp), with integer conversions (OpenCV's 8-bit
// RGB -> HSV, integer HSV -> RGB): several times faster, within a level or so of it.
LIBREYOLO_INLINE void hsv_augment(Image& img, double h_gain, double s_gain, double v_gain, std::mt19937_64& rng);

// The jittered uint8 [3, H, W] tensor of img through a lookup table (one pass).
LIBREYOLO_INLINE torch::Tensor hsv_lut_chw(const Image& img, const detail::HsvJitterLut& L);

// YOLOX-style additive HSV jitter (gains in OpenCV units: H 0..180, S and V 0..255) to a CHW tensor.
// Gains 0 turn it off (no conversion); otherwise every image goes through the integer HSV round trip,
// as the original's (OpenCV's) does, also when its drawn offsets are all 0.
LIBREYOLO_INLINE torch::Tensor hsv_add_chw(const Image& img, double h_gain, double s_gain, double v_gain, std::mt19937_64& rng);

// hsv_augment and to_chw_tensor in one pass: the uint8 [3, H, W] tensor of the jittered image.
LIBREYOLO_INLINE torch::Tensor hsv_augment_chw(const Image& img, double h_gain, double s_gain, double v_gain, std::mt19937_64& rng);

LIBREYOLO_INLINE void flip_boxes_lr(DetBoxes& boxes, float width);  // mirror x -> width - x
LIBREYOLO_INLINE void flip_boxes_ud(DetBoxes& boxes, float height);

// Portable Gamma(k, 1) for k >= 1 (Marsaglia-Tsang, normals by Box-Muller), so Beta draws are the
// same with every standard library.
LIBREYOLO_INLINE double gamma_draw(double k, std::mt19937_64& rng);
LIBREYOLO_INLINE double beta_draw(double a, double b, std::mt19937_64& rng);

// a = a * r + b * (1 - r), per byte (same-sized images).
LIBREYOLO_INLINE void blend_into(Image& a, const Image& b, double r);

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/augment-inl.hpp>
#endif
