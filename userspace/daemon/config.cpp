#include "daemon/config.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "base/host_port.h"
#include "infertap/abi.h"

namespace infertap::daemon {
namespace {

// Collects every problem of a document, in document order.
class Parser {
 public:
  using Handler = std::function<void(const YAML::Node& value, const std::string& key)>;
  struct Field {
    const char* name;
    Handler handle;
  };

  std::vector<std::string> errors;

  static std::string at(const YAML::Node& node) {
    const YAML::Mark mark = node.Mark();
    if (mark.line < 0) return "";
    return " (line " + std::to_string(mark.line + 1) + ")";
  }

  void fail(const YAML::Node& node, const std::string& key, const std::string& what) {
    errors.push_back(key + ": " + what + at(node));
  }

  // A mapping whose keys must all be among `fields`; null = empty.
  void map(const YAML::Node& node, const std::string& prefix, const std::vector<Field>& fields) {
    if (node.IsNull()) return;
    if (!node.IsMap()) {
      if (prefix.empty()) {
        errors.push_back("the configuration must be a mapping of sections (key: value)" + at(node));
      } else {
        fail(node, prefix, "must be a mapping (key: value)");
      }
      return;
    }
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node k = it->first;  // by value: the iterator yields a temporary pair
      const YAML::Node v = it->second;
      const std::string where = prefix.empty() ? "" : prefix + ".";
      if (!k.IsScalar()) {
        errors.push_back("a key " + (prefix.empty() ? std::string("at the top level") : "in " + prefix) +
                         " is not a plain name" + at(k));
        continue;
      }
      const std::string name = k.Scalar();
      const std::string key = where + name;
      if (!seen.insert(name).second) {
        errors.push_back("duplicate key '" + key + "'" + at(k));
        continue;
      }
      const Field* field = nullptr;
      for (const Field& f : fields) {
        if (name == f.name) field = &f;
      }
      if (!field) {
        std::string known;
        for (const Field& f : fields) known += (known.empty() ? "" : ", ") + std::string(f.name);
        errors.push_back("unknown key '" + key + "'" + at(k) + "; known keys" +
                         (prefix.empty() ? "" : " in " + prefix) + ": " + known);
        continue;
      }
      field->handle(v, key);
    }
  }

  // Scalar text, or nullopt (with an error) for a mapping / sequence. Null
  // values are reported as absent by the callers (the default stays).
  std::optional<std::string> scalar(const YAML::Node& node, const std::string& key, const std::string& expected) {
    if (!node.IsScalar()) {
      fail(node, key, "must be " + expected + ", got a " + (node.IsMap() ? "mapping" : "list"));
      return std::nullopt;
    }
    return node.Scalar();
  }

  // Integer in [lo, hi]; suffixes KiB/MiB/GiB allowed when `sizes`.
  std::optional<std::uint64_t> integer(const YAML::Node& node, const std::string& key, std::uint64_t lo,
                                       std::uint64_t hi, bool sizes = false) {
    const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
    const std::string expected = sizes ? "a size in bytes " + range + " (suffix B, KiB, MiB or GiB allowed)"
                                       : "an integer " + range;
    const auto text = scalar(node, key, expected);
    if (!text) return std::nullopt;
    std::string_view s = *text;
    bool negative = false;
    if (!s.empty() && s.front() == '-') {
      negative = true;
      s.remove_prefix(1);
    } else if (!s.empty() && s.front() == '+') {
      s.remove_prefix(1);
    }
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    std::string_view rest(end, static_cast<std::size_t>(s.data() + s.size() - end));
    bool ok = ec == std::errc{} && end != s.data();
    if (ok && !rest.empty()) {
      while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
      std::uint64_t mult = 0;
      if (sizes) {
        if (rest == "B") mult = 1;
        if (rest == "KiB") mult = 1ull << 10;
        if (rest == "MiB") mult = 1ull << 20;
        if (rest == "GiB") mult = 1ull << 30;
      }
      if (mult == 0 || value > UINT64_MAX / mult) {
        ok = false;
      } else {
        value *= mult;
      }
    }
    if (!ok) {
      if (ec == std::errc::result_out_of_range) {
        fail(node, key, "must be " + range + ", got " + *text);
      } else {
        fail(node, key, "must be " + expected + ", got '" + *text + "'");
      }
      return std::nullopt;
    }
    if ((negative && value != 0) || value < lo || value > hi) {
      fail(node, key, "must be " + range + ", got " + *text);
      return std::nullopt;
    }
    return value;
  }

