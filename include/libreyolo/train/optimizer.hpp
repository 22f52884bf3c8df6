#pragma once
// SGD (nesterov) and AdamW over parameter groups, matching PyTorch's update rules exactly. The
// schedule changes each group's lr and the momentum between steps, so both live here rather than in
// torch::optim options. Two paths with the same maths: a per-tensor loop and multi-tensor
// `_foreach_*` calls (fewer kernel launches on CUDA). No host syncs inside step().
// A third form for cuda_graph=step (device_step): every value that changes between steps lives in a
// device tensor (each group's lr, AdamW's step counts) and an inf/NaN step is skipped on the device, so
// the whole step can be recorded in a CUDA graph; on the CPU it computes exactly what step() does.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/io/checkpoint.hpp>
#include <libreyolo/train/param_groups.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

namespace libreyolo::train {

struct OptimizerOptions {
  std::string name = "SGD";  // "SGD" | "AdamW" (case-insensitive)
  double lr0 = 0.01;
  double momentum = 0.937;  // SGD momentum, AdamW beta1
  bool nesterov = true;     // SGD only
  double beta2 = 0.999;     // AdamW only
  double eps = 1e-8;        // AdamW only
  int foreach = -1;         // -1 auto: multi-tensor path when params are on CUDA; 0 off; 1 on
};

class Optimizer {
 public:
  enum class Kind { sgd, adamw };

  Optimizer(std::vector<ParamGroup> groups, OptimizerOptions opt);

  // One update of every parameter with a defined grad, using each group's current lr.
  void step();

  void zero_grad(bool set_to_none = true);

  size_t num_groups() const { return groups_.size(); }
  ParamGroup& group(size_t i) { return groups_.at(check_group(i)); }
  const ParamGroup& group(size_t i) const { return groups_.at(check_group(i)); }
  void set_lr(size_t i, double lr);
  double lr(size_t i) const { return groups_[check_group(i)].lr; }
  void set_momentum(double m);
  double momentum() const { return momentum_; }
  const std::string& name() const { return opt_.name; }
  const OptimizerOptions& options() const { return opt_; }  // as constructed (the family's adjustments included)
  Kind kind() const { return kind_; }

  std::vector<torch::Tensor> params() const;
  // Decided per step from where the params are now (a model moved to CUDA after construction counts).
  bool uses_foreach() const;


  // ---- the device-state step (cuda_graph=step) ----------------------------------------------------
  // Creates the device tensors from the host state (call after a resume / load, before the first
  // device_step): each group's lr (float64, and float32 for the fused kernels), AdamW's per-parameter
  // step counts, and every parameter's state (SGD momentum buffers start at zero, which the first
  // update turns into the gradient exactly as step() creates them). Afterwards set_lr writes the tensors.
  void enable_device_state();
  bool device_state() const { return dev_.on; }
  // Whether device_step uses LibTorch's fused multi-tensor kernels (SGD; CUDA, LibTorch >= 2.5).
  bool device_fused() const { return dev_.on && dev_.fused; }
  // Whether AdamW's device_step uses the multi-tensor form (`_foreach_*` over each group, one bias
  // correction per group: a few dozen launches where the per-tensor form launches ~24 per parameter).
  // Default: on for CUDA parameters unless set_device_fused(false); groups whose parameters stop
  // stepping together (a parameter without a grad) take the per-tensor form from then on.
  bool device_multi_tensor() const { return dev_.on && dev_.multi; }
  // Why the fused kernels were given up for the generic device path (empty while they run).
  const std::string& device_fused_error() const { return fused_error_; }
  // false: the generic (per-tensor) device path on CUDA too (tests); before enable_device_state().
  void set_device_fused(bool on);
  // Forces AdamW's multi-tensor device form on (the CPU tests) or off; before enable_device_state().
  void set_device_multi_tensor(bool on);

  // One update of every parameter with a defined grad, reading lr and step counts from the device
  // tensors; when found_inf (0-d float, scale's device) is defined and 1, nothing changes (parameters,
  // state and step counts stay). Changes no host state, reads nothing back on CUDA: recordable.
  void device_step(const torch::Tensor& found_inf = {});

  // Tensors go to "<prefix>.<group>.<param>.<field>" (CPU copies); the rest to meta["<prefix>"]
  // (a trailing dot on the prefix is optional).
  void save(Checkpoint& ck, const std::string& prefix) const;

  // Restores state, step counts, group lrs and momentum; checks everything before changing anything.
  void load(const Checkpoint& ck, const std::string& prefix);

 private:
  // `a` is the SGD momentum buffer or the AdamW first moment, `b` the AdamW second moment.
  struct ParamState {
    torch::Tensor a, b;
    int64_t step = 0;
  };
  // The parameters of one group that have a grad this step, with their grads and states.
  struct Batch {
    std::vector<torch::Tensor> params, grads;
    std::vector<ParamState*> states;
  };

