// The strict reading of infertapd's configuration (docs/configuration.md),
// shared by every section (the daemon's, degradation's): an unknown key, a
// duplicate key, a value of the wrong type or out of range becomes one line
// naming the key and its line, e.g.
//   "capture.head_bytes: must be 16..4096, got 5000 (line 3)"
//   "unknown key 'output.rotate' (line 14); known keys in output: stdout, file, ..."
// so a typo never silently falls back to a default. Reading goes on after a
// problem, so every problem of a document is reported at once, in order.
//
// Header-only: the layers that read configuration link yaml-cpp, the ones
// below them (and the fuzzers) do not.
#pragma once

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace infertap::base {

// The text of a configuration file; nullopt with *error "PATH: cannot open: ..." or "PATH: read failed: ...".
inline std::optional<std::string> read_config_file(const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (error) *error = path + ": cannot open: " + std::strerror(errno);
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    if (error) *error = path + ": read failed: " + std::strerror(errno);
    return std::nullopt;
  }
  return text.str();
}

// Each line of `lines` as "PATH: line": a file's problems name the file.
inline std::string prefix_lines(const std::string& path, const std::string& lines) {
  std::string out;
  std::istringstream in(lines);
  for (std::string line; std::getline(in, line);) out += (out.empty() ? "" : "\n") + path + ": " + line;
  return out;
}

class YamlReader {
 public:
  using Read = std::function<void(const YAML::Node& value, const std::string& key)>;
  struct Field {
    std::string name;
    Read read;
  };

  explicit YamlReader(std::vector<std::string>& errors) : errors_(errors) {}

  // " (line N)" of a node read from a document; "" for one built in memory
  // (a command-line value).
  static std::string at(const YAML::Node& node) {
    const YAML::Mark mark = node.Mark();
    return mark.line < 0 ? "" : " (line " + std::to_string(mark.line + 1) + ")";
  }

  void fail(const YAML::Node& node, const std::string& key, const std::string& what) {
    errors_.push_back(key + ": " + what + at(node));
  }
  void error(std::string line) { errors_.push_back(std::move(line)); }
  std::size_t error_count() const { return errors_.size(); }

