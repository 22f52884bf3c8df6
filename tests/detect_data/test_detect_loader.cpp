// Detection data through the threaded Loader: determinism per seed across worker counts,
// multi-scale batch sizes, ram/disk image caches, load-time substitution, early exit, the
// synthetic generator, and (gpu suite) pinned batches with non-blocking copies.
#include <doctest/doctest.h>
#include <libreyolo/data/detect.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/data/synth.hpp>

#include <fstream>
#include <map>
#include <set>

#include "support.hpp"

using namespace libreyolo;
using namespace libreyolo::data;
namespace fs = std::filesystem;

namespace {

// A small synthetic detection set (14 JPEGs, long sides 96..128, 4 classes), made once.
const fs::path& synth_root() {
  static lry_test::TempDir dir("lry_detect_synth");
  static bool made = false;
  if (!made) {
    SynthOptions o;
    o.task = "detect";
    o.out = dir.path / "set";
    o.images = 14;
    o.imgsz = 128;
    o.classes = 4;
    o.seed = 11;
    synth_detect(o, 96);
    made = true;
  }
  return dir.path;
}

DetectAugment train_aug() {
  DetectAugment a;
  a.imgsz = 64;
  a.mixup = 0.5, a.degrees = 10, a.shear = 2, a.perspective = 0.0005, a.flipud = 0.3;
  return a;
}

std::shared_ptr<DetectDataset> open_synth(const std::string& split, DetectAugment a) {
  return DetectDataset::open(load_dataset_yaml(synth_root() / "set/data.yaml"), split, a);
}

std::vector<DetectBatch> run_epoch(Loader<DetectDataset>& loader, int epoch) {
  std::vector<DetectBatch> out;
  loader.start_epoch(epoch);
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

bool same_batches(const std::vector<DetectBatch>& a, const std::vector<DetectBatch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].images.equal(b[i].images) || !a[i].targets.equal(b[i].targets) || a[i].paths != b[i].paths) return false;
  return true;
}

}  // namespace

TEST_CASE("determinism: identical batches per seed for 0, 1 and 3 workers (mosaic, mixup, affine, HSV, flips)") {
  auto ds = open_synth("train", train_aug());
  std::vector<std::vector<DetectBatch>> runs;
  for (int workers : {0, 1, 3}) {
    LoaderOptions o;
    o.batch = 4, o.workers = workers, o.seed = 5;
    Loader<DetectDataset> loader(ds, o);
    auto e0 = run_epoch(loader, 0), e1 = run_epoch(loader, 1);
    e0.insert(e0.end(), std::make_move_iterator(e1.begin()), std::make_move_iterator(e1.end()));
    runs.push_back(std::move(e0));
  }
  REQUIRE(runs[0].size() == 2 * 3);  // 11 train images, batch 4: 3 batches per epoch
  CHECK(runs[0][0].images.sizes() == torch::IntArrayRef({4, 3, 64, 64}));
  CHECK(runs[0][2].images.size(0) == 3);
  CHECK(same_batches(runs[0], runs[1]));
  CHECK(same_batches(runs[0], runs[2]));
  CHECK_FALSE(runs[0][0].images.equal(runs[0][3].images));  // epochs differ
  LoaderOptions o;
  o.batch = 4, o.workers = 2, o.seed = 6;
  Loader<DetectDataset> other(ds, o);
  CHECK_FALSE(run_epoch(other, 0)[0].images.equal(runs[0][0].images));  // so do seeds
  // Boxes stay inside the image and padding rows are marked.
  for (const auto& b : runs[0]) {
    const auto t = b.targets;
    const auto real = t.select(2, 0).ge(0);
    CHECK(t.select(2, 1).masked_select(real).ge(0).all().item<bool>());
    CHECK(t.select(2, 3).masked_select(real).le(64).all().item<bool>());
    CHECK(t.select(2, 0).masked_select(real.logical_not()).eq(-1).all().item<bool>());
  }
}

