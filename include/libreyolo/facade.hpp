#pragma once
// The per-family entry points of the run-time facade: train_with (the trainers a run can need: cuda_graph
// false / true / step x profile, and the distributed one; step is the network trainer itself for a
// family whose loss is not fixed-shape), validate_with, predict_with and export_with. They need the family's
// header only, not the family list: the generated per-family translation units (families/instantiate.hpp)
// include this and their own family, so a change to one family recompiles that family's unit alone.
#include <libreyolo/capture/cuda_graph.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/cudnn.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/memory_format.hpp>
#include <libreyolo/data/augment.hpp>
#include <libreyolo/data/classify.hpp>
#include <libreyolo/eval/graphed_forward.hpp>
#include <libreyolo/eval/infer_profile.hpp>
#include <libreyolo/io/original.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/profile/step_timing.hpp>
#include <libreyolo/tasks/detect_postprocess.hpp>
#include <libreyolo/tasks/task.hpp>
#include <libreyolo/train/trainer.hpp>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace libreyolo {

// train_resize / val_resize are detection's keys: classification, point and semantic models resize their
// inputs their own way (a centre crop; a stretch to imgsz x imgsz), so either key set for them is refused, not ignored.
template <class F>
void refuse_detect_resize(const TrainConfig& cfg) {
  if constexpr (family_traits<F>::task != Task::detect)
    for (const auto& [key, value] : {std::pair{"train_resize", cfg.train_resize}, std::pair{"val_resize", cfg.val_resize}})
      if (cfg.is_explicit(key))
        throw ConfigError(std::string(key) + "=" + value + ": a " + std::string(F::task_info::name) +
                          " model resizes its inputs its own way; the key is for detection models (allowed: leave it unset)");
}

// Composes the trainer for a family from the run-time switches (cuda_graph x profile) and trains. The
// profiler's window comes from the config (profile_warmup / profile_steps / profile_trace_steps) inside
// the trainer itself.
template <class F, class Capture>
TrainResult train_with_capture(F family, const TrainConfig& cfg) {
  using precision_t = precision::FamilyDefault;
  if (cfg.profile) return Trainer<F, precision_t, Capture, profile::Window<>>(cfg, std::move(family)).fit();
  return Trainer<F, precision_t, Capture, profile::Off>(cfg, std::move(family)).fit();
}
template <class F>
TrainResult train_with(F family, const TrainConfig& cfg) {
  refuse_detect_resize<F>(cfg);
  if (dist::launched_distributed()) {
    // One rank of a data-parallel run: capture resolves to Eager and the profiler to Off statically, so
    // the flags only decide which notice is printed; every combination is the same trainer type.
    using precision_t = precision::FamilyDefault;
    constexpr auto D = capture::Mode::distributed;
    if (dist::env_from_environment().rank != 0) log::set_level(log::Level::warn);  // only rank 0 logs
    if (cfg.cuda_graph != GraphMode::off) capture::resolve<F, capture::CudaGraph<>, D>::notice(cfg);
    if (cfg.profile) profile::resolve<profile::Window<>, D>::notice();
    Trainer<F, precision_t, capture::resolve_t<F, capture::Eager, D>, profile::Off, D> t(cfg, std::move(family));
    return t.fit();
  }
  switch (cfg.cuda_graph) {
    case GraphMode::step: {
      // Statically step -> network (a loss that is not fixed-shape) -> eager, said once here; the trainer
      // is then the network or eager one, not a third type.
      using R = capture::resolve<F, capture::CudaGraph<capture::scope::step>>;
      R::notice(cfg);
      return train_with_capture<F, typename R::type>(std::move(family), cfg);
    }
    case GraphMode::network: return train_with_capture<F, capture::CudaGraph<>>(std::move(family), cfg);
    case GraphMode::off: break;
  }
  return train_with_capture<F, capture::Eager>(std::move(family), cfg);
}

// A checkpoint's network (EMA weights when present) for `family` (restored from the checkpoint), in eval
// mode on `dev`.
template <class F>
typename F::Network network_from(F& family, const train::Checkpoint& ck, torch::Device dev) {
  family.restore(ck.meta.at("family"));
  auto net = family.make_network();
  train::get_module_state(ck, ck.tensors.count("ema.__present__") ? "ema." : "model.", *net);
  net->to(dev);
  net->eval();
  return net;
}

