#include "capture/elf_file.h"

#include <elf.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace infertap::capture {

namespace {

constexpr std::uint64_t kChunkBytes = 1 << 20;                      // compressed input read per step
constexpr std::uint64_t kSymbolChunkBytes = 2730 * sizeof(Elf64_Sym);  // ~64 KiB of symbols per read
constexpr std::uint64_t kMaxSectionNamesBytes = 16 << 20;
constexpr std::uint64_t kMaxNoteBytes = 64 << 10;
constexpr std::size_t kMaxNoteSections = 16;
constexpr std::uint32_t kElfCompressZstd = 2;  // ELFCOMPRESS_ZSTD, absent from older <elf.h>

std::chrono::nanoseconds thread_cpu_time() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

// [offset, offset+size) inside [0, total), without overflow.
bool fits(std::uint64_t offset, std::uint64_t size, std::uint64_t total) {
  return offset <= total && size <= total - offset;
}

std::string mib(std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::string section_label(std::size_t index, const ElfSection& s) {
  return "section " + std::to_string(index) + (s.name.empty() ? "" : " (" + s.name + ")");
}

// The NUL-terminated name at `at` in a string table; false when the NUL is
// not within the table or the name is longer than the cap.
bool name_at(const std::vector<std::uint8_t>& table, std::uint64_t at, std::string_view* name) {
  if (at >= table.size()) return false;
  const std::size_t window = std::min<std::uint64_t>(kMaxSymbolNameLength + 1, table.size() - at);
  const auto* start = reinterpret_cast<const char*>(table.data() + at);
  const void* nul = std::memchr(start, 0, window);
  if (!nul) return false;
  *name = std::string_view(start, static_cast<const char*>(nul) - start);
  return true;
}

// One step of a decompressor: takes from `in`, writes into `out`, sets `done`
// at the stream's end; "" or why the stream is corrupt.
using InflateStep = std::function<std::string(const std::uint8_t*& in, std::size_t& in_left, std::uint8_t*& out,
                                              std::size_t& out_left, bool& done)>;

class ZlibStep {
 public:
  ZlibStep() { ok_ = inflateInit(&z_) == Z_OK; }
  ~ZlibStep() {
    if (ok_) inflateEnd(&z_);
  }
  ZlibStep(const ZlibStep&) = delete;
  ZlibStep& operator=(const ZlibStep&) = delete;
  std::string operator()(const std::uint8_t*& in, std::size_t& in_left, std::uint8_t*& out, std::size_t& out_left,
                         bool& done) {
    if (!ok_) return "zlib cannot start";
    z_.next_in = const_cast<Bytef*>(in);
    z_.avail_in = static_cast<uInt>(std::min<std::size_t>(in_left, 1u << 30));
    z_.next_out = out;
    z_.avail_out = static_cast<uInt>(std::min<std::size_t>(out_left, 1u << 30));
    const uInt in_given = z_.avail_in, out_given = z_.avail_out;
    const int rc = inflate(&z_, Z_NO_FLUSH);
    in += in_given - z_.avail_in, in_left -= in_given - z_.avail_in;
    out += out_given - z_.avail_out, out_left -= out_given - z_.avail_out;
    done = rc == Z_STREAM_END;
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) return "corrupt zlib stream";
    return "";
  }

 private:
  z_stream z_{};
  bool ok_ = false;
};

class ZstdStep {
 public:
  ZstdStep() : d_(ZSTD_createDCtx()) {}
  ~ZstdStep() { ZSTD_freeDCtx(d_); }
  ZstdStep(const ZstdStep&) = delete;
  ZstdStep& operator=(const ZstdStep&) = delete;
  std::string operator()(const std::uint8_t*& in, std::size_t& in_left, std::uint8_t*& out, std::size_t& out_left,
                         bool& done) {
    if (!d_) return "zstd cannot start";
    ZSTD_inBuffer i{in, in_left, 0};
    ZSTD_outBuffer o{out, out_left, 0};
    const std::size_t rc = ZSTD_decompressStream(d_, &o, &i);
    if (ZSTD_isError(rc)) return "corrupt zstd stream";
    in += i.pos, in_left -= i.pos, out += o.pos, out_left -= o.pos;
    done = rc == 0;
    return "";
  }

