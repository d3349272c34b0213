# infertap build. Layout follows libbpf-bootstrap / libbpf-tools:
#   bpf/**/X.bpf.c --clang -target bpf--> build/bpf/**/X.bpf.o
#     --bpftool gen object--> build/infertap.bpf.o --bpftool gen skeleton--> build/infertap.skel.h
#   userspace/**.cpp --g++ -std=c++20--> build/libinfertap.a + binaries
# `make` builds everything but fuzzers; `make test` runs unit tests (no root);
# `make fuzz` builds the libFuzzer harnesses; scripts/test.sh runs the whole suite.

OUT       ?= build
ARCH      ?= $(shell uname -m | sed 's/x86_64/x86/;s/aarch64/arm64/')
CLANG     ?= clang
CXX       ?= g++
BPFTOOL   ?= bpftool
VMLINUX   := vmlinux/$(ARCH)/vmlinux.h

CXXFLAGS  ?= -O2 -g
override CXXFLAGS += -std=c++20 -Wall -Wextra -Wno-missing-field-initializers -pthread
CPPFLAGS  += -Iinclude -Iuserspace -Itests -I$(OUT)
LDLIBS    += -lbpf -lelf -lz -lbrotlidec -lzstd -lsimdjson -lcpp-httplib -lyaml-cpp -lssl -lcrypto -lcrypt -lnghttp2 -lcapstone -pthread
# Libraries and headers of another arch, unpacked (scripts/arm64_sysroot.sh).
SYSROOT   ?=
TRIPLET   ?= aarch64-linux-gnu
ifneq ($(SYSROOT),)
CPPFLAGS  += -isystem $(SYSROOT)/usr/include -isystem $(SYSROOT)/usr/include/$(TRIPLET)
LDFLAGS   += -L$(SYSROOT)/usr/lib/$(TRIPLET) -Wl,-rpath-link,$(SYSROOT)/usr/lib/$(TRIPLET) \
             -Wl,-rpath-link,$(SYSROOT)/lib/$(TRIPLET)
endif

BPF_CFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -Wall -Wno-unused-function \
              -Iinclude -I$(dir $(VMLINUX)) -Ibpf

# Every bpf/**/*.bpf.c (one per attach set, plus the global copy function) is
# compiled on its own and the objects are linked into one: one skeleton,
# shared maps (bpf/maps/maps.bpf.h). A new program file needs no Makefile edit.
BPF_SRCS   := $(shell find bpf -name '*.bpf.c' | sort)
BPF_HDRS   := $(shell find bpf -name '*.bpf.h')
BPF_OBJS   := $(patsubst bpf/%.bpf.c,$(OUT)/bpf/%.bpf.o,$(BPF_SRCS))
SKELS      := $(OUT)/infertap.skel.h

# Every product source under userspace/ is found by path: a new unit needs no
# Makefile edit. Unit tests sit beside the code they test (*_test.cpp) or, when
# they cross units, in tests/unit/. Files with main() and the standalone tools
# are kept out of the library.
ALL_CPP    := $(shell find userspace -name '*.cpp' | sort)
TEST_CPP   := $(filter %_test.cpp,$(ALL_CPP))
TOOL_CPP   := $(filter userspace/tools/%,$(ALL_CPP))
MAIN_CPP   := userspace/infertapd.cpp userspace/cli/infertap.cpp
LIB_SRCS   := $(filter-out $(TEST_CPP) $(TOOL_CPP) $(MAIN_CPP),$(ALL_CPP))
LIB_OBJS   := $(patsubst %.cpp,$(OUT)/obj/%.o,$(LIB_SRCS))
LIB        := $(OUT)/libinfertap.a

BINS       := $(OUT)/infertapd $(OUT)/sample-server $(OUT)/sample-client $(OUT)/send-loop $(OUT)/tls-fault-peer \
              $(if $(wildcard userspace/cli/infertap.cpp),$(OUT)/infertap)
