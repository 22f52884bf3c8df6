#pragma once
// Per-optimizer-step learning rate, with the original's (LibreYOLO's) formulas. Warm-up is linear from
// warmup_lr_start (capped at lr0) to lr0 over W = round(warmup_epochs * iters_per_epoch) steps, t <= W
// inclusive, except yoloxwarmcos whose warm-up is quadratic; every parameter group gets the same lr and
// momentum stays constant (the original has no momentum or bias warm-up).
//   linear       after W: lr0 - (lr0 - lr_min) (t - W) / max(1, T - W)
//   cos          after W: lr_min + (lr0 - lr_min) (1 + cos(pi (t - W) / max(1, T - W))) / 2
//   yoloxwarmcos (t / W)² warm-up, cosine to T - N, then lr_min for the last N = no_aug_epochs epochs
//   flat_cosine  after W: lr0 until T - N, then a cosine from lr0 to lr_min over the last N epochs
//   deimv2_flat_cosine (the original's DEIMv2FlatCosineScheduler, models/deimv2/trainer.py at c41461e):
//                (t / W)² warm-up; lr0 while t <= F (F = flat_epochs * iters_per_epoch, or T - N when
//                flat_epochs is -1); lr_min from T - N on; between them a cosine from lr0 to lr_min over
//                max(1, T - F - N) steps. The flat test comes first, so with F >= T - N (DEIMv2's recipes
//                on a short run: flat_epochs 250 of 500 and epochs=10) the lr stays lr0 to the end.
//   step         (RF-DETR's RFDETRStepScheduler, models/rfdetr/trainer.py at c41461e) lr0 t / W for t < W,
//                W = floor(warmup_epochs * iters_per_epoch) here (the original's int(); from 0: warmup_lr_start
//                is unread), then lr0 for t < D = lr_drop * iters_per_epoch, lr0 x 0.1 from D on (lr_drop
//                >= epochs: no drop within the run)
//   constant     after W: lr0
// lr_min = lr0 * min_lr_ratio, T = epochs * iters_per_epoch. Past T the curves are held at their value at T.
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/train/optimizer.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

namespace libreyolo::train {

enum class ScheduleKind { linear, cos, yoloxwarmcos, flat_cosine, deimv2_flat_cosine, step, constant };

inline constexpr const char* kScheduleChoices = "linear|cos|warmcos|yoloxwarmcos|flat_cosine|deimv2_flat_cosine|step|constant";

inline ScheduleKind parse_schedule(const std::string& s) {
  if (s == "linear") return ScheduleKind::linear;
  if (s == "cos" || s == "warmcos") return ScheduleKind::cos;
  if (s == "yoloxwarmcos") return ScheduleKind::yoloxwarmcos;
  if (s == "flat_cosine") return ScheduleKind::flat_cosine;
  if (s == "deimv2_flat_cosine") return ScheduleKind::deimv2_flat_cosine;
  if (s == "step") return ScheduleKind::step;
  if (s == "constant") return ScheduleKind::constant;
  throw ConfigError("scheduler '" + s + "' is not supported; allowed: " + kScheduleChoices);
}

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::yoloxwarmcos;
  double lr0 = 0.01;
  double min_lr_ratio = 0.05;
  int epochs = 300;
  int64_t iters_per_epoch = 1;  // optimizer steps per epoch
  double warmup_epochs = 5;
  double warmup_lr_start = 0.0;
  double momentum = 0.937;
  int no_aug_epochs = 15;  // yoloxwarmcos / deimv2_flat_cosine: the lr_min tail; flat_cosine: the cosine tail
  int flat_epochs = -1;    // deimv2_flat_cosine: where the flat phase ends (-1: at T - N); the others: unread
  int lr_drop = 100;       // step: the epoch from which the lr is lr0 x 0.1; the others: unread
};

class LRSchedule {
 public:
  explicit LRSchedule(ScheduleOptions o) : o_(o) {
    auto bad = [](const std::string& key, double v, const char* allowed) {
      throw ConfigError("schedule " + key + " = " + std::to_string(v) + ": " + allowed);
    };
    if (!(o_.lr0 > 0)) bad("lr0", o_.lr0, "must be > 0");
    if (!(o_.min_lr_ratio >= 0 && o_.min_lr_ratio <= 1)) bad("min_lr_ratio", o_.min_lr_ratio, "allowed 0..1");
    if (o_.epochs < 0) bad("epochs", o_.epochs, "must be >= 0");
    if (o_.iters_per_epoch < 1) bad("iters_per_epoch", static_cast<double>(o_.iters_per_epoch), "must be >= 1");
    if (!(o_.warmup_epochs >= 0)) bad("warmup_epochs", o_.warmup_epochs, "must be >= 0");
    if (!(o_.warmup_lr_start >= 0)) bad("warmup_lr_start", o_.warmup_lr_start, "must be >= 0");
    if (o_.no_aug_epochs < 0) bad("no_aug_epochs", o_.no_aug_epochs, "must be >= 0");
    if (o_.lr_drop < 0) bad("lr_drop", o_.lr_drop, "must be >= 0");
    if (o_.flat_epochs < -1) bad("flat_epochs", o_.flat_epochs, "must be >= 0, or -1 (the flat phase ends where the no-aug epochs start)");
    if (!(o_.momentum >= 0 && o_.momentum < 1)) bad("momentum", o_.momentum, "allowed 0 <= momentum < 1");
    total_ = static_cast<int64_t>(o_.epochs) * o_.iters_per_epoch;
    // step truncates as the original's int(iters_per_epoch * warmup_epochs); the others round.
    warmup_ = o_.kind == ScheduleKind::step ? static_cast<int64_t>(o_.warmup_epochs * static_cast<double>(o_.iters_per_epoch))
                                            : std::llround(o_.warmup_epochs * static_cast<double>(o_.iters_per_epoch));
    tail_ = static_cast<int64_t>(o_.no_aug_epochs) * o_.iters_per_epoch;
    flat_ = o_.flat_epochs >= 0 ? static_cast<int64_t>(o_.flat_epochs) * o_.iters_per_epoch : total_ - tail_;
    start_ = std::min(o_.warmup_lr_start, o_.lr0);
  }