// Validates a checkpoint's network (EMA weights when present) on cfg.data's validation split; with
// cfg.cuda_graph the forward replays CUDA graphs (eval/graphed_forward.hpp; one line and eager without CUDA).
template <class F>
train::ValResult validate_with(F family, TrainConfig cfg, const train::Checkpoint& ck) {
  refuse_detect_resize<F>(cfg);
  train::apply_family_overrides(family, cfg);
  family.restore(ck.meta.at("family"));
  family.setup(cfg);
  // Standalone validation runs NMS as the original's val() does (IoU 0.6), not as its trainer's (0.65).
  if constexpr (family_traits<F>::task == Task::detect) family.set_val_nms_iou(tasks::kStandaloneValIou);
  const auto dev = resolve_device(cfg.device);
  auto net = network_from(family, ck, dev);
  precision::FamilyDefault prec;
  prec.setup(cfg, dev, family_traits<F>::amp_default);
  data::LoaderOptions lo;
  lo.batch = std::max(1, cfg.batch) * 2;
  lo.workers = cfg.workers;
  lo.shuffle = false;
  lo.pin_memory = dev.is_cuda();
  data::Loader<typename F::Dataset> loader(family.val_set(), lo);
  // cuda_graph=true: one graph per batch shape (images letterboxed to imgsz: the full batches and the last);
  // the autocast weight cache is off while graphs record (a cached cast would be baked into a graph).
  eval::GraphedForward<decltype(net)> graphed(net, dev, cfg.cuda_graph != GraphMode::off, "val");
  prec.set_capture_active(graphed.active());
  auto forward = [&](const torch::Tensor& x) {
    [[maybe_unused]] auto g = prec.autocast();
    return graphed(x);
  };
  return family.validate(forward, loader, dev);
}

// Predict with a checkpoint's network on the images `source` names; the task writes its outputs under
// out_dir and returns them as JSON. `given`: the thresholds (conf, iou, max_det); the rest comes from cfg and
// the checkpoint. cfg.cuda_graph: the forward replays a CUDA graph (see validate_with).
template <class F>
nlohmann::json predict_with(F family, const train::Checkpoint& ck, const std::filesystem::path& source,
                            const TrainConfig& cfg, const std::filesystem::path& out_dir, const tasks::PredictOptions& given) {
  refuse_detect_resize<F>(cfg);
  const auto dev = resolve_device(cfg.device);
  auto net = network_from(family, ck, dev);
  tasks::PredictOptions po = given;
  po.imgsz = cfg.is_explicit("imgsz") ? cfg.imgsz : ck.meta.at("config").value("imgsz", 640);
  po.save_txt = cfg.save_txt;
  po.stretch = cfg.val_stretch();
  // cuda_graph=true: every image is letterboxed (or stretched) to imgsz x imgsz, batch 1: one graph serves them all.
  eval::GraphedForward<decltype(net)> graphed(net, dev, cfg.cuda_graph != GraphMode::off, "predict");
  auto forward = [&](const torch::Tensor& x) { return graphed(x); };
  return family.predict(forward, source, po, dev, out_dir);
}

