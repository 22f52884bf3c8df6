// The host work of a DETR family's training step, counted on the CPU: the ATen operators dispatched per
// step (RecordFunction, scope FUNCTION; all of them and the top-level ones, which are what the host
// dispatches itself), split by phase, and the device-directed conversions among them (`aten::to` /
// `_to_copy` / `copy_` called with a device argument: on CUDA each is a host<->device copy unless the
// tensor already lives there), with those on index tensors (int64 / bool) apart.
//
//   detr_ops --model rtdetr-r18|rtdetrv2-r18|dfinen|deimn|rtdetrv4s|deimv2atto|deimv2s|ec-s [--batch 4 --imgsz 320 --steps 3
//            --detail N --json FILE]
//
// Phases of one step (after a warm-up step; every step seeded alike, so the denoising noise and the
// matching repeat):
//   network    backbone + encoder forward (the part cuda_graph=true captures; reference only)
//   targets    the family's DETR targets of the batch, built once more here for the decoder (reference only:
//              the loss phase builds them again, as the trainer's step does)
//   decoder    the decoder's forward with the batch's denoising queries
//   criterion  the family's loss (targets, matching, every term)
//   backward   the loss's backward down to the encoder's maps (they are detached leaves here, so the
//              captured region's backward is not counted)
//   net_backward  the gradient at those maps carried on through encoder and backbone (the captured region's
//              backward; reference only, as network)
// The eager remainder is decoder + criterion + backward; an eager step adds network + net_backward. The batch
// is the family task's synthetic set (a few boxes per image), as graph_speedup's; the network and loss are the
// family's own.
// float32 only: LibTorch 1.13's CPU autocast (bfloat16) fails in layer_norm here, so the casts that CUDA fp16
// autocast adds are not seen (every `.to(kFloat32)` of an fp32 tensor still dispatches one aten::to).
// Prints a table, then one JSON line (also written to --json when given). Loss values and a gradient
// checksum are printed too, to compare two builds' results at the same seed.
#include <libreyolo/families/dfine/family.hpp>
#include <libreyolo/families/deim/family.hpp>
#include <libreyolo/families/deimv2/family.hpp>
#include <libreyolo/families/ec/family.hpp>
#include <libreyolo/families/rtdetr/family.hpp>
#include <libreyolo/families/rtdetrv2/family.hpp>
#include <libreyolo/families/rtdetrv4/family.hpp>

#include <ATen/record_function.h>
#include <nlohmann/json.hpp>

#include "../bench_options.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace ly = libreyolo;

