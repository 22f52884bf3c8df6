#pragma once
// A family's optional members, declared (issue 37): a family lists the optional members it has in its
// traits (`using members = member::list<member::param_groups, ...>`; a task base lists those every
// family of the task gets in `task_members`), and the trainer calls exactly the declared ones. Both
// directions are checked at compile time, each with a sentence: a declared member that is missing,
// misspelt or has another signature, and a member with the expected signature that is not declared
// (it would otherwise never run). Only a misspelt member that is not declared either goes unseen.
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/train/ema.hpp>
#include <libreyolo/train/events.hpp>
#include <libreyolo/train/optimizer.hpp>
#include <libreyolo/train/param_groups.hpp>

#include <torch/torch.h>

#include <concepts>
#include <filesystem>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace libreyolo::member {

// std::vector<train::ParamGroup> param_groups(torch::nn::Module& net, double weight_decay) [const or static]:
// the family's parameter groups (e.g. a backbone at a fraction of the learning rate).
struct param_groups {};
// void optimizer_options(train::OptimizerOptions&, const TrainConfig&) [const or static]: adjusts the
// optimizer's options (e.g. AdamW's betas).
struct optimizer_options {};
// A range of "key=value" strings, size_overrides() const: the size's own recipe keys, applied after the
// family's traits::overrides to keys the user left alone (FOMO's and MobileNetV4's input size per size).
struct size_overrides {};
// std::string-like size() const: the size name, appended to the family name for a hand-composed trainer.
struct size {};
// void plot_labels(const std::filesystem::path&) const and void set_plot_dir(const std::filesystem::path&):
// the task's labels.png and its validation pictures.
struct plots {};
// static Batch pad_for_step_graph(const Batch&): the batch padded to a fixed-shape bucket (cuda_graph=step).
struct step_padding {};
// cuda_graph=step in two parts with a host decision between them (capture/step_graph.hpp; the DETR line's
// matching): capture::Segment match_segment(const Output&, const Batch&) (part A's end: the device tensor
// the host reads and its solve) and train::LossOutput loss_given(const Output&, const Batch&, const
// torch::Tensor& given) (part B's loss from the solve's answer on the device). Their composition equals
// loss(out, batch) up to the fixed-shape form (the DETR denoising part at its capacity).
struct segmented_step {};
// void on(event::epoch_begin, const EpochInfo&, const TrainConfig&, train::EpochContext<Capture>&): the
// family's recipe step at an epoch's start (YOLOX's L1 switch, D-FINE's EMA restart).
struct epoch_hook {};
// The family's epoch hook applies the key ema_restart_decay (the original's EMA restart: D-FINE, DEIM,
// RT-DETRv4); a run of another family that sets the key is told that it does not apply.
struct ema_restart {};

namespace detail {
template <class M, class L>
struct contains;
template <class M, class... Ms>
struct contains<M, list<Ms...>> : std::bool_constant<(std::is_same_v<M, Ms> || ...)> {};
template <class F>
struct task_members_of {
  using type = list<>;
};
template <class F>
  requires requires { typename F::task_members; }
struct task_members_of<F> {
  using type = typename F::task_members;
};
}  // namespace detail

// Whether family F declares member M (in its traits' `members` or its task base's `task_members`).
template <class F, class M>
constexpr bool declares = detail::contains<M, typename F::traits::members>::value ||
                          detail::contains<M, typename detail::task_members_of<F>::type>::value;

}  // namespace libreyolo::member

