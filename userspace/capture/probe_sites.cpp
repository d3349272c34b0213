#include "capture/probe_sites.h"

#include <capstone/capstone.h>

#include <cstring>
#include <memory>

namespace infertap::capture {

namespace {

bool is_endbr64(std::span<const std::uint8_t> c) {
  static constexpr std::uint8_t kEndbr64[] = {0xf3, 0x0f, 0x1e, 0xfa};
  return c.size() >= 4 && std::memcmp(c.data(), kEndbr64, 4) == 0;
}

// push r64 (50+r, REX.B 41 50+r): 1 or 2 bytes, 0 when not one.
std::size_t push_length(std::span<const std::uint8_t> c) {
  if (!c.empty() && c[0] >= 0x50 && c[0] <= 0x57) return 1;
  if (c.size() >= 2 && c[0] == 0x41 && c[1] >= 0x50 && c[1] <= 0x57) return 2;
  return 0;
}

// sub rsp, imm8 / imm32: 4 or 7 bytes, 0 when not one.
std::size_t sub_rsp_length(std::span<const std::uint8_t> c) {
  if (c.size() >= 4 && c[0] == 0x48 && c[1] == 0x83 && c[2] == 0xec) return 4;
  if (c.size() >= 7 && c[0] == 0x48 && c[1] == 0x81 && c[2] == 0xec) return 7;
  return 0;
}

std::int32_t rel32_at(std::span<const std::uint8_t> c) {
  std::int32_t rel;
  std::memcpy(&rel, c.data(), sizeof(rel));
  return rel;
}

struct Decoder {
  csh handle = 0;
  cs_insn* insn = nullptr;
  Decoder() {
    if (cs_open(CS_ARCH_X86, CS_MODE_64, &handle) != CS_ERR_OK) return;
    insn = cs_malloc(handle);
  }
  ~Decoder() {
    if (insn) cs_free(insn, 1);
    if (handle) cs_close(&handle);
  }
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
};

}  // namespace

std::optional<std::uint64_t> emulated_entry(std::span<const std::uint8_t> code, std::uint64_t at) {
  const std::size_t skip = is_endbr64(code) ? 4 : 0;
  if (code.size() <= skip || push_length(code.subspan(skip)) == 0) return std::nullopt;
  return at + skip;
}

std::optional<std::uint64_t> pass_through_callee(std::span<const std::uint8_t> code, std::uint64_t at) {
  std::size_t i = 0;
  for (int steps = 0; steps < 8 && i < code.size(); ++steps) {
    const std::span<const std::uint8_t> rest = code.subspan(i);
    if (rest[0] == 0xe8 && rest.size() >= 5) return at + i + 5 + static_cast<std::int64_t>(rel32_at(rest.subspan(1)));
    std::size_t n = is_endbr64(rest) ? 4 : push_length(rest);
    if (n == 0) n = sub_rsp_length(rest);
    if (n == 0) return std::nullopt;  // touches more than the stack
    i += n;
  }
  return std::nullopt;
}

bool calls_before_return(std::span<const std::uint8_t> code, std::uint64_t at, std::uint64_t callee) {
  Decoder d;
  if (!d.insn) return false;
  const std::uint8_t* p = code.data();
  std::size_t left = code.size();
  std::uint64_t address = at;
  while (left > 0 && cs_disasm_iter(d.handle, &p, &left, &address, d.insn)) {
    if (d.insn->id == X86_INS_RET) return false;
    if (d.insn->id == X86_INS_CALL && d.insn->size == 5 && d.insn->bytes[0] == 0xe8) {
      const std::int32_t rel = rel32_at(std::span<const std::uint8_t>(d.insn->bytes + 1, 4));
      if (d.insn->address + 5 + static_cast<std::int64_t>(rel) == callee) return true;
    }
  }
  return false;
}

namespace {

std::uint64_t cheap_entry(const CodeAt& code, std::uint64_t at) {
  if (!at) return 0;
  return emulated_entry(code(at), at).value_or(at);
}

}  // namespace

TlsIoSites cheap_tls_io_sites(const CodeAt& code, TlsIoPair pair) {
  TlsIoSites sites{cheap_entry(code, pair.plain), cheap_entry(code, pair.ex), false};
  if (!pair.ex) return sites;
  const std::optional<std::uint64_t> body = pass_through_callee(code(pair.ex), pair.ex);
  if (!body) return sites;
  const std::optional<std::uint64_t> body_site = emulated_entry(code(*body), *body);
  if (!body_site) return sites;
  sites.ex = *body_site;
  sites.shared_body = true;
  if (pair.plain && calls_before_return(code(pair.plain), pair.plain, *body)) sites.plain = 0;
  return sites;
}

}  // namespace infertap::capture