TEST_CASE("multi_scale: a size per batch, multiples of 32 in [0.5, 1.5] * imgsz, from (seed, epoch, batch)") {
  DetectAugment a = train_aug();
  a.imgsz = 96, a.multi_scale = true;
  auto ds = open_synth("train", a);
  std::set<int> seen;
  for (size_t b = 0; b < 200; ++b) {
    const int s = ds->imgsz_for_batch(3, 1, b);
    CHECK(s % 32 == 0);
    CHECK(s >= 64);   // ceil(48 / 32) * 32
    CHECK(s <= 128);  // floor(144 / 32) * 32
    CHECK(s == ds->imgsz_for_batch(3, 1, b));
    seen.insert(s);
  }
  CHECK(seen == std::set<int>{64, 96, 128});
  LoaderOptions o;
  o.batch = 3, o.workers = 2, o.seed = 3;
  Loader<DetectDataset> loader(ds, o);
  auto batches = run_epoch(loader, 1);
  for (size_t b = 0; b < batches.size(); ++b) {
    const int s = ds->imgsz_for_batch(3, 1, b);
    CHECK(batches[b].images.size(2) == s);
    CHECK(batches[b].images.size(3) == s);
    const auto t = batches[b].targets;
    CHECK(t.select(2, 4).masked_select(t.select(2, 0).ge(0)).le(s).all().item<bool>());
  }
  DetectAugment v = a;
  v.train = false;  // validation never changes size
  CHECK(open_synth("val", v)->imgsz_for_batch(3, 1, 7) == 96);
}

TEST_CASE("multi_scale: a family's own sizes (weighted by repetition) until multi_scale_stop_epoch, then imgsz") {
  DetectAugment a = train_aug();
  a.imgsz = 96, a.multi_scale = true;
  a.multi_scale_sizes = {64, 96, 96, 96, 160};  // the D-FINE line's shape: imgsz listed 3 times
  a.multi_scale_stop_epoch = 2;
  auto ds = open_synth("train", a);
  std::map<int, int> count;
  for (size_t b = 0; b < 500; ++b) ++count[ds->imgsz_for_batch(3, 1, b)];
  CHECK(count.size() == 3);
  CHECK(count[64] > 50);
  CHECK(count[160] > 50);
  CHECK(count[96] > 2 * count[64]);  // weight 3 of 5
  for (size_t b = 0; b < 50; ++b) {
    CHECK(ds->imgsz_for_batch(3, 2, b) == 96);  // from the stop epoch on: imgsz
    CHECK(ds->imgsz_for_batch(3, 5, b) == 96);
  }
}

