#pragma once
// Detection datasets in YOLO format: the dataset YAML and how a split names its images.
//
// YAML keys: `path` (dataset root; relative to the YAML's folder; default: that folder), `train`,
// `val` (required), `test` (optional): each a path or a list of paths relative to the root, each an
// image folder (searched recursively) or a list file (one image path per line; relative lines are
// relative to the list file's folder, blank lines and lines starting with '#' are ignored);
// `names`: a list, or a map {0: a, 1: b, ...} with keys exactly 0..n-1; `nc` (optional) must match
// the number of names, or alone gives names class0..class{nc-1}. Other keys (download, ...) are
// ignored. Every error is a DataError/ConfigError naming the file, the line and the key.
//
// Labels: one text file per image, found by the images/ -> labels/ sibling rule (the last
// "/images/" of the image path becomes "/labels/", the extension becomes .txt; without an images/
// folder the .txt sits next to the image).
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/utf8.hpp>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace libreyolo::data {

// The most classes a dataset may declare (ImageNet-21k has 21841).
inline constexpr long long max_classes = 100000;

struct DatasetYaml {
  std::filesystem::path root;
  std::vector<std::filesystem::path> train, val, test;  // absolute: image folders or list files
  std::vector<std::string> names;
  std::filesystem::path file;  // the YAML itself (for messages)

  const std::vector<std::filesystem::path>& split(const std::string& name) const;
};

namespace detail {

LIBREYOLO_INLINE std::string yaml_where(const std::filesystem::path& file, const YAML::Node& node, const std::string& key);

LIBREYOLO_INLINE bool is_image_file(const std::filesystem::path& p);

// `train: a` or `train: [a, b]`; each resolved against the root and required to exist.
LIBREYOLO_INLINE std::vector<std::filesystem::path> yaml_split_paths(const std::filesystem::path& file, const YAML::Node& node,
                                                                     const std::string& key, const std::filesystem::path& root);

LIBREYOLO_INLINE std::vector<std::string> yaml_names(const std::filesystem::path& file, const YAML::Node& node);

}  // namespace detail

// Parses a dataset YAML; every path is resolved and checked to exist.
LIBREYOLO_INLINE DatasetYaml load_dataset_yaml(const std::filesystem::path& yaml_file);

// The label file of an image: images/ -> labels/ (last occurrence), extension -> .txt.
LIBREYOLO_INLINE std::filesystem::path label_path_for(const std::filesystem::path& image);

// The images of one split, in order: folders searched recursively (sorted), list files line by
// line. Listed files are not checked here (a missing one is a counted skip of the label index).
LIBREYOLO_INLINE std::vector<std::filesystem::path> split_image_files(const std::vector<std::filesystem::path>& sources);

}  // namespace libreyolo::data

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/data/detect_yaml-inl.hpp>
#endif
