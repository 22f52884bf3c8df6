// Detection loader benchmark: images/s of the training pipeline (decode -> mosaic or letterbox ->
// affine -> HSV -> flips -> collate) through the threaded Loader, for each worker count, with mosaic
// on and closed, on synthetic JPEGs of realistic sizes (written once by synth_detect).
//
//   loader_bench [--workers 0,1,2,4,8,16] [--images 2000] [--imgsz 640] [--seconds 5] [--batch 16]
//                [--src-min 640] [--src-max 1280] [--data DIR] [--cache off|ram|disk] [--modes mosaic,closed]
//
// Prints a table (images/s, per worker, and where a worker's time goes per image: load = read +
// decode + resize, augment, tensor, collate; wait = the consumer's time blocked in next()) and one
// JSON line with the same numbers. decodes/img counts JPEG decodes per image delivered: about 1 with
// mosaic (partners come from the shared decode buffer) when the set is much larger than the buffer;
// a set that fits in the buffer would be measured as if cached, so the bench warns about it.
#include <libreyolo/data/detect.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/data/synth.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ly = libreyolo;
namespace data = libreyolo::data;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::vector<int> workers{0, 1, 2, 4, 8, 16};
  std::vector<std::string> modes{"mosaic", "closed"};
  int images = 2000, imgsz = 640, batch = 16, src_min = 640, src_max = 1280;
  double seconds = 5;
  std::string cache = "off";
  fs::path data = fs::temp_directory_path() / "libreyolo_loader_bench";
  std::string command;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int to_int(const std::string& key, const std::string& v) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size()) throw ly::ConfigError("option " + key + " = '" + v + "' is not an integer");
  return x;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 0; i < argc; ++i) a.command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw ly::ConfigError("option " + k + " needs a value");
    const std::string v = argv[i + 1];
    if (k == "--workers") {
      a.workers.clear();
      for (const auto& w : split_list(v)) a.workers.push_back(to_int(k, w));
    } else if (k == "--modes") a.modes = split_list(v);
    else if (k == "--images") a.images = to_int(k, v);
    else if (k == "--imgsz") a.imgsz = to_int(k, v);
    else if (k == "--batch") a.batch = to_int(k, v);
    else if (k == "--src-min") a.src_min = to_int(k, v);
    else if (k == "--src-max") a.src_max = to_int(k, v);
    else if (k == "--seconds") a.seconds = std::stod(v);
    else if (k == "--cache") a.cache = v;
    else if (k == "--data") a.data = v;
    else
      throw ly::ConfigError("unknown option " + k + " (allowed: --workers --modes --images --imgsz --batch --src-min "
                            "--src-max --seconds --cache --data)");
  }
  for (const auto& m : a.modes)
    if (m != "mosaic" && m != "closed") throw ly::ConfigError("--modes entry '" + m + "' is not mosaic or closed");
  if (a.images < 16 || a.imgsz < 64 || a.batch < 1 || a.seconds <= 0 || a.src_min > a.src_max || a.workers.empty())
    throw ly::ConfigError("need --images >= 16, --imgsz >= 64, --batch >= 1, --seconds > 0, --src-min <= --src-max, "
                          "and at least one worker count");
  return a;
}