namespace {

struct Args {
  std::string model = "rtdetr-r18", json;
  int batch = 4, imgsz = 320, steps = 3, detail = 0, classes = 80;
};

// ---- the counter ---------------------------------------------------------------------------------
struct PhaseCount {
  int64_t all = 0, no_blas = 0, top = 0, autograd_nodes = 0, to_device = 0, to_device_index = 0;
  std::map<std::string, int64_t> by_name;      // top-level ops by name
  std::map<std::string, int64_t> all_by_name;  // all ops by name
};

struct Counter {
  std::mutex mu;
  std::map<std::string, PhaseCount> phases;
  std::string phase;  // empty: not counting
};
Counter g_counter;
thread_local int t_depth = 0;
thread_local int t_blas = 0;  // inside a CPU matrix-product kernel

// The CPU's matrix products dispatch operators of their own (bmm: a select and an addmm per batch entry,
// resolve_conj, as_strided); on CUDA they are one library call. "all ops, BLAS internals excluded" leaves
// those out, so that it compares across devices.
bool blas(const char* n) {
  return std::strcmp(n, "aten::mm") == 0 || std::strcmp(n, "aten::addmm") == 0 || std::strcmp(n, "aten::bmm") == 0 ||
         std::strcmp(n, "aten::baddbmm") == 0 || std::strcmp(n, "aten::addbmm") == 0 || std::strcmp(n, "aten::mv") == 0 ||
         std::strcmp(n, "aten::addmv") == 0 || std::strcmp(n, "aten::dot") == 0;
}

bool device_directed(const at::RecordFunction& fn, bool& index) {
  const std::string n = fn.name();
  if (n != "aten::to" && n != "aten::_to_copy" && n != "aten::copy_") return false;
  auto in = fn.inputs();
  if (n == "aten::copy_") {
    // copy_(self, src): a device copy when the two differ in device (on the CPU: never); counted when the
    // source is an index tensor being written into a float one is not a transfer, so only device moves.
    if (in.size() >= 2 && in[0].isTensor() && in[1].isTensor() && in[0].toTensor().device() != in[1].toTensor().device()) {
      index = !at::isFloatingType(in[1].toTensor().scalar_type());
      return true;
    }
    return false;
  }
  bool has_device = false;
  for (size_t i = 1; i < in.size(); ++i)
    if (in[i].isDevice()) has_device = true;
  if (!has_device) return false;
  index = in.size() > 0 && in[0].isTensor() && !at::isFloatingType(in[0].toTensor().scalar_type());
  return true;
}

// The autograd engine's per-node wrappers ("autograd::engine::evaluate_function: ...", scope FUNCTION)
// are no operators: the ops a backward node calls count as top-level ones.
bool wrapper(const at::RecordFunction& fn) { return std::strncmp(fn.name(), "autograd::", 10) == 0; }

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (wrapper(fn)) return nullptr;
  const bool node = fn.scope() == at::RecordScope::BACKWARD_FUNCTION;  // autograd nodes: counted apart, no nesting
  const bool top = t_depth == 0, in_blas = t_blas > 0;
  if (!node) {
    ++t_depth;
    if (blas(fn.name())) ++t_blas;
  }
  std::lock_guard<std::mutex> lk(g_counter.mu);
  if (g_counter.phase.empty()) return nullptr;
  auto& p = g_counter.phases[g_counter.phase];
  if (node) {
    ++p.autograd_nodes;
    return nullptr;
  }
  ++p.all;
  ++p.all_by_name[fn.name()];
  if (!in_blas) ++p.no_blas;
  if (top) {
    ++p.top;
    ++p.by_name[fn.name()];
    bool index = false;
    if (device_directed(fn, index)) {
      ++p.to_device;
      if (index) ++p.to_device_index;
    }
  }
  return nullptr;
}
void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION || wrapper(fn)) return;
  --t_depth;
  if (blas(fn.name())) --t_blas;
}

struct PhaseGuard {
  explicit PhaseGuard(const std::string& name) {
    std::lock_guard<std::mutex> lk(g_counter.mu);
    g_counter.phase = name;
  }
  ~PhaseGuard() {
    std::lock_guard<std::mutex> lk(g_counter.mu);
    g_counter.phase.clear();
  }
};

