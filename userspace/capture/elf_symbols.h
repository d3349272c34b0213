// File offsets of named functions in an ELF file, as a uprobe needs them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

typedef struct Elf Elf;  // libelf's

namespace infertap::capture {

struct FunctionOffsets {
  // offsets[i]: file offset of names[i]'s code, 0 when the file defines no
  // such function (an undefined import does not count).
  std::vector<std::uint64_t> offsets;
  std::string error;  // the file could not be read as ELF (offsets then empty)
};

// Reads .dynsym and .symtab (a stripped binary keeps its exported .dynsym).
// A versioned name (dlopen@@GLIBC_2.34) matches its plain form.
FunctionOffsets find_functions(const std::string& path, std::span<const std::string_view> names);

// A virtual address of executable code as a file offset (0: in no executable
// loadable segment).
std::uint64_t file_offset(Elf* elf, std::uint64_t vaddr);

}  // namespace infertap::capture