namespace libreyolo::train {

// What a family's epoch hook (member::epoch_hook) may act on.
template <class Capture>
struct EpochContext {
  Capture& capture;  // capture.invalidate(reason) when the captured computation changes (YOLOX's L1 switch)
  ModelEMA* ema;     // the run's EMA (null when ema=false)
  bool main;         // this process logs (rank 0 of a distributed run)
};

namespace members_detail {
using events::detail::any_arg;
template <class F>
concept has_param_groups = requires(F& f, torch::nn::Module& m, double wd) {
  { f.param_groups(m, wd) } -> std::convertible_to<std::vector<ParamGroup>>;
};
template <class F>
concept has_optimizer_options = requires(F& f, OptimizerOptions& o, const TrainConfig& c) { f.optimizer_options(o, c); };
template <class F>
concept has_size_overrides = requires(const F& f, TrainConfig& c) { apply_overrides(c, f.size_overrides()); };
template <class F>
concept has_size = requires(const F& f) { { f.size() } -> std::convertible_to<std::string>; };
template <class F>
concept has_plot_labels = requires(const F& f, const std::filesystem::path& p) { f.plot_labels(p); };
template <class F>
concept has_set_plot_dir = requires(F& f, const std::filesystem::path& p) { f.set_plot_dir(p); };
template <class F>
concept has_step_padding = requires(const typename F::Batch& b) {
  { F::pad_for_step_graph(b) } -> std::same_as<typename F::Batch>;
};
template <class F, class Capture>
concept has_epoch_hook = requires(F& f, const EpochInfo& i, const TrainConfig& c, EpochContext<Capture>& x) {
  f.on(event::epoch_begin{}, i, c, x);
};
// match_segment / loss_given of any arguments (their types follow the family's network output).
template <class F>
concept names_match_segment = requires(F& f, any_arg a) { f.match_segment(a, a); };
template <class F>
concept names_loss_given = requires(F& f, any_arg a) { f.loss_given(a, a, a); };
// Some on(event::epoch_begin, ...) of any arguments: a hook, whatever its signature.
template <class F>
concept names_epoch_hook = requires(F& f, any_arg a) { f.on(event::epoch_begin{}, a, a, a); } ||
                           requires(F& f, any_arg a) { f.on(event::epoch_begin{}, a, a); } ||
                           requires(F& f, any_arg a) { f.on(event::epoch_begin{}, a); };
}  // namespace members_detail

// The compile-time check of F's optional members against its declaration (train/members.hpp's tags), for
// a trainer whose capture policy is Capture. Every failure is one sentence naming the member.
template <class F, class Capture>
constexpr bool check_members() {
  namespace d = members_detail;
  using member::declares;
  static_assert(!declares<F, member::param_groups> || d::has_param_groups<F>,
                "the family declares member::param_groups but has no `std::vector<train::ParamGroup> "
                "param_groups(torch::nn::Module& net, double weight_decay)`");
  static_assert(declares<F, member::param_groups> || !d::has_param_groups<F>,
                "the family has param_groups(net, weight_decay) but does not declare it: add member::param_groups "
                "to its traits' members (train/members.hpp), or the trainer never calls it");
  static_assert(!declares<F, member::optimizer_options> || d::has_optimizer_options<F>,
                "the family declares member::optimizer_options but has no `void optimizer_options("
                "train::OptimizerOptions&, const TrainConfig&)`");
  static_assert(declares<F, member::optimizer_options> || !d::has_optimizer_options<F>,
                "the family has optimizer_options(options, cfg) but does not declare it: add "
                "member::optimizer_options to its traits' members, or the trainer never calls it");
  static_assert(!declares<F, member::size_overrides> || d::has_size_overrides<F>,
                "the family declares member::size_overrides but has no `size_overrides() const` returning "
                "\"key=value\" strings");
  static_assert(declares<F, member::size_overrides> || !d::has_size_overrides<F>,
                "the family has size_overrides() but does not declare it: add member::size_overrides to its "
                "traits' members, or its per-size recipe is never applied");
  static_assert(!declares<F, member::size> || d::has_size<F>,
                "the family declares member::size but has no `size() const` returning the size's name");
  static_assert(!declares<F, member::plots> || (d::has_plot_labels<F> && d::has_set_plot_dir<F>),
                "the family declares member::plots but lacks `void plot_labels(const std::filesystem::path&) "
                "const` or `void set_plot_dir(const std::filesystem::path&)`");
  static_assert(declares<F, member::plots> || !(d::has_plot_labels<F> || d::has_set_plot_dir<F>),
                "the family has plot_labels / set_plot_dir but does not declare member::plots, so its pictures "
                "are never drawn");
  static_assert(!declares<F, member::step_padding> || d::has_step_padding<F>,
                "the family declares member::step_padding but has no `static Batch pad_for_step_graph(const Batch&)`");
  static_assert(declares<F, member::step_padding> || !d::has_step_padding<F>,
                "the family has pad_for_step_graph(batch) but does not declare member::step_padding, so "
                "cuda_graph=step would not pad its batches");
  static_assert(!declares<F, member::segmented_step> || (d::names_match_segment<F> && d::names_loss_given<F>),
                "the family declares member::segmented_step but lacks `capture::Segment match_segment(const Output&, const "
                "Batch&)` or `train::LossOutput loss_given(const Output&, const Batch&, const torch::Tensor&)`");
  static_assert(declares<F, member::segmented_step> || !(d::names_match_segment<F> || d::names_loss_given<F>),
                "the family has match_segment / loss_given but does not declare member::segmented_step, so "
                "cuda_graph=step would never run its segmented step");
  static_assert(!declares<F, member::epoch_hook> || d::has_epoch_hook<F, Capture>,
                "the family declares member::epoch_hook but has no `void on(libreyolo::event::epoch_begin, const "
                "EpochInfo&, const TrainConfig&, train::EpochContext<Capture>&)` (a template over the context "
                "type serves every trainer)");
  static_assert(declares<F, member::epoch_hook> || !d::names_epoch_hook<F>,
                "the family has an on(event::epoch_begin, ...) hook but does not declare member::epoch_hook, so "
                "it never runs");
  static_assert(!declares<F, member::ema_restart> || declares<F, member::epoch_hook>,
                "member::ema_restart: the EMA restart runs in the family's epoch hook; declare member::epoch_hook");
  static_assert(!requires(F& f, d::any_arg a) { f.on_epoch_start(a, a, a); },
                "family hook on_epoch_start(epoch, cfg, capture) is the old form and would be ignored; write `void "
                "on(libreyolo::event::epoch_begin, const EpochInfo&, const TrainConfig&, train::EpochContext<Capture>&)`");
  return true;
}

// The family's recipe on a configuration: its traits' overrides, then its size's (member::size_overrides),
// each on the keys the user left alone. Every place that builds a run's configuration for a family (the
// trainer, validation, benchmarks) calls this one.
template <class F>
void apply_family_overrides(const F& family, TrainConfig& cfg) {
  apply_overrides(cfg, family_traits<F>::overrides);
  if constexpr (member::declares<F, member::size_overrides>) apply_overrides(cfg, family.size_overrides());
}

// The run's optimizer as the family builds it: its parameter groups (member::param_groups, else the
// default three: weights with decay, BatchNorm weights and biases without) and its adjustments of the
// options (member::optimizer_options) over the configuration's optimizer, lr0, momentum and nesterov.
// `weight_decay` is the decay the run applies (scaled to a nominal batch by the trainer when nbs > 0).
template <class F>
std::unique_ptr<Optimizer> family_optimizer(F& family, torch::nn::Module& net, const TrainConfig& cfg, double weight_decay) {
  OptimizerOptions oo;
  oo.name = cfg.optimizer;
  oo.lr0 = cfg.lr0;
  oo.momentum = cfg.momentum;
  oo.nesterov = cfg.nesterov;
  auto groups = [&] {
    if constexpr (member::declares<F, member::param_groups>) return family.param_groups(net, weight_decay);
    else return make_param_groups(net, weight_decay);
  }();
  if constexpr (member::declares<F, member::optimizer_options>) family.optimizer_options(oo, cfg);
  return std::make_unique<Optimizer>(std::move(groups), oo);
}

}  // namespace libreyolo::train