 private:
  ZSTD_DCtx* d_;
};

}  // namespace

ElfFile::ElfFile(int fd, std::chrono::nanoseconds cpu_budget)
    : fd_(fd), cpu_budget_(cpu_budget), cpu_deadline_(thread_cpu_time() + cpu_budget) {
  error_ = read_headers();
  if (!error_.empty()) sections_.clear(), segments_.clear();
}

std::string ElfFile::over_budget() const {
  if (thread_cpu_time() <= cpu_deadline_) return "";
  return "over the CPU budget of " +
         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(cpu_budget_).count()) +
         " ms for one file";
}

std::string ElfFile::read(std::uint64_t offset, std::uint64_t size, std::vector<std::uint8_t>& out) const {
  if (!fits(offset, size, file_size_))
    return "truncated: " + std::to_string(size) + " bytes at offset " + std::to_string(offset) +
           " end past the file's " + std::to_string(file_size_) + " bytes";
  out.resize(size);
  std::uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd_, out.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::string("read failed: ") + std::strerror(errno);
    if (n == 0)
      return "truncated: the file ended at " + std::to_string(offset + done) + " bytes while reading (it shrank)";
    done += static_cast<std::uint64_t>(n);
  }
  return "";
}

std::string ElfFile::read_headers() {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return std::string("cannot stat: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  file_size_ = static_cast<std::uint64_t>(st.st_size);
  if (file_size_ < sizeof(Elf64_Ehdr))
    return "truncated: the ELF header needs 64 bytes, the file has " + std::to_string(file_size_);
  std::vector<std::uint8_t> bytes;
  if (std::string why = read(0, sizeof(Elf64_Ehdr), bytes); !why.empty()) return why;
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return "not an ELF file";
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return "not 64-bit ELF (only 64-bit files are read)";
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB) return "big-endian ELF (only little-endian files are read)";
  if (eh.e_machine != EM_X86_64 && eh.e_machine != EM_AARCH64)
    return "machine " + std::to_string(eh.e_machine) + " (only x86-64 and aarch64 are read)";
  machine_ = eh.e_machine;
  std::uint64_t section_count = eh.e_shnum, names_index = eh.e_shstrndx;
  if (eh.e_shoff != 0 && (section_count == 0 || names_index == SHN_XINDEX)) {
    // Past 0xff00 sections the real counts live in section header 0.
    if (std::string why = read(eh.e_shoff, sizeof(Elf64_Shdr), bytes); !why.empty()) return why;
    Elf64_Shdr first;
    std::memcpy(&first, bytes.data(), sizeof first);
    if (section_count == 0) section_count = first.sh_size;
    if (names_index == SHN_XINDEX) names_index = first.sh_link;
  }
  if (eh.e_shoff == 0) section_count = 0;
  if (section_count && eh.e_shentsize != sizeof(Elf64_Shdr))
    return "section headers of " + std::to_string(eh.e_shentsize) + " bytes (64 expected)";
  if (eh.e_phnum && eh.e_phentsize != sizeof(Elf64_Phdr))
    return "program headers of " + std::to_string(eh.e_phentsize) + " bytes (56 expected)";
  if (eh.e_phnum == PN_XNUM) return "more than 65534 program headers";
  if (std::string why = read_section_headers(eh.e_shoff, section_count, names_index); !why.empty()) return why;
  return read_program_headers(eh.e_phoff, eh.e_phnum);
}