  // The lr of optimizer step t (0-based): the original sets update_lr(0) before the first step and
  // update_lr(t + 1) after step t.
  double lr(int64_t t) const {
    if (t < 0) throw Error("LRSchedule: step index t = " + std::to_string(t) + " is negative");
    t = std::min(t, std::max<int64_t>(total_, 0));
    const double lr0 = o_.lr0, lo = o_.lr0 * o_.min_lr_ratio;
    const auto frac = [](int64_t a, int64_t b) { return static_cast<double>(a) / static_cast<double>(b); };
    const auto cosine = [&](double p) { return lo + 0.5 * (lr0 - lo) * (1 + std::cos(std::numbers::pi * p)); };  // lr0 at 0, lo at 1
    if (o_.kind == ScheduleKind::step) {
      if (warmup_ > 0 && t < warmup_) return lr0 * frac(t, warmup_);  // linear from 0 (warmup_lr_start unread)
      return t < static_cast<int64_t>(o_.lr_drop) * o_.iters_per_epoch ? lr0 : lr0 * 0.1;
    }
    const bool quadratic = o_.kind == ScheduleKind::yoloxwarmcos || o_.kind == ScheduleKind::deimv2_flat_cosine;
    if (quadratic && warmup_ > 0 && t <= warmup_) return (lr0 - start_) * std::pow(frac(t, warmup_), 2) + start_;
    if (o_.kind == ScheduleKind::yoloxwarmcos) {
      if (t >= total_ - tail_) return lo;
      return cosine(frac(t - warmup_, total_ - warmup_ - tail_));
    }
    if (o_.kind == ScheduleKind::deimv2_flat_cosine) {
      if (t <= flat_) return lr0;
      if (t >= total_ - tail_) return lo;
      return cosine(frac(t - flat_, std::max<int64_t>(1, total_ - flat_ - tail_)));
    }
    if (t <= warmup_) return warmup_ > 0 ? (lr0 - start_) * frac(t, warmup_) + start_ : lr0;
    const int64_t span = std::max<int64_t>(1, total_ - warmup_);
    switch (o_.kind) {
      case ScheduleKind::linear: return lr0 - (lr0 - lo) * frac(t - warmup_, span);
      case ScheduleKind::cos: return cosine(frac(t - warmup_, span));
      case ScheduleKind::flat_cosine: {
        const int64_t cos_start = total_ - tail_;
        if (t < cos_start) return lr0;
        return cosine(std::min(1.0, frac(t - cos_start, std::max<int64_t>(1, tail_))));
      }
      default: return lr0;
    }
  }
  double momentum(int64_t) const { return o_.momentum; }
  int64_t warmup_iters() const { return warmup_; }
  int64_t total_iters() const { return total_; }
  const ScheduleOptions& options() const { return o_; }

  // Sets every group's lr (times its lr_mult) and the optimizer's momentum for step t.
  void apply(Optimizer& opt, int64_t t) const {
    const double v = lr(t);
    for (size_t i = 0; i < opt.num_groups(); ++i) opt.set_lr(i, v * opt.group(i).lr_mult);
    opt.set_momentum(o_.momentum);
  }

 private:
  ScheduleOptions o_;
  int64_t total_ = 0, warmup_ = 0, tail_ = 0, flat_ = 0;
  double start_ = 0;
};

// The schedule a run of `cfg` follows over `batches_per_epoch` loader batches per epoch: it advances once per
// optimizer step, as the original's does under accumulation (ceil(batches / accumulate) steps per epoch). `momentum`
// is the optimizer's (the schedule keeps it constant).
inline ScheduleOptions schedule_options(const TrainConfig& cfg, int64_t batches_per_epoch, int accumulate, double momentum) {
  ScheduleOptions so;
  so.kind = parse_schedule(cfg.scheduler);
  so.lr0 = cfg.lr0;
  so.min_lr_ratio = cfg.min_lr_ratio;
  so.epochs = cfg.epochs;
  const int64_t batches = std::max<int64_t>(1, batches_per_epoch), acc = std::max(1, accumulate);
  so.iters_per_epoch = (batches + acc - 1) / acc;
  so.warmup_epochs = cfg.warmup_epochs;
  so.warmup_lr_start = cfg.warmup_lr_start;
  so.momentum = momentum;
  so.no_aug_epochs = cfg.no_aug_epochs;
  so.flat_epochs = cfg.flat_epochs;
  so.lr_drop = cfg.lr_drop;
  return so;
}

}  // namespace libreyolo::train
