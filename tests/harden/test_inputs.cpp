// Hardening regression tests: hostile or damaged input files and arguments (issue 18, items 1, 2, 5,
// 6 and the input parts of 8). Each failed on main 22d4288.
#include <doctest/doctest.h>

#include "harden_support.hpp"

namespace ly = libreyolo;
namespace fs = std::filesystem;
using lry_harden::in_child;

namespace {

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

nlohmann::json profile_with_kernel(const std::string& raw_name) {
  return {{"schema", std::string(ly::profile::analysis_schema)},
          {"kernels", nlohmann::json::array({{{"raw_name", raw_name}, {"kernel", "k"}, {"ms_per_step", 1.0}}})}};
}

int kernels_rc(const fs::path& file, const std::string& grep, std::string* err_text = nullptr) {
  ly::profile::KernelQuery q;
  q.grep = grep;
  std::ostringstream out, err;
  const int rc = ly::profile::run_kernels(file, q, out, err);
  if (err_text) *err_text = err.str();
  return rc;
}

void jpeg(const fs::path& p, const ly::data::Image& img) {
  fs::create_directories(p.parent_path());
  ly::data::write_jpeg(p, img);
}
void png(const fs::path& p, const ly::data::Image& img) {
  fs::create_directories(p.parent_path());
  ly::data::write_png(p, img);
}

struct Logs {
  std::vector<std::string> lines;
  std::function<void(ly::log::Level, std::string_view)> previous;
  Logs() { previous = ly::log::set_sink([this](ly::log::Level, std::string_view m) { lines.emplace_back(m); }); }
  ~Logs() { ly::log::set_sink(previous); }
  bool has(const std::string& a, const std::string& b = "") const {
    for (const auto& l : lines)
      if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return true;
    return false;
  }
};

}  // namespace

TEST_CASE("item 1: profile kernels --grep on huge kernel names neither overflows the stack nor hangs") {
  lry_test::TempDir td("lry_h1");
  const fs::path big = td / "big.json", mid = td / "mid.json", evil = td / "evil.json";
  std::ofstream(big) << profile_with_kernel(std::string(50000, 'a')).dump();
  std::ofstream(mid) << profile_with_kernel(std::string(20000, 'a')).dump();
  std::ofstream(evil) << profile_with_kernel(std::string(1000, 'x')).dump();
  // Each in a child: on main these crashed (std::regex recursion) or never returned.
  auto r1 = in_child([&] { return kernels_rc(big, ".*"); });
  CHECK_MESSAGE(r1.exited, r1.describe());
  CHECK(r1.code == 0);
  auto r2 = in_child([&] { return kernels_rc(mid, "(a|x)*"); });
  CHECK_MESSAGE(r2.exited, r2.describe());
  CHECK(r2.code == 0);
  auto r3 = in_child([&] { return kernels_rc(evil, "(x+x+)+y"); }, 20);
  CHECK_MESSAGE(r3.exited, r3.describe());
  CHECK(r3.code == 0);
  // Matching still works, case-insensitively; a bad or overlong pattern is a named usage error.
  ly::profile::KernelQuery q;
  q.grep = "A{3}";
  std::ostringstream out, err;
  CHECK(ly::profile::run_kernels(big, q, out, err) == 0);
  CHECK(out.str().find("1 kernels match") != std::string::npos);
  std::string why;
  CHECK(kernels_rc(big, std::string(5000, 'a'), &why) == 2);
  CHECK(why.find("at most 4096") != std::string::npos);
}

TEST_CASE("item 2: profile compare on a repeat file whose metric lacks std is a named error, not UB") {
  lry_test::TempDir td("lry_h2");
  nlohmann::json rep = {{"schema", std::string(ly::profile::repeat_schema)},
                        {"metrics", {{"img_per_s", {{"mean", 10.0}, {"n", 3}, {"values", {9, 10, 11}}}}}}};
  std::ofstream(td / "rep.json") << rep.dump();
  rep["metrics"]["img_per_s"]["std"] = 1.0;
  std::ofstream(td / "good.json") << rep.dump();
  std::ostringstream out, err;
  int rc = -1;
  CHECK_NOTHROW(rc = ly::profile::run_compare(td / "good.json", td / "rep.json", out, err));
  CHECK(rc == 2);
  CHECK(err.str().find("rep.json") != std::string::npos);
  CHECK(err.str().find("'std' is missing") != std::string::npos);
  out.str(""), err.str("");
  CHECK(ly::profile::run_compare(td / "good.json", td / "good.json", out, err) == 0);
  CHECK(out.str().find("img_per_s") != std::string::npos);
}