// ---- the step ------------------------------------------------------------------------------------
template <class P>
nlohmann::json run(const Args& a, P p, const std::string& tag) {
  const torch::Device dev(torch::kCPU);
  const std::filesystem::path data_dir = std::filesystem::temp_directory_path() / ("detr_ops_" + tag + "_" + std::to_string(a.imgsz));
  ly::data::SynthOptions o;
  o.out = data_dir;
  o.images = std::max(2 * a.batch, 16);
  o.imgsz = a.imgsz;
  o.classes = 8;
  o.seed = 0;
  if (!std::filesystem::exists(data_dir)) P::synth(o);
  p.setup(ly::parse_args({"data=" + P::synth_data(data_dir).string(), "imgsz=" + std::to_string(a.imgsz), "workers=0", "mosaic=0",
                          "mixup=0", "fliplr=0", "hsv_h=0", "hsv_s=0", "hsv_v=0", "hsv_prob=0", "scale=0", "translate=0",
                          "seed=0"}));
  p.restore({{"names", std::vector<std::string>(static_cast<size_t>(a.classes), "c")}});
  const auto ds = p.train_set();
  std::mt19937_64 rng(0);
  std::vector<typename P::Dataset::Sample> samples;
  for (int i = 0; i < a.batch; ++i) samples.push_back(ds->get(static_cast<size_t>(i) % ds->size(), rng, 0));
  const auto b = P::to_device(P::Dataset::collate(std::move(samples)), dev);
  int64_t boxes = 0;
  for (auto& r : b.boxes) boxes += r.size(0);
  torch::manual_seed(0);
  auto net = p.make_network();
  net->to(dev);
  net->train();
  auto family = std::make_shared<P>(std::move(p));
  const auto x = P::input(b);

  auto make_targets = [&](const auto& batch) {
    if constexpr (std::is_same_v<typename P::Network, ly::families::rtdetr::RTDETR>) return ly::families::rtdetr::detr_targets(batch, dev);
    else return ly::families::dfine::dfine_targets(batch, dev);
  };

  auto handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_start, &on_end).needsInputs(true).scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  nlohmann::json losses;
  double grad_abs = 0;
  for (int s = 0; s <= a.steps; ++s) {
    if (s == 1) {  // step 0 warms up (anchor caches, lazy criterion)
      std::lock_guard<std::mutex> lk(g_counter.mu);
      g_counter.phases.clear();
    }
    torch::manual_seed(1234);
    for (auto& q : net->parameters()) q.mutable_grad() = torch::Tensor();
    ly::train::LossOutput lo;
    std::vector<torch::Tensor> maps, leaves;
    {
      auto out = [&] {
        PhaseGuard g("network");
        return net->forward(x);
      }();
      maps = out.features;
      for (auto& f : out.features) f = f.detach().requires_grad_(true);
      leaves = out.features;
      {
        auto t = [&] {
          PhaseGuard g("targets");
          return make_targets(b);
        }();
        PhaseGuard g("decoder");
        out.run(&t);
      }
      {
        PhaseGuard g("criterion");
        lo = family->loss(out, b);
      }
    }
    {
      PhaseGuard g("backward");
      lo.total.backward();
    }
    {
      PhaseGuard g("net_backward");
      std::vector<torch::Tensor> roots, grads;
      for (size_t k = 0; k < maps.size(); ++k)
        if (maps[k].requires_grad() && leaves[k].grad().defined()) roots.push_back(maps[k]), grads.push_back(leaves[k].grad());
      torch::autograd::backward(roots, grads);
    }
    if (s == a.steps) {
      losses["total"] = lo.total.template item<double>();
      std::vector<double> it;
      auto items = lo.items.to(torch::kFloat64).contiguous();
      for (int64_t k = 0; k < items.numel(); ++k) it.push_back(items.template data_ptr<double>()[k]);
      losses["items"] = it;
      for (auto& q : net->parameters())
        if (q.grad().defined()) grad_abs += q.grad().abs().sum().template item<double>();
    }
  }
  at::removeCallback(handle);

  nlohmann::json j = {{"model", a.model}, {"batch", a.batch}, {"imgsz", a.imgsz}, {"boxes", boxes}, {"steps", a.steps}};
  j["loss"] = losses;
  j["grad_abs_sum"] = grad_abs;
  const double n = a.steps;
  int64_t rem_top = 0, rem_all = 0, rem_nb = 0, rem_to = 0, rem_nodes = 0;
  std::printf("%s  batch %d  %d px  %lld boxes  float32  (per step, mean of %d)\n", a.model.c_str(), a.batch, a.imgsz,
              static_cast<long long>(boxes), a.steps);
  std::printf("%-10s %10s %10s %12s %10s %12s %12s\n", "phase", "top ops", "all ops", "all no-BLAS", "autograd", "to(device)",
              "of them idx");
  for (const char* name : {"network", "targets", "decoder", "criterion", "backward", "net_backward"}) {
    auto& c = g_counter.phases[name];
    std::printf("%-10s %10.0f %10.0f %12.0f %10.0f %12.0f %12.0f\n", name, c.top / n, c.all / n, c.no_blas / n, c.autograd_nodes / n,
                c.to_device / n, c.to_device_index / n);
    nlohmann::json pj = {{"top_ops", c.top / n}, {"all_ops", c.all / n}, {"all_ops_no_blas", c.no_blas / n}, {"autograd_nodes", c.autograd_nodes / n},
                         {"to_device", c.to_device / n}, {"to_device_index", c.to_device_index / n}};
    if (a.detail > 0) {
      for (const bool nested : {false, true}) {
        std::vector<std::pair<int64_t, std::string>> v;
        for (auto& [k, cnt] : nested ? c.all_by_name : c.by_name) v.emplace_back(cnt, k);
        std::sort(v.rbegin(), v.rend());
        nlohmann::json top = nlohmann::json::object();
        std::printf("    %s: ", nested ? "all" : "top");
        for (size_t i = 0; i < v.size() && i < static_cast<size_t>(a.detail); ++i) {
          top[v[i].second] = v[i].first / n;
          std::printf("%s %.0f  ", v[i].second.c_str(), v[i].first / n);
        }
        std::printf("\n");
        pj[nested ? "all_by_name" : "top_by_name"] = top;
      }
    }
    j["phases"][name] = pj;
    if (std::string(name) == "decoder" || std::string(name) == "criterion" || std::string(name) == "backward") {
      rem_top += c.top, rem_all += c.all, rem_nb += c.no_blas, rem_to += c.to_device, rem_nodes += c.autograd_nodes;
    }
  }
  std::printf("%-10s %10.0f %10.0f %12.0f %10.0f %12.0f\n", "remainder", rem_top / n, rem_all / n, rem_nb / n, rem_nodes / n, rem_to / n);
  j["remainder"] = {{"top_ops", rem_top / n}, {"all_ops", rem_all / n}, {"all_ops_no_blas", rem_nb / n}, {"autograd_nodes", rem_nodes / n},
                    {"to_device", rem_to / n}};
  std::printf("loss %s  grad_abs_sum %.9g\n", losses.dump().c_str(), grad_abs);
  return j;
}

}  // namespace

