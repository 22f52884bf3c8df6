// The original's .pt checkpoints through our train / val / predict path (io/original.hpp): its real
// trained YOLOv9-t loads as one of our checkpoints and validates like the original measured it; ours
// export to a .pt with the original's metadata schema and read back equal; bad files get named errors.
#include "support.hpp"
#include "io/io_support.hpp"
#include "support_data.hpp"

#include <libreyolo/data/synth.hpp>
#include <libreyolo/io/original.hpp>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade
#include "support_extern.hpp"

#include <cstdlib>
#include <fstream>

#include "support_doctest.hpp"

namespace ly = libreyolo;
namespace io = libreyolo::io;
namespace fs = std::filesystem;
using io::PyValue;

namespace {
const std::string kTrained = LIBREYOLO_SOURCE_DIR "/../shared/fixtures/libreyolo/yolo9-t-trained/ly9t_ckpt.pt";
const std::string kData = LIBREYOLO_SOURCE_DIR "/tests/data/pt/";

// Inside a case registered with lry_test::needs({lry_test::Need::fixtures}): the trained checkpoint is there.
void require_trained() {
  LRY_NEED(lry_test::Need::fixtures);
  REQUIRE_MESSAGE(fs::exists(kTrained), "the fixture file " << kTrained << " is missing");
}

using lry_test::original_like;
}  // namespace

TEST_CASE("original .pt: the trained YOLOv9-t becomes one of our checkpoints (names, classes, weights)" * lry_test::needs({lry_test::Need::fixtures})) {
  require_trained();
  const auto ck = io::load_any_checkpoint(kTrained);
  CHECK(ck.meta.at("model") == "yolo9t");
  CHECK(ck.meta.at("family_name") == "yolo9");
  CHECK(ck.meta.at("format") == io::kTrainerCheckpointFormat);
  const auto names = ck.meta.at("family").at("names").get<std::vector<std::string>>();
  REQUIRE(names.size() == 8);
  CHECK(names[0] == "circle");
  CHECK(names[7] == "diamond");
  CHECK(ck.meta.at("config").at("imgsz") == 640);
  CHECK(ck.meta.at("original").at("best_mAP50_95").get<double>() == doctest::Approx(0.5150201995647421));
  CHECK(ck.tensors.size() == 1338);
  CHECK(ck.tensors.at("model.head.cv3.0.2.weight").sizes() == torch::IntArrayRef({8, 64, 1, 1}));
  // The facade takes it as a model: its family, size and weights.
  CHECK(ly::Model(kTrained).name() == "yolo9t");
  // Its weights load strictly into our YOLOv9-t built for its classes.
  ly::Yolo9Family fam("t");
  fam.restore(ck.meta.at("family"));
  auto net = fam.make_network();
  ly::train::get_module_state(ck, "model.", *net);
  CHECK(torch::equal(net->named_parameters()["head.cv3.0.2.weight"], ck.tensors.at("model.head.cv3.0.2.weight")));
}

TEST_CASE("original .pt: `val` of the original's trained YOLOv9-t on its regenerated set gives its own validator's mAP50-95 (0.5161906 on the CPU)" * lry_test::needs({lry_test::Need::fixtures})) {
  require_trained();
  lry_test::TempDir dir("lry_ly9t_val");
  ly::data::SynthOptions o;  // the set the original trained on: data synth --task detect --images 400 --imgsz 640 --classes 8 --seed 0
  o.task = "detect";
  o.out = dir.path / "D";
  o.images = 400;
  o.imgsz = 640;
  o.classes = 8;
  o.seed = 0;
  ly::data::synth(o);
  auto cfg = ly::parse_args({"data=" + (o.out / "data.yaml").string(), "imgsz=640", "batch=8", "workers=2", "device=cpu"});
  const auto r = ly::Model(kTrained).val(cfg);
  MESSAGE(r.summary << "  " << r.metrics.dump());
  // The original's own val() of this checkpoint on this set, run here on the CPU in fp32 (PyTorch 1.13,
  // benchmarks/fidelity/original_val_cpu.sh): mAP50-95 0.5161906. Ours gives its detections (each within
  // 0.0012 in score and pixels; one image has one box more) with the image in the top-left corner as its
  // YOLO9ValPreprocessor places it, boxes clamped to the image before NMS, NMS at its val() IoU 0.6
  // (docs/fidelity.md rows 17, 18, 20; centred and unclamped, as before, it was 0.5120). The 0.5150 in its metadata is its in-training
  // validation on CUDA (autocast, NMS 0.65).
  const double m = r.metrics.at("mAP50-95").get<double>();
  CHECK_MESSAGE(std::abs(m - 0.5161906) <= 1e-4, "mAP50-95 " << m << " against the original's own 0.5161906");
}