  // A mapping whose keys must all be among `fields`, each read by its field;
  // prefix "" is the document itself. A null mapping is an empty one, and a
  // null value keeps the key's default (`key:` is the same as leaving it out).
  void fields(const YAML::Node& node, const std::string& prefix, const std::vector<Field>& fields) {
    if (node.IsNull()) return;
    if (!node.IsMap()) {
      if (prefix.empty()) {
        errors_.push_back("the configuration must be a mapping of sections (key: value)" + at(node));
      } else {
        fail(node, prefix, "must be a mapping (key: value)");
      }
      return;
    }
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node k = it->first;  // by value: the iterator yields a temporary pair
      const YAML::Node v = it->second;
      if (!k.IsScalar()) {
        errors_.push_back("a key " + (prefix.empty() ? std::string("at the top level") : "in " + prefix) +
                          " is not a plain name" + at(k));
        continue;
      }
      const std::string key = prefix.empty() ? k.Scalar() : prefix + "." + k.Scalar();
      if (!seen.insert(k.Scalar()).second) {
        errors_.push_back("duplicate key '" + key + "'" + at(k));
        continue;
      }
      const Field* field = find(fields, k.Scalar());
      if (!field) {
        errors_.push_back("unknown key '" + key + "'" + at(k) + "; known keys" + (prefix.empty() ? "" : " in " + prefix) +
                          ": " + names(fields));
        continue;
      }
      if (!v.IsNull()) field->read(v, key);
    }
  }

  // Scalar text, or nullopt (with an error) for a mapping or a list.
  std::optional<std::string> scalar(const YAML::Node& node, const std::string& key, const std::string& expected) {
    if (node.IsScalar()) return node.Scalar();
    fail(node, key, "must be " + expected + ", got a " + (node.IsMap() ? "mapping" : "list"));
    return std::nullopt;
  }

  std::optional<std::string> string(const YAML::Node& node, const std::string& key) {
    return scalar(node, key, "a string");
  }

  // Integer in [lo, hi]; with `sizes`, a suffix B, KiB, MiB or GiB too.
  std::optional<std::uint64_t> integer(const YAML::Node& node, const std::string& key, std::uint64_t lo,
                                       std::uint64_t hi, bool sizes = false) {
    const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
    const std::string expected =
        sizes ? "a size in bytes " + range + " (suffix B, KiB, MiB or GiB allowed)" : "an integer " + range;
    const auto text = scalar(node, key, expected);
    if (!text) return std::nullopt;
    std::string_view s = *text;
    const bool negative = !s.empty() && s.front() == '-';
    if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    bool ok = ec == std::errc{} && end != s.data();
    std::string_view rest(end, static_cast<std::size_t>(s.data() + s.size() - end));
    if (ok && !rest.empty()) {
      const std::uint64_t mult = sizes ? size_suffix(rest) : 0;
      ok = mult != 0 && value <= UINT64_MAX / mult;
      value *= ok ? mult : 1;
    }
    if (!ok) {
      fail(node, key,
           ec == std::errc::result_out_of_range ? "must be " + range + ", got " + *text
                                                : "must be " + expected + ", got '" + *text + "'");
      return std::nullopt;
    }
    if ((negative && value != 0) || value < lo || value > hi) {
      fail(node, key, "must be " + range + ", got " + *text);
      return std::nullopt;
    }
    return value;
  }

  // A number in [lo, hi] (a fraction allowed); never NaN or infinite.
  std::optional<double> number(const YAML::Node& node, const std::string& key, double lo, double hi) {
    const std::string range = number_range(lo, hi);
    const auto text = scalar(node, key, "a number " + range);
    if (!text) return std::nullopt;
    const std::string& s = *text;
    const bool plain = !s.empty() && s.find_first_not_of("0123456789+-.eE") == std::string::npos;
    char* end = nullptr;
    errno = 0;
    const double value = plain ? std::strtod(s.c_str(), &end) : 0;
    if (!plain || end != s.c_str() + s.size() || errno != 0 || !std::isfinite(value)) {
      fail(node, key, "must be a number " + range + ", got '" + s + "'");
      return std::nullopt;
    }
    if (value < lo || value > hi) {
      fail(node, key, "must be " + range + ", got " + s);
      return std::nullopt;
    }
    return value;
  }

  std::optional<bool> boolean(const YAML::Node& node, const std::string& key) {
    const auto text = scalar(node, key, "true or false");
    bool value = false;
    if (text && YAML::convert<bool>::decode(node, value)) return value;
    if (text) fail(node, key, "must be true or false, got '" + *text + "'");
    return std::nullopt;
  }

  // A list; each item is handed to `item` with the key "key[i]".
  void list(const YAML::Node& node, const std::string& key,
            const std::function<void(const YAML::Node& item, const std::string& item_key)>& item) {
    if (!node.IsSequence()) {
      fail(node, key, std::string("must be a list (e.g. [a, b]), got a ") + (node.IsMap() ? "mapping" : "scalar"));
      return;
    }
    for (std::size_t i = 0; i < node.size(); ++i) item(node[i], key + "[" + std::to_string(i) + "]");
  }

  // "16..4096", "0.1..86400": how ranges read in messages and --help.
  static std::string number_range(double lo, double hi) {
    std::ostringstream text;
    text << lo << ".." << hi;
    return text.str();
  }

 private:
  static const Field* find(const std::vector<Field>& fields, const std::string& name) {
    for (const Field& f : fields) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }
  static std::string names(const std::vector<Field>& fields) {
    std::string out;
    for (const Field& f : fields) out += (out.empty() ? "" : ", ") + f.name;
    return out;
  }
  static std::uint64_t size_suffix(std::string_view rest) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (rest == "B") return 1;
    if (rest == "KiB") return 1ull << 10;
    if (rest == "MiB") return 1ull << 20;
    if (rest == "GiB") return 1ull << 30;
    return 0;
  }

  std::vector<std::string>& errors_;
};

}  // namespace infertap::base