UNIT_SRCS  := $(TEST_CPP) $(wildcard tests/unit/*.cpp)
UNIT_OBJS  := $(patsubst %.cpp,$(OUT)/obj/%.o,$(UNIT_SRCS))
INTEG_SRCS := $(wildcard tests/integration/*.cpp)
INTEG_OBJS := $(patsubst %.cpp,$(OUT)/obj/%.o,$(INTEG_SRCS))
BENCH_SRCS := $(wildcard tests/bench/*.cpp)
BENCH_OBJS := $(patsubst %.cpp,$(OUT)/obj/%.o,$(BENCH_SRCS))

# Fuzzers: clang + libFuzzer + ASan/UBSan, one binary per tests/fuzz/fuzz_*.cpp.
FUZZ_SRCS  := $(wildcard tests/fuzz/fuzz_*.cpp)
FUZZ_BINS  := $(patsubst tests/fuzz/%.cpp,$(OUT)/fuzz/%,$(FUZZ_SRCS))
# The library sources they need are compiled once (instrumented, no main)
# and linked into each.
FUZZ_LIB_SRCS := $(filter userspace/base/% userspace/protocol/% userspace/core/%,$(LIB_SRCS)) userspace/capture/event.cpp \
                 userspace/capture/proc_maps.cpp userspace/capture/elf_file.cpp userspace/capture/elf_symbols.cpp userspace/capture/go_binary.cpp \
                 userspace/output/svg/stream_svg.cpp
FUZZ_LIB_OBJS := $(patsubst %.cpp,$(OUT)/fuzz/obj/%.o,$(FUZZ_LIB_SRCS))
FUZZ_COMMON := -std=c++20 -O1 -gline-tables-only -fno-sanitize-recover=undefined -Iinclude -Iuserspace -I$(OUT)
FUZZ_FLAGS := $(FUZZ_COMMON) -fsanitize=fuzzer,address,undefined

.DELETE_ON_ERROR:
.PHONY: all bins bpf test unit integration bench fuzz clean vmlinux cross-arm64

all: $(BINS) $(OUT)/unit_tests $(OUT)/integration_tests $(OUT)/bench_pipeline

bins: $(BINS)

# aarch64: the BPF objects against vmlinux/arm64/vmlinux.h and the product
# binaries with Debian's cross compiler, linked against arm64 libraries
# unpacked into build-arm64/sysroot (the host's packages stay as they are).
# Tests run on the host only. CROSS_CXXFLAGS: the suite, which checks that
# everything compiles and links, builds unoptimised: up to half the time.
CROSS_CXXFLAGS ?= -O2 -g
cross-arm64:
	scripts/arm64_sysroot.sh build-arm64/sysroot
	$(MAKE) OUT=build-arm64 ARCH=arm64 CXX=$(TRIPLET)-g++ SYSROOT=build-arm64/sysroot CXXFLAGS="$(CROSS_CXXFLAGS)" bins

bpf: $(SKELS)

$(OUT) $(OUT)/fuzz:
	mkdir -p $@

# The committed vmlinux.h is generated from the running kernel's BTF.
vmlinux:
	scripts/gen_vmlinux.sh

$(OUT)/bpf/%.bpf.o: bpf/%.bpf.c $(BPF_HDRS) include/infertap/abi.h $(VMLINUX)
	@mkdir -p $(dir $@)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(OUT)/infertap.bpf.o: $(BPF_OBJS)
	$(BPFTOOL) gen object $@ $^
	llvm-strip -g $@

$(OUT)/infertap.skel.h: $(OUT)/infertap.bpf.o
	$(BPFTOOL) gen skeleton $< > $@

# Tests carry line tables only (-g1: enough for a backtrace): full debug
# info doubles the compile time of a gtest file. Product objects keep CXXFLAGS.
$(UNIT_OBJS) $(INTEG_OBJS) $(BENCH_OBJS): TEST_DEBUG := -g1

$(OUT)/obj/%.o: %.cpp $(SKELS)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) $(TEST_DEBUG) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJS)
	rm -f $@ && ar rcs $@ $^  # a fresh archive: a moved source leaves no stale member

$(OUT)/infertapd: $(OUT)/obj/userspace/infertapd.o $(LIB)
	$(CXX) $(CXXFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(OUT)/infertap: $(OUT)/obj/userspace/cli/infertap.o $(LIB)
	$(CXX) $(CXXFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(OUT)/sample-server: $(OUT)/obj/userspace/tools/sample_server.o
	$(CXX) $(CXXFLAGS) $(LDFLAGS) $^ -o $@ -pthread -lz -lbrotlienc -lzstd

$(OUT)/sample-client: $(OUT)/obj/userspace/tools/sample_client.o
	$(CXX) $(CXXFLAGS) $(LDFLAGS) $^ -o $@ -pthread -lz

$(OUT)/send-loop: $(OUT)/obj/userspace/tools/send_loop.o
	$(CXX) $(CXXFLAGS) $^ -o $@ -pthread

$(OUT)/tls-fault-peer: $(OUT)/obj/userspace/tools/tls_fault_peer.o
	$(CXX) $(CXXFLAGS) $(LDFLAGS) $^ -o $@ -lssl -lcrypto

$(OUT)/unit_tests: $(UNIT_OBJS) $(LIB)
	$(CXX) $(CXXFLAGS) $^ -o $@ -lgtest -lgtest_main -lbrotlienc -lexpat $(LDLIBS)

$(OUT)/integration_tests: $(INTEG_OBJS) $(LIB)
	$(CXX) $(CXXFLAGS) $^ -o $@ -lgtest -lgtest_main -lbrotlienc -lexpat $(LDLIBS)

$(OUT)/bench_pipeline: $(BENCH_OBJS) $(LIB)
	$(CXX) $(CXXFLAGS) $^ -o $@ -lbenchmark $(LDLIBS)

$(OUT)/fuzz/obj/%.o: %.cpp $(SKELS)
	@mkdir -p $(dir $@)
	$(CLANG)++ $(FUZZ_COMMON) -fsanitize=fuzzer-no-link,address,undefined -MMD -MP -c $< -o $@

$(OUT)/fuzz/fuzz_%: tests/fuzz/fuzz_%.cpp $(FUZZ_LIB_OBJS) $(SKELS) | $(OUT)/fuzz
	$(CLANG)++ $(FUZZ_FLAGS) -MMD -MP -MF $(OUT)/fuzz/obj/fuzz_$*.d $< $(FUZZ_LIB_OBJS) -o $@ -lsimdjson -lz -lbrotlidec -lzstd -lelf -lnghttp2 -lcapstone -lexpat

fuzz: $(FUZZ_BINS)

unit: $(OUT)/unit_tests
	$(OUT)/unit_tests

test: unit

clean:
	rm -rf $(OUT)

-include $(shell find $(OUT)/obj $(OUT)/fuzz/obj -name '*.d' 2>/dev/null)