namespace {
// A trained-looking YOLOv9-t checkpoint (3 classes, EMA present, 77 EMA updates) written to dir/best.ckpt.
struct ExportSample {
  ly::Yolo9Family fam{"t"};
  decltype(std::declval<ly::Yolo9Family&>().make_network()) net;
  explicit ExportSample(const fs::path& dir) {
    fam.restore({{"names", std::vector<std::string>{"a", "b", "c"}}, {"nc", 3}, {"size", "t"}});
    torch::manual_seed(3);
    net = fam.make_network();
    ly::train::Checkpoint ck;
    ck.meta = {{"format", io::kTrainerCheckpointFormat}, {"family_name", "yolo9"}, {"model", "yolo9t"},
               {"family", fam.describe()}, {"config", {{"imgsz", 320}}}, {"state", {{"epoch", 4}, {"best_fitness", 0.25}}},
               {"ema", {{"updates", 77}}}};
    ly::train::put_module_state(ck, "ema.", *net);
    ck.tensors["ema.__present__"] = torch::ones({1});
    ly::train::save_checkpoint(ck, dir / "best.ckpt");
  }
};
}  // namespace

TEST_CASE("original .pt: our checkpoint exports with the original's schema and reads back equal") {
  lry_test::TempDir dir("lry_export");
  ExportSample sample(dir.path);
  auto& fam = sample.fam;
  auto& net = sample.net;
  const fs::path out = ly::Model((dir.path / "best.ckpt").string()).export_original();
  CHECK(out == dir.path / "best.pt");
  CHECK_THROWS_WITH_AS(ly::Model((dir.path / "best.ckpt").string()).export_original(dir.path / "best.ckpt"),
                       doctest::Contains("is the checkpoint being exported"), ly::ConfigError);
  const auto back = io::checkpoint_from_original(out);
  CHECK(back.meta.at("model") == "yolo9t");
  CHECK(back.meta.at("family").at("names") == fam.describe().at("names"));
  CHECK(back.meta.at("config").at("imgsz") == 320);
  size_t n = 0;
  for (const auto& p : net->named_parameters()) {
    REQUIRE(back.tensors.count("model." + p.key()));
    CHECK(torch::equal(back.tensors.at("model." + p.key()), p.value()));
    ++n;
  }
  CHECK(n > 100);
  const PyValue root = io::read_pt(out.string());
  for (const char* k : {"model", "schema_version", "libreyolo_version", "model_family", "size", "task", "nc", "names",
                        "imgsz", "ema", "is_ema_weights", "ema_updates", "epoch"})
    CHECK_MESSAGE(root.contains(k), k);
  CHECK(root.at("ema_updates").as_int() == 77);
}

TEST_CASE("original .pt: Python's torch.load reads our export with the original's schema" *
          lry_test::needs({lry_test::Need::python_torch})) {
  LRY_NEED(lry_test::Need::python_torch);
  lry_test::TempDir dir("lry_export_py");
  ExportSample sample(dir.path);
  const fs::path out = ly::Model((dir.path / "best.ckpt").string()).export_original();
  // Python's torch.load sees the original's schema (names int-keyed, model an OrderedDict in state_dict order).
  const std::string py = lry_test::python_with_torch();
  const std::string script = (dir.path / "check.py").string();
  std::ofstream(script) << R"PY(import collections, sys, torch
ck = torch.load(sys.argv[1])
req = ("model", "schema_version", "libreyolo_version", "model_family", "size", "task", "nc", "names", "imgsz")
missing = [k for k in req if k not in ck]
assert not missing, missing
assert ck["schema_version"] == "1.0" and ck["model_family"] == "yolo9" and ck["size"] == "t"
assert ck["names"] == {0: "a", 1: "b", 2: "c"} and ck["nc"] == 3 and ck["task"] == "detect"
assert isinstance(ck["model"], collections.OrderedDict)
assert list(ck["model"])[0] == "backbone.conv0.conv.weight"
print("OK", len(ck["model"]))
)PY";
  const int rc = std::system((py + " " + script + " " + out.string() + " > " + (dir.path / "py.txt").string() + " 2>&1").c_str());
  std::ifstream f(dir.path / "py.txt");
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  INFO(text);
  CHECK(rc == 0);
  CHECK(text.find("OK") != std::string::npos);
}

