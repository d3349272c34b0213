#include "capture/elf_symbols.h"

#include <capstone/capstone.h>
#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace infertap::capture {

namespace {

constexpr std::uint64_t kMaxDecodedBytes = 256 << 10;  // of an enclosing function, to check a boundary

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string_view plain_name(std::string_view n) {
  if (auto at = n.find('@'); at != std::string_view::npos) n = n.substr(0, at);
  return n;
}

bool is_function(const ElfSymbol& s) {
  return (s.type == STT_FUNC || s.type == STT_GNU_IFUNC) && s.section != SHN_UNDEF && s.value != 0;
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Two passes over the symbol tables: the wanted names, then the functions
// that strictly enclose them (the earliest start, the longest decode).
std::string scan_symbols(const ElfFile& file, std::span<const std::string_view> names, std::vector<FoundSymbol>& found) {
  found.assign(names.size(), {});
  const auto each_table = [&](const std::function<void(const ElfSymbol&)>& visit) -> std::string {
    for (const ElfSection& s : file.sections())
      if (s.type == SHT_DYNSYM || s.type == SHT_SYMTAB)
        if (std::string why = file.for_each_symbol(s, visit); !why.empty()) return why;
    return "";
  };
  std::string why = each_table([&](const ElfSymbol& s) {
    if (!is_function(s)) return;
    const std::string_view plain = plain_name(s.name);
    for (std::size_t k = 0; k < names.size(); ++k)
      if (!found[k].vaddr && plain == names[k]) found[k].vaddr = s.value;
  });
  if (!why.empty() || std::none_of(found.begin(), found.end(), [](const FoundSymbol& f) { return f.vaddr; })) return why;
  return each_table([&](const ElfSymbol& s) {
    if (!is_function(s) || !s.size) return;
    for (FoundSymbol& f : found)
      if (f.vaddr > s.value && f.vaddr - s.value < s.size && (!f.enclosing_size || s.value < f.enclosing_vaddr))
        f.enclosing_vaddr = s.value, f.enclosing_size = s.size;
  });
}

// Whether `target` is where an instruction starts when the enclosing
// function is decoded from its first byte.
bool x86_boundary(std::span<const std::uint8_t> code, std::uint64_t target) {
  csh handle;
  if (cs_open(CS_ARCH_X86, CS_MODE_64, &handle) != CS_ERR_OK) return false;
  cs_insn* insn = cs_malloc(handle);
  const std::uint8_t* p = code.data();
  std::size_t left = code.size();
  std::uint64_t address = 0;
  while (address < target && cs_disasm_iter(handle, &p, &left, &address, insn)) {
  }
  cs_free(insn, 1);
  cs_close(&handle);
  return address == target;
}

// "" when the function at `f` may be probed in this file; else why not.
std::string check_site(const ElfFile& file, const FoundSymbol& f, std::uint64_t* offset) {
  *offset = file.code_offset(f.vaddr);
  if (!*offset) return "at " + hex(f.vaddr) + ", in no executable segment of the file";
  if (!f.enclosing_size) return "";
  const std::uint64_t into = f.vaddr - f.enclosing_vaddr;
  if (file.machine() == EM_AARCH64) return into % 4 ? "inside an instruction of the function at " + hex(f.enclosing_vaddr) : "";
  if (f.enclosing_size > kMaxDecodedBytes)
    return "inside a function of " + std::to_string(f.enclosing_size) + " bytes: more than 256 KiB to decode";
  const std::uint64_t start = file.code_offset(f.enclosing_vaddr, f.enclosing_size);
  std::vector<std::uint8_t> code;
  if (!start || !file.read(start, f.enclosing_size, code).empty())
    return "inside a function at " + hex(f.enclosing_vaddr) + " whose code is not in the file";
  if (!x86_boundary(code, into))
    return "at " + hex(f.vaddr) + ", mid-instruction in the function at " + hex(f.enclosing_vaddr);
  return "";
}

std::string cache_key(const ElfFile& file, const std::string& build_id, std::span<const std::string_view> names) {
  std::string key = build_id + "/" + std::to_string(file.file_size());
  for (std::string_view n : names) key += "/" + std::string(n);
  return key;
}

}  // namespace

bool SymbolCache::find(const std::string& key, std::vector<FoundSymbol>* out) {
  std::lock_guard lock(mutex_);
  const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const auto& e) { return e.first == key; });
  if (it == entries_.end()) return false;
  entries_.splice(entries_.begin(), entries_, it);
  *out = it->second;
  return true;
}

void SymbolCache::store(const std::string& key, std::vector<FoundSymbol> found) {
  std::lock_guard lock(mutex_);
  entries_.emplace_front(key, std::move(found));
  if (entries_.size() > kSymbolCacheEntries) entries_.pop_back();
}

std::size_t SymbolCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

FunctionOffsets find_functions(int fd, std::span<const std::string_view> names, SymbolCache* cache) {
  FunctionOffsets result;
  const ElfFile file(fd);
  if (!(result.error = file.error()).empty()) return result;
  result.build_id = file.build_id();
  const std::string key = cache_key(file, result.build_id, names);
  std::vector<FoundSymbol> found;
  if (!cache || result.build_id.empty() || !cache->find(key, &found)) {
    if (!(result.error = scan_symbols(file, names, found)).empty()) return result;
    if (cache && !result.build_id.empty()) cache->store(key, found);
  }
  result.offsets.assign(names.size(), 0);
  for (std::size_t k = 0; k < names.size(); ++k) {
    if (!found[k].vaddr) continue;
    std::uint64_t offset = 0;
    if (const std::string why = check_site(file, found[k], &offset); !why.empty())
      result.refusal += (result.refusal.empty() ? "" : "; ") + std::string(names[k]) + " refused: " + why;
    else
      result.offsets[k] = offset;
  }
  return result;
}

FunctionOffsets find_functions(const std::string& path, std::span<const std::string_view> names, SymbolCache* cache) {
  const Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) return {{}, std::string("cannot open: ") + std::strerror(errno), "", ""};
  return find_functions(fd.fd, names, cache);
}

ElfCode::ElfCode(int fd) : fd_(::fcntl(fd, F_DUPFD_CLOEXEC, 0)) {
  if (fd_ < 0) return;
  const ElfFile file(fd_);
  if (!file.error().empty()) return;
  x86_64_ = file.machine() == EM_X86_64;
  for (const ElfSegment& ph : file.segments())
    if (ph.type == PT_LOAD && (ph.flags & PF_X)) segments_.push_back({ph.offset, ph.filesz});
}

ElfCode::ElfCode(const std::string& path) : ElfCode(Fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)}.fd) {}

ElfCode::~ElfCode() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<std::uint8_t> ElfCode::bytes(std::uint64_t at, std::size_t max) const {
  for (const Segment& s : segments_) {
    if (at < s.offset || at >= s.offset + s.size) continue;
    std::vector<std::uint8_t> out(std::min<std::uint64_t>(max, s.offset + s.size - at));
    const ssize_t n = ::pread(fd_, out.data(), out.size(), static_cast<off_t>(at));
    if (n < 0) return {};
    out.resize(static_cast<std::size_t>(n));
    return out;
  }
  return {};
}

}  // namespace infertap::capture
