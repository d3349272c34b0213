#!/usr/bin/env python3
"""ELF files a hostile tenant maps for the agent to read (tenant tests):
every one small on disk, each claiming what would cost a careless reader
gigabytes or minutes. Usage: elf_bombs.py KIND OUT

  sections   12 KB claiming 10 000 000 section headers (count in section 0)
  symtab     a .symtab of 4 GiB, sparse (nothing allocated on disk)
  strtab     a 16 MiB .strtab with no NUL, every symbol's name pointing in it
  zlib       a compressed .strtab (SHF_COMPRESSED) that inflates to 1 GiB
  midinsn    SSL_write pointing into the middle of another function's instruction
  goret      a Go-looking executable whose crypto/tls.(*Conn).Write/Read hold
             5 000 RET instructions each
"""
import struct
import sys
import zlib

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
SHDR = struct.Struct("<IIQQQQIIQQ")
PHDR = struct.Struct("<IIQQQQQQ")
SYM = struct.Struct("<IBBHQQ")
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB = 1, 2, 3
SHF_ALLOC, SHF_EXECINSTR, SHF_COMPRESSED = 2, 4, 0x800
STT_FUNC_GLOBAL = (1 << 4) | 2


TEXT = 0x401000  # where the code is loaded (above mmap_min_addr: the Go-looking one runs)


def ehdr(shoff, shnum, shstrndx, phoff=0, phnum=0, etype=3, entry=TEXT):
    ident = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    return EHDR.pack(ident, etype, 62, 1, entry, phoff, shoff, 0, 64, 56, phnum, 64, shnum, shstrndx)


def shdr(name=0, kind=0, flags=0, addr=0, offset=0, size=0, link=0, info=0, align=1, entsize=0):
    return SHDR.pack(name, kind, flags, addr, offset, size, link, info, align, entsize)


def layout(sections, text, extra_tail=0, etype=3, entry=TEXT):
    """An ELF with one executable PT_LOAD holding `text` (file offset 0x1000,
    address TEXT) and the given sections (name, kind, flags, addr,
    data-or-size, link, entsize); data None: the section is the text."""
    names = b"\0" + b"".join(s[0].encode() + b"\0" for s in sections) + b".shstrtab\0"
    body = bytearray(b"\0" * 0x1000) + text
    headers = [shdr()]
    name_at = 1
    for (name, kind, flags, addr, data, link, entsize) in sections:
        if data is None:
            off, size = 0x1000, len(text)
        elif isinstance(data, int):  # claimed size, no bytes (sparse or absent)
            off, size = len(body), data
        else:
            off, size = len(body), len(data)
            body += data
        headers.append(shdr(name_at, kind, flags, addr, off, size, link, 0, 1, entsize))
        name_at += len(name) + 1
    shstr_off = len(body)
    body += names
    headers.append(shdr(name_at, SHT_STRTAB, 0, 0, shstr_off, len(names)))
    shoff = (len(body) + 7) & ~7
    body += b"\0" * (shoff - len(body))
    body += b"".join(headers)
    ph = PHDR.pack(1, 5, 0x1000, TEXT, TEXT, len(text), len(text), 0x1000)
    body[0:64] = ehdr(shoff, len(headers), len(headers) - 1, 64, 1, etype, entry)
    body[64:64 + 56] = ph
    return bytes(body), extra_tail


def text_with(funcs):
    return b"".join(funcs)


def write(out, data, size=None):
    with open(out, "wb") as f:
        f.write(data)
        if size:
            f.truncate(size)