  std::optional<double> number(const YAML::Node& node, const std::string& key, double lo, double hi) {
    std::ostringstream range_text;
    range_text << lo << ".." << hi;
    const std::string range = range_text.str();
    const auto text = scalar(node, key, "a number " + range);
    if (!text) return std::nullopt;
    const std::string& s = *text;
    bool plain = !s.empty();
    for (char c : s) {
      if (!std::strchr("0123456789+-.eE", c)) plain = false;
    }
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
    if (!text) return std::nullopt;
    bool value = false;
    if (!YAML::convert<bool>::decode(node, value)) {
      fail(node, key, "must be true or false, got '" + *text + "'");
      return std::nullopt;
    }
    return value;
  }

  std::optional<std::string> string(const YAML::Node& node, const std::string& key) {
    return scalar(node, key, "a string");
  }

  // A list of items; each item is handed to `item` with key "key[i]".
  void list(const YAML::Node& node, const std::string& key,
            const std::function<void(const YAML::Node&, const std::string&)>& item) {
    if (!node.IsSequence()) {
      fail(node, key, std::string("must be a list (e.g. [a, b]), got a ") + (node.IsMap() ? "mapping" : "scalar"));
      return;
    }
    for (std::size_t i = 0; i < node.size(); ++i) {
      item(node[i], key + "[" + std::to_string(i) + "]");
    }
  }
};

// Null values keep the default: `file:` with nothing after it is the same as
// leaving the key out.
template <typename T, typename Get>
void set(const YAML::Node& node, T* out, Get&& get) {
  if (node.IsNull()) return;
  if (auto v = get()) *out = static_cast<T>(*v);
}

// A listen address of the file names its host and a port other than 0.
bool valid_listen(const std::string& s) {
  const auto address = base::split_host_port(s);
  return address && !address->host.empty() && address->port != 0;
}

bool has_control_chars(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

void parse_document(Parser& p, const YAML::Node& root, DaemonConfig& c) {
  using Field = Parser::Field;
  using Node = YAML::Node;

  const std::vector<Field> capture = {
      {"attach",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         const auto v = p.scalar(n, k, "auto, sock, tracepoint or raw_tp");
         if (!v) return;
         std::string s = *v;
         for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
         if (s == "auto") {
           c.capture.attach = capture::AttachMethod::automatic;
         } else if (s == "sock") {
           c.capture.attach = capture::AttachMethod::socket_tracepoints;
         } else if (s == "tracepoint") {
           c.capture.attach = capture::AttachMethod::tracepoints;
         } else if (s == "raw_tp") {
           c.capture.attach = capture::AttachMethod::raw_tracepoints;
         } else {
           p.fail(n, k, "must be auto, sock, tracepoint or raw_tp, got '" + *v + "'");
         }
       }},
      {"head_bytes",
       [&](const Node& n, const std::string& k) {
         set(n, &c.capture.head_bytes, [&] { return p.integer(n, k, 16, ITAP_HEAD_MAX); });
       }},
      {"tail_bytes",
       [&](const Node& n, const std::string& k) {
         set(n, &c.capture.tail_bytes, [&] { return p.integer(n, k, 0, ITAP_TAIL_MAX); });
       }},
      {"delivery_signals",
       [&](const Node& n, const std::string& k) { set(n, &c.capture.path_signals, [&] { return p.boolean(n, k); }); }},
      {"ringbuf_mb",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         const auto v = p.integer(n, k, 1, 1024);
         if (!v) return;
         if ((*v & (*v - 1)) != 0) {
           p.fail(n, k, "must be a power of two (1, 2, 4 .. 1024), got " + std::to_string(*v));
           return;
         }
         c.capture.ringbuf_bytes = static_cast<std::uint32_t>(*v << 20);
       }},
      {"wakeup_bytes",
       [&](const Node& n, const std::string& k) {
         set(n, &c.capture.wakeup_bytes, [&] { return p.integer(n, k, 0, 256ull << 20, true); });
       }},
      {"ignore_self",
       [&](const Node& n, const std::string& k) {
         set(n, &c.capture.ignore_self, [&] { return p.boolean(n, k); });
       }},
  };

