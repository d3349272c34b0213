#include "capture/go_binary.h"

#include <capstone/capstone.h>
#include <fcntl.h>
#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>

#include "capture/elf_file.h"

namespace infertap::capture {

namespace {

constexpr std::string_view kWriteName = "crypto/tls.(*Conn).Write";
constexpr std::string_view kReadName = "crypto/tls.(*Conn).Read";
constexpr int kFirstRegisterAbiMinor = 17;  // Go 1.17: arguments and results in registers on amd64 and arm64
constexpr std::uint32_t kArm64Ret = 0xd65f03c0;  // ret (x30)

constexpr std::uint64_t kMaxPclntabBytes = 256ull << 20;
constexpr std::uint64_t kMaxFunctionBytes = 256 << 10;
constexpr std::size_t kMaxReturns = 64;
constexpr std::uint64_t kBuildinfoHeadBytes = 4096;  // header, then a version of at most 64 bytes

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The first `max` bytes of a named section (uncompressed); empty when absent.
std::vector<std::uint8_t> section_head(const ElfFile& file, std::string_view name, std::uint64_t max) {
  const ElfSection* s = file.section(name);
  std::vector<std::uint8_t> out;
  if (!s || s->type == SHT_NOBITS || (s->flags & SHF_COMPRESSED) ||
      !file.read(s->offset, std::min(max, s->size), out).empty())
    return {};
  return out;
}

// Little-endian unsigned of `width` bytes at `at`; nullopt past the end.
std::optional<std::uint64_t> read_le(std::span<const std::uint8_t> b, std::uint64_t at, unsigned width) {
  if (width > 8 || at > b.size() || b.size() - at < width) return std::nullopt;
  std::uint64_t v = 0;
  for (unsigned i = 0; i < width; ++i) v |= static_cast<std::uint64_t>(b[at + i]) << (8 * i);
  return v;
}

// .go.buildinfo: a 32-byte header, then (Go 1.18+, flag 2) the version as a
// varint-prefixed string, or (Go 1.13-1.17) a pointer to a Go string header.
std::string buildinfo_version(const ElfFile& file, std::span<const std::uint8_t> b) {
  static constexpr char kMagic[] = "\xff Go buildinf:";
  if (b.size() < 32 || std::memcmp(b.data(), kMagic, 14) != 0) return "";
  const unsigned ptr = b[14];
  const std::uint8_t flags = b[15];
  if (flags & 1) return "";  // big-endian: no such target here
  if (flags & 2) {
    std::uint64_t len = 0;
    std::size_t at = 32;
    for (int shift = 0; at < b.size() && shift < 63; shift += 7) {
      len |= static_cast<std::uint64_t>(b[at] & 0x7f) << shift;
      if (!(b[at++] & 0x80)) break;
    }
    if (len > 64 || at > b.size() || b.size() - at < len) return "";
    return std::string(reinterpret_cast<const char*>(b.data() + at), len);
  }
  if (ptr != 4 && ptr != 8) return "";
  const auto header = read_le(b, 16, ptr);
  if (!header) return "";
  std::vector<std::uint8_t> str, text;
  if (!file.read_vaddr(*header, 2 * ptr, str).empty()) return "";
  const auto data = read_le(str, 0, ptr), len = read_le(str, ptr, ptr);
  if (!data || !len || *len > 64 || !file.read_vaddr(*data, *len, text).empty()) return "";
  return std::string(reinterpret_cast<const char*>(text.data()), text.size());
}

using FunctionRange = GoFunctionRange;

struct Wanted : GoTlsRanges {
  bool complete() const { return write.vaddr && read.vaddr; }
  void offer(std::string_view name, FunctionRange r) {
    if (name == kWriteName && !write.vaddr) write = r;
    if (name == kReadName && !read.vaddr) read = r;
  }
};

std::string from_symtab(const ElfFile& file, Wanted& wanted) {
  for (const ElfSection& s : file.sections()) {
    if (s.type != SHT_SYMTAB) continue;
    const std::string why = file.for_each_symbol(s, [&](const ElfSymbol& sym) {
      if (sym.type == STT_FUNC && sym.section != SHN_UNDEF && sym.size) wanted.offer(sym.name, {sym.value, sym.size});
    });
    if (!why.empty()) return why;
  }
  return "";
}

// The function table's header fields, by format.
struct PclnTable {
  unsigned ptr = 8;
  std::uint64_t nfunc = 0, text_start = 0, funcnames = 0, functab = 0;
  bool relative = true;  // Go 1.18+: 32-bit entry offsets from text_start; else absolute pointers
};

std::optional<PclnTable> pcln_header(std::span<const std::uint8_t> t, std::uint64_t text_addr, std::string* why) {
  const auto magic = read_le(t, 0, 4);
  if (!magic || t.size() < 8) {
    *why = ".gopclntab too short";
    return std::nullopt;
  }
  PclnTable p;
  p.ptr = t[7];
  if (t[4] != 0 || t[5] != 0 || (p.ptr != 4 && p.ptr != 8)) {
    *why = ".gopclntab header malformed";
    return std::nullopt;
  }
  const auto field = [&](int i) { return read_le(t, 8 + i * p.ptr, p.ptr).value_or(0); };
  p.nfunc = field(0);
  if (*magic == 0xfffffff0 || *magic == 0xfffffff1) {
    p.text_start = field(2) ? field(2) : text_addr;  // PIE: relocated at load, 0 in the file
    p.funcnames = field(3);
    p.functab = field(7);
  } else if (*magic == 0xfffffffa) {
    p.relative = false;
    p.funcnames = field(2);
    p.functab = field(6);
  } else {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(*magic));
    *why = std::string(".gopclntab format 0x") + hex + " not supported (Go 1.16+ formats are)";
    return std::nullopt;
  }
  if (!p.nfunc || p.functab >= t.size() || p.funcnames >= t.size()) {
    *why = ".gopclntab header out of bounds";
    return std::nullopt;
  }
  return p;
}

// Walks the function table: each entry's start, its successor's start as its end, and its name.
void from_pclntab(std::span<const std::uint8_t> t, const PclnTable& p, Wanted& wanted) {
  const unsigned w = p.relative ? 4 : p.ptr;  // width of an entry field
  const auto entry = [&](std::uint64_t i) -> std::optional<std::uint64_t> {
    const auto v = read_le(t, p.functab + i * 2 * w, w);
    if (!v) return std::nullopt;
    return p.relative ? p.text_start + *v : *v;
  };
  for (std::uint64_t i = 0; i < p.nfunc && !wanted.complete(); ++i) {
    const auto start = entry(i), end = entry(i + 1);
    const auto funcoff = read_le(t, p.functab + i * 2 * w + w, w);
    if (!start || !end || !funcoff || *end <= *start) return;
    const auto nameoff = read_le(t, p.functab + *funcoff + w, 4);  // _func: entry, then int32 name offset
    if (!nameoff) return;
    const std::uint64_t at = p.funcnames + *nameoff;
    if (at >= t.size()) continue;
    const auto* name = reinterpret_cast<const char*>(t.data() + at);
    wanted.offer(std::string_view(name, strnlen(name, t.size() - at)), {*start, *end - *start});
  }
}

GoArch arch_of(const ElfFile& file) {
  if (file.machine() == EM_X86_64) return GoArch::amd64;
  if (file.machine() == EM_AARCH64) return GoArch::arm64;
  return GoArch::unknown;
}

bool starts_with(std::span<const std::uint8_t> code, std::initializer_list<std::uint8_t> bytes) {
  return code.size() >= bytes.size() && std::equal(bytes.begin(), bytes.end(), code.begin());
}

}  // namespace