def main(kind, out):
    ret = b"\xc3"
    code = b"\x55\x48\x89\xe5\x5d" + ret  # push rbp; mov rbp,rsp; pop rbp; ret
    if kind == "sections":
        data = bytearray(12 * 1024)
        data[0:64] = ehdr(64, 0, 0)
        data[64:128] = shdr(size=10_000_000)  # e_shnum 0: the count is section 0's size
        write(out, bytes(data))
    elif kind == "symtab":
        strtab = b"\0SSL_write\0"
        body, _ = layout([(".strtab", SHT_STRTAB, 0, 0, strtab, 0, 0),
                          (".symtab", SHT_SYMTAB, 0, 0, 4 << 30, 1, SYM.size)], code)
        write(out, body, len(body) + (4 << 30))
    elif kind == "strtab":
        size = 16 << 20
        syms = b"".join(SYM.pack(i * 4096, STT_FUNC_GLOBAL, 0, 1, TEXT, len(code)) for i in range(4096))
        body, _ = layout([(".symtab", SHT_SYMTAB, 0, 0, syms, 2, SYM.size),
                          (".strtab", SHT_STRTAB, 0, 0, b"A" * size, 0, 0)], code)
        write(out, body)
    elif kind == "zlib":
        comp = zlib.compressobj(9)
        chunks = [comp.compress(b"\0" * (1 << 20)) for _ in range(1024)]
        stream = b"".join(chunks) + comp.flush()
        chdr = struct.pack("<IIQQ", 1, 0, 1 << 30, 1)  # ELFCOMPRESS_ZLIB, 1 GiB
        syms = SYM.pack(0, 0, 0, 0, 0, 0) + SYM.pack(1, STT_FUNC_GLOBAL, 0, 1, TEXT, len(code))
        body, _ = layout([(".symtab", SHT_SYMTAB, 0, 0, syms, 2, SYM.size),
                          (".strtab", SHT_STRTAB, SHF_COMPRESSED, 0, chdr + stream, 0, 0)], code)
        write(out, body)
    elif kind == "midinsn":
        inner = b"\x48\xb8" + struct.pack("<Q", 0x1122334455667788) + ret  # movabs rax, imm64; ret
        text = inner + code
        strtab = b"\0inner\0SSL_write\0SSL_read\0"
        syms = (SYM.pack(0, 0, 0, 0, 0, 0) + SYM.pack(1, STT_FUNC_GLOBAL, 0, 1, TEXT, len(inner)) +
                SYM.pack(7, STT_FUNC_GLOBAL, 0, 1, TEXT + 3, 0) +  # three bytes into the movabs
                SYM.pack(17, STT_FUNC_GLOBAL, 0, 1, TEXT + len(inner), len(code)))
        body, _ = layout([(".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, TEXT, None, 0, 0),
                          (".dynsym", 11, SHF_ALLOC, 0, syms, 3, SYM.size),
                          (".dynstr", SHT_STRTAB, SHF_ALLOC, 0, strtab, 0, 0)], text)
        write(out, body)
    elif kind == "goret":
        fn = b"\x90" * 3 + ret * 5000
        idle = b"\xb8\x22\x00\x00\x00\x0f\x05\xeb\xf7"  # for (;;) pause();
        text = fn + fn + idle
        write_name, read_name = b"crypto/tls.(*Conn).Write", b"crypto/tls.(*Conn).Read"
        strtab = b"\0" + write_name + b"\0" + read_name + b"\0"
        syms = (SYM.pack(0, 0, 0, 0, 0, 0) + SYM.pack(1, STT_FUNC_GLOBAL, 0, 1, TEXT, len(fn)) +
                SYM.pack(2 + len(write_name), STT_FUNC_GLOBAL, 0, 1, TEXT + len(fn), len(fn)))
        version = b"go1.21.0"
        buildinfo = b"\xff Go buildinf:\x08\x02" + b"\0" * 16 + bytes([len(version)]) + version
        body, _ = layout([(".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, TEXT, None, 0, 0),
                          (".go.buildinfo", SHT_PROGBITS, 0, 0, buildinfo, 0, 0),
                          (".symtab", SHT_SYMTAB, 0, 0, syms, 4, SYM.size),
                          (".strtab", SHT_STRTAB, 0, 0, strtab, 0, 0)], text, etype=2, entry=TEXT + 2 * len(fn))
        write(out, body)
    else:
        sys.exit("unknown kind " + kind)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
