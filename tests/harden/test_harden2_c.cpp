// Hardening, second pass (issue 36, item 6): what was accepted silently is now a warning or an error
// that names the file, key or value. Each case failed on main b3bb2e4 (the input was accepted without a
// word, or refused for another reason).
#include <doctest/doctest.h>

#include "harden_support.hpp"

#include <libreyolo/eval/semantic.hpp>

namespace h2c {

namespace ly = libreyolo;
namespace fs = std::filesystem;

void text_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

void image_file(const fs::path& p, int side = 32) {
  fs::create_directories(p.parent_path());
  const ly::data::Image img(side, side, 3, 128);
  if (p.extension() == ".png") ly::data::write_png(p, img);
  else ly::data::write_jpeg(p, img);
}

// The log lines written while it lives (libreyolo::log's sink).
struct Logs {
  std::vector<std::string> lines;
  std::function<void(ly::log::Level, std::string_view)> previous;
  Logs() { previous = ly::log::set_sink([this](ly::log::Level, std::string_view m) { lines.emplace_back(m); }); }
  ~Logs() { ly::log::set_sink(previous); }
  bool has(const std::string& a, const std::string& b = "", const std::string& c = "") const {
    for (const auto& l : lines)
      if (l.find(a) != std::string::npos && l.find(b) != std::string::npos && l.find(c) != std::string::npos) return true;
    return false;
  }
  std::string all() const {
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

ly::data::DetectAugment val_aug() {
  ly::data::DetectAugment a;
  a.imgsz = 64;
  a.train = false;
  return a;
}

}  // namespace h2c

using h2c::contains;

TEST_CASE("h2c: an empty model= or name= is a usage error naming the key (library, cfg= YAML and CLI)") {
  lry_test::TempDir td("lry_h2c_empty");
  for (const char* arg : {"model=", "name=", "name=  "}) {
    const auto why = lry_test::message_of<ly::ConfigError>([&] { ly::parse_args({"epochs=1", arg}); });
    CHECK_MESSAGE(contains(why, std::string(arg).substr(0, std::string(arg).find('=') + 1) + ": empty value"), arg, ": ", why);
    CHECK(contains(why, "leave the key out"));
  }
  const auto yaml = td / "cfg.yaml";
  h2c::text_file(yaml, "epochs: 2\nmodel:\n");
  const auto why = lry_test::message_of<ly::ConfigError>([&] { ly::parse_args({"cfg=" + yaml.string()}); });
  CHECK_MESSAGE(contains(why, yaml.string() + ":2: model=: empty value"), why);
  // A saved config (checkpoints) keeps its empty model: only the user's keys are checked.
  CHECK(ly::from_json(ly::to_json(ly::TrainConfig{})).model.empty());
  std::string out;
  CHECK(lry_harden::run_cli({"train", "model=", "data=" + (td / "nowhere").string()}, &out) == 2);
  CHECK_MESSAGE(contains(out, "model=: empty value"), out);
}

TEST_CASE("h2c: a key given twice on the command line: another value is exit 2 naming both, the same value a warning") {
  lry_test::TempDir td("lry_h2c_twice");
  const auto a = (td / "a.ckpt").string(), b = (td / "b.ckpt").string();
  std::string out;
  CHECK(lry_harden::run_cli({"val", "model=" + a, "device=cpu", "model=" + b}, &out) == 2);
  CHECK_MESSAGE(contains(out, "key 'model' is given twice: model=" + a + " and model=" + b), out);
  CHECK(lry_harden::run_cli({"predict", "model=" + a, "source=x.jpg", "source=y.jpg"}, &out) == 2);
  CHECK_MESSAGE(contains(out, "key 'source' is given twice: source=x.jpg and source=y.jpg"), out);
  // The same value twice: said, then the command goes on (here to the missing checkpoint, exit 5).
  CHECK(lry_harden::run_cli({"val", "model=" + a, "model=" + a}, &out) == 5);
  CHECK_MESSAGE(contains(out, "key 'model' is given twice with the same value (model=" + a + ")"), out);
  CHECK(contains(out, "no such checkpoint file"));
}

TEST_CASE("h2c: a key given twice in a cfg= YAML or a dataset YAML is refused (another value) or warned about") {
  lry_test::TempDir td("lry_h2c_yaml");
  const auto cfg = td / "train.yaml";
  h2c::text_file(cfg, "epochs: 3\nbatch: 8\nepochs: 5\n");
  auto why = lry_test::message_of<ly::ConfigError>([&] { ly::parse_args({"cfg=" + cfg.string()}); });
  CHECK_MESSAGE(contains(why, cfg.string() + ":3: key 'epochs' is given twice (first on line 1)"), why);
  CHECK(contains(why, "'3', then '5'"));
  h2c::text_file(cfg, "epochs: 3\nepochs: 3\n");
  {
    h2c::Logs logs;
    CHECK(ly::parse_args({"cfg=" + cfg.string()}).epochs == 3);
    CHECK_MESSAGE(logs.has(cfg.string() + ":2: key 'epochs' is given twice", "same value"), logs.all());
  }
  // A dataset YAML: yaml-cpp reads the first 'train' and dropped the second without a word.
  const auto data = td / "data.yaml";
  h2c::text_file(data, "train: images/a\nval: images/a\nnames: [x]\ntrain: images/b\n");
  why = lry_test::message_of<ly::DataError>([&] { ly::data::load_dataset_yaml(data); });
  CHECK_MESSAGE(contains(why, "dataset YAML '" + data.string() + "':4: key 'train' is given twice (first on line 1)"), why);
  CHECK(contains(why, "'images/a', then 'images/b'"));
}

TEST_CASE("h2c: an image listed twice, or two images sharing one label file, is warned about") {
  lry_test::TempDir td("lry_h2c_repeat");
  const auto a = td / "images" / "a.jpg", b = td / "images" / "b.jpg", b_png = td / "images" / "b.png";
  for (const auto& p : {a, b, b_png}) h2c::image_file(p);
  h2c::text_file(td / "labels" / "a.txt", "0 0.5 0.5 0.2 0.2\n");
  h2c::text_file(td / "labels" / "b.txt", "0 0.5 0.5 0.2 0.2\n");
  h2c::Logs logs;
  const auto idx = ly::data::build_label_index({a, b, a, b_png}, 1, {});
  CHECK(idx.entries.size() == 4);  // still used: a warning, not a refusal
  CHECK_MESSAGE(logs.has("image '" + a.string() + "' is listed more than once"), logs.all());
  CHECK_MESSAGE(logs.has("images '" + b.string() + "' and '" + b_png.string() + "' share the label file '" +
                         (td / "labels" / "b.txt").string() + "'"),
                logs.all());
}

TEST_CASE("h2c: a directory where a label file should be skips its image with a warning naming it") {
  lry_test::TempDir td("lry_h2c_labeldir");
  const auto a = td / "images" / "a.jpg", b = td / "images" / "b.jpg";
  h2c::image_file(a);
  h2c::image_file(b);
  fs::create_directories(td / "labels" / "a.txt");
  h2c::text_file(td / "labels" / "b.txt", "0 0.5 0.5 0.2 0.2\n");
  const auto idx = ly::data::build_label_index({a, b}, 1, {});
  CHECK(idx.stats.bad_labels == 1);  // on main: a background image with 0 boxes, and no word
  CHECK(idx.entries.size() == 1);
  bool named = false;
  for (const auto& m : idx.messages) named = named || contains(m, "'" + (td / "labels" / "a.txt").string() + "' is a directory");
  CHECK(named);
}

TEST_CASE("h2c: a detection dataset with no labels/ is a data error naming the label file it expected") {
  lry_test::TempDir td("lry_h2c_nolabels");
  for (const char* n : {"a.jpg", "b.jpg"}) h2c::image_file(td / "images" / "train" / n);
  const auto yaml_file = td / "data.yaml";
  h2c::text_file(yaml_file, "train: images/train\nval: images/train\nnames: [x]\n");
  const auto y = ly::data::load_dataset_yaml(yaml_file);
  const auto why = lry_test::message_of<ly::DataError>([&] { ly::data::DetectDataset::open(y, "train", h2c::val_aug()); });
  CHECK_MESSAGE(contains(why, "split 'train': none of its 2 images has a label file"), why);
  CHECK(contains(why, "expected '" + (td / "labels" / "train" / "a.txt").string() + "'"));
  CHECK(contains(why, "'" + (td / "labels" / "train").string() + "' does not exist"));
  CHECK(!fs::exists(td / "labels"));  // and no "label cache not writable" detour
  // The labels/ folder exists but this split has no label file: all background images, said.
  fs::create_directories(td / "labels" / "train");
  h2c::Logs logs;
  CHECK(ly::data::DetectDataset::open(y, "train", h2c::val_aug())->size() == 2);
  CHECK_MESSAGE(logs.has("none of its 2 images has a label file", "every image is a background image"), logs.all());
}

TEST_CASE("h2c: a dataset of another task is refused: a semantic YAML to detection, a YAML to classification") {
  lry_test::TempDir td("lry_h2c_task");
  h2c::image_file(td / "images" / "train" / "a.jpg");
  fs::create_directories(td / "masks" / "train");
  const auto yaml_file = td / "data.yaml";
  h2c::text_file(yaml_file, "train: images/train\nval: images/train\nmasks_dir: masks\nnames: [x, y]\n");
  const auto y = ly::data::load_dataset_yaml(yaml_file);
  auto why = lry_test::message_of<ly::DataError>([&] { ly::data::DetectDataset::open(y, "train", h2c::val_aug()); });
  CHECK_MESSAGE(contains(why, "dataset YAML '" + y.file.string() + "':3, key 'masks_dir'"), why);
  CHECK(contains(why, "belongs to a semantic segmentation dataset"));
  why = lry_test::message_of<ly::DataError>([&] { ly::data::open_classify(yaml_file, 32, {}); });
  CHECK_MESSAGE(contains(why, "'" + yaml_file.string() + "' is a YAML file"), why);
}

TEST_CASE("h2c: a single-class classification set is warned about") {
  lry_test::TempDir td("lry_h2c_oneclass");
  for (const char* split : {"train", "val"})
    for (const char* n : {"a.jpg", "b.jpg"}) h2c::image_file(td / split / "only" / n);
  h2c::Logs logs;
  const auto d = ly::data::open_classify(td.path, 32, {});
  CHECK(d.names.size() == 1);
  CHECK_MESSAGE(logs.has("classification dataset '" + td.path.string() + "'", "one class folder ('only')"), logs.all());
}

TEST_CASE("h2c: a semantic validation with no labelled pixel is warned about") {
  ly::eval::SemanticMetrics m(3, 255);
  m.add(torch::zeros({1, 4, 4}, torch::kInt64), torch::full({1, 4, 4}, 255, torch::kInt64));
  h2c::Logs logs;
  const auto r = m.compute();
  CHECK(r.labelled_pixels == 0);
  CHECK_MESSAGE(logs.has("no labelled pixel in the whole validation split", "ignore = 255"), logs.all());
}

TEST_CASE("h2c: profile run --batch 0, --imgsz 0 and name= are usage errors (exit 2) naming the value") {
  lry_test::TempDir td("lry_h2c_prun");
  const auto data = (td / "nowhere").string();
  std::string out;
  CHECK(lry_harden::run_cli({"profile", "run", data, "--weights", "resnet18", "--batch", "0", "--project", td.path.string()}, &out) == 2);
  CHECK_MESSAGE(contains(out, "--batch 0: allowed -1 (auto) or an integer >= 1"), out);
  CHECK(lry_harden::run_cli({"profile", "run", data, "--weights", "resnet18", "--imgsz", "0", "--project", td.path.string()}, &out) == 2);
  CHECK_MESSAGE(contains(out, "--imgsz 0: allowed an integer >= 1"), out);
  CHECK(lry_harden::run_cli({"profile", "run", data, "--weights", "resnet18", "name=mine", "--project", td.path.string()}, &out) == 2);
  CHECK_MESSAGE(contains(out, "name=mine: the run names are chosen by profile run"), out);
}

TEST_CASE("h2c: profile readers say so when the phase or kernel table is empty or malformed") {
  lry_test::TempDir td("lry_h2c_ptables");
  const std::string schema(ly::profile::analysis_schema);
  auto write = [&](const std::string& name, nlohmann::json doc) {
    doc["schema"] = schema;
    const auto p = td / name;
    std::ofstream(p) << doc.dump();
    return p;
  };
  std::ostringstream out, err;
  const auto empty = write("empty.json", {{"phases", nlohmann::json::array()}, {"kernels", nlohmann::json::array()},
                                          {"trace_collected", false}});
  CHECK(ly::profile::run_phases(empty, out, err) == 0);
  CHECK_MESSAGE(contains(out.str(), "no phase table: this profile's 'phases' table is empty"), out.str());
  out.str("");
  CHECK(ly::profile::run_kernels(empty, {}, out, err) == 0);
  CHECK_MESSAGE(contains(out.str(), "no kernel rows: this profile's 'kernels' table is empty; no kernel trace was collected"),
                out.str());
  const auto bad_kernels = write("bad_kernels.json", {{"kernels", "oops"}});
  CHECK(ly::profile::run_kernels(bad_kernels, {}, out, err) == 2);
  CHECK_MESSAGE(contains(err.str(), "'" + bad_kernels.string() + "': the 'kernels' table is malformed: it is a string"), err.str());
  err.str("");
  const auto bad_row = write("bad_row.json", {{"phases", nlohmann::json::array({nlohmann::json::object(), 7})}});
  CHECK(ly::profile::run_phases(bad_row, out, err) == 2);
  CHECK_MESSAGE(contains(err.str(), "'" + bad_row.string() + "': the 'phases' table is malformed: row 2 is a number"), err.str());
  err.str("");
  const auto bad_by_phase = write("bad_by_phase.json", {{"kernels_by_phase", {{"forward", {{"k", 1}}}}}});
  CHECK(ly::profile::run_summary(bad_by_phase, out, err) == 2);
  CHECK_MESSAGE(contains(err.str(), "the 'kernels_by_phase.forward' table is malformed"), err.str());
}

TEST_CASE("h2c: a zero step time in a profile is flagged in its summary") {
  nlohmann::json p = {{"schema", std::string(ly::profile::analysis_schema)}, {"step_ms", 0.0}, {"img_per_s", 0.0}};
  CHECK(contains(ly::profile::summary_text(p), "!! ZERO STEP TIME: step_ms is 0.000"));
  p["step_ms"] = 12.5;
  CHECK(!contains(ly::profile::summary_text(p), "ZERO STEP TIME"));
}
