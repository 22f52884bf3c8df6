#pragma once
// Definitions of detect_yaml.hpp (core/api.hpp): included by detect_yaml.hpp when header-only, compiled once otherwise.
#include <libreyolo/data/detect_yaml.hpp>
#include <libreyolo/core/yaml_keys.hpp>  // config_detail::refuse_repeated_yaml_keys

namespace libreyolo::data {

LIBREYOLO_INLINE const std::vector<std::filesystem::path>& DatasetYaml::split(const std::string& name) const {
  if (name == "train") return train;
  if (name == "val") return val;
  if (name == "test") return test;
  throw ConfigError("dataset split '" + name + "' is unknown (allowed: train, val, test)");
}

namespace detail {

LIBREYOLO_INLINE std::string yaml_where(const std::filesystem::path& file, const YAML::Node& node, const std::string& key) {
  const int line = node.Mark().line;
  return "dataset YAML '" + file.string() + "'" + (line >= 0 ? ":" + std::to_string(line + 1) : std::string()) +
         ", key '" + key + "'";
}

LIBREYOLO_INLINE bool is_image_file(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

LIBREYOLO_INLINE std::vector<std::filesystem::path> yaml_split_paths(const std::filesystem::path& file, const YAML::Node& node,
                                                                     const std::string& key, const std::filesystem::path& root) {
  std::vector<std::string> raw;
  if (node.IsScalar()) {
    raw.push_back(node.as<std::string>());
  } else if (node.IsSequence()) {
    for (const auto& item : node) {
      if (!item.IsScalar())
        throw DataError(yaml_where(file, item, key) + ": each entry must be a path (an image folder or a list file)");
      raw.push_back(item.as<std::string>());
    }
  } else {
    throw DataError(yaml_where(file, node, key) + ": must be a path or a list of paths (image folders or list files)");
  }
  if (raw.empty()) throw DataError(yaml_where(file, node, key) + ": the list of paths is empty");
  std::vector<std::filesystem::path> out;
  for (const auto& r : raw) {
    if (r.empty()) throw DataError(yaml_where(file, node, key) + ": an empty path is not allowed");
    std::filesystem::path p = std::filesystem::path(r).is_absolute() ? std::filesystem::path(r) : root / r;
    p = p.lexically_normal();
    std::error_code ec;
    if (!std::filesystem::exists(p, ec))
      throw DataError(yaml_where(file, node, key) + ": '" + r + "' resolves to '" + p.string() +
                      "', which does not exist (expected an image folder or a list file of image paths)");
    out.push_back(p);
  }
  return out;
}

LIBREYOLO_INLINE std::vector<std::string> yaml_names(const std::filesystem::path& file, const YAML::Node& node) {
  std::vector<std::string> names;
  if (node.IsSequence()) {
    for (const auto& item : node) {
      if (!item.IsScalar()) throw DataError(yaml_where(file, item, "names") + ": each class name must be a string");
      names.push_back(item.as<std::string>());
    }
  } else if (node.IsMap()) {
    std::map<long long, std::string> by_id;
    for (const auto& kv : node) {
      long long id = -1;
      try {
        id = kv.first.as<long long>();
      } catch (const YAML::Exception&) {
        throw DataError(yaml_where(file, kv.first, "names") + ": map key '" + kv.first.Scalar() +
                        "' is not an integer class id");
      }
      if (!kv.second.IsScalar()) throw DataError(yaml_where(file, kv.second, "names") + ": class names must be strings");
      if (id < 0 || !by_id.emplace(id, kv.second.as<std::string>()).second)
        throw DataError(yaml_where(file, kv.first, "names") + ": class id " + std::to_string(id) +
                        (id < 0 ? " is negative" : " appears twice"));
    }
    long long expect = 0;
    for (const auto& [id, name] : by_id) {
      if (id != expect)
        throw DataError(yaml_where(file, node, "names") + ": class ids must be exactly 0.." +
                        std::to_string(by_id.size() - 1) + ", but id " + std::to_string(expect) + " is missing");
      names.push_back(name);
      ++expect;
    }
  } else {
    throw DataError(yaml_where(file, node, "names") + ": must be a list of class names or a map {id: name}");
  }
  if (names.empty()) throw DataError(yaml_where(file, node, "names") + ": there are no class names");
  if (names.size() > static_cast<size_t>(max_classes))
    throw DataError(yaml_where(file, node, "names") + ": " + std::to_string(names.size()) + " class names; allowed: at most " +
                    std::to_string(max_classes));
  for (size_t k = 0; k < names.size(); ++k)  // class names go into checkpoints and results.json (JSON: UTF-8 only)
    if (auto why = utf8::problem(names[k]); !why.empty())
      throw DataError(yaml_where(file, node, "names") + ": class " + std::to_string(k) + "'s name " + why +
                      "; allowed: UTF-8 text (save the YAML as UTF-8)");
  return names;
}

}  // namespace detail

LIBREYOLO_INLINE DatasetYaml load_dataset_yaml(const std::filesystem::path& yaml_file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(yaml_file, ec))
    throw DataError("dataset YAML '" + yaml_file.string() + "' does not exist or is not a file");
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(yaml_file.string());
  } catch (const YAML::ParserException& e) {
    throw DataError("dataset YAML '" + yaml_file.string() + "':" + std::to_string(e.mark.line + 1) +
                    ": not valid YAML (" + e.msg + ")");
  } catch (const YAML::Exception& e) {
    throw DataError("dataset YAML '" + yaml_file.string() + "': cannot be read (" + e.what() + ")");
  }
  if (!doc.IsMap())
    throw DataError("dataset YAML '" + yaml_file.string() + "': the top level must be a map with keys path, train, "
                    "val, names");
  config_detail::refuse_repeated_yaml_keys<DataError>(doc, "dataset YAML '" + yaml_file.string() + "'");
  DatasetYaml d;
  d.file = fs::absolute(yaml_file).lexically_normal();
  const fs::path base = d.file.parent_path();
  d.root = base;
  if (const auto p = doc["path"]; p && !p.IsNull()) {
    if (!p.IsScalar()) throw DataError(detail::yaml_where(d.file, p, "path") + ": must be a folder path");
    const fs::path r = p.as<std::string>();
    d.root = (r.is_absolute() ? r : base / r).lexically_normal();
    if (!fs::is_directory(d.root, ec))
      throw DataError(detail::yaml_where(d.file, p, "path") + ": dataset root '" + d.root.string() +
                      "' does not exist or is not a folder");
  }
  for (const char* key : {"train", "val"})
    if (!doc[key] || doc[key].IsNull())
      throw DataError("dataset YAML '" + d.file.string() + "': the required key '" + key +
                      "' is missing (give an image folder or a list file, relative to 'path')");
  d.train = detail::yaml_split_paths(d.file, doc["train"], "train", d.root);
  d.val = detail::yaml_split_paths(d.file, doc["val"], "val", d.root);
  if (const auto t = doc["test"]; t && !t.IsNull() && !(t.IsScalar() && t.Scalar().empty()))
    d.test = detail::yaml_split_paths(d.file, t, "test", d.root);
  const auto names = doc["names"], nc = doc["nc"];
  long long n_classes = -1;
  if (nc && !nc.IsNull()) {
    try {
      n_classes = nc.as<long long>();
    } catch (const YAML::Exception&) {
      n_classes = -1;
    }
    if (n_classes < 1 || n_classes > max_classes)  // found by fuzzing: nc: 10^17 alone made 10^17 names
      throw DataError(detail::yaml_where(d.file, nc, "nc") + ": value '" + nc.Scalar() + "' is not an integer 1 .. " +
                      std::to_string(max_classes));
  }
  if (names && !names.IsNull()) {
    d.names = detail::yaml_names(d.file, names);
    if (n_classes >= 1 && static_cast<size_t>(n_classes) != d.names.size())
      throw DataError(detail::yaml_where(d.file, nc, "nc") + ": nc = " + std::to_string(n_classes) + " but 'names' has " +
                      std::to_string(d.names.size()) + " entries (they must agree)");
  } else if (n_classes >= 1) {
    for (long long k = 0; k < n_classes; ++k) d.names.push_back("class" + std::to_string(k));
  } else {
    throw DataError("dataset YAML '" + d.file.string() + "': neither 'names' nor 'nc' is given (give the class names)");
  }
  return d;
}

