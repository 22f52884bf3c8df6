#pragma once
// Per-iteration learning rate and momentum: linear / cosine decay with a linear warm-up
// (ultralytics style), or YOLOX's quadratic warm-up + cosine + flat tail for the no-augmentation epochs.
#include <libreyolo/core/error.hpp>
#include <libreyolo/train/optimizer.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

namespace libreyolo::train {

enum class ScheduleKind { linear, cos, yoloxwarmcos };

inline ScheduleKind parse_schedule(const std::string& s) {
  if (s == "linear") return ScheduleKind::linear;
  if (s == "cos") return ScheduleKind::cos;
  if (s == "yoloxwarmcos") return ScheduleKind::yoloxwarmcos;
  throw ConfigError("scheduler '" + s + "' is not supported; allowed: linear|cos|yoloxwarmcos");
}

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::yoloxwarmcos;
  double lr0 = 0.01;
  double min_lr_ratio = 0.05;
  int epochs = 300;
  int64_t iters_per_epoch = 1;
  double warmup_epochs = 5;
  double momentum = 0.937;
  double warmup_momentum = 0.8;
  double warmup_bias_lr = 0.0;
  int no_aug_epochs = 15;  // yoloxwarmcos only: lr stays at its minimum for these last epochs
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
    if (o_.no_aug_epochs < 0) bad("no_aug_epochs", o_.no_aug_epochs, "must be >= 0");
    if (!(o_.momentum >= 0 && o_.momentum < 1)) bad("momentum", o_.momentum, "allowed 0 <= momentum < 1");
    if (!(o_.warmup_momentum >= 0 && o_.warmup_momentum < 1))
      bad("warmup_momentum", o_.warmup_momentum, "allowed 0 <= warmup_momentum < 1");
    if (!(o_.warmup_bias_lr >= 0)) bad("warmup_bias_lr", o_.warmup_bias_lr, "must be >= 0");
    total_ = static_cast<int64_t>(o_.epochs) * o_.iters_per_epoch;
    warmup_ = o_.warmup_epochs > 0
                  ? std::max<int64_t>(1, std::llround(o_.warmup_epochs * static_cast<double>(o_.iters_per_epoch)))
                  : 0;
    no_aug_ = static_cast<int64_t>(o_.no_aug_epochs) * o_.iters_per_epoch;
  }

  // lr of the "decay" and "norm" groups at optimizer step t (0-based).
  double lr(int64_t t) const {
    check(t);
    if (o_.kind == ScheduleKind::yoloxwarmcos) return yolox(t);
    const double s = decayed(t);
    return t < warmup_ ? s * frac_warm(t) : s;
  }
  // lr of the "bias" group: starts at warmup_bias_lr and meets lr(t) at the end of warm-up.
  double bias_lr(int64_t t) const {
    check(t);
    if (o_.kind == ScheduleKind::yoloxwarmcos) return yolox(t);
    const double s = decayed(t);
    return t < warmup_ ? o_.warmup_bias_lr + (s - o_.warmup_bias_lr) * frac_warm(t) : s;
  }
  double momentum(int64_t t) const {
    check(t);
    if (t >= warmup_) return o_.momentum;
    return o_.warmup_momentum + (o_.momentum - o_.warmup_momentum) * frac_warm(t);
  }
  int64_t warmup_iters() const { return warmup_; }
  int64_t total_iters() const { return total_; }
  const ScheduleOptions& options() const { return o_; }

  // Sets every group's lr (the group named "bias" gets bias_lr) and the optimizer momentum.
  void apply(Optimizer& opt, int64_t t) const {
    const double main = lr(t), bias = bias_lr(t);
    for (size_t i = 0; i < opt.num_groups(); ++i) opt.set_lr(i, opt.group(i).name == "bias" ? bias : main);
    opt.set_momentum(momentum(t));
  }

 private:
  static void check(int64_t t) {
    if (t < 0) throw Error("LRSchedule: step index t = " + std::to_string(t) + " is negative");
  }
  double frac_warm(int64_t t) const { return static_cast<double>(t) / static_cast<double>(warmup_); }

  // The linear / cosine curve s(t), clamped at t = T so it never turns back up past the end.
  double decayed(int64_t t) const {
    const double r = o_.min_lr_ratio;
    const double x = total_ > 0 ? static_cast<double>(std::min(t, total_)) / static_cast<double>(total_) : 0.0;
    if (o_.kind == ScheduleKind::linear) return o_.lr0 * (1 - (1 - r) * x);
    return o_.lr0 * (r + (1 - r) * 0.5 * (1 + std::cos(std::numbers::pi * x)));
  }

  double yolox(int64_t t) const {
    const double min_lr = o_.lr0 * o_.min_lr_ratio;
    if (t < warmup_) return o_.lr0 * frac_warm(t) * frac_warm(t);
    const int64_t cos_len = total_ - warmup_ - no_aug_;
    if (cos_len <= 0 || t >= total_ - no_aug_) return min_lr;
    const double x = static_cast<double>(t - warmup_) / static_cast<double>(cos_len);
    return min_lr + 0.5 * (o_.lr0 - min_lr) * (1 + std::cos(std::numbers::pi * x));
  }

  ScheduleOptions o_;
  int64_t total_ = 0, warmup_ = 0, no_aug_ = 0;
};

}  // namespace libreyolo::train
