// The agent's OTLP transport: cpp-httplib's client, built (Debian's
// libcpp-httplib) with OpenSSL, zlib and brotli support, which its header
// must be told.
#define CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#include <httplib.h>

#include <ctime>
#include <map>
#include <mutex>

#include "output/otlp/exporter.h"

namespace infertap::output::otlp {
namespace {

using std::chrono::milliseconds;

// "http://host:4318/v1/traces" -> {"http://host:4318", "/v1/traces"}
std::pair<std::string, std::string> split_url(const std::string& url) {
  const std::size_t scheme = url.find("://");
  const std::size_t path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (path == std::string::npos) return {url, "/"};
  return {url.substr(0, path), url.substr(path)};
}

// Retry-After: delay-seconds or an HTTP-date (RFC 9110 10.2.3).
std::optional<milliseconds> parse_retry_after(const std::string& v) {
  if (v.empty()) return std::nullopt;
  if (v.find_first_not_of("0123456789") == std::string::npos) {
    if (v.size() > 9) return milliseconds(std::int64_t{999'999'999} * 1000);
    return milliseconds(std::stoll(v) * 1000);
  }
  std::tm tm{};
  if (!strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm)) return std::nullopt;
  const std::time_t at = timegm(&tm);
  const std::time_t now = std::time(nullptr);
  return milliseconds(at > now ? (at - now) * 1000 : 0);
}

class HttpTransport : public Transport {
 public:
  HttpAnswer post(const SignalOptions& to, const std::string& body, milliseconds timeout) override {
    const auto [base, path] = split_url(to.url);
    httplib::Client* client = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& slot = clients_[base];
      if (!slot) {
        slot = std::make_unique<httplib::Client>(base);
        slot->set_keep_alive(true);
      }
      client = slot.get();
      active_ = client;
    }
    client->set_connection_timeout(timeout);
    client->set_read_timeout(timeout);
    client->set_write_timeout(timeout);
    httplib::Headers headers;
    for (const auto& [name, value] : to.headers) headers.emplace(name, value);
    if (headers.find("User-Agent") == headers.end()) headers.emplace("User-Agent", "infertap-otlp");
    const std::string type(content_type(to.encoding));
    httplib::Result res = client->Post(path, headers, body, type);
    {
      std::lock_guard<std::mutex> lock(mu_);
      active_ = nullptr;
    }
    HttpAnswer answer;
    if (!res) {
      answer.error = httplib::to_string(res.error());
      return answer;
    }
    answer.status = res->status;
    answer.retry_after = parse_retry_after(res->get_header_value("Retry-After"));
    return answer;
  }

  void cancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_) active_->stop();  // shuts the socket down under the request: it returns an error
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<httplib::Client>> clients_;  // per scheme://host:port
  httplib::Client* active_ = nullptr;
};

}  // namespace

std::unique_ptr<Transport> http_transport() { return std::make_unique<HttpTransport>(); }

}  // namespace infertap::output::otlp