std::uint64_t go_entry_probe_site(std::span<const std::uint8_t> code, std::uint64_t entry) {
  std::size_t i = 0;
  bool via_r12 = false;
  if (starts_with(code, {0x4c, 0x8d, 0x64, 0x24})) {  // lea r12, [rsp+disp8]
    i = 5, via_r12 = true;
  } else if (starts_with(code, {0x4c, 0x8d, 0xa4, 0x24})) {  // lea r12, [rsp+disp32]
    i = 8, via_r12 = true;
  }
  if (i >= code.size()) return entry;
  const std::span<const std::uint8_t> cmp = code.subspan(i);
  if (!starts_with(cmp, {static_cast<std::uint8_t>(via_r12 ? 0x4d : 0x49), 0x3b, 0x66, 0x10})) return entry;
  const std::span<const std::uint8_t> jump = cmp.subspan(4);
  if (starts_with(jump, {0x76}) || starts_with(jump, {0x0f, 0x86})) return entry + i + 4;
  return entry;
}

namespace {

// The function's code must lie inside one executable segment and be of a
// plausible size; its entry probe site and every RET lie inside it.
bool locate(const ElfFile& file, GoArch arch, const FunctionRange& r, GoFunction& f, std::string* why) {
  if (r.size > kMaxFunctionBytes) {
    *why = std::to_string(r.size) + " bytes of code: more than 256 KiB, not a real crypto/tls";
    return false;
  }
  f.entry = file.code_offset(r.vaddr, r.size);
  f.size = r.size;
  std::vector<std::uint8_t> code;
  if (!f.entry || !file.read(f.entry, r.size, code).empty()) {
    *why = "its code is outside the file's executable segments";
    return false;
  }
  f.returns = find_returns(arch, code, f.entry, why);
  if (!why->empty()) return false;
  if (f.returns.size() > kMaxReturns) {
    *why = std::to_string(f.returns.size()) + " RET instructions: more than " + std::to_string(kMaxReturns) +
           ", not a real crypto/tls";
    return false;
  }
  f.probe_at = arch == GoArch::amd64 ? go_entry_probe_site(code, f.entry) : f.entry;
  if (f.returns.empty()) *why = "no return instruction found";
  return !f.returns.empty();
}

// The functions, from .symtab or the function table; "" or the problem.
std::string find_tls_functions(const ElfFile& file, GoBinary& out) {
  Wanted wanted;
  if (std::string why = from_symtab(file, wanted); !why.empty()) return why;
  out.symbols_from = "symtab";
  if (!wanted.complete()) {
    const ElfSection* pcln = file.section(".gopclntab");
    std::vector<std::uint8_t> table;
    if (!pcln || pcln->type == SHT_NOBITS) return "no .symtab entries and no .gopclntab (stripped beyond repair)";
    if (std::string why = file.read_section(*pcln, kMaxPclntabBytes, table); !why.empty()) return why;
    const ElfSection* text = file.section(".text");
    GoTlsRanges ranges;
    const std::string why = tls_functions_in_pclntab(table, text ? text->addr : 0, &ranges);
    if (!why.empty()) return why;
    wanted.write = ranges.write;
    wanted.read = ranges.read;
    out.symbols_from = "gopclntab";
  }
  if (!wanted.complete()) return "crypto/tls.(*Conn).Write/Read not in the binary (it does not use crypto/tls)";
  std::string why;
  if (!locate(file, out.arch, wanted.write, out.write, &why)) return std::string(kWriteName) + ": " + why;
  if (!locate(file, out.arch, wanted.read, out.read, &why)) return std::string(kReadName) + ": " + why;
  return "";
}

std::vector<std::uint64_t> x86_returns(std::span<const std::uint8_t> code, std::uint64_t start, std::string* error) {
  std::vector<std::uint64_t> out;
  csh handle;
  if (cs_open(CS_ARCH_X86, CS_MODE_64, &handle) != CS_ERR_OK) {
    *error = "capstone cannot decode x86-64";
    return out;
  }
  cs_insn* insn = cs_malloc(handle);
  const std::uint8_t* p = code.data();
  std::size_t left = code.size();
  std::uint64_t address = 0;
  while (left > 0) {
    if (!cs_disasm_iter(handle, &p, &left, &address, insn)) {
      // alignment padding after the last instruction is not code
      const bool padding = std::all_of(p, p + left, [](std::uint8_t b) { return b == 0xcc || b == 0x00; });
      if (!padding) *error = "undecodable instruction at +" + std::to_string(address);
      break;
    }
    if (insn->id == X86_INS_RET) out.push_back(start + insn->address);
  }
  cs_free(insn, 1);
  cs_close(&handle);
  return out;
}

}  // namespace

