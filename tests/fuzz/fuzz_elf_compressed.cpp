// Compressed ELF sections on arbitrary bytes: the input becomes the body of
// an SHF_COMPRESSED .strtab (Elf64_Chdr, then a zlib or zstd stream) inside a
// well-formed ELF file. Inflating answers with bytes within the cap or a
// named refusal, never a crash, never more than the cap.
#include <elf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "capture/elf_file.h"

using namespace infertap::capture;

namespace {

constexpr std::uint64_t kFuzzCap = 1 << 20;  // small, so the fuzzer reaches it

// ELF header, then the input at 0x40 as section 1, then .shstrtab and the headers.
std::vector<std::uint8_t> wrap(const std::uint8_t* data, std::size_t size) {
  static const char kNames[] = "\0.strtab\0.shstrtab";
  std::vector<std::uint8_t> out(sizeof(Elf64_Ehdr));
  out.insert(out.end(), data, data + size);
  const std::uint64_t names_at = out.size();
  out.insert(out.end(), kNames, kNames + sizeof kNames);
  const std::uint64_t shoff = (out.size() + 7) & ~7ull;
  Elf64_Shdr sh[3]{};
  sh[1].sh_name = 1, sh[1].sh_type = SHT_STRTAB, sh[1].sh_flags = SHF_COMPRESSED;
  sh[1].sh_offset = sizeof(Elf64_Ehdr), sh[1].sh_size = size;
  sh[2].sh_name = 9, sh[2].sh_type = SHT_STRTAB, sh[2].sh_offset = names_at, sh[2].sh_size = sizeof kNames;
  out.resize(shoff + sizeof sh);
  std::memcpy(out.data() + shoff, sh, sizeof sh);
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64, eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_machine = EM_X86_64, eh.e_shoff = shoff, eh.e_shentsize = sizeof(Elf64_Shdr), eh.e_shnum = 3,
  eh.e_shstrndx = 2;
  std::memcpy(out.data(), &eh, sizeof eh);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const int fd = ::memfd_create("elf-compressed", 0);
  if (fd < 0) return 0;
  const std::vector<std::uint8_t> file = wrap(data, size);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, file.data(), file.size(), 0) != static_cast<ssize_t>(file.size()))
    return 0;
  const ElfFile elf(fd);
  const ElfSection* strtab = elf.section(".strtab");
  if (!elf.error().empty() || !strtab) __builtin_trap();  // the wrapper is well-formed
  std::vector<std::uint8_t> out;
  const std::string why = elf.read_section(*strtab, kFuzzCap, out);
  if (out.size() > kFuzzCap + 1) __builtin_trap();
  if (why.empty() && out.size() != reinterpret_cast<const Elf64_Chdr*>(file.data() + sizeof(Elf64_Ehdr))->ch_size)
    __builtin_trap();
  return 0;
}