std::string ElfFile::read_section_headers(std::uint64_t shoff, std::uint64_t count, std::uint64_t names_index) {
  if (count > kMaxSections)
    return std::to_string(count) + " sections: more than " + std::to_string(kMaxSections);
  if (!fits(shoff, count * sizeof(Elf64_Shdr), file_size_))
    return "truncated: section headers end past the file's " + std::to_string(file_size_) + " bytes";
  std::vector<std::uint8_t> bytes;
  if (std::string why = read(shoff, count * sizeof(Elf64_Shdr), bytes); !why.empty()) return why;
  sections_.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, bytes.data() + i * sizeof sh, sizeof sh);
    sections_.push_back(
        {"", sh.sh_name, sh.sh_type, sh.sh_flags, sh.sh_addr, sh.sh_offset, sh.sh_size, sh.sh_entsize, sh.sh_link});
  }
  name_sections(names_index);
  for (std::size_t i = 0; i < sections_.size(); ++i) {
    const ElfSection& s = sections_[i];
    if (s.type != SHT_NOBITS && s.type != SHT_NULL && !fits(s.offset, s.size, file_size_))
      return "truncated: " + section_label(i, s) + " ends past the file's " + std::to_string(file_size_) + " bytes";
  }
  return "";
}

void ElfFile::name_sections(std::uint64_t names_index) {
  if (names_index == 0 || names_index >= sections_.size()) return;
  const ElfSection names = sections_[names_index];
  std::vector<std::uint8_t> table;
  if (names.type != SHT_STRTAB || !read_section(names, kMaxSectionNamesBytes, table).empty()) return;
  for (ElfSection& s : sections_) {
    std::string_view name;
    if (name_at(table, s.name_offset, &name)) s.name = name;
  }
}

std::string ElfFile::read_program_headers(std::uint64_t phoff, std::uint64_t count) {
  if (!fits(phoff, count * sizeof(Elf64_Phdr), file_size_))
    return "truncated: program headers end past the file's " + std::to_string(file_size_) + " bytes";
  std::vector<std::uint8_t> bytes;
  if (std::string why = read(phoff, count * sizeof(Elf64_Phdr), bytes); !why.empty()) return why;
  for (std::uint64_t i = 0; i < count; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, bytes.data() + i * sizeof ph, sizeof ph);
    if (ph.p_type == PT_LOAD && !fits(ph.p_offset, ph.p_filesz, file_size_))
      return "truncated: segment " + std::to_string(i) + " ends past the file's " + std::to_string(file_size_) +
             " bytes";
    segments_.push_back({ph.p_type, ph.p_flags, ph.p_offset, ph.p_vaddr, ph.p_filesz});
  }
  return "";
}

const ElfSection* ElfFile::section(std::string_view name) const {
  for (const ElfSection& s : sections_)
    if (s.name == name) return &s;
  return nullptr;
}

std::string ElfFile::read_section(const ElfSection& s, std::uint64_t cap, std::vector<std::uint8_t>& out) const {
  out.clear();
  if (s.type == SHT_NOBITS) return "";
  if (s.flags & SHF_COMPRESSED) return inflate_section(s, cap, out);
  if (s.size > cap) return "section " + s.name + " is " + std::to_string(s.size) + " bytes: more than " + mib(cap);
  return read(s.offset, s.size, out);
}