TEST_CASE("item 8: profile files with wrong field types, or a directory, are named errors") {
  lry_test::TempDir td("lry_h2b");
  nlohmann::json p = profile_with_kernel("gemm");
  p["kernels"][0]["raw_name"] = 12;  // a number where a string belongs
  std::ofstream(td / "types.json") << p.dump();
  std::string why;
  int rc = -1;
  CHECK_NOTHROW(rc = kernels_rc(td / "types.json", "gemm", &why));
  CHECK(rc == 2);
  CHECK(why.find("types.json") != std::string::npos);
  nlohmann::json s = {{"schema", std::string(ly::profile::analysis_schema)}, {"levers", {1, 2}}};
  std::ofstream(td / "levers.json") << s.dump();
  std::ostringstream out, err;
  CHECK_NOTHROW(rc = ly::profile::run_summary(td / "levers.json", out, err));
  CHECK(rc == 2);
  CHECK(err.str().find("levers.json") != std::string::npos);
  fs::create_directories(td / "dir.json");
  err.str("");
  CHECK(ly::profile::run_summary(td / "dir.json", out, err) == 2);
  CHECK(err.str().find("is a directory") != std::string::npos);
  // Nesting deep enough to overflow the stack when printed is refused while parsing.
  std::ofstream(td / "deep.json") << R"({"schema": "libreyolo.profile.analysis/v1", "config": {"batch": )" +
                                         std::string(100000, '[') + std::string(100000, ']') + "}}";
  auto r = in_child([&] {
    std::ostringstream o, e;
    return ly::profile::run_summary(td / "deep.json", o, e);
  });
  CHECK_MESSAGE(r.exited, r.describe());
  CHECK(r.code == 2);
}

TEST_CASE("item 6: a tiny PNG claiming 10^6 x 10^6 pixels is refused before allocation, naming the file") {
  lry_test::TempDir td("lry_h6");
  const fs::path bomb = td / "bomb.png";
  lry_harden::write_bytes(bomb, lry_harden::png_claiming(1000000, 1000000));
  CHECK(fs::file_size(bomb) < 100);
  std::string why;
  CHECK_FALSE(ly::data::probe_image(bomb, &why));
  CHECK(why.find("too many pixels") != std::string::npos);
  const std::string msg = lry_test::message_of<ly::DataError>([&] { ly::data::read_image(bomb); });
  CHECK(msg.find("bomb.png") != std::string::npos);
  CHECK(msg.find("1000000x1000000") != std::string::npos);
  // The limit is configurable (0 = none); a small image passes the default.
  ly::data::Image img(16, 16, 3, 100);
  ly::data::write_png(td / "small.png", img);
  CHECK(ly::data::read_image(td / "small.png").w == 16);
  ly::data::set_max_image_pixels(100);
  CHECK_FALSE(ly::data::probe_image(td / "small.png", &why));
  CHECK_THROWS_AS(ly::data::read_image(td / "small.png"), ly::DataError);
  ly::data::write_jpeg(td / "small.jpg", img);
  CHECK_THROWS_AS(ly::data::read_image(td / "small.jpg"), ly::DataError);
  ly::data::set_max_image_pixels(ly::data::default_max_image_pixels);
  CHECK(ly::data::read_image(td / "small.jpg").h == 16);
  // In a dataset the bomb is a skipped image with a warning naming it; the rest trains.
  const fs::path root = td / "cls";
  for (const char* split : {"train", "val"})
    for (const char* c : {"a", "b"}) {
      jpeg(root / split / c / "1.jpg", img);
      jpeg(root / split / c / "2.jpg", img);
    }
  lry_harden::write_bytes(root / "train" / "a" / "bomb.png", lry_harden::png_claiming(1000000, 1000000));
  Logs logs;
  ly::data::ClassifyAugment aug;
  auto d = ly::data::open_classify(root, 32, aug);
  CHECK(d.train->size() == 4);
  CHECK(logs.has("bomb.png", "too many pixels"));
}

TEST_CASE("item 5: class names that are not UTF-8 are refused when the dataset is read, naming them") {
  lry_test::TempDir td("lry_h5");
  ly::data::Image img(16, 16, 3, 100);
  jpeg(td / "images" / "train" / "1.jpg", img);
  write_text(td / "data.yaml", "path: .\ntrain: images/train\nval: images/train\nnames: [cat, \"d\xFFg\"]\n");
  const std::string msg = lry_test::message_of<ly::DataError>([&] { ly::data::load_dataset_yaml(td / "data.yaml"); });
  CHECK(msg.find("data.yaml") != std::string::npos);
  CHECK(msg.find("class 1") != std::string::npos);
  CHECK(msg.find("not valid UTF-8") != std::string::npos);
  CHECK(msg.find("d\\xFFg") != std::string::npos);
  // A classification class folder with such a name, likewise.
  for (const char* split : {"train", "val"})
    for (const char* c : {"ok", "b\xFE"}) jpeg(td / "cls" / split / c / "1.jpg", img);
  ly::data::ClassifyAugment aug;
  const std::string m2 = lry_test::message_of<ly::DataError>([&] { ly::data::open_classify(td / "cls", 32, aug); });
  CHECK(m2.find("not valid UTF-8") != std::string::npos);
  // And a checkpoint whose metadata holds one is a named CheckpointError, not a bare json error.
  ly::train::Checkpoint ck;
  ck.meta["names"] = {"d\xFFg"};
  ck.tensors["w"] = torch::ones({2});
  CHECK_THROWS_WITH_AS(ly::train::save_checkpoint(ck, td / "x.ckpt"), doctest::Contains("not valid UTF-8"), ly::CheckpointError);
  CHECK_FALSE(fs::exists(td / "x.ckpt"));
  // Config values too (they are saved as JSON in args.json and every checkpoint).
  CHECK_THROWS_WITH_AS(ly::parse_args({"name=r\xFFn"}), doctest::Contains("not valid UTF-8"), ly::ConfigError);
}