  static Kind parse_kind(const std::string& name);
  static void check_momentum(double m);
  size_t check_group(size_t i) const;
  const char* field_a() const { return kind_ == Kind::sgd ? "momentum_buffer" : "exp_avg"; }
  static std::string state_key(const std::string& prefix, size_t g, size_t p, const std::string& field);
  static torch::Tensor cpu_copy(const torch::Tensor& t);

  Batch collect(size_t i);

  // PyTorch SGD, dampening 0: d = g + wd*p; buf = d (first) or mu*buf + d; d = d + mu*buf (nesterov)
  // or buf; p -= lr*d.
  void sgd_loop(const ParamGroup& g, Batch& b);

  void sgd_foreach(const ParamGroup& g, Batch& b);

  // PyTorch AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
  // p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps), bc = 1 - beta^step from a host-side step count. Every form
  // (loop, foreach, both device forms) does the last line as PyTorch's capturable AdamW does, p += m / d with
  // d = (sqrt(v)/sqrt(bc2) + eps) / (-lr/bc1): the multi-tensor device form can only take the step size as a
  // 0-d tensor that way, and so all four round alike (the graph step equals eager bit for bit).
  void adamw_loop(const ParamGroup& g, Batch& b);

  void adamw_foreach(const ParamGroup& g, Batch& b);

  // The device-state path's tensors (enable_device_state()).
  struct DeviceState {
    bool on = false, fused = false, multi = false;
    std::vector<torch::Tensor> lr, lr32;            // per group, 0-d float64 / float32
    std::vector<std::vector<torch::Tensor>> steps;  // per group and parameter, 0-d (AdamW's step counts)
    // Per group: every parameter has stepped in every device step so far, and their counts were equal
    // at enable_device_state(), so one count (the first parameter's) gives the group's bias corrections.
    std::vector<char> together;
  };
  void write_device_lr(size_t i);
  // x + y * alpha, x * alpha, x / alpha for a 0-d alpha: on the CPU its value is read (there is no device to
  // wait for) and given as the Scalar step() uses, so the arithmetic is step()'s to the bit; on CUDA it
  // stays a tensor.
  static torch::Tensor add_scaled(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& alpha);
  static torch::Tensor mul_by(const torch::Tensor& x, const torch::Tensor& alpha);
  static torch::Tensor div_by(const torch::Tensor& x, const torch::Tensor& alpha);
  // live = keep ? fresh : live, where keep = (found == 0); without found_inf, live = fresh.
  static void commit(torch::Tensor& live, const torch::Tensor& fresh, const torch::Tensor& keep);

  // step()'s SGD with the lr from the device and the update kept only when found_inf is 0.
  void sgd_device(const ParamGroup& g, size_t gi, Batch& b, const std::vector<torch::Tensor*>& steps,
                  const torch::Tensor& found);
  void sgd_fused(const ParamGroup& g, size_t gi, Batch& b, const std::vector<torch::Tensor*>& steps,
                 const torch::Tensor& found);

  // step()'s AdamW (the per-tensor form) with lr and step counts from the device; the counts do not
  // advance on a skipped step.
  void adamw_device(const ParamGroup& g, size_t gi, Batch& b, const std::vector<torch::Tensor*>& steps,
                    const torch::Tensor& found);
  // The same update in multi-tensor calls for a group whose parameters step together (dev_.together).
  // With found_inf, the grads are zeroed when it is 1 and the factors are picked on the device (beta -> 1,
  // decay -> 1, step size -> 0: the denominator becomes inf), so the update leaves parameters and moments
  // as they were without a per-tensor select of each result.
  void adamw_multi(const ParamGroup& g, size_t gi, Batch& b, const std::vector<torch::Tensor*>& steps,
                   const torch::Tensor& found);
  static void init_adam_state(ParamState& s, const torch::Tensor& p);

  const nlohmann::json& checked_meta(const Checkpoint& ck, const std::string& prefix) const;

  // A checkpoint tensor for state key `key`, as a fresh tensor on p's device with p's shape.
  static torch::Tensor fetch(const Checkpoint& ck, const std::string& key, const torch::Tensor& p);

  std::vector<ParamGroup> groups_;
  OptimizerOptions opt_;
  Kind kind_ = Kind::sgd;
  double momentum_ = 0;
  std::vector<std::vector<ParamState>> state_;
  DeviceState dev_;
  bool prefer_fused_ = true;
  int prefer_multi_ = -1;  // -1: as prefer_fused_ on CUDA; 0 / 1: set_device_multi_tensor
  std::string fused_error_;
};

}  // namespace libreyolo::train

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/train/optimizer-inl.hpp>
#endif