int main(int argc, char** argv) try {
  Args a;
  bench::Options()
      .add("--model", &a.model)
      .add("--batch", &a.batch)
      .add("--imgsz", &a.imgsz)
      .add("--steps", &a.steps)
      .add("--detail", &a.detail)
      .add("--classes", &a.classes)
      .add("--json", &a.json)
      .parse(argc, argv);
  if (a.steps < 1) throw std::invalid_argument("--steps must be >= 1");
  at::set_num_threads(1);
  nlohmann::json j;
  if (a.model == "rtdetr-r18") j = run(a, ly::RTDETRFamily("r18"), "rtdetr");
  else if (a.model == "rtdetrv2-r18") j = run(a, ly::RTDETRv2Family("r18"), "rtdetrv2");
  else if (a.model == "dfinen") j = run(a, ly::DFineFamily("n"), "dfine");
  else if (a.model == "deimn") j = run(a, ly::DEIMFamily("n"), "deim");
  else if (a.model == "rtdetrv4s") j = run(a, ly::RTDETRv4Family("s"), "rtdetrv4");
  else if (a.model == "deimv2atto") j = run(a, ly::DEIMv2Family("atto"), "deimv2atto");
  else if (a.model == "deimv2s") j = run(a, ly::DEIMv2Family("s"), "deimv2s");
  else if (a.model == "ec-s") j = run(a, ly::ECFamily("s"), "ecs");
  else
    throw std::invalid_argument("--model " + a.model +
                                ": allowed rtdetr-r18, rtdetrv2-r18, dfinen, deimn, rtdetrv4s, deimv2atto, deimv2s, ec-s");
  std::cout << j.dump() << std::endl;
  if (!a.json.empty()) std::ofstream(a.json) << j.dump(1) << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "detr_ops: " << e.what() << "\n";
  return 1;
}
