// What a Go executable says about its own TLS: its Go version (from
// .go.buildinfo), its architecture, and where crypto/tls.(*Conn).Write and
// Read begin and return — from .symtab when the binary keeps it, else from
// the function table in .gopclntab, which `strip` and `-ldflags=-s -w` leave.
// Function table formats read: Go 1.16/1.17 (magic 0xfffffffa), Go 1.18/1.19
// (0xfffffff0) and Go 1.20 and later (0xfffffff1). Probed: Go >= 1.17 (the
// register ABI) on x86-64 and arm64.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace infertap::capture {

enum class GoArch { unknown, amd64, arm64 };

// One function's code, as uprobes need it: file offsets.
struct GoFunction {
  std::uint64_t entry = 0;  // file offset of the first instruction; 0: not found
  // Where the entry probe goes: on amd64 the branch of the stack check that
  // opens the function (an emulated instruction: one trap, not two; the
  // arguments are still in their registers), else the entry.
  std::uint64_t probe_at = 0;
  std::uint64_t size = 0;
  std::vector<std::uint64_t> returns;  // file offsets of its RET instructions
};

struct GoBinary {
  bool is_go = false;       // has .go.buildinfo or .gopclntab
  std::string version;      // "go1.19.8"; "" when the binary does not say
  GoArch arch = GoArch::unknown;
  std::string symbols_from;  // "symtab" or "gopclntab"
  GoFunction write, read;    // crypto/tls.(*Conn).Write / Read
  std::string problem;       // why its TLS cannot be probed ("" = it can)
};

// Reads a Go executable's TLS entry and return points; is_go false (and no
// problem) for anything else. Never throws on bad input: a problem is named.
// Bounded: .gopclntab read up to 256 MiB; a function of more than 256 KiB of
// code or more than 64 RET instructions is a problem, not a probe site.
// `fd` is borrowed (not closed); the path form opens the file and reads it so.
GoBinary inspect_go_binary(int fd);
GoBinary inspect_go_binary(const std::string& path);

struct GoFunctionRange {
  std::uint64_t vaddr = 0, size = 0;  // vaddr 0: not found
};
struct GoTlsRanges {
  GoFunctionRange write, read;
};

// crypto/tls.(*Conn).Write/Read in a .gopclntab's bytes (text_addr: the
// .text section's address, for position-independent binaries); "" or what is
// wrong with the table. Functions not in it stay vaddr 0.
std::string tls_functions_in_pclntab(std::span<const std::uint8_t> pclntab, std::uint64_t text_addr,
                                     GoTlsRanges* out);

// "go1.19.8" -> 19; -1 when it is not a go1.N version.
int go_minor_version(const std::string& version);

// Offsets (start_offset + position) of every return instruction in `code`, a
// function's machine code decoded from its first byte. x86-64 needs a real
// instruction decoder (capstone); arm64 instructions are 4 bytes. An
// undecodable byte sequence before the end is an error (*error set).
// The offset of the stack-check branch that opens a Go amd64 function at
// `entry` (`[lea r12, [rsp-n];] cmp rsp|r12, [r14+16]; jbe`), or `entry`
// when the code has another shape.
std::uint64_t go_entry_probe_site(std::span<const std::uint8_t> code, std::uint64_t entry);

std::vector<std::uint64_t> find_returns(GoArch arch, std::span<const std::uint8_t> code, std::uint64_t start_offset,
                                        std::string* error);

}  // namespace infertap::capture
