// The bounded ELF reader against the files a hostile tenant crafted: each
// attack ends in a named refusal, in bounded memory and time, never a signal.
#include "capture/elf_file.h"

#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <chrono>
#include <cstring>

#include "capture/elf_symbols.h"
#include "capture/go_binary.h"

namespace infertap::capture {
namespace {

struct Blob {
  std::string name;
  std::uint32_t type = SHT_PROGBITS;
  std::uint64_t flags = 0;
  std::vector<std::uint8_t> data;
  std::uint32_t link = 0;  // a section index (1-based: 0 is the null section)
  std::uint64_t entsize = 0;
  std::uint64_t claimed_size = 0;  // the header's size when not data.size()
};

template <typename T>
void put(std::vector<std::uint8_t>& out, std::uint64_t at, const T& v) {
  if (out.size() < at + sizeof v) out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

// An ELF image: blobs laid out from 0x1000 (allocated ones at vaddr ==
// offset), one R+X PT_LOAD over them, then .shstrtab and the section headers.
std::vector<std::uint8_t> build_elf(std::vector<Blob> blobs, std::uint16_t machine = EM_X86_64) {
  std::vector<std::uint8_t> out(0x1000);
  blobs.push_back({".shstrtab", SHT_STRTAB, 0, {0}});
  std::vector<std::uint32_t> name_at;
  for (const Blob& b : blobs) {
    name_at.push_back(static_cast<std::uint32_t>(blobs.back().data.size()));
    blobs.back().data.insert(blobs.back().data.end(), b.name.begin(), b.name.end());
    blobs.back().data.push_back(0);
  }
  std::vector<Elf64_Shdr> headers(1);
  std::uint64_t load_end = 0x1000;
  for (std::size_t i = 0; i < blobs.size(); ++i) {
    const Blob& b = blobs[i];
    Elf64_Shdr sh{};
    sh.sh_name = name_at[i];
    sh.sh_type = b.type, sh.sh_flags = b.flags, sh.sh_offset = out.size(), sh.sh_link = b.link;
    sh.sh_size = b.claimed_size ? b.claimed_size : b.data.size(), sh.sh_entsize = b.entsize;
    if (b.flags & SHF_ALLOC) sh.sh_addr = sh.sh_offset, load_end = sh.sh_offset + b.data.size();
    out.insert(out.end(), b.data.begin(), b.data.end());
    headers.push_back(sh);
  }
  const std::uint64_t shoff = (out.size() + 7) & ~7ull;
  for (std::size_t i = 0; i < headers.size(); ++i) put(out, shoff + i * sizeof(Elf64_Shdr), headers[i]);
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64, eh.e_ident[EI_DATA] = ELFDATA2LSB, eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN, eh.e_machine = machine, eh.e_version = EV_CURRENT;
  eh.e_phoff = sizeof eh, eh.e_phentsize = sizeof(Elf64_Phdr), eh.e_phnum = 1;
  eh.e_shoff = shoff, eh.e_shentsize = sizeof(Elf64_Shdr), eh.e_shnum = static_cast<std::uint16_t>(headers.size());
  eh.e_shstrndx = static_cast<std::uint16_t>(headers.size() - 1);
  put(out, 0, eh);
  Elf64_Phdr ph{};
  ph.p_type = PT_LOAD, ph.p_flags = PF_R | PF_X, ph.p_filesz = ph.p_memsz = load_end;
  put(out, sizeof eh, ph);
  return out;
}

struct Sym {
  std::string name;
  std::uint64_t value = 0, size = 0;
};

// .symtab and .strtab blobs (the string table at section index `strtab_index`).
std::pair<Blob, Blob> symbol_tables(const std::vector<Sym>& syms, std::uint32_t strtab_index) {
  Blob symtab{".symtab", SHT_SYMTAB, 0, std::vector<std::uint8_t>(sizeof(Elf64_Sym)), strtab_index,
              sizeof(Elf64_Sym)};
  Blob strtab{".strtab", SHT_STRTAB, 0, {0}};
  for (const Sym& s : syms) {
    Elf64_Sym e{};
    e.st_name = static_cast<std::uint32_t>(strtab.data.size());
    e.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC), e.st_shndx = 1, e.st_value = s.value, e.st_size = s.size;
    strtab.data.insert(strtab.data.end(), s.name.begin(), s.name.end());
    strtab.data.push_back(0);
    put(symtab.data, symtab.data.size(), e);
  }
  return {symtab, strtab};
}

// A memory file holding `bytes` (closed with the object).
struct MemFile {
  int fd = ::memfd_create("elf-test", MFD_CLOEXEC);
  explicit MemFile(const std::vector<std::uint8_t>& bytes) {
    EXPECT_EQ(::pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  }
  ~MemFile() { ::close(fd); }
};

const std::array<std::string_view, 2> kSsl = {"SSL_write", "SSL_read"};

// movabs rax, imm64 (10 bytes); ret — a symbol 3 bytes in is mid-instruction.
std::vector<std::uint8_t> mid_instruction_library() {
  const Blob text{".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, {0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8, 0xc3}};
  auto [symtab, strtab] = symbol_tables({{"A", 0x1000, 11}, {"SSL_write", 0x1003, 4}, {"SSL_read", 0x100a, 1}}, 3);
  return build_elf({text, symtab, strtab});
}

TEST(ElfFile, AFunctionMidInstructionOfAnotherIsRefused) {
  const MemFile f(mid_instruction_library());
  const FunctionOffsets found = find_functions(f.fd, kSsl);
  ASSERT_TRUE(found.error.empty()) << found.error;
  EXPECT_EQ(found.offsets[0], 0u);
  EXPECT_NE(found.refusal.find("SSL_write refused: at 0x1003, mid-instruction in the function at 0x1000"),
            std::string::npos)
      << found.refusal;
  EXPECT_EQ(found.offsets[1], 0x100au) << "the ret starts an instruction";
}

TEST(ElfFile, TenMillionSectionsAreRefusedBeforeAllocating) {
  std::vector<std::uint8_t> image = build_elf({});
  Elf64_Ehdr eh;
  std::memcpy(&eh, image.data(), sizeof eh);
  eh.e_shnum = 0;  // the count moves to section 0's sh_size
  put(image, 0, eh);
  Elf64_Shdr first{};
  first.sh_size = 10'000'000;
  put(image, eh.e_shoff, first);
  const MemFile f(image);
  EXPECT_EQ(ElfFile(f.fd).error(), "10000000 sections: more than 65536");
}

TEST(ElfFile, ATruncatedFileIsAnErrorNotASignal) {
  std::vector<std::uint8_t> image = mid_instruction_library();
  const MemFile f(image);
  const ElfFile file(f.fd);
  ASSERT_TRUE(file.error().empty());
  ASSERT_EQ(::ftruncate(f.fd, 0x1004), 0);  // shrinks under the open reader
  std::vector<std::uint8_t> out;
  EXPECT_NE(file.read_section(*file.section(".strtab"), kMaxStringTableBytes, out).find("truncated"), std::string::npos);
  EXPECT_NE(find_functions(f.fd, kSsl).error.find("truncated"), std::string::npos);
  ASSERT_EQ(::ftruncate(f.fd, 40), 0);
  EXPECT_EQ(ElfFile(f.fd).error(), "truncated: the ELF header needs 64 bytes, the file has 40");
}

TEST(ElfFile, ASparseFourGibSymbolTableIsRefused) {
  auto [symtab, strtab] = symbol_tables({}, 2);
  symtab.claimed_size = 4ull << 30;
  std::vector<std::uint8_t> image = build_elf({symtab, strtab});
  const MemFile f(image);
  ASSERT_EQ(::ftruncate(f.fd, static_cast<off_t>(8ull << 30)), 0);  // sparse: the table lies inside the file
  const FunctionOffsets found = find_functions(f.fd, kSsl);
  EXPECT_EQ(found.error, "symbol table .symtab is 4294967296 bytes: more than 64 MiB");
}

TEST(ElfFile, AStringTableWithoutNulIsRefusedQuickly) {
  auto [symtab, strtab] = symbol_tables({{"SSL_write", 0x1000, 1}}, 2);
  strtab.data.assign(16 << 20, 'A');
  const MemFile f(build_elf({symtab, strtab}));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(find_functions(f.fd, kSsl).error, "string table .strtab does not end in NUL");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

// A compressed section: Elf64_Chdr claiming `claimed` bytes, then `zeros`
// zero bytes deflated in 1 MiB steps.
std::vector<std::uint8_t> compressed_zeros(std::uint64_t claimed, std::uint64_t zeros) {
  Elf64_Chdr ch{};
  ch.ch_type = ELFCOMPRESS_ZLIB, ch.ch_size = claimed, ch.ch_addralign = 1;
  std::vector<std::uint8_t> out;
  put(out, 0, ch);
  z_stream z{};
  deflateInit(&z, 9);
  std::vector<std::uint8_t> in(1 << 20), buf(1 << 16);
  for (std::uint64_t left = zeros;;) {
    const std::uint64_t n = std::min<std::uint64_t>(left, in.size());
    left -= n;
    z.next_in = in.data(), z.avail_in = static_cast<uInt>(n);
    do {
      z.next_out = buf.data(), z.avail_out = static_cast<uInt>(buf.size());
      deflate(&z, left ? Z_NO_FLUSH : Z_FINISH);
      out.insert(out.end(), buf.begin(), buf.end() - z.avail_out);
    } while (z.avail_out == 0);
    if (!left) break;
  }
  deflateEnd(&z);
  return out;
}

std::string read_compressed_strtab(std::uint64_t claimed, std::uint64_t zeros) {
  const Blob strtab{".strtab", SHT_STRTAB, SHF_COMPRESSED, compressed_zeros(claimed, zeros)};
  const MemFile f(build_elf({strtab}));
  const ElfFile file(f.fd);
  std::vector<std::uint8_t> out;
  return file.read_section(*file.section(".strtab"), kMaxInflatedBytes, out);
}

TEST(ElfFile, ACompressionBombIsRefusedAtItsCap) {
  EXPECT_EQ(read_compressed_strtab(1ull << 30, 200ull << 20),
            "section .strtab inflates past 64 MiB (it claims 1073741824 bytes)");
  EXPECT_EQ(read_compressed_strtab(1 << 20, 200ull << 20), "section .strtab inflates past its declared 1048576 bytes");
  EXPECT_EQ(read_compressed_strtab(4096, 4096), "");
}

TEST(ElfFile, TheCpuBudgetEndsTheRead) {
  const MemFile f(mid_instruction_library());
  const ElfFile file(f.fd, std::chrono::nanoseconds(0));
  while (file.over_budget().empty()) {  // spends the (zero) budget
  }
  EXPECT_NE(file.for_each_symbol(*file.section(".symtab"), [](const ElfSymbol&) {}).find("CPU budget"),
            std::string::npos);
}

TEST(ElfFile, AGoFunctionWithThousandsOfReturnsIsNotCryptoTls) {
  std::vector<std::uint8_t> buildinfo(32);
  std::memcpy(buildinfo.data(), "\xff Go buildinf:", 14);
  buildinfo[14] = 8, buildinfo[15] = 2;
  const std::string version = "go1.21.0";
  buildinfo.push_back(static_cast<std::uint8_t>(version.size()));
  buildinfo.insert(buildinfo.end(), version.begin(), version.end());
  const Blob text{".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, std::vector<std::uint8_t>(5010, 0xc3)};
  auto [symtab, strtab] = symbol_tables(
      {{"crypto/tls.(*Conn).Write", 0x1000, 5000}, {"crypto/tls.(*Conn).Read", 0x1000 + 5000, 10}}, 3);
  const MemFile f(build_elf({text, symtab, strtab, {".go.buildinfo", SHT_PROGBITS, 0, buildinfo}}));
  const GoBinary go = inspect_go_binary(f.fd);
  EXPECT_TRUE(go.is_go);
  EXPECT_EQ(go.problem, "crypto/tls.(*Conn).Write: 5000 RET instructions: more than 64, not a real crypto/tls");
}

TEST(ElfFile, TheSystemLibsslIsScannedOnceByBuildId) {
  const int fd = ::open("/usr/lib/x86_64-linux-gnu/libssl.so.3", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  SymbolCache cache;
  const FunctionOffsets first = find_functions(fd, kSsl, &cache);
  const FunctionOffsets again = find_functions(fd, kSsl, &cache);
  const FunctionOffsets uncached = find_functions(fd, kSsl);
  ::close(fd);
  ASSERT_TRUE(first.error.empty()) << first.error;
  EXPECT_FALSE(first.build_id.empty());
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_TRUE(first.refusal.empty()) << first.refusal;
  EXPECT_NE(first.offsets[0], 0u);
  EXPECT_EQ(first.offsets, again.offsets);
  EXPECT_EQ(first.offsets, uncached.offsets);
}

}  // namespace
}  // namespace infertap::capture
