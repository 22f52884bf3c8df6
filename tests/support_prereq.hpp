#pragma once
// What a test case needs beyond the build: the original's fixtures, a python3 with torch, Chromium.
//
// A case states its prerequisites once, at registration:
//
//   TEST_CASE("..." * lry_test::needs({lry_test::Need::fixtures})) {
//     LRY_NEED(lry_test::Need::fixtures);
//     ...
//   }
//
// Locally a missing prerequisite makes doctest skip the case (it is counted in the summary line's
// "skipped", never as passed). In strict mode -- CI=true, as CI runs, or LRY_STRICT=1 -- the case runs and
// LRY_NEED fails it with a sentence naming what is missing and how to get it. Every case also has to make
// at least one assertion (tests/main.cpp), so a body that returns early without checking anything fails.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string>

namespace lry_test {

enum class Need {
  fixtures,      // ../shared/fixtures/libreyolo beside the checkout (the original's networks as data)
  python_torch,  // a python3 that imports torch and numpy (Debian's python3-torch): cross-checks against PyTorch
  chromium,      // /usr/bin/chromium: the timeline page rendered in a real browser
};

// CI=true (CI's environment) or LRY_STRICT=1: a missing prerequisite is a failure, not a skip.
inline bool strict() {
  auto is = [](const char* var, const char* value) {
    const char* e = std::getenv(var);
    return e && std::string(e) == value;
  };
  return is("CI", "true") || is("CI", "1") || is("LRY_STRICT", "1");
}

inline std::filesystem::path fixtures_root() {
  return std::filesystem::path(LIBREYOLO_SOURCE_DIR "/../shared/fixtures/libreyolo");
}

// "python3" or Debian's /usr/bin/python3 (the PATH one may be a pyenv Python without torch); "" = none.
// Asked once per process.
inline const std::string& python_with_torch() {
  static const std::string py = [] {
    for (const char* p : {"python3", "/usr/bin/python3"})
      if (std::system((std::string(p) + " -c \"import torch, numpy\" > /dev/null 2>&1").c_str()) == 0) return std::string(p);
    return std::string();
  }();
  return py;
}

inline bool have(Need n) {
  switch (n) {
    case Need::fixtures: {
      static const bool ok = std::filesystem::exists(fixtures_root() / "README.md");
      return ok;
    }
    case Need::python_torch: return !python_with_torch().empty();
    case Need::chromium: {
      static const bool ok = std::filesystem::exists("/usr/bin/chromium");
      return ok;
    }
  }
  return false;
}

inline std::string missing_message(Need n) {
  switch (n) {
    case Need::fixtures:
      return "missing prerequisite: the fixtures folder " + fixtures_root().lexically_normal().string() +
             " (shared/fixtures/libreyolo beside the checkout)";
    case Need::python_torch:
      return "missing prerequisite: a python3 that imports torch and numpy (apt-get install python3-torch; "
             "scripts/test.sh installs it)";
    case Need::chromium:
      return "missing prerequisite: /usr/bin/chromium (apt-get install chromium; LIBREYOLO_WITH_CHROMIUM=1 scripts/deps.sh)";
  }
  return "missing prerequisite";
}

// Registration-time decorator: skip the case when a prerequisite is missing, unless strict.
inline doctest::skip needs(std::initializer_list<Need> list) {
  bool missing = false;
  for (Need n : list) missing = missing || !have(n);
  return doctest::skip(missing && !strict());
}

}  // namespace lry_test

// Inside a case registered with lry_test::needs({...}): fail, naming it, when the prerequisite is missing
// (reached only in strict mode; locally the case was skipped).
#define LRY_NEED(n) REQUIRE_MESSAGE(lry_test::have(n), lry_test::missing_message(n))