  const std::vector<Field> targeting = {
      {"pids",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         p.list(n, k, [&](const Node& item, const std::string& ik) {
           if (auto v = p.integer(item, ik, 1, UINT32_MAX)) c.targeting.pids.push_back(static_cast<std::uint32_t>(*v));
         });
       }},
      {"ports",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         p.list(n, k, [&](const Node& item, const std::string& ik) {
           if (auto v = p.integer(item, ik, 1, 65535)) c.targeting.ports.push_back(static_cast<std::uint16_t>(*v));
         });
       }},
      {"cgroups",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         p.list(n, k, [&](const Node& item, const std::string& ik) {
           const auto v = item.IsNull() ? std::nullopt : p.string(item, ik);
           if (!v) {
             if (item.IsNull()) p.fail(item, ik, "must be a cgroup v2 path, got nothing");
             return;
           }
           if (v->empty() || v->front() != '/') {
             p.fail(item, ik, "must be an absolute cgroup v2 path (\"/kubepods.slice/...\"), got '" + *v + "'");
             return;
           }
           c.targeting.cgroups.push_back(*v);
         });
       }},
      {"process_name_patterns",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         p.list(n, k, [&](const Node& item, const std::string& ik) {
           const auto v = item.IsNull() ? std::nullopt : p.string(item, ik);
           if (!v || v->empty()) {
             if (!v && !item.IsNull()) return;
             p.fail(item, ik, "must be a non-empty glob (e.g. \"vllm*\")");
             return;
           }
           c.targeting.process_name_patterns.push_back(*v);
         });
       }},
  };

  const std::vector<Field> stall = {
      {"floor_ms",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         if (auto v = p.number(n, k, 0, 3'600'000)) c.pipeline.stall_floor_ns = static_cast<std::uint64_t>(*v * 1e6);
       }},
      {"ratio",
       [&](const Node& n, const std::string& k) { set(n, &c.pipeline.stall_ratio, [&] { return p.number(n, k, 0, 1000); }); }},
  };

  const std::vector<Field> pipeline = {
      {"stream_idle_timeout_s",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         if (auto v = p.number(n, k, 0.001, 86'400)) c.pipeline.stream_idle_timeout_ns = static_cast<std::uint64_t>(*v * 1e9);
       }},
      {"conn_idle_timeout_s",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         if (auto v = p.number(n, k, 0.001, 604'800)) c.pipeline.conn_idle_timeout_ns = static_cast<std::uint64_t>(*v * 1e9);
       }},
      {"max_timeline_events",
       [&](const Node& n, const std::string& k) {
         set(n, &c.pipeline.max_timeline_events, [&] { return p.integer(n, k, 1, 10'000'000); });
       }},
      {"request_body_head_bytes",
       [&](const Node& n, const std::string& k) {
         set(n, &c.pipeline.request_body_head, [&] { return p.integer(n, k, 0, 1ull << 20, true); });
       }},
  };

  const std::vector<Field> limits = {
      {"max_connections",
       [&](const Node& n, const std::string& k) {
         set(n, &c.pipeline.max_connections, [&] { return p.integer(n, k, 1, 16'777'216); });
       }},
      {"max_streams_in_memory",
       [&](const Node& n, const std::string& k) {
         set(n, &c.limits.max_streams_in_memory, [&] { return p.integer(n, k, 0, 1'000'000); });
       }},
      {"sink_queue_lines",
       [&](const Node& n, const std::string& k) {
         set(n, &c.limits.sink_queue_lines, [&] { return p.integer(n, k, 1, 16'777'216); });
       }},
      {"sink_queue_bytes",
       [&](const Node& n, const std::string& k) {
         set(n, &c.limits.sink_queue_bytes, [&] { return p.integer(n, k, 64ull << 10, 16ull << 30, true); });
       }},
  };

  const std::vector<Field> output = {
      {"stdout",
       [&](const Node& n, const std::string& k) { set(n, &c.output.to_stdout, [&] { return p.boolean(n, k); }); }},
      {"file",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         const auto v = p.string(n, k);
         if (!v) return;
         if (!v->empty() && v->back() == '/') {
           p.fail(n, k, "must name a file, not a directory, got '" + *v + "'");
           return;
         }
         if (has_control_chars(*v)) {
           p.fail(n, k, "must not contain control characters");
           return;
         }
         c.output.file = *v;
       }},
      {"rotate_bytes",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         const auto v = p.integer(n, k, 0, 1ull << 40, true);
         if (!v) return;
         if (*v != 0 && *v < 4096) {
           p.fail(n, k, "must be 0 (never rotate) or at least 4096 bytes, got " + std::to_string(*v));
           return;
         }
         c.output.rotate_bytes = *v;
       }},
      {"keep_files",
       [&](const Node& n, const std::string& k) { set(n, &c.output.keep_files, [&] { return p.integer(n, k, 0, 1000); }); }},
      {"timeline",
       [&](const Node& n, const std::string& k) { set(n, &c.output.timeline, [&] { return p.boolean(n, k); }); }},
  };

  const std::vector<Field> api = {
      {"socket",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         const auto v = p.string(n, k);
         if (!v) return;
         if (v->empty() || v->front() != '/') {
           p.fail(n, k, "must be an absolute path, got '" + *v + "'");
           return;
         }
         if (v->size() >= sizeof(sockaddr_un{}.sun_path)) {
           p.fail(n, k, "must be shorter than " + std::to_string(sizeof(sockaddr_un{}.sun_path)) +
                            " bytes (unix socket path limit), got " + std::to_string(v->size()));
           return;
         }
         c.api.socket = *v;
       }},
  };

  const std::vector<Field> metrics = {
      {"listen",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         const auto v = p.string(n, k);
         if (!v) return;
         if (!valid_listen(*v)) {
           p.fail(n, k, "must be host:port with port 1..65535 (\"0.0.0.0:9464\", \"[::]:9464\"), got '" + *v + "'");
           return;
         }
         c.metrics.listen = *v;
       }},
      {"max_label_values",
       [&](const Node& n, const std::string& k) {
         set(n, &c.metrics.max_label_values, [&] { return p.integer(n, k, 1, 10'000); });
       }},
  };

  const auto directory = [&](std::string* out) {
    return [&p, out](const Node& n, const std::string& k) {
      if (n.IsNull()) return;
      const auto v = p.string(n, k);
      if (!v) return;
      if (!v->empty() && v->front() != '/') {
        p.fail(n, k, "must be an absolute directory path or \"\" (do not look), got '" + *v + "'");
        return;
      }
      *out = *v;
    };
  };
  const std::vector<Field> kubernetes = {
      {"pods_dir", directory(&c.kubernetes.pods_dir)},
      {"containers_dir", directory(&c.kubernetes.containers_dir)},
  };

  const std::vector<Field> top = {
      {"node_name",
       [&](const Node& n, const std::string& k) {
         if (n.IsNull()) return;
         const auto v = p.string(n, k);
         if (!v) return;
         if (v->size() > 253 || has_control_chars(*v)) {
           p.fail(n, k, "must be at most 253 printable characters");
           return;
         }
         c.node_name = *v;
       }},
      {"capture", [&](const Node& n, const std::string& k) { p.map(n, k, capture); }},
      {"targeting", [&](const Node& n, const std::string& k) { p.map(n, k, targeting); }},
      {"stall", [&](const Node& n, const std::string& k) { p.map(n, k, stall); }},
      {"pipeline", [&](const Node& n, const std::string& k) { p.map(n, k, pipeline); }},
      {"limits", [&](const Node& n, const std::string& k) { p.map(n, k, limits); }},
      {"output", [&](const Node& n, const std::string& k) { p.map(n, k, output); }},
      {"api", [&](const Node& n, const std::string& k) { p.map(n, k, api); }},
      {"metrics", [&](const Node& n, const std::string& k) { p.map(n, k, metrics); }},
      {"kubernetes", [&](const Node& n, const std::string& k) { p.map(n, k, kubernetes); }},
      {"degradation", [&](const Node& n, const std::string& k) { degrade::parse_config(n, k, &c.degradation, &p.errors); }},
  };

  p.map(root, "", top);

  // Cross-field checks.
  if (c.capture.wakeup_bytes > c.capture.ringbuf_bytes) {
    p.errors.push_back("capture.wakeup_bytes: must not exceed the ring buffer (capture.ringbuf_mb = " +
                       std::to_string(c.capture.ringbuf_bytes >> 20) + "), got " +
                       std::to_string(c.capture.wakeup_bytes));
  }
  c.capture.pids = c.targeting.pids;
  c.capture.ports = c.targeting.ports;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

}  // namespace

std::optional<DaemonConfig> parse_config(const std::string& yaml_text, std::string* error) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(yaml_text);
  } catch (const YAML::ParserException& e) {
    if (error) {
      *error = "YAML syntax error at line " + std::to_string(e.mark.line + 1) + ", column " +
               std::to_string(e.mark.column + 1) + ": " + e.msg;
    }
    return std::nullopt;
  } catch (const YAML::Exception& e) {
    if (error) *error = std::string("YAML error: ") + e.what();
    return std::nullopt;
  }
  if (docs.size() > 1) {
    if (error) *error = "expected one YAML document, found " + std::to_string(docs.size()) + " (remove the '---' separators)";
    return std::nullopt;
  }
  DaemonConfig config;
  Parser parser;
  try {
    if (!docs.empty()) parse_document(parser, docs.front(), config);
  } catch (const YAML::Exception& e) {  // not expected: every access is type-checked first
    parser.errors.push_back(std::string("YAML error: ") + e.what());
  }
  if (!parser.errors.empty()) {
    if (error) *error = join_lines(parser.errors);
    return std::nullopt;
  }
  return config;
}

