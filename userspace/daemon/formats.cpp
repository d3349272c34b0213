#include "daemon/formats.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "base/yaml_reader.h"

namespace infertap::daemon {
namespace {

using Node = YAML::Node;
using base::YamlReader;

std::string path_problem(const std::string& v) {
  if (!v.empty() && (v.front() == '/' || v.front() == '*')) return "";
  return "must be a glob on the request path, starting with '/' or '*' (e.g. \"/v1/acme/*\"), got '" + v + "'";
}

std::string media_problem(const std::string& v) {
  if (v.find(';') != std::string::npos) return "must be a media type without parameters (\"application/x-acme\"), got '" + v + "'";
  return "";
}

using Text = std::string (*)(const std::string&);

// A string field checked by `problem`.
YamlReader::Field text(YamlReader& r, const char* name, std::string* out, Text problem) {
  return {name, [&r, out, problem](const Node& v, const std::string& k) {
            const auto s = r.string(v, k);
            if (!s) return;
            if (const std::string why = problem ? problem(*s) : ""; !why.empty()) return r.fail(v, k, why);
            *out = *s;
          }};
}

YamlReader::Field pointer(YamlReader& r, const char* name, std::string* out) {
  return {name, [&r, out](const Node& v, const std::string& k) {
            const auto s = r.string(v, k);
            if (!s) return;
            if (const std::string why = protocol::json_pointer_problem(*s); !why.empty()) return r.fail(v, k, why);
            *out = *s;
          }};
}

YamlReader::Field framing(YamlReader& r, protocol::DeclaredFormat& f) {
  return {"framing", [&r, &f](const Node& v, const std::string& k) {
            const auto s = r.string(v, k);
            if (!s) return;
            if (*s == "sse") f.framing = protocol::EventFraming::sse;
            else if (*s == "ndjson") f.framing = protocol::EventFraming::ndjson;
            else if (*s == "websocket") f.framing = protocol::EventFraming::websocket;
            else r.fail(v, k, "must be sse, ndjson or websocket, got '" + *s + "'");
          }};
}

YamlReader::Field operation(YamlReader& r, protocol::DeclaredFormat& f) {
  return {"operation", [&r, &f](const Node& v, const std::string& k) {
            const auto s = r.string(v, k);
            if (!s) return;
            if (*s != "chat" && *s != "text_completion" && *s != "generate_content")
              return r.fail(v, k, "must be chat, text_completion or generate_content, got '" + *s + "'");
            f.operation = *s;
          }};
}

// One entry: its keys, then what they must say together.
void read_format(YamlReader& r, const Node& n, const std::string& key, std::set<std::string>& names,
                 protocol::DeclaredFormats& out) {
  auto f = std::make_shared<protocol::DeclaredFormat>();
  bool has_finish_value = false;
  const std::size_t errors_before = r.error_count();
  r.fields(n, key,
           {text(r, "name", &f->name, name_problem), text(r, "path", &f->path, path_problem),
            text(r, "content_type", &f->content_type, media_problem), framing(r, *f),
            pointer(r, "content", &f->content),
            {"cumulative", [&](const Node& v, const std::string& k) { f->cumulative = r.boolean(v, k).value_or(false); }},
            pointer(r, "finish", &f->finish),
            {"finish_value", [&](const Node& v, const std::string& k) {
               has_finish_value = true;
               if (const auto s = r.scalar(v, k, "a value (true, a number, a string)")) f->finish_value = *s;
             }},
            pointer(r, "finish_reason", &f->finish_reason), pointer(r, "tokens", &f->tokens),
            pointer(r, "prompt_tokens", &f->prompt_tokens), pointer(r, "error", &f->error),
            pointer(r, "model", &f->model), pointer(r, "response_id", &f->response_id),
            text(r, "provider", &f->provider, name_problem), operation(r, *f)});
  if (!n.IsMap() || r.error_count() != errors_before) return;  // one problem at a time per entry
  if (f->name.empty()) r.fail(n, key, "needs a name");
  if (!f->name.empty() && !names.insert(f->name).second) r.fail(n, key, "name '" + f->name + "' given twice");
  if (f->content.empty()) r.fail(n, key, "needs content: the JSON pointer of the generated text in each event");
  if (has_finish_value && f->finish.empty()) r.fail(n, key + ".finish_value", "needs finish: the pointer it is read at");
  std::transform(f->content_type.begin(), f->content_type.end(), f->content_type.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  out.push_back(std::move(f));
}

}  // namespace

std::string name_problem(const std::string& v) {
  const bool ok = !v.empty() && v.size() <= 64 && std::all_of(v.begin(), v.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '_' || c == '-' || c == '.';
  });
  return ok ? "" : "must be 1..64 letters, digits, '_', '-' or '.', got '" + v + "'";
}

void parse_formats(const YAML::Node& node, const std::string& key, protocol::DeclaredFormats* out,
                   std::vector<std::string>* errors) {
  YamlReader r(*errors);
  if (!node.IsSequence()) {
    r.fail(node, key, "must be a list of formats (- name: ..., path: ..., content: /pointer)");
    return;
  }
  protocol::DeclaredFormats formats;
  std::set<std::string> names;
  for (std::size_t i = 0; i < node.size(); ++i) read_format(r, node[i], key + "[" + std::to_string(i) + "]", names, formats);
  *out = std::move(formats);
}

}  // namespace infertap::daemon