// `libreyolo profile infer` (eval/infer_profile.hpp): the stage latencies of a checkpoint's network (EMA
// weights when present), or of a freshly initialised one for a bare model name (80 classes), on `batch`
// synthetic 4:3 images letterboxed (detection) or centre-cropped (classification) to imgsz. Eager first,
// then, with o.cuda_graph on a CUDA device, the graphed forward (GraphedForward) on the same inputs.
template <class F>
nlohmann::json infer_with(F family, const train::Checkpoint* ck, const std::string& model, eval::InferOptions o) {
  constexpr Task task = family_traits<F>::task;
  eval::check_infer_options(o);
  if constexpr (task != Task::detect && task != Task::classify) {
    throw ConfigError("profile infer: " + model + " is a " + std::string(F::task_info::name) +
                      " model; allowed: detection and classification models");
  } else {
    using Clock = std::chrono::steady_clock;
    const auto dev = resolve_device(o.device);
    torch::NoGradGuard ng;
    auto net = [&] {
      if (ck) return network_from(family, *ck, dev);
      std::vector<std::string> names;
      for (int i = 0; i < 80; ++i) names.push_back("class" + std::to_string(i));
      family.restore({{"names", names}});
      auto n = family.make_network();
      n->to(dev);
      n->eval();
      return n;
    }();
    if (o.half && !dev.is_cuda())
      throw ConfigError("profile infer: --half needs a CUDA device (device " + device_name(dev) + "; fp16 convolutions on "
                        "the CPU are slow or missing); run without --half");
    if (o.half) net->to(torch::kHalf);  // floating-point parameters and buffers; the input follows (preprocess)
    if (o.cudnn_benchmark && !dev.is_cuda())
      throw ConfigError("profile infer: --cudnn-benchmark needs a CUDA device (device " + device_name(dev) + "); run without it");
    if (o.trace > 0 && !compat::with_cuda)
      throw ConfigError("profile infer: --trace needs a CUDA build of libreyolo (this one has no kernel tracer); run without it");
    if (o.trace > 0 && !dev.is_cuda())
      throw ConfigError("profile infer: --trace needs a CUDA device (device " + device_name(dev) + "); run without it");
    // cuDNN's autotuning flag is process-wide: set for this measurement, the caller's value put back after it.
    CudnnScope cudnn_scope;
    if (dev.is_cuda()) at::globalContext().setBenchmarkCuDNN(o.cudnn_benchmark);
    if (o.channels_last) to_channels_last(*net);
    if (o.imgsz == 0) o.imgsz = ck ? ck->meta.at("config").value("imgsz", 640) : 640;
    // Deterministic synthetic images, 4:3 (letterboxing pads them), a different pattern each.
    std::vector<data::Image> images;
    for (int b = 0; b < o.batch; ++b) {
      data::Image img(o.imgsz * 3 / 4, o.imgsz);
      for (size_t i = 0; i < img.px.size(); ++i) img.px[i] = static_cast<uint8_t>((i * 2654435761u + 97u * b) >> 7);
      images.push_back(std::move(img));
    }
    tasks::DecodeOptions dec;
    dec.conf = o.conf;
    auto preprocess = [&] {
      std::vector<torch::Tensor> chw;
      for (const auto& img : images) {
        if constexpr (task == Task::detect) {
          data::DetBoxes none;
          chw.push_back(data::to_chw_tensor(data::letterbox(img, o.imgsz, o.imgsz, none, nullptr, /*scaleup=*/false)));
        } else {
          chw.push_back(data::to_chw_tensor(data::resize_center_crop(img, o.imgsz)));
        }
      }
      auto x = torch::stack(chw).to(dev);
      if constexpr (task == Task::detect) x = F::from_pixels(x.to(torch::kFloat32));
      else x = F::normalise(x);
      if (o.half) x = x.to(torch::kHalf);
      return o.channels_last ? as_channels_last(x) : x;
    };
    auto postprocess = [&](const auto& out) {
      std::vector<torch::Tensor> host;
      if constexpr (task == Task::detect) {
        for (auto& d : family.decode(out, dec)) host.push_back(d.to(torch::kCPU));
      } else {
        host.push_back(F::decode(out).to(torch::kCPU));
      }
      return host;
    };
    const auto ms_since = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
    auto measure = [&](auto& fwd) {
      eval::StageSamples s;
      for (int it = 0; it < o.warmup + o.repeat; ++it) {
        auto t = Clock::now();
        auto x = preprocess();
        compat::cuda_synchronize(dev);
        const double pre = ms_since(t);
        t = Clock::now();
        auto out = fwd(x);
        eval::complete(out);  // a DETR's decoder belongs to the forward stage (the graphed one ran it already)
        compat::cuda_synchronize(dev);
        const double fw = ms_since(t);
        t = Clock::now();
        (void)postprocess(out);
        compat::cuda_synchronize(dev);
        const double post = ms_since(t);
        if (it < o.warmup) continue;
        s.preprocess.push_back(pre), s.forward.push_back(fw), s.postprocess.push_back(post);
      }
      return s;
    };
    // --trace: per mode `o.trace` forwards of one preprocessed batch timed alone, then as many under the kernel
    // tracer (profile::time_steps), after every timed pass (the tracer's set-up and CUPTI slow the launches
    // around it): the mode block's "kernels".
    auto trace_forwards = [&](auto& fwd) -> nlohmann::json {
      const auto x = preprocess();
      const auto t = profile::time_steps([&] { eval::complete(fwd(x)); }, o.trace, dev, o.batch);
      if (!t.traced) return nullptr;
      auto k = profile::step_breakdown_json(t.busy, 5);
      k["forwards"] = o.trace;
      k["forward_min_ms"] = t.min_ms, k["forward_median_ms"] = t.median_ms;
      k["kernels_per_forward"] = t.busy.kernels_per_step;
      k["busy_ms"] = t.busy.gpu_busy_ms_per_step, k["kernel_sum_ms"] = t.busy.gpu_kernel_sum_ms_per_step;
      return k;
    };
    nlohmann::json doc = {{"schema", eval::infer_schema}, {"model", model}, {"task", std::string(F::task_info::name)},
                          {"weights", ck ? nlohmann::json(true) : nlohmann::json(false)},
                          {"weights_note", ck ? "checkpoint weights" : "random weights: a bare model name"},
                          {"batch", o.batch}, {"imgsz", o.imgsz}, {"device", device_name(dev)}, {"half", o.half},
                          {"channels_last", o.channels_last}, {"cudnn_benchmark", o.cudnn_benchmark}, {"repeat", o.repeat},
                          {"warmup", o.warmup}, {"host_timings_only", true}, {"trace_collected", false},
                          {"note", eval::infer_timing_note()}};
    nlohmann::json modes = nlohmann::json::array();
    eval::GraphedForward<decltype(net)> eager(net, dev, false, "profile infer");
    const nlohmann::json eager_doc = eval::mode_doc("eager", measure(eager), o.batch);
    modes.push_back(eager_doc);
    nlohmann::json graph = {{"requested", o.cuda_graph}, {"measured", false}, {"why", nullptr}, {"graphs", 0}};
    std::optional<eval::GraphedForward<decltype(net)>> graphed;
    if (o.cuda_graph && !dev.is_cuda()) {
      graph["why"] = "cuda_graph: graphs need CUDA (device " + device_name(dev) + "); eager only";
    } else if (o.cuda_graph) {
      graphed.emplace(net, dev, true, "profile infer");
      const eval::StageSamples s = measure(*graphed);
      if (graphed->active()) {
        const nlohmann::json gdoc = eval::mode_doc("cuda_graph", s, o.batch);
        modes.push_back(gdoc);
        graph["measured"] = true;
        graph["graphs"] = graphed->graphs();
        doc["graph_speedup_p50"] = eager_doc["latency_ms"]["p50_ms"].get<double>() / gdoc["latency_ms"]["p50_ms"].get<double>();
      } else {
        graph["why"] = graphed->fallback();
        graphed.reset();
      }
    }
    if (o.trace > 0) {
      bool collected = true;
      for (auto& m : modes) {
        const auto k = m.at("mode") == "eager" ? trace_forwards(eager) : trace_forwards(*graphed);
        collected = collected && !k.is_null();
        m["kernels"] = k;
      }
      doc["trace_collected"] = collected;
      doc["host_timings_only"] = !collected;
      doc["note"] = collected ? eval::infer_trace_note() : eval::infer_timing_note();
    }
    doc["cuda_graph"] = graph;
    doc["modes"] = modes;
    return doc;
  }
}

// Writes a checkpoint's network (EMA weights when present) as the original's .pt at `out` (io/original.hpp).
template <class F>
void export_with(F family, const train::Checkpoint& ck, const std::filesystem::path& out) {
  family.restore(ck.meta.at("family"));
  auto net = family.make_network();
  train::get_module_state(ck, ck.tensors.count("ema.__present__") ? "ema." : "model.", *net);
  io::write_original_checkpoint(out, ck, *net, std::string(F::task_info::name), "libreyolo-cpp");
}

}  // namespace libreyolo
