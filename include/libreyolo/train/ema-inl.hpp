#pragma once
// Definitions of ema.hpp (core/api.hpp): included by ema.hpp when header-only, compiled once otherwise.
#include <libreyolo/train/ema.hpp>

#include <unordered_map>

namespace libreyolo::train {

namespace detail {
// A tensor under k names (a shared module): the original's update walks its state dict, so k updates in a row
// (host-scalar form: d and keep = 1 - d as numbers).
inline void ema_update_times(const torch::Tensor& e, const torch::Tensor& m, double d, double keep, int times) {
  for (int j = 0; j < times; ++j) e.mul_(d).add_(m.detach(), keep);
}
}  // namespace detail

LIBREYOLO_INLINE ModelEMA::ModelEMA(std::shared_ptr<torch::nn::Module> ema_copy, const torch::nn::Module& model, double decay,
                                    double tau, int foreach)
    : ema_(std::move(ema_copy)), decay_(decay), tau_(tau) {
  if (!ema_) throw SetupError("ModelEMA: ema_copy is null");
  if (!(decay >= 0 && decay <= 1)) throw ConfigError("ema decay = " + std::to_string(decay) + ": allowed 0..1");
  if (!(tau > 0)) throw ConfigError("ema tau = " + std::to_string(tau) + ": must be > 0");
  if (foreach < -1 || foreach > 1)
    throw ConfigError("ema foreach = " + std::to_string(foreach) + ": allowed -1 (auto), 0, 1");
  const auto pairs = matched(model);
  torch::NoGradGuard no_grad;
  for (const auto& [e, m] : pairs) e.copy_(m);
  for (auto& p : ema_->parameters()) p.set_requires_grad(false);
  ema_->eval();
  foreach_mode_ = foreach;
}

LIBREYOLO_INLINE void ModelEMA::update(const torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  ++updates_;
  const double d = current_decay();
  cache_pairs(model);  // name matching is host work: done once per model object
  std::vector<torch::Tensor> ef, mf;
  for (size_t i = 0; i < cached_pairs_.size(); ++i) {
    const auto& [e, m] = cached_pairs_[i];
    if (!e.is_floating_point()) {
      e.copy_(m);
    } else if (cached_mult_[i] > 1) {
      detail::ema_update_times(e, m, d, 1 - d, cached_mult_[i]);
    } else {
      ef.push_back(e);
      mf.push_back(m.detach());
    }
  }
  if (uses_foreach()) {
    at::_foreach_mul_(ef, at::Scalar(d));
    at::_foreach_add_(ef, mf, at::Scalar(1 - d));
  } else {
    for (size_t i = 0; i < ef.size(); ++i) ef[i].mul_(d).add_(mf[i], 1 - d);
  }
}

LIBREYOLO_INLINE void ModelEMA::cache_pairs(const torch::nn::Module& model) {
  if (&model == cached_model_) return;
  cached_pairs_ = matched(model, &cached_mult_);
  cached_model_ = &model;
}

LIBREYOLO_INLINE void ModelEMA::begin_device_update() {
  ++updates_;
  const double d = current_decay();
  if (!decay_t_.defined()) {
    auto ps = ema_->parameters();
    const torch::Device dev = ps.empty() ? torch::Device(torch::kCPU) : ps.front().device();
    const auto o = torch::TensorOptions().dtype(dev.is_cuda() ? torch::kFloat32 : torch::kFloat64).device(dev);
    decay_t_ = torch::zeros({}, o);
    keep_t_ = torch::zeros({}, o);
  }
  decay_t_.fill_(d);
  keep_t_.fill_(1 - d);
}

LIBREYOLO_INLINE void ModelEMA::device_update(const torch::nn::Module& model) {
  if (!decay_t_.defined()) throw Error("ModelEMA::device_update: call begin_device_update() first");
  torch::NoGradGuard no_grad;
  cache_pairs(model);
  std::vector<torch::Tensor> ef, mf;
  std::vector<size_t> multi;  // k updates in a row, as update()
  for (size_t i = 0; i < cached_pairs_.size(); ++i) {
    const auto& [e, m] = cached_pairs_[i];
    if (!e.is_floating_point()) {
      e.copy_(m);
    } else if (cached_mult_[i] > 1) {
      multi.push_back(i);
    } else {
      ef.push_back(e);
      mf.push_back(m.detach());
    }
  }
  if (!decay_t_.is_cuda()) {
    const double d = decay_t_.item<double>(), k = keep_t_.item<double>();
    for (const size_t i : multi) detail::ema_update_times(cached_pairs_[i].first, cached_pairs_[i].second, d, k, cached_mult_[i]);
    if (uses_foreach()) {
      at::_foreach_mul_(ef, at::Scalar(d));
      at::_foreach_add_(ef, mf, at::Scalar(k));
    } else {
      for (size_t i = 0; i < ef.size(); ++i) ef[i].mul_(d).add_(mf[i], k);
    }
    return;
  }
  for (const size_t i : multi)
    for (int j = 0; j < cached_mult_[i]; ++j)
      cached_pairs_[i].first.mul_(decay_t_).add_(cached_pairs_[i].second.detach() * keep_t_);
  compat::foreach_mul_by_tensor_(ef, decay_t_);
  at::_foreach_add_(ef, compat::foreach_mul_by_tensor(mf, keep_t_));
}

LIBREYOLO_INLINE double ModelEMA::current_decay() const {
  if (constant_ > 0) return constant_;
  return decay_ * (1 - std::exp(-static_cast<double>(updates_) / tau_));
}

LIBREYOLO_INLINE void ModelEMA::set_constant_decay(double d) {
  if (!(d >= 0 && d <= 1)) throw ConfigError("ema restart decay = " + std::to_string(d) + ": allowed 0..1");
  constant_ = d;
}

LIBREYOLO_INLINE bool ModelEMA::uses_foreach() const {
  if (foreach_mode_ != -1) return foreach_mode_ == 1;
  auto ps = ema_->parameters();
  return !ps.empty() && ps.front().is_cuda();
}

LIBREYOLO_INLINE void ModelEMA::save(Checkpoint& ck, const std::string& prefix) const {
  put_module_state(ck, prefix, *ema_);
  ck.meta[detail::meta_key(prefix)] = {{"updates", updates_}, {"decay", decay_}, {"tau", tau_}};
}

LIBREYOLO_INLINE void ModelEMA::load(const Checkpoint& ck, const std::string& prefix) {
  const std::string key = detail::meta_key(prefix);
  if (!ck.meta.contains(key) || !ck.meta[key].is_object() || !ck.meta[key].contains("updates") ||
      !ck.meta[key]["updates"].is_number_integer())
    throw CheckpointError("checkpoint lacks EMA state (meta key '" + key + "' with an integer 'updates')");
  get_module_state(ck, prefix, *ema_);
  updates_ = ck.meta[key]["updates"].get<int64_t>();
}

LIBREYOLO_INLINE std::vector<std::pair<torch::Tensor, torch::Tensor>> ModelEMA::matched(const torch::nn::Module& model,
                                                                                    std::vector<int>* mult) const {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  std::unordered_map<const void*, size_t> seen;  // tensor -> its index in out
  if (mult) mult->clear();
  auto pair_up = [&](const auto& ema_items, const auto& model_items, const char* what) {
    if (ema_items.size() != model_items.size())
      throw SetupError(std::string("ModelEMA: the EMA copy has ") + std::to_string(ema_items.size()) + " " +
                       what + ", the model " + std::to_string(model_items.size()));
    for (const auto& item : model_items) {
      const torch::Tensor* e = ema_items.find(item.key());
      if (!e) throw SetupError(std::string("ModelEMA: the EMA copy lacks ") + what + " '" + item.key() + "'");
      if (!e->defined() || !item.value().defined()) continue;
      // A tensor under several names (a module shared by several parents, e.g. DEIMv2 atto..pico's one box
      // head for every decoder layer): one entry, its name count in mult. The original's EMA walks its state
      // dict, which lists such a tensor under every name, so it is averaged that many times per update
      // (training/ema.py ModelEMA.update): decay d^k for it.
      if (const auto it = seen.find(item.value().unsafeGetTensorImpl()); it != seen.end()) {
        if (mult) ++(*mult)[it->second];
        continue;
      }
      seen.emplace(item.value().unsafeGetTensorImpl(), out.size());
      if (e->sizes() != item.value().sizes())
        throw SetupError("ModelEMA: '" + item.key() + "' has shape " + detail::shape_str(*e) +
                         " in the EMA copy but " + detail::shape_str(item.value()) + " in the model");
      out.emplace_back(*e, item.value());
      if (mult) mult->push_back(1);
    }
  };
  pair_up(ema_->named_parameters(true), model.named_parameters(true), "parameters");
  pair_up(ema_->named_buffers(true), model.named_buffers(true), "buffers");
  return out;
}

}  // namespace libreyolo::train
