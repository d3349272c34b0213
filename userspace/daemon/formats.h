// The `formats:` section of infertapd's configuration (docs/configuration.md,
// "Declared formats"): a list of the user's own stream formats, each naming
// the responses it covers and JSON pointers into its events. Read as
// strictly as the option table: an unknown key, a missing one, a pointer that
// is not RFC 6901, a bad glob or value names the key and its line.
#pragma once

#include <string>
#include <vector>

#include "protocol/payload/declared.h"

namespace YAML {
class Node;
}

namespace infertap::daemon {

// What is wrong with a name or a provider label of the configuration (a
// Prometheus label value, a word in log lines): "" when it is 1..64 letters,
// digits, '_', '-' or '.'.
std::string name_problem(const std::string& v);

// Parses the `formats:` list into *out (replacing it). Problems are appended
// to *errors, one line each, e.g.
//   "formats[0].content: must be a JSON pointer starting with '/' (RFC 6901, ...), got 'delta' (line 4)"
void parse_formats(const YAML::Node& node, const std::string& key, protocol::DeclaredFormats* out,
                   std::vector<std::string>* errors);

}  // namespace infertap::daemon