// Inflates in bounded steps: compressed input is read 1 MiB at a time and the
// output grows only as far as the size the header declares (capped), plus
// one byte to catch a stream that inflates past it.
std::string ElfFile::inflate_section(const ElfSection& s, std::uint64_t cap, std::vector<std::uint8_t>& out) const {
  std::vector<std::uint8_t> in;
  if (s.size < sizeof(Elf64_Chdr)) return "compressed section " + s.name + " lacks its header";
  if (std::string why = read(s.offset, sizeof(Elf64_Chdr), in); !why.empty()) return why;
  Elf64_Chdr ch;
  std::memcpy(&ch, in.data(), sizeof ch);
  const std::string label = "section " + s.name;
  if (ch.ch_size > cap)
    return label + " inflates past " + mib(cap) + " (it claims " + std::to_string(ch.ch_size) + " bytes)";
  ZlibStep zlib;
  ZstdStep zstd;
  InflateStep step;
  if (ch.ch_type == ELFCOMPRESS_ZLIB) step = std::ref(zlib);
  else if (ch.ch_type == kElfCompressZstd) step = std::ref(zstd);
  else return label + " uses compression type " + std::to_string(ch.ch_type) + " (zlib and zstd are read)";
  std::uint64_t in_at = s.offset + sizeof ch, produced = 0;
  const std::uint64_t in_end = s.offset + s.size, limit = ch.ch_size + 1;
  std::size_t in_left = 0;
  const std::uint8_t* in_next = nullptr;
  for (bool done = false; !done;) {
    if (std::string why = over_budget(); !why.empty()) return why;
    if (in_left == 0) {
      if (in_at == in_end) return label + " ends before inflating to its declared " + std::to_string(ch.ch_size) + " bytes";
      if (std::string why = read(in_at, std::min(kChunkBytes, in_end - in_at), in); !why.empty()) return why;
      in_at += in.size(), in_next = in.data(), in_left = in.size();
    }
    out.resize(std::min(limit, produced + kChunkBytes));
    std::uint8_t* out_next = out.data() + produced;
    std::size_t out_left = out.size() - produced;
    if (std::string why = step(in_next, in_left, out_next, out_left, done); !why.empty()) return label + ": " + why;
    produced = static_cast<std::uint64_t>(out_next - out.data());
    if (produced > ch.ch_size) return label + " inflates past its declared " + std::to_string(ch.ch_size) + " bytes";
  }
  if (produced != ch.ch_size) return label + " inflates to " + std::to_string(produced) + " bytes, not the declared " + std::to_string(ch.ch_size);
  out.resize(produced);
  return "";
}

std::string ElfFile::read_vaddr(std::uint64_t vaddr, std::uint64_t size, std::vector<std::uint8_t>& out) const {
  for (const ElfSection& s : sections_) {
    if (!(s.flags & SHF_ALLOC) || s.type == SHT_NOBITS || (s.flags & SHF_COMPRESSED) || vaddr < s.addr ||
        vaddr - s.addr >= s.size)
      continue;
    if (size > s.size - (vaddr - s.addr)) return "address range runs past its section";
    return read(s.offset + (vaddr - s.addr), size, out);
  }
  return "address in no section of the file";
}

std::string ElfFile::for_each_symbol(const ElfSection& table,
                                     const std::function<void(const ElfSymbol&)>& visit) const {
  const std::string label = "symbol table " + table.name;
  if (table.type != SHT_SYMTAB && table.type != SHT_DYNSYM) return label + " is not a symbol table";
  if (table.entsize != sizeof(Elf64_Sym))
    return label + " has entries of " + std::to_string(table.entsize) + " bytes (24 expected)";
  if (table.size > kMaxSymbolTableBytes)
    return label + " is " + std::to_string(table.size) + " bytes: more than " + mib(kMaxSymbolTableBytes);
  if (table.link >= sections_.size() || sections_[table.link].type != SHT_STRTAB)
    return label + " names no string table";
  std::vector<std::uint8_t> strings;
  if (std::string why = read_section(sections_[table.link], kMaxStringTableBytes, strings); !why.empty()) return why;
  if (!strings.empty() && strings.back() != 0)
    return "string table " + sections_[table.link].name + " does not end in NUL";
  // A compressed table is inflated whole (capped); a plain one read in chunks.
  std::vector<std::uint8_t> inflated, chunk;
  if (table.flags & SHF_COMPRESSED) {
    if (std::string why = read_section(table, kMaxSymbolTableBytes, inflated); !why.empty()) return why;
  }
  const std::uint64_t total = (table.flags & SHF_COMPRESSED) ? inflated.size() : table.size;
  for (std::uint64_t at = 0; at + sizeof(Elf64_Sym) <= total; at += kSymbolChunkBytes) {
    if (std::string why = over_budget(); !why.empty()) return why;
    const std::uint64_t n = std::min(kSymbolChunkBytes, total - at) / sizeof(Elf64_Sym) * sizeof(Elf64_Sym);
    const std::uint8_t* base = inflated.data() + at;
    if (!(table.flags & SHF_COMPRESSED)) {
      if (std::string why = read(table.offset + at, n, chunk); !why.empty()) return why;
      base = chunk.data();
    }
    for (std::uint64_t i = 0; i < n; i += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, base + i, sizeof sym);
      std::string_view name;
      if (sym.st_name && !name_at(strings, sym.st_name, &name)) continue;
      visit({name, sym.st_value, sym.st_size, static_cast<std::uint8_t>(ELF64_ST_TYPE(sym.st_info)), sym.st_shndx});
    }
  }
  return "";
}

