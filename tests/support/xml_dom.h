// An XML document parsed by expat (a conforming, non-validating parser:
// ill-formed markup, an undefined entity or a character XML does not allow
// is an error) into a small tree, for tests of what the agent writes as XML
// (the stream picture, SVG).
#pragma once

#include <expat.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace infertap::testing {

struct XmlNode {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // character data directly inside this element
  std::vector<std::unique_ptr<XmlNode>> children;
  XmlNode* parent = nullptr;

  std::string attr(const std::string& key) const {
    const auto it = attrs.find(key);
    return it == attrs.end() ? std::string() : it->second;
  }
  double number(const std::string& key) const { return std::strtod(attr(key).c_str(), nullptr); }
  bool has_class(const std::string& cls) const {
    std::istringstream words(attr("class"));
    for (std::string w; words >> w;) {
      if (w == cls) return true;
    }
    return false;
  }
  // Every element below this one (document order) that `keep` accepts.
  std::vector<const XmlNode*> find(const std::function<bool(const XmlNode&)>& keep) const {
    std::vector<const XmlNode*> out;
    for (const auto& c : children) {
      if (keep(*c)) out.push_back(c.get());
      const auto below = c->find(keep);
      out.insert(out.end(), below.begin(), below.end());
    }
    return out;
  }
  std::vector<const XmlNode*> find(const std::string& element, const std::string& cls = "") const {
    return find([&](const XmlNode& n) { return n.name == element && (cls.empty() || n.has_class(cls)); });
  }
  // The text of this element and every element below it.
  std::string all_text() const {
    std::string out = text;
    for (const auto& c : children) out += c->all_text();
    return out;
  }
  std::size_t element_count() const {
    std::size_t n = 1;
    for (const auto& c : children) n += c->element_count();
    return n;
  }
};

struct XmlDocument {
  std::unique_ptr<XmlNode> root;  // null when the text is not well-formed XML
  std::string error;              // expat's message and line when not
};

inline XmlDocument parse_xml(const std::string& text) {
  struct Builder {
    std::unique_ptr<XmlNode> root;
    XmlNode* current = nullptr;
  } b;
  XML_Parser parser = XML_ParserCreate("UTF-8");
  XML_SetUserData(parser, &b);
  XML_SetElementHandler(
      parser,
      [](void* data, const XML_Char* name, const XML_Char** attrs) {
        auto& b = *static_cast<Builder*>(data);
        auto node = std::make_unique<XmlNode>();
        node->name = name;
        for (int i = 0; attrs[i]; i += 2) node->attrs[attrs[i]] = attrs[i + 1];
        node->parent = b.current;
        XmlNode* raw = node.get();
        if (b.current) {
          b.current->children.push_back(std::move(node));
        } else {
          b.root = std::move(node);
        }
        b.current = raw;
      },
      [](void* data, const XML_Char*) {
        auto& b = *static_cast<Builder*>(data);
        b.current = b.current->parent;
      });
  XML_SetCharacterDataHandler(parser, [](void* data, const XML_Char* s, int len) {
    auto& b = *static_cast<Builder*>(data);
    if (b.current) b.current->text.append(s, static_cast<std::size_t>(len));
  });
  XmlDocument doc;
  if (XML_Parse(parser, text.data(), static_cast<int>(text.size()), 1) == XML_STATUS_ERROR) {
    doc.error = std::string(XML_ErrorString(XML_GetErrorCode(parser))) + " at line " +
                std::to_string(XML_GetCurrentLineNumber(parser));
  } else {
    doc.root = std::move(b.root);
  }
  XML_ParserFree(parser);
  return doc;
}

}  // namespace infertap::testing