TEST_CASE("item 8: label rows slightly outside [0, 1] are clipped, polygons become boxes, a short names list is an error") {
  lry_test::TempDir td("lry_h8l");
  ly::data::Image img(16, 16, 3, 50);
  for (const char* n : {"a", "b", "c"}) png(td / "images" / (std::string(n) + ".png"), img);
  write_text(td / "labels" / "a.txt", "0 1.0000001 0.5 0.2 0.2\n1 0.5 -1e-7 0.2 0.2\n");
  write_text(td / "labels" / "b.txt", "1 0.1 0.2 0.5 0.2 0.3 0.6\n");  // a triangle
  write_text(td / "labels" / "c.txt", "0 1.2 0.5 0.1 0.1\n");           // far outside: still refused
  const auto images = ly::data::split_image_files({td / "images"});
  Logs logs;
  const auto idx = ly::data::build_label_index(images, 2, {});
  REQUIRE(idx.entries.size() == 2);
  REQUIRE(idx.entries[0].boxes.size() == 2);
  CHECK(idx.entries[0].boxes[0][1] == 1.0f);
  CHECK(idx.entries[0].boxes[1][2] == 0.0f);
  REQUIRE(idx.entries[1].boxes.size() == 1);
  const auto& tri = idx.entries[1].boxes[0];
  CHECK(tri[0] == 1.0f);
  CHECK(tri[1] == doctest::Approx(0.3));  // x 0.1 .. 0.5
  CHECK(tri[2] == doctest::Approx(0.4));  // y 0.2 .. 0.6
  CHECK(tri[3] == doctest::Approx(0.4));
  CHECK(tri[4] == doctest::Approx(0.4));
  CHECK(idx.stats.bad_labels == 1);
  CHECK(idx.class_overflows == 0);
  // Class id 2 with two names: the dataset refuses the split (on main: the image was skipped, training went on).
  write_text(td / "labels" / "a.txt", "2 0.5 0.5 0.2 0.2\n");
  ly::data::DetectAugment aug;
  aug.imgsz = 32;
  const std::string msg = lry_test::message_of<ly::DataError>(
      [&] { ly::data::DetectDataset::open_images(images, {"x", "y"}, aug, {}, "train"); });
  CHECK(msg.find("a.txt':1") != std::string::npos);
  CHECK(msg.find("'names' list is too short") != std::string::npos);
}

TEST_CASE("item 8: config parsing: batch overflow, a non-scalar cfg= key, a directory as cfg=") {
  CHECK_THROWS_WITH_AS(ly::parse_args({"batch=4294967300"}), doctest::Contains("batch=4294967300"), ly::ConfigError);
  CHECK(ly::parse_args({"batch=2147483647"}).batch == 2147483647);
  lry_test::TempDir td("lry_h8c");
  write_text(td / "cfg.yaml", "? [a, b]\n: 1\n");
  CHECK_THROWS_WITH_AS(ly::parse_args({"cfg=" + (td / "cfg.yaml").string()}), doctest::Contains("cfg.yaml:1"), ly::ConfigError);
  fs::create_directories(td / "dir.yaml");
  CHECK_THROWS_WITH_AS(ly::parse_args({"cfg=" + (td / "dir.yaml").string()}), doctest::Contains("is a directory"), ly::ConfigError);
}

TEST_CASE("fuzz finding: a dataset YAML with a huge nc and no names is refused, not allocated") {
  lry_test::TempDir td("lry_hfz");
  fs::create_directories(td / "images");
  write_text(td / "data.yaml", "\ntrain: images\nval: images/\nnc: 111111111111321689");  // found by fuzz_dataset_yaml (OOM)
  const std::string msg = lry_test::message_of<ly::DataError>([&] { ly::data::load_dataset_yaml(td / "data.yaml"); });
  CHECK(msg.find("nc") != std::string::npos);
  CHECK(msg.find("1 .. 100000") != std::string::npos);
  write_text(td / "ok.yaml", "train: images\nval: images\nnc: 3\n");
  CHECK(ly::data::load_dataset_yaml(td / "ok.yaml").names.size() == 3);
}
