#include "capture/elf_symbols.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace infertap::capture {

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
using ElfHandle = std::unique_ptr<Elf, decltype(&elf_end)>;

}  // namespace

// A symbol's virtual address as a file offset: through the loadable segment
// that holds it (shared objects, PIE and fixed-address executables alike).
std::uint64_t file_offset(Elf* elf, std::uint64_t vaddr) {
  std::size_t count = 0;
  if (elf_getphdrnum(elf, &count) != 0) return 0;
  for (std::size_t i = 0; i < count; ++i) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf, static_cast<int>(i), &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    if (vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz) return vaddr - ph.p_vaddr + ph.p_offset;
  }
  return 0;
}

namespace {

std::string_view plain_name(const char* name) {
  std::string_view n(name);
  if (auto at = n.find('@'); at != std::string_view::npos) n = n.substr(0, at);
  return n;
}

void scan_symbols(Elf* elf, Elf_Scn* scn, const GElf_Shdr& sh, std::span<const std::string_view> names,
                  std::vector<std::uint64_t>& offsets) {
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (!data || sh.sh_entsize == 0) return;
  const std::size_t count = sh.sh_size / sh.sh_entsize;
  for (std::size_t i = 0; i < count; ++i) {
    GElf_Sym sym;
    if (!gelf_getsym(data, static_cast<int>(i), &sym)) break;
    if (GELF_ST_TYPE(sym.st_info) != STT_FUNC && GELF_ST_TYPE(sym.st_info) != STT_GNU_IFUNC) continue;
    if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
    const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
    if (!name) continue;
    const std::string_view plain = plain_name(name);
    for (std::size_t k = 0; k < names.size(); ++k)
      if (!offsets[k] && plain == names[k]) offsets[k] = file_offset(elf, sym.st_value);
  }
}

}  // namespace

FunctionOffsets find_functions(const std::string& path, std::span<const std::string_view> names) {
  FunctionOffsets result;
  if (elf_version(EV_CURRENT) == EV_NONE) {
    result.error = "libelf is unusable";
    return result;
  }
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) {
    result.error = std::string("cannot open: ") + std::strerror(errno);
    return result;
  }
  ElfHandle elf(elf_begin(fd.fd, ELF_C_READ_MMAP, nullptr), elf_end);
  if (!elf || elf_kind(elf.get()) != ELF_K_ELF) {
    result.error = "not an ELF file";
    return result;
  }
  result.offsets.assign(names.size(), 0);
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf.get(), scn)) != nullptr) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB)) continue;
    scan_symbols(elf.get(), scn, sh, names, result.offsets);
  }
  return result;
}

ElfCode::ElfCode(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
  if (fd_ < 0 || elf_version(EV_CURRENT) == EV_NONE) return;
  ElfHandle elf(elf_begin(fd_, ELF_C_READ_MMAP, nullptr), elf_end);
  GElf_Ehdr eh;
  if (!elf || elf_kind(elf.get()) != ELF_K_ELF || !gelf_getehdr(elf.get(), &eh)) return;
  x86_64_ = eh.e_machine == EM_X86_64;
  std::size_t count = 0;
  if (elf_getphdrnum(elf.get(), &count) != 0) return;
  for (std::size_t i = 0; i < count; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf.get(), static_cast<int>(i), &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
      segments_.push_back({ph.p_offset, ph.p_filesz});
  }
}

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