TEST_CASE("original .pt: another family, missing weights, a disallowed global or a truncated file: a named error") {
  lry_test::TempDir dir("lry_bad_pt");
  ly::Yolo9Family fam("t");
  fam.restore({{"names", std::vector<std::string>{"a", "b"}}, {"nc", 2}, {"size", "t"}});
  auto net = fam.make_network();
  const auto sd = io::module_state_dict(*net);
  // A family we do not train: the model name it makes is refused, listing the available ones.
  const fs::path other = dir.path / "other.pt";
  io::write_pt(other.string(), original_like(sd, "damoyolo", "t", 2));
  CHECK_THROWS_WITH_AS(ly::Model(other.string()), doctest::Contains("model=damoyolot: unknown model"), ly::ConfigError);
  // A state dict missing a tensor: the weights do not load, and the error names the tensor.
  io::StateDict partial(sd.begin() + 1, sd.end());
  const fs::path miss = dir.path / "missing.pt";
  io::write_pt(miss.string(), original_like(partial, "yolo9", "t", 2));
  const auto ck = io::checkpoint_from_original(miss);
  auto net2 = fam.make_network();
  CHECK_THROWS_WITH_AS(ly::train::get_module_state(ck, "model.", *net2), doctest::Contains(sd.front().first.c_str()),
                       ly::CheckpointError);
  // No metadata at all (a bare state dict): it names what is missing.
  const fs::path bare = dir.path / "bare.pt";
  io::write_pt(bare.string(), PyValue::state_dict(sd));
  CHECK_THROWS_WITH_AS(io::checkpoint_from_original(bare), doctest::Contains("model_family"), ly::CheckpointError);
  // nc and names disagree.
  PyValue bad_nc = original_like(sd, "yolo9", "t", 2);
  bad_nc.set("nc", PyValue::integer(5));
  io::write_pt((dir.path / "nc.pt").string(), bad_nc);
  CHECK_THROWS_WITH_AS(io::checkpoint_from_original(dir.path / "nc.pt"), doctest::Contains("nc = 5"), ly::CheckpointError);
  // NaN weights are refused before anything trains on them.
  auto nan_sd = sd;
  nan_sd[0].second = nan_sd[0].second.clone().fill_(std::nan(""));
  io::write_pt((dir.path / "nan.pt").string(), original_like(nan_sd, "yolo9", "t", 2));
  CHECK_THROWS_WITH_AS(io::checkpoint_from_original(dir.path / "nan.pt"), doctest::Contains("NaN"), ly::CheckpointError);
  // Hostile and broken files from the reader's test set.
  CHECK_THROWS_WITH_AS(io::load_any_checkpoint(kData + "evil_os_system.pt"), doctest::Contains("os"), ly::CheckpointError);
  CHECK_THROWS_AS(io::load_any_checkpoint(kData + "truncated.pt"), ly::CheckpointError);
  CHECK_THROWS_WITH_AS(io::load_any_checkpoint(dir.path / "absent.pt"), doctest::Contains("no such file"), ly::CheckpointError);
}

namespace libreyolo::io::detail {
// Defined in io/original-inl.hpp (compiled once in the core library of the in-tree build) and used by
// checkpoint_from_original / the export; declared here only for this check.
std::string family_from_original(const std::string& f);
std::string family_to_original(std::string f);
}  // namespace libreyolo::io::detail