// Writes the synthetic JPEGs unless DIR already holds a set made with the same settings.
fs::path ensure_dataset(const Args& a) {
  const fs::path stamp = a.data / "bench_settings.txt";
  const std::string want = std::to_string(a.images) + " " + std::to_string(a.src_min) + " " + std::to_string(a.src_max);
  std::string have;
  if (std::ifstream in(stamp); in) std::getline(in, have);
  if (have != want || !fs::exists(a.data / "data.yaml")) {
    data::SynthOptions o;
    o.task = "detect", o.out = a.data, o.images = a.images, o.imgsz = a.src_max, o.classes = 8, o.seed = 1;
    o.val_fraction = 0;
    const auto t0 = Clock::now();
    data::synth_detect(o, a.src_min);
    std::ofstream(stamp) << want << "\n";
    std::printf("wrote %d JPEGs (long side %d..%d) to %s in %.1f s\n", a.images, a.src_min, a.src_max,
                a.data.string().c_str(), std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return a.data / "data.yaml";
}

struct Result {
  std::string mode;
  int workers = 0;
  double images_per_s = 0, per_worker = 0;
  double load_ms = 0, augment_ms = 0, tensor_ms = 0, collate_ms = 0, wait_ms = 0;  // per image
  double decodes = 0;  // JPEG decodes per image built
  int64_t images = 0;
};

Result measure(const std::shared_ptr<data::DetectDataset>& ds, const Args& a, const std::string& mode, int workers) {
  data::LoaderOptions o;
  o.batch = a.batch, o.workers = workers, o.seed = 1, o.prefetch = 2;
  data::Loader<data::DetectDataset> loader(ds, o);
  // Mosaic closes for the last no_aug_epochs epochs: run epochs from there for "closed".
  int epoch = mode == "mosaic" ? 0 : ds->augment().epochs - 1;
  loader.start_epoch(epoch);
  auto next = [&] {
    auto b = loader.next();
    if (!b) {
      loader.start_epoch(mode == "mosaic" ? ++epoch : epoch);
      b = loader.next();
    }
    return b->images.size(0);
  };
  for (int i = 0; i < std::max(1, workers); ++i) next();  // warm-up: threads started, first batches out
  auto& st = data::detect_stage_times();
  st.reset();
  st.enabled = true;
  const uint64_t misses0 = ds->decode_buffer().misses();
  int64_t n = 0;
  double wait_s = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  while (elapsed < a.seconds) {
    const auto w0 = Clock::now();
    n += next();
    const auto w1 = Clock::now();
    wait_s += std::chrono::duration<double>(w1 - w0).count();
    elapsed = std::chrono::duration<double>(w1 - t0).count();
  }
  st.enabled = false;
  Result r;
  r.mode = mode, r.workers = workers, r.images = n;
  r.images_per_s = n / elapsed;
  r.per_worker = r.images_per_s / std::max(1, workers);
  const double per = 1e-6 / std::max<int64_t>(1, st.samples.load());  // ns -> ms per sample built
  r.load_ms = st.load_ns * per, r.augment_ms = st.augment_ns * per, r.tensor_ms = st.tensor_ns * per;
  r.collate_ms = st.collate_ns * per;
  r.wait_ms = 1e3 * wait_s / std::max<int64_t>(1, n);
  r.decodes = static_cast<double>(ds->decode_buffer().misses() - misses0) / std::max<int64_t>(1, st.samples.load());
  if (static_cast<size_t>(a.images) < 3 * ds->decode_buffer().capacity())
    std::printf("WARNING: %d images vs a decode buffer of %zu: the set is mostly buffered, raise --images\n", a.images,
                ds->decode_buffer().capacity());
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    torch::set_num_threads(1);  // the loader's own threads are the parallelism being measured
    const fs::path yaml = ensure_dataset(a);
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    std::printf("loader_bench  %s  hardware threads: %u\ncommand: %s\n", date, std::thread::hardware_concurrency(),
                a.command.c_str());
    std::printf("imgsz %d, batch %d, %d JPEGs of long side %d..%d, cache=%s, %.1f s per row\n", a.imgsz, a.batch,
                a.images, a.src_min, a.src_max, a.cache.c_str(), a.seconds);
    data::DetectAugment aug;
    aug.imgsz = a.imgsz, aug.cache = a.cache;
    auto ds = data::DetectDataset::open(data::load_dataset_yaml(yaml), "train", aug);
    std::vector<Result> results;
    std::printf("\n%-7s %7s %10s %10s | %-33s | %-8s | %s\n", "", "", "", "", "ms per image, in one worker", "", "consumer");
    std::printf("%-7s %7s %10s %10s | %7s %8s %7s %8s | %8s | %8s\n", "mode", "workers", "images/s", "per worker",
                "load", "augment", "tensor", "collate", "decodes", "wait ms");
    for (const auto& mode : a.modes)
      for (int w : a.workers) {
        const Result r = measure(ds, a, mode, w);
        results.push_back(r);
        std::printf("%-7s %7d %10.1f %10.1f | %7.2f %8.2f %7.2f %8.2f | %8.2f | %8.2f\n", r.mode.c_str(), r.workers,
                    r.images_per_s, r.per_worker, r.load_ms, r.augment_ms, r.tensor_ms, r.collate_ms, r.decodes, r.wait_ms);
        std::fflush(stdout);
      }
    std::printf("\n(workers = 0 builds batches on the consumer thread; its per-worker figure is per that thread. load = read "
                "+ JPEG decode (DCT-scaled when >= 2x imgsz %d), or a decode-buffer hit; augment = canvas, warp, "
                "mixup, HSV and the CHW copy; tensor = box tensors; decodes = JPEG decodes per image.)\n",
                a.imgsz);
    std::ostringstream js;
    js << "{\"bench\":\"loader\",\"date\":\"" << date << "\",\"hardware_threads\":" << std::thread::hardware_concurrency()
       << ",\"imgsz\":" << a.imgsz << ",\"batch\":" << a.batch << ",\"images\":" << a.images << ",\"src_long_side\":["
       << a.src_min << "," << a.src_max << "],\"cache\":\"" << a.cache << "\",\"results\":[";
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      js << (i ? "," : "") << "{\"mode\":\"" << r.mode << "\",\"workers\":" << r.workers << ",\"images_per_s\":"
         << r.images_per_s << ",\"per_worker\":" << r.per_worker << ",\"load_ms\":" << r.load_ms
         << ",\"augment_ms\":" << r.augment_ms << ",\"tensor_ms\":" << r.tensor_ms << ",\"collate_ms\":" << r.collate_ms
         << ",\"decodes_per_image\":" << r.decodes << ",\"wait_ms\":" << r.wait_ms << "}";
    }
    js << "]}";
    std::printf("%s\n", js.str().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loader_bench: %s\n", e.what());
    return 2;
  }
}
