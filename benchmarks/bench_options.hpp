#pragma once
// "--name value" options of the benchmark programs: each name is bound to a field; an unknown name, a
// missing value or a malformed number is an error that says what is allowed.
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace bench {

class Options {
 public:
  Options& add(std::string name, std::string* field) { return push(std::move(name), field); }
  Options& add(std::string name, int* field) { return push(std::move(name), field); }
  Options& add(std::string name, bool* field) { return push(std::move(name), field); }  // 1|0|true|false

  void parse(int argc, char** argv) const {
    for (int i = 1; i < argc; i += 2) {
      const std::string k = argv[i];
      if (i + 1 >= argc) throw std::invalid_argument("option " + k + " needs a value");
      set(k, argv[i + 1]);
    }
  }

 private:
  using Field = std::variant<std::string*, int*, bool*>;
  Options& push(std::string name, Field f) {
    names_.push_back(std::move(name));
    fields_.push_back(f);
    return *this;
  }
  void set(const std::string& k, const std::string& v) const {
    for (size_t j = 0; j < names_.size(); ++j) {
      if (names_[j] != k) continue;
      if (auto* s = std::get_if<std::string*>(&fields_[j])) {
        **s = v;
      } else if (auto* n = std::get_if<int*>(&fields_[j])) {
        size_t used = 0;
        try {
          **n = std::stoi(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != v.size() || v.empty()) throw std::invalid_argument(k + " " + v + ": expected an integer");
      } else {
        auto* b = std::get<bool*>(fields_[j]);
        if (v == "1" || v == "true") *b = true;
        else if (v == "0" || v == "false") *b = false;
        else throw std::invalid_argument(k + " " + v + ": expected 1, 0, true or false");
      }
      return;
    }
    std::string allowed;
    for (const auto& n : names_) allowed += " " + n;
    throw std::invalid_argument("unknown option " + k + "; allowed:" + allowed);
  }
  std::vector<std::string> names_;
  std::vector<Field> fields_;
};

}  // namespace bench