TEST_CASE("original .pt: the model_family 'rtdetr' / 'rtdetrv2' / 'ec' / 'rfdetr' names our rtdetr-r18 / rtdetrv2-r18 / ec-r18 / rfdetr-r18, and back") {
  lry_test::TempDir dir("lry_rtdetr_names");
  ly::Yolo9Family fam("t");
  fam.restore({{"names", std::vector<std::string>{"a", "b"}}, {"nc", 2}, {"size", "t"}});
  const auto sd = io::module_state_dict(*fam.make_network());
  for (const std::string f : {"rtdetr", "rtdetrv2", "ec", "rfdetr"}) {  // (the size is only a name here)
    const fs::path p = dir.path / (f + ".pt");
    io::write_pt(p.string(), original_like(sd, f, "r18", 2));
    const auto ck = io::checkpoint_from_original(p);
    CHECK(ck.meta.at("model") == f + "-r18");
    CHECK(ck.meta.at("family_name") == f + "-");
    CHECK(io::detail::family_to_original(f + "-") == f);
  }
  CHECK(io::detail::family_from_original("dfine") == "dfine");
  CHECK(io::detail::family_from_original("deimv2") == "deimv2");
  CHECK(io::detail::family_to_original("yolo9") == "yolo9");
}

TEST_CASE("original .pt: the DETR line's checkpoints carry val_resize=stretch (the original's validation geometry), the CNNs' none") {
  lry_test::TempDir dir("lry_orig_resize");
  ly::Yolo9Family fam("t");
  fam.restore({{"names", std::vector<std::string>{"a", "b"}}, {"nc", 2}, {"size", "t"}});
  const auto sd = io::module_state_dict(*fam.make_network());
  auto config_of = [&](const std::string& family) {  // (the state dict and size are only names here)
    const fs::path p = dir.path / (family + ".pt");
    io::write_pt(p.string(), original_like(sd, family, "n", 2));
    return io::checkpoint_from_original(p).meta.at("config");
  };
  for (const std::string f : {"rtdetr", "rtdetrv2", "rtdetrv4", "dfine", "deim", "deimv2", "ec", "rfdetr"}) {
    CAPTURE(f);
    CHECK(config_of(f).value("val_resize", std::string()) == "stretch");
  }
  for (const std::string f : {"yolo9", "yolox", "yolonas", "rtmdet"}) {
    CAPTURE(f);
    CHECK_FALSE(config_of(f).contains("val_resize"));
  }
}