std::uint64_t ElfFile::code_offset(std::uint64_t vaddr, std::uint64_t size) const {
  for (const ElfSegment& ph : segments_) {
    if (ph.type != PT_LOAD || !(ph.flags & PF_X) || vaddr < ph.vaddr) continue;
    if (fits(vaddr - ph.vaddr, size, ph.filesz)) return vaddr - ph.vaddr + ph.offset;
  }
  return 0;
}

const ElfSegment* ElfFile::code_segment_at(std::uint64_t offset) const {
  for (const ElfSegment& ph : segments_)
    if (ph.type == PT_LOAD && (ph.flags & PF_X) && offset >= ph.offset && offset - ph.offset < ph.filesz) return &ph;
  return nullptr;
}

namespace {

// The GNU build id among notes (each: namesz, descsz, type, name, desc, 4-aligned).
std::string build_id_in_notes(const std::vector<std::uint8_t>& notes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::uint64_t at = 0;
  while (at + 12 <= notes.size()) {
    std::uint32_t namesz, descsz, type;
    std::memcpy(&namesz, &notes[at], 4);
    std::memcpy(&descsz, &notes[at + 4], 4);
    std::memcpy(&type, &notes[at + 8], 4);
    const std::uint64_t name_at = at + 12, desc_at = name_at + ((namesz + 3ull) & ~3ull);
    const std::uint64_t next = desc_at + ((descsz + 3ull) & ~3ull);
    if (next > notes.size()) return "";
    if (type == NT_GNU_BUILD_ID && namesz == 4 && std::memcmp(&notes[name_at], "GNU", 4) == 0 && descsz <= 64) {
      std::string hex;
      for (std::uint64_t i = 0; i < descsz; ++i) hex += {kHex[notes[desc_at + i] >> 4], kHex[notes[desc_at + i] & 15]};
      return hex;
    }
    at = next;
  }
  return "";
}

}  // namespace

std::string ElfFile::build_id() const {
  std::vector<std::uint8_t> notes;
  std::size_t seen = 0;
  for (const ElfSection& s : sections_) {
    if (s.type != SHT_NOTE || s.size > kMaxNoteBytes || (s.flags & SHF_COMPRESSED)) continue;
    if (++seen > kMaxNoteSections) break;
    if (!read(s.offset, s.size, notes).empty()) continue;
    if (std::string id = build_id_in_notes(notes); !id.empty()) return id;
  }
  for (const ElfSegment& ph : segments_) {  // a file without section headers keeps its PT_NOTE
    if (ph.type != PT_NOTE || ph.filesz > kMaxNoteBytes || !read(ph.offset, ph.filesz, notes).empty()) continue;
    if (std::string id = build_id_in_notes(notes); !id.empty()) return id;
  }
  return "";
}

}  // namespace infertap::capture
