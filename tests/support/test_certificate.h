// A throwaway TLS certificate for the tests' servers and gateways: an EC key
// and a self-signed certificate for localhost and 127.0.0.1, made with the
// system `openssl req` (valid two days).
#pragma once

#include <cstdlib>
#include <string>

#include "support/gateways.h"
#include "support/process.h"

namespace infertap::testing {

// Writes key and cert (PEM); "" when done, else why not (openssl's output in `log`).
inline std::string make_localhost_certificate(const std::string& key, const std::string& cert, const std::string& log) {
  if (find_system_binary("openssl").empty()) return "openssl not installed: run scripts/setup.sh";
  const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "
                          "/CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
                          key + " -out " + cert + " > " + log + " 2>&1";
  if (std::system(cmd.c_str()) != 0) return "openssl req failed:\n" + read_file(log);
  return "";
}

}  // namespace infertap::testing