std::string tls_functions_in_pclntab(std::span<const std::uint8_t> pclntab, std::uint64_t text_addr,
                                     GoTlsRanges* out) {
  std::string why;
  const auto header = pcln_header(pclntab, text_addr, &why);
  if (!header) return why;
  Wanted wanted;
  from_pclntab(pclntab, *header, wanted);
  out->write = wanted.write;
  out->read = wanted.read;
  return "";
}

int go_minor_version(const std::string& version) {
  const std::size_t at = version.find("go1.");
  if (at == std::string::npos) return -1;
  int minor = 0, digits = 0;
  for (std::size_t i = at + 4; i < version.size() && version[i] >= '0' && version[i] <= '9' && digits < 4; ++i, ++digits)
    minor = minor * 10 + (version[i] - '0');
  return digits ? minor : -1;
}

std::vector<std::uint64_t> find_returns(GoArch arch, std::span<const std::uint8_t> code, std::uint64_t start_offset,
                                        std::string* error) {
  error->clear();
  if (arch == GoArch::amd64) return x86_returns(code, start_offset, error);
  std::vector<std::uint64_t> out;
  if (arch != GoArch::arm64) {
    *error = "unsupported architecture";
    return out;
  }
  for (std::size_t i = 0; i + 4 <= code.size(); i += 4)
    if (read_le(code, i, 4) == kArm64Ret) out.push_back(start_offset + i);
  return out;
}

GoBinary inspect_go_binary(int fd) {
  GoBinary out;
  const ElfFile file(fd);
  if (!file.error().empty()) return out;  // not ELF: not Go either
  const std::vector<std::uint8_t> buildinfo = section_head(file, ".go.buildinfo", kBuildinfoHeadBytes);
  const ElfSection* pcln = file.section(".gopclntab");
  out.is_go = !buildinfo.empty() || (pcln && pcln->type != SHT_NOBITS && pcln->size);
  if (!out.is_go) return out;
  out.version = buildinfo_version(file, buildinfo);
  out.arch = arch_of(file);
  const int minor = go_minor_version(out.version);
  if (out.arch == GoArch::unknown) {
    out.problem = "architecture not supported (x86-64 and arm64 are)";
  } else if (minor < 0) {
    out.problem = "Go version unknown (no readable .go.buildinfo)";
  } else if (minor < kFirstRegisterAbiMinor) {
    out.problem = "Go older than 1.17 passes arguments on the stack (the register ABI is needed)";
  } else {
    out.problem = find_tls_functions(file, out);
  }
  return out;
}

GoBinary inspect_go_binary(const std::string& path) {
  const Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) return {};
  return inspect_go_binary(fd.fd);
}

}  // namespace infertap::capture