std::optional<DaemonConfig> load_config(const std::string& path, std::string* error) {
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
  std::string inner;
  auto config = parse_config(text.str(), &inner);
  if (!config && error) {
    std::string prefixed;
    std::istringstream lines(inner);
    std::string line;
    while (std::getline(lines, line)) prefixed += (prefixed.empty() ? "" : "\n") + path + ": " + line;
    *error = prefixed;
  }
  return config;
}

std::string effective_node_name(const DaemonConfig& config) {
  if (!config.node_name.empty()) return config.node_name;
  if (const char* env = std::getenv("NODE_NAME"); env && *env) return env;
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

std::string cgroup2_mount_point(const std::string& mountinfo_path) {
  // Lines: "id parent major:minor root mount-point options... - fstype source super-options".
  std::ifstream in(mountinfo_path);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t sep = line.find(" - ");
    if (sep == std::string::npos || line.compare(sep + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line.substr(0, sep));
    std::string id, parent, dev, root, mount_point;
    if (fields >> id >> parent >> dev >> root >> mount_point) return mount_point;
  }
  return "/sys/fs/cgroup";
}

bool resolve_cgroup_ids(const std::vector<std::string>& paths, std::vector<std::uint64_t>* ids, std::string* error,
                        const std::string& cgroup_root) {
  for (const std::string& path : paths) {
    const bool under_root = path == cgroup_root || path.rfind(cgroup_root + "/", 0) == 0;
    const std::string full = under_root ? path : cgroup_root + path;
    struct stat st {};
    if (stat(full.c_str(), &st) != 0) {
      if (error) *error = "cgroup " + full + ": " + std::strerror(errno);
      return false;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (error) *error = "cgroup " + full + ": not a directory";
      return false;
    }
    ids->push_back(static_cast<std::uint64_t>(st.st_ino));
  }
  return true;
}

}  // namespace infertap::daemon