TEST_CASE("cache=ram and cache=disk: validation pixels exact, training boxes exact; disk files reused and refreshed") {
  lry_test::TempDir td("lry_img_cache");
  fs::copy(synth_root() / "set", td / "set", fs::copy_options::recursive);
  const auto yaml = load_dataset_yaml(td / "set/data.yaml");
  for (bool train : {false, true}) {
    DetectAugment a = train_aug();
    a.train = train;
    std::vector<DetectSample> ref, cached_ref;
    for (const char* mode : {"off", "ram", "disk", "disk"}) {  // the second disk pass reads the files
      a.cache = mode;
      auto ds = DetectDataset::open(yaml, "train", a);
      for (size_t i = 0; i < ds->size(); ++i) {
        std::mt19937_64 rng(i);
        auto s = ds->get(i, rng, 0);
        if (std::string(mode) == "off") {
          ref.push_back(s);
          continue;
        }
        CHECK(s.boxes.equal(ref[i].boxes));
        // Training tiles are the resized images whether cached or not (load_tile): the same pixels.
        CHECK(s.image.equal(ref[i].image));
        if (train) {
          if (std::string(mode) == "ram") cached_ref.push_back(s);
          else CHECK(s.image.equal(cached_ref[i].image));
        }
      }
      if (std::string(mode) == "ram") CHECK(ds->cache().cached_in_ram() == ds->size());
      // Every tile, cached or not, is its image resized to the long side imgsz (the synthetic set's are 128 px).
      for (size_t i = 0; i < ds->size(); ++i) {
        const auto t = ds->load_tile(i);
        CHECK(t.img->w == t.w);
        CHECK(t.img->h == t.h);
        CHECK(std::max(t.w, t.h) == a.imgsz);
      }
    }
  }
  DetectAugment a = train_aug();
  const fs::path img0 = td / "set/images/train/00003.jpg";
  const fs::path cached = ImageCache::disk_path(img0, 64);
  REQUIRE(fs::exists(cached));
  // Zero the cached pixels (header kept): a validation sample now shows them, so it is read.
  {
    std::fstream f(cached, std::ios::in | std::ios::out | std::ios::binary);
    const auto size = fs::file_size(cached);
    const size_t header = sizeof(libreyolo::data::detail::DiskImageHeader);
    std::vector<char> zeros(size - header, 0);
    f.seekp(static_cast<std::streamoff>(header));
    f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  DetectAugment v = a;
  v.train = false, v.cache = "disk";
  auto ds = DetectDataset::open(yaml, "train", v);
  size_t k = 0;
  while (ds->index().entries[k].image != img0.string()) ++k;
  std::mt19937_64 rng(0);
  auto s = ds->get(k, rng, 0);
  CHECK(s.image[0][s.image.size(1) / 2][32].item<int>() == 0);
  // The source changes (newer mtime): the cache entry is stale and rebuilt from the JPEG.
  fs::last_write_time(img0, fs::last_write_time(img0) + std::chrono::seconds(5));
  auto ds2 = DetectDataset::open(yaml, "train", v);
  auto fresh = ds2->get(k, rng, 0);
  v.cache = "off";
  auto plain = DetectDataset::open(yaml, "train", v)->get(k, rng, 0);
  CHECK(fresh.image.equal(plain.image));
  CHECK_FALSE(fresh.image.equal(s.image));
}

TEST_CASE("an image broken after indexing is replaced by the next one, with that image's labels") {
  lry_test::TempDir td("lry_broken");
  fs::copy(synth_root() / "set", td / "set", fs::copy_options::recursive);
  const auto yaml = load_dataset_yaml(td / "set/data.yaml");
  DetectAugment v = train_aug();
  v.train = false;
  auto ds = DetectDataset::open(yaml, "train", v);
  std::mt19937_64 rng(0);
  const auto next = ds->get(2, rng, 0);
  std::ofstream(ds->index().entries[1].image, std::ios::trunc) << "garbage";
  std::vector<std::string> warnings;
  auto prev = log::set_sink([&](log::Level l, std::string_view m) {
    if (l == log::Level::warn) warnings.emplace_back(m);
  });
  const auto s = ds->get(1, rng, 0);
  ds->get(1, rng, 0);
  log::set_sink(prev);
  CHECK(s.path == next.path);
  CHECK(s.boxes.equal(next.boxes));
  CHECK(s.image.equal(next.image));
  REQUIRE(warnings.size() == 1);  // warned once
  CHECK(warnings[0].find("using the next image") != std::string::npos);
}

TEST_CASE("early exit: destroying a loader mid-epoch stops its workers") {
  auto ds = open_synth("train", train_aug());
  LoaderOptions o;
  o.batch = 2, o.workers = 3;
  {
    Loader<DetectDataset> loader(ds, o);
    loader.start_epoch(0);
    CHECK(loader.next().has_value());
  }  // joins the workers; a hang here would time the test out
  CHECK(true);
}

TEST_CASE("synth_detect: JPEGs, labels with 1-6 objects, data.yaml; deterministic; dispatched by synth()") {
  const fs::path root = synth_root() / "set";
  const auto yaml = load_dataset_yaml(root / "data.yaml");
  CHECK(yaml.names == std::vector<std::string>{"circle", "square", "triangle", "star"});
  const auto train = split_image_files(yaml.train), val = split_image_files(yaml.val);
  CHECK(train.size() == 11);
  CHECK(val.size() == 3);  // round(0.2 * 14)
  std::set<int> classes;
  size_t small = 0;
  for (const auto& p : train) {
    const Image img = read_image(p);
    CHECK(std::max(img.h, img.w) >= 96);
    CHECK(std::max(img.h, img.w) <= 128);
    CHECK(std::min(img.h, img.w) >= 0.55 * std::max(img.h, img.w));
    std::ifstream in(label_path_for(p));
    int n = 0, c;
    double cx, cy, w, h;
    while (in >> c >> cx >> cy >> w >> h) {
      ++n;
      classes.insert(c);
      CHECK(w > 0);
      CHECK(cx - w / 2 >= -1e-6);
      CHECK(cx + w / 2 <= 1 + 1e-6);
      small += w * h < 0.02;
    }
    CHECK(n >= 1);
    CHECK(n <= 6);
  }
  CHECK(classes.size() == 4);
  CHECK(small > 0);  // small objects exist
  lry_test::TempDir td("lry_synth2");
  SynthOptions o;
  o.task = "detect", o.out = td / "again", o.images = 14, o.imgsz = 128, o.classes = 4, o.seed = 11;
  synth_detect(o, 96);
  for (const char* f : {"labels/train/00005.txt", "images/train/00005.jpg"}) {
    std::ifstream a(root / f, std::ios::binary), b(td / "again" / f, std::ios::binary);
    CHECK(std::string(std::istreambuf_iterator<char>(a), {}) == std::string(std::istreambuf_iterator<char>(b), {}));
  }
  o.out = td / "via_dispatch", o.images = 3, o.imgsz = 64, o.val_fraction = 0;
  synth(o);
  CHECK(split_image_files(load_dataset_yaml(td / "via_dispatch/data.yaml").train).size() == 3);
  o.classes = 17;
  CHECK_THROWS_AS(synth(o), ConfigError);
}

LRY_GPU_SUITE {
  TEST_CASE("pinned detection batches copy to the GPU without blocking") {
    LRY_REQUIRE_CUDA();
    auto ds = open_synth("train", train_aug());
    LoaderOptions o;
    o.batch = 4, o.workers = 2, o.pin_memory = true;
    Loader<DetectDataset> loader(ds, o);
    loader.start_epoch(0);
    auto b = loader.next();
    REQUIRE(b.has_value());
    CHECK(b->images.is_pinned());
    CHECK(b->targets.is_pinned());
    auto g = b->to(torch::Device(torch::kCUDA), true);
    CHECK(g.images.is_cuda());
    CHECK(g.images.cpu().equal(b->images));
    CHECK(g.targets.cpu().equal(b->targets));
  }
}

TEST_CASE("DecodeBuffer: one load per key however many threads ask; oldest evicted; failures not kept") {
  DecodeBuffer buf(3);
  std::atomic<int> loads{0};
  auto slow = [&] {
    ++loads;
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return Image(2, 2, 3, 7);
  };
  std::vector<std::thread> ts;
  std::vector<std::shared_ptr<const Image>> got(6);
  for (int t = 0; t < 6; ++t) ts.emplace_back([&, t] { got[t] = buf.get(42, slow); });
  for (auto& t : ts) t.join();
  CHECK(loads == 1);
  for (const auto& g : got) CHECK(g.get() == got[0].get());
  for (size_t k = 0; k < 3; ++k) buf.get(k, [] { return Image(1, 1, 3); });  // 42 is now the oldest of 4
  buf.get(42, slow);
  CHECK(loads == 2);
  CHECK_THROWS_AS(buf.get(7, []() -> Image { throw DataError("broken"); }), DataError);
  CHECK(buf.get(7, [] { return Image(1, 1, 3, 1); })->px[0] == 1);  // retried, not the old failure
}

TEST_CASE("mosaic partners come from the window around the sample in the Loader's order: ~1 decode per image") {
  DetectAugment a = train_aug();
  a.mosaic_window = 4, a.mixup = 0;
  auto ds = open_synth("train", a);
  LoaderOptions o;
  o.batch = 1, o.workers = 0, o.seed = 9;
  Loader<DetectDataset> loader(ds, o);
  loader.start_epoch(0);  // hands the order to the dataset
  CHECK(ds->decode_buffer().capacity() == (1 * 2 + 2) * 1 + 4);  // smaller than the 11 images
  std::vector<size_t> order;
  while (auto b = loader.next())
    for (size_t k = 0; k < ds->size(); ++k)
      if (ds->index().entries[k].image == b->paths[0]) order.push_back(k);
  REQUIRE(order.size() == ds->size());
  const int64_t n = static_cast<int64_t>(order.size());
  // Every mosaic decoded its primary and three partners; with partners near in the order, they are
  // mostly still buffered: about one decode per image, where random partners would need ~3.5.
  CHECK(ds->decode_buffer().misses() <= static_cast<uint64_t>(1.6 * n));
  std::vector<int64_t> pos(order.size());
  for (int64_t p = 0; p < n; ++p) pos[order[p]] = p;
  std::mt19937_64 rng(1);
  std::set<int64_t> offsets;
  for (int t = 0; t < 400; ++t) {
    const size_t i = static_cast<size_t>(t % n);
    const int64_t d = ((pos[ds->partner(i, 0, rng)] - pos[i]) % n + n + 2) % n - 2;  // signed offset in [-2, n-3]
    offsets.insert(d);
  }
  CHECK(offsets == std::set<int64_t>{-2, -1, 1, 2});
  std::set<size_t> anywhere;  // an epoch the Loader did not announce: any image
  for (int t = 0; t < 400; ++t) anywhere.insert(ds->partner(0, 5, rng));
  CHECK(anywhere.size() == ds->size());
}