TEST_CASE("val_resize: predict stretches as the checkpoint's run did or as the command line says, boxes mapped back per axis; a bad saved value is named") {
  lry_test::TempDir dir("lry_val_resize");
  ly::Yolo9Family fam("t");
  fam.restore({{"names", std::vector<std::string>{"a", "b", "c"}}, {"nc", 3}, {"size", "t"}});
  torch::manual_seed(5);
  auto net = fam.make_network();
  net->eval();
  // One network, three checkpoints that differ only in their saved config.
  auto write = [&](const std::string& name, nlohmann::json config) {
    ly::train::Checkpoint ck;
    config["imgsz"] = 320;
    ck.meta = {{"format", io::kTrainerCheckpointFormat}, {"family_name", "yolo9"}, {"model", "yolo9t"},
               {"family", fam.describe()}, {"config", config}, {"state", {{"epoch", 1}}}};
    ly::train::put_module_state(ck, "model.", *net);
    ly::train::save_checkpoint(ck, dir.path / name);
    return (dir.path / name).string();
  };
  const auto plain = write("plain.ckpt", nlohmann::json::object());
  const auto stretched = write("stretched.ckpt", {{"train_resize", "letterbox"}, {"val_resize", "stretch"}});
  const auto bad = write("bad.ckpt", {{"val_resize", "squash"}});
  // A 160 x 320 image (h x w): the letterbox pads it (predict never scales up), the stretch doubles its height.
  ly::data::Image img(160, 320, 3, 0);
  for (int y = 0; y < 160; ++y)
    for (int x = 0; x < 320; ++x)
      for (int c = 0; c < 3; ++c) img.at(y, x, c) = static_cast<uint8_t>((x * 7 + y * 13 + c * 50) % 256);
  fs::create_directories(dir.path / "src");
  ly::data::write_png(dir.path / "src" / "a.png", img);
  auto predict = [&](const std::string& ckpt, std::vector<std::string> args, const std::string& out) {
    args.push_back("device=cpu");
    return ly::Model(ckpt).predict(dir.path / "src", ly::parse_args(args), dir.path / out, /*conf=*/0.0);
  };
  const auto saved = predict(stretched, {}, "p1");
  const auto asked = predict(plain, {"val_resize=stretch"}, "p2");
  const auto letterboxed = predict(plain, {}, "p3");
  const auto overridden = predict(stretched, {"val_resize=letterbox"}, "p4");
  REQUIRE(saved.size() == 1);
  const auto& boxes = saved[0].at("boxes");
  REQUIRE(boxes.size() > 0);
  CHECK(saved[0].at("boxes") == asked[0].at("boxes"));             // the saved config's stretch = the command line's
  CHECK(overridden[0].at("boxes") == letterboxed[0].at("boxes"));  // the command line wins over the saved config
  CHECK(saved[0].at("boxes") != letterboxed[0].at("boxes"));
  // The boxes are not all clipped to the whole image (so the comparisons above compare something).
  size_t inside = 0;
  for (const auto& b : boxes) inside += b.at("box")[3].get<double>() - b.at("box")[1].get<double>() < 159;
  CHECK(inside > 0);
  // Bad thresholds are refused before predict reads the checkpoint again or looks at the source: with the
  // model's file gone and the source missing, the error names the threshold.
  {
    fs::copy_file(plain, dir.path / "gone.ckpt");
    const ly::Model m((dir.path / "gone.ckpt").string());
    fs::remove(dir.path / "gone.ckpt");
    const auto cfg = ly::parse_args({"device=cpu"});
    CHECK_THROWS_WITH_AS(m.predict(dir.path / "nowhere", cfg, dir.path / "p5", 0.25, 0.0), doctest::Contains("iou="), ly::ConfigError);
    CHECK_THROWS_WITH_AS(m.predict(dir.path / "nowhere", cfg, dir.path / "p5", 1.5), doctest::Contains("conf="), ly::ConfigError);
    CHECK_THROWS_WITH_AS(m.predict(dir.path / "nowhere", cfg, dir.path / "p5", 0.25, 0.45, 0), doctest::Contains("max_det="),
                         ly::ConfigError);
    CHECK_THROWS(m.predict(dir.path / "src", cfg, dir.path / "p5"));  // good thresholds: the missing file is what fails
  }
  // The stretched boxes by hand: the image resized to 320 x 320, decoded, y divided by 320/160.
  ly::data::DetBoxes none;
  const auto in = ly::data::stretch_resize(img, 320, 320, none);
  ly::tasks::DecodeOptions dec;
  dec.conf = 0.0;
  dec.iou = ly::tasks::PredictOptions{}.iou;
  dec.multi_label = ly::Yolo9Family::val_decode().multi_label;  // predict keeps YOLOv9's every class above conf
  dec.clip = {{0, 0, 320, 320}};                                 // boxes clamped to the (stretched) image before NMS
  torch::NoGradGuard ng;
  const auto x = ly::Yolo9Family::from_pixels(ly::data::to_chw_tensor(in).unsqueeze(0).to(torch::kFloat32));
  const auto det = fam.decode(net->forward(x), dec)[0].to(torch::kFloat64);
  REQUIRE(det.size(0) == static_cast<int64_t>(boxes.size()));
  for (int64_t i = 0; i < det.size(0); i += std::max<int64_t>(1, det.size(0) / 7)) {
    const auto& b = boxes[static_cast<size_t>(i)].at("box");
    CHECK(b[0].get<double>() == doctest::Approx(std::clamp(det[i][0].item<double>(), 0.0, 320.0)).epsilon(1e-6));
    CHECK(b[1].get<double>() == doctest::Approx(std::clamp(det[i][1].item<double>() * 160 / 320, 0.0, 160.0)).epsilon(1e-6));
    CHECK(b[2].get<double>() == doctest::Approx(std::clamp(det[i][2].item<double>(), 0.0, 320.0)).epsilon(1e-6));
    CHECK(b[3].get<double>() == doctest::Approx(std::clamp(det[i][3].item<double>() * 160 / 320, 0.0, 160.0)).epsilon(1e-6));
  }
  CHECK_THROWS_WITH_AS(predict(bad, {}, "p5"), doctest::Contains("its saved config: val_resize"), ly::ConfigError);
  CHECK_THROWS_WITH_AS(ly::parse_args({"val_resize=squash"}), doctest::Contains("val_resize"), ly::ConfigError);
  // auto follows train_resize.
  ly::TrainConfig c;
  CHECK_FALSE(c.val_stretch());
  c.train_resize = "stretch";
  CHECK(c.val_stretch());
  c.val_resize = "letterbox";
  CHECK_FALSE(c.val_stretch());
}
