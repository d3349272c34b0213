// A bounded reader of 64-bit little-endian ELF files (x86-64, aarch64) that
// tenants control. It never maps the file: every byte comes through pread(),
// so a file truncated under it gives a short read (a named error), not
// SIGBUS. Every count, offset and size in a header is checked against the
// file's real size and against the caps below before anything is allocated,
// and a per-file budget of thread CPU time bounds the loops. Refusals are
// strings; nothing throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace infertap::capture {

inline constexpr std::uint64_t kMaxSections = 65536;
inline constexpr std::uint64_t kMaxSymbolTableBytes = 64ull << 20;
inline constexpr std::uint64_t kMaxStringTableBytes = 64ull << 20;
inline constexpr std::uint64_t kMaxInflatedBytes = 64ull << 20;  // any one compressed section
inline constexpr std::size_t kMaxSymbolNameLength = 4096;        // longer names are skipped
inline constexpr std::chrono::milliseconds kElfCpuBudget{2000};

struct ElfSection {
  std::string name;  // "" when its name is unreadable
  std::uint32_t name_offset = 0, type = 0;
  std::uint64_t flags = 0, addr = 0, offset = 0, size = 0, entsize = 0;
  std::uint32_t link = 0;
};

struct ElfSegment {
  std::uint32_t type = 0, flags = 0;
  std::uint64_t offset = 0, vaddr = 0, filesz = 0;
};

// A defined or undefined symbol as a symbol table holds it; `name` points
// into the string table and lives only during the visit.
struct ElfSymbol {
  std::string_view name;
  std::uint64_t value = 0, size = 0;
  std::uint8_t type = 0;  // STT_*
  std::uint16_t section = 0;
};

class ElfFile {
 public:
  // Borrows `fd` (never closes it); reads the headers and checks them.
  explicit ElfFile(int fd, std::chrono::nanoseconds cpu_budget = kElfCpuBudget);

  // "" when the headers are sound; else why the file is not read as ELF.
  const std::string& error() const { return error_; }
  std::uint16_t machine() const { return machine_; }  // EM_X86_64 or EM_AARCH64
  std::uint64_t file_size() const { return file_size_; }
  const std::vector<ElfSection>& sections() const { return sections_; }
  const std::vector<ElfSegment>& segments() const { return segments_; }
  const ElfSection* section(std::string_view name) const;  // the first so named

  // Exactly `size` bytes at `offset` into `out`; "" or why not (short read).
  std::string read(std::uint64_t offset, std::uint64_t size, std::vector<std::uint8_t>& out) const;
  // A section's contents, inflated when SHF_COMPRESSED; refused past `cap`.
  std::string read_section(const ElfSection& s, std::uint64_t cap, std::vector<std::uint8_t>& out) const;
  // `size` bytes at a virtual address, from the allocated section holding them.
  std::string read_vaddr(std::uint64_t vaddr, std::uint64_t size, std::vector<std::uint8_t>& out) const;
  // Calls `visit` for each entry of a SHT_SYMTAB / SHT_DYNSYM section, read
  // in bounded chunks. Names without NUL or longer than the cap are skipped.
  std::string for_each_symbol(const ElfSection& table, const std::function<void(const ElfSymbol&)>& visit) const;

  // The file offset of executable code at `vaddr`, when [vaddr, vaddr+size)
  // lies inside one executable PT_LOAD segment's file bytes; else 0.
  std::uint64_t code_offset(std::uint64_t vaddr, std::uint64_t size = 1) const;
  // The executable segment holding file offset `offset`, or nullptr.
  const ElfSegment* code_segment_at(std::uint64_t offset) const;
  // Hex of the NT_GNU_BUILD_ID note; "" when there is none.
  std::string build_id() const;
  // "" while the CPU budget lasts; the refusal once it is spent.
  std::string over_budget() const;

 private:
  std::string read_headers();
  std::string read_section_headers(std::uint64_t shoff, std::uint64_t count, std::uint64_t names_index);
  std::string read_program_headers(std::uint64_t phoff, std::uint64_t count);
  void name_sections(std::uint64_t names_index);
  std::string inflate_section(const ElfSection& s, std::uint64_t cap, std::vector<std::uint8_t>& out) const;

  int fd_;
  std::uint64_t file_size_ = 0;
  std::uint16_t machine_ = 0;
  std::chrono::nanoseconds cpu_budget_, cpu_deadline_;
  std::vector<ElfSection> sections_;
  std::vector<ElfSegment> segments_;
  std::string error_;
};

}  // namespace infertap::capture