LIBREYOLO_INLINE std::filesystem::path label_path_for(const std::filesystem::path& image) {
  const std::string s = image.string();
  const std::string from = "/images/", to = "/labels/";
  const size_t at = s.rfind(from);
  std::filesystem::path p = at == std::string::npos ? image : std::filesystem::path(s.substr(0, at) + to + s.substr(at + from.size()));
  return p.replace_extension(".txt");
}

LIBREYOLO_INLINE std::vector<std::filesystem::path> split_image_files(const std::vector<std::filesystem::path>& sources) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  for (const auto& src : sources) {
    std::error_code ec;
    if (fs::is_directory(src, ec)) {
      std::vector<fs::path> found;
      for (auto it = fs::recursive_directory_iterator(src, fs::directory_options::follow_directory_symlink, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->is_regular_file() && detail::is_image_file(it->path())) found.push_back(it->path().lexically_normal());
      if (ec) throw DataError("cannot list image folder '" + src.string() + "': " + ec.message());
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
      continue;
    }
    std::ifstream in(src);
    if (!in) throw DataError("cannot open the image list file '" + src.string() + "'");
    std::string line;
    while (std::getline(in, line)) {
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      size_t b = 0;
      while (b < line.size() && std::isspace(static_cast<unsigned char>(line[b]))) ++b;
      if (b == line.size() || line[b] == '#') continue;
      const fs::path p = line.substr(b);
      out.push_back((p.is_absolute() ? p : src.parent_path() / p).lexically_normal());
    }
  }
  return out;
}

}  // namespace libreyolo::data
