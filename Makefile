# ringpipe top-level build.
#
#   make                 libringpipe.{a,so}, the ringpipe tool
#   make run             the main job on the built-in demo
#   make test            every test: unit, integration, interop, fuzz smoke
#   make bench           benchmarks (markdown table on stdout)
#   make deps            install build/test dependencies (apt-get as root)
#   make install         PREFIX=/usr/local DESTDIR=
#   SAN=asan|ubsan|tsan  sanitizer build (separate output directory)
#   V=1                  show the commands
.DELETE_ON_ERROR:
.SECONDARY:
.DEFAULT_GOAL := all

VERSION   := 0.1.0
SOVERSION := 0
PREFIX    ?= /usr/local
DESTDIR   ?=
LIBDIR    ?= $(PREFIX)/lib
INCDIR    ?= $(PREFIX)/include
BINDIR    ?= $(PREFIX)/bin
MANDIR    ?= $(PREFIX)/share/man

CC      ?= gcc
CLANG   ?= clang
BPFTOOL ?= $(or $(shell command -v bpftool 2>/dev/null),/usr/sbin/bpftool)
LLVM_STRIP ?= llvm-strip
DOTNET  ?= dotnet
SAN     ?=

ifeq ($(V),1)
  Q =
  msg =
else
  Q = @
  msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

OUTPUT  := .output
OUT     := $(OUTPUT)/$(if $(SAN),$(SAN),default)

WARN    := -Wall -Wextra -Werror -Wmissing-field-initializers -Werror=undef \
           -Wno-unused-parameter
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
CFLAGS  += -std=gnu11 $(WARN) -fPIC -fvisibility=hidden -D_GNU_SOURCE \
           -Iinclude -Iuser -fno-omit-frame-pointer
LDLIBS  := -luring -lpthread -lm

ifeq ($(SAN),asan)
  SANFLAGS := -fsanitize=address -fno-sanitize-recover=all
else ifeq ($(SAN),ubsan)
  SANFLAGS := -fsanitize=undefined -fno-sanitize-recover=all
else ifeq ($(SAN),tsan)
  SANFLAGS := -fsanitize=thread
else ifneq ($(SAN),)
  $(error SAN must be asan, ubsan or tsan, not '$(SAN)')
endif
CFLAGS  += $(SANFLAGS)
LDFLAGS += $(SANFLAGS)

LIB_SRCS  := $(sort $(wildcard user/*.c))
LIB_OBJS  := $(patsubst user/%.c,$(OUT)/user/%.o,$(LIB_SRCS))
TOOL_SRCS := $(sort $(wildcard tools/ringpipe/*.c))
TOOL_OBJS := $(patsubst tools/%.c,$(OUT)/tools/%.o,$(TOOL_SRCS))
DEMO_SRCS := $(sort $(wildcard tools/demo/*.c))
DEMO_OBJS := $(patsubst tools/%.c,$(OUT)/tools/%.o,$(DEMO_SRCS))
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TEST_BINS := $(patsubst tests/%.c,$(OUT)/tests/%,$(TEST_SRCS))
BENCH_SRCS:= $(sort $(wildcard bench/bench_*.c))
BENCH_BINS:= $(patsubst bench/%.c,$(OUT)/bench/%,$(BENCH_SRCS))
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(OUTPUT)/fuzz/%,$(FUZZ_SRCS))
# eBPF programs: every bpf/NAME.bpf.c becomes $(OUT)/bpf/NAME.bpf.o and the
# skeleton $(OUT)/bpf/NAME.skel.h (struct NAME_bpf). Only the ringpipe tool
# (and the tests and benchmarks that load programs) link libbpf; the producer
# library stays free of it.
BPF_SRCS  := $(sort $(wildcard bpf/*.bpf.c))
BPF_SKELS := $(patsubst bpf/%.bpf.c,$(OUT)/bpf/%.skel.h,$(BPF_SRCS))
BPF_HDRS  := $(wildcard bpf/*.h)
VMLINUX   := $(OUT)/bpf/vmlinux.h
BPF_LIBS  := -lbpf -lelf -lz
BPF_CFLAGS:= -I$(OUT)/bpf -Ibpf
# usdt.bpf.h pulls in <linux/errno.h>, which wants the multiarch <asm/...>
BPF_ARCH_INC := $(shell $(CC) -dumpmachine 2>/dev/null)
HDRS      := $(wildcard include/ringpipe/*.h user/*.h user/*.inc tools/ringpipe/*.h tools/demo/*.h tests/*.h bench/*.h)

STATIC_LIB := $(OUT)/libringpipe.a
SHARED_LIB := $(OUT)/libringpipe.so.$(VERSION)
TOOL       := $(OUT)/ringpipe
DEMO       := $(if $(DEMO_SRCS),$(OUT)/ringpipe-demo)
INTEROP_DLL:= $(OUTPUT)/interop/TraceDump.dll

# The contenders of `make bench`'s side-by-side table. LTTng-UST's probe
# builds only where its headers are (liblttng-ust-dev, installed by make
# deps): evaluated in the sub-make that `bench` starts after deps.
LTTNG_UST   := $(shell pkg-config --exists lttng-ust 2>/dev/null && echo y)
LTTNG_BENCH := $(if $(LTTNG_UST),$(OUT)/bench/lttng_bench)
EP_BENCH    := $(OUTPUT)/eventpipe-bench/EventPipeBench.dll
EP_SRCS     := $(wildcard bench/EventPipeBench/*.cs bench/EventPipeBench/*.csproj)

bpf: $(BPF_SKELS)

.PHONY: bpf all lib tools tests bench bench-bins eventpipe-bench run test deps install clean \
	interop fuzz check-map sdt-check

all: lib tools

lib: $(STATIC_LIB) $(SHARED_LIB)
tools: $(TOOL) $(DEMO)
tests: $(TEST_BINS) $(TOOL) $(DEMO)

$(OUT)/user/%.o: user/%.c $(HDRS) | $(OUT)/user
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

# the ringpipe:event USDT probe (user/usdt.h) needs <sys/sdt.h>
$(OUT)/user/write.o $(OUT)/user/usdt.o: | sdt-check
sdt-check:
	$(Q)printf '#include <sys/sdt.h>\n' | $(CC) $(CFLAGS) -E -x c - >/dev/null 2>&1 || { \
		echo "missing <sys/sdt.h>: make deps installs systemtap-sdt-dev" \
		     "(or build without the USDT probe: make CFLAGS+=-DRP_NO_USDT)" >&2; exit 1; }

$(OUT)/tools/%.o: tools/%.c $(HDRS) | $(OUT)/tools/ringpipe $(OUT)/tools/demo
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(BPF_CFLAGS) -c $< -o $@

# The tool's BPF loader includes the generated skeletons.
$(OUT)/tools/ringpipe/bpf_capture.o $(OUT)/tools/ringpipe/cmd_record.o: $(BPF_SKELS) $(BPF_HDRS)

# Kernel types for CO-RE, from the running kernel's BTF. Without BTF a copy
# pinned in bpf/vmlinux.h (generated elsewhere) is used, if one exists.
$(VMLINUX): | $(OUT)/bpf
	$(call msg,GEN,$@)
	$(Q)command -v $(BPFTOOL) >/dev/null 2>&1 || [ -x $(BPFTOOL) ] || \
		{ echo "ringpipe: bpftool not found: run make deps (installs clang, bpftool)" >&2; exit 1; }
	$(Q)if [ -r /sys/kernel/btf/vmlinux ]; then \
		$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@; \
	elif [ -r bpf/vmlinux.h ]; then \
		echo "  NOTE     no /sys/kernel/btf/vmlinux: using the pinned bpf/vmlinux.h"; cp bpf/vmlinux.h $@; \
	else echo "ringpipe: the kernel has no BTF (/sys/kernel/btf/vmlinux) and no bpf/vmlinux.h is pinned" >&2; exit 1; fi

$(OUT)/bpf/%.bpf.o: bpf/%.bpf.c $(VMLINUX) $(BPF_HDRS) include/ringpipe/abi.h | $(OUT)/bpf
	$(call msg,BPF,$@)
	$(Q)command -v $(CLANG) >/dev/null 2>&1 || \
		{ echo "ringpipe: $(CLANG) not found: run make deps (installs clang, bpftool)" >&2; exit 1; }
	$(Q)$(CLANG) -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Wextra -Werror \
		-Wno-unused-parameter -I$(OUT)/bpf -Ibpf -Iinclude \
		$(if $(BPF_ARCH_INC),-idirafter /usr/include/$(BPF_ARCH_INC)) -c $< -o $@
	$(Q)if command -v $(LLVM_STRIP) >/dev/null 2>&1; then $(LLVM_STRIP) -g $@; fi

$(OUT)/bpf/%.skel.h: $(OUT)/bpf/%.bpf.o
	$(call msg,SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $*_bpf > $@

$(STATIC_LIB): $(LIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

# The shared library exports only what user/libringpipe.map lists.
$(SHARED_LIB): $(LIB_OBJS) user/libringpipe.map
	$(call msg,LD,$@)
	$(Q)$(CC) -shared $(LDFLAGS) -Wl,-soname,libringpipe.so.$(SOVERSION) \
		-Wl,--version-script=user/libringpipe.map -o $@ $(LIB_OBJS) $(LDLIBS)
	$(Q)ln -sf libringpipe.so.$(VERSION) $(OUT)/libringpipe.so.$(SOVERSION)
	$(Q)ln -sf libringpipe.so.$(VERSION) $(OUT)/libringpipe.so

$(TOOL): $(TOOL_OBJS) $(STATIC_LIB)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJS) $(STATIC_LIB) $(BPF_LIBS) $(LDLIBS)

# The demo runtime keeps frame pointers and symbols: it is what users attach to.
$(OUT)/ringpipe-demo: $(DEMO_OBJS) $(STATIC_LIB)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -rdynamic -o $@ $(DEMO_OBJS) $(STATIC_LIB) $(LDLIBS)

$(OUT)/tests/%: tests/%.c $(STATIC_LIB) $(HDRS) | $(OUT)/tests
	$(call msg,TEST,$@)
	$(Q)$(CC) $(CFLAGS) -Itests $(LDFLAGS) -o $@ $< $(STATIC_LIB) -lcriterion $(LDLIBS)

# ---- CPU sampling and symbols ------------------------------------------
# bpf/sample.bpf.c builds through the generic bpf/%.bpf.c rule above.
$(OUT)/tools/ringpipe/sampler.o: $(OUT)/bpf/sample.skel.h bpf/capture.h
$(OUT)/tools/ringpipe/sampler.o: CFLAGS += -I$(OUT)/bpf
$(OUT)/tools/ringpipe/sample_out.o $(OUT)/tools/ringpipe/cmd_sample.o: bpf/capture.h
# test_sample compiles the symbolizer in; busy is its sampled target
$(OUT)/tests/test_sample: tools/ringpipe/symbolize.c $(OUT)/tests/progs/busy $(OUT)/tests/progs/busy-pie
$(OUT)/tests/test_sample: LDLIBS += -lelf
$(OUT)/tests/progs/busy: tests/progs/busy.c | $(OUT)/tests
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D) && $(CC) -O1 -g -fno-omit-frame-pointer -no-pie -o $@ $<
$(OUT)/tests/progs/busy-pie: tests/progs/busy.c | $(OUT)/tests
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D) && $(CC) -O1 -g -fno-omit-frame-pointer -fPIE -pie -o $@ $<

# test_collect includes the CLI's IPC client
$(OUT)/tests/test_collect: tools/ringpipe/ipc_client.c tools/ringpipe/ipc_client.h

# test_record and bench_bpf include the tool's BPF loader and load programs
$(OUT)/tests/test_record $(OUT)/bench/bench_bpf: tools/ringpipe/bpf_capture.c \
	tools/ringpipe/bpf_capture.h $(BPF_SKELS) $(BPF_HDRS)
$(OUT)/tests/test_record $(OUT)/bench/bench_bpf: LDLIBS += $(BPF_LIBS)
$(OUT)/tests/test_record $(OUT)/bench/bench_bpf: CFLAGS += $(BPF_CFLAGS)

# test_usdt traces a writer linked against libringpipe.so and one linked
# against libringpipe.a (ringpipe:event must work in both)
$(OUT)/tests/test_usdt: $(OUT)/tests/usdt_writer $(OUT)/tests/usdt_writer_static

$(OUT)/tests/usdt_writer: tests/usdt_writer.c $(SHARED_LIB) $(HDRS) | $(OUT)/tests
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(OUT) -lringpipe -Wl,-rpath,$(abspath $(OUT)) -lpthread

$(OUT)/tests/usdt_writer_static: tests/usdt_writer.c $(STATIC_LIB) $(HDRS) | $(OUT)/tests
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC_LIB) $(LDLIBS)

# bench_rundown compiles the demo's method tables and CLR encoders in
$(OUT)/bench/bench_rundown: tools/demo/jit.c tools/demo/clr_events.c tools/demo/sampler.c

$(OUT)/bench/%: bench/%.c $(STATIC_LIB) $(HDRS) | $(OUT)/bench
	$(call msg,BENCH,$@)
	$(Q)$(CC) $(CFLAGS) -O2 -march=native $(LDFLAGS) -o $@ $< $(STATIC_LIB) $(LDLIBS)

# bench_usdt compares itself with usdt_off: the same program and library
# but write.c built with -DRP_NO_USDT (linked first, so the archive's
# write.o is never pulled in)
$(OUT)/bench/bench_usdt: $(OUT)/bench/usdt_off

$(OUT)/bench/write_nousdt.o: user/write.c $(HDRS) | $(OUT)/bench
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -DRP_NO_USDT -c $< -o $@

$(OUT)/bench/usdt_off: bench/bench_usdt.c $(OUT)/bench/write_nousdt.o $(STATIC_LIB) $(HDRS) | $(OUT)/bench
	$(call msg,BENCH,$@)
	$(Q)$(CC) $(CFLAGS) -O2 -march=native -DRP_NO_USDT $(LDFLAGS) -o $@ $< \
		$(OUT)/bench/write_nousdt.o $(STATIC_LIB) $(LDLIBS)

# The probe is linked in, as in a statically instrumented program.
$(OUT)/bench/lttng_bench: bench/lttng_bench.c bench/lttng_tp.c bench/lttng_tp.h $(HDRS) | $(OUT)/bench
	$(call msg,BENCH,$@)
	$(Q)$(CC) $(CFLAGS) -O2 -march=native -Ibench $(LDFLAGS) -o $@ bench/lttng_bench.c \
		bench/lttng_tp.c $$(pkg-config --libs lttng-ust) -ldl -lpthread

$(EP_BENCH): $(EP_SRCS)
	$(call msg,DOTNET,$@)
	$(Q)if command -v $(DOTNET) >/dev/null 2>&1; then \
		$(DOTNET) build -nologo -v q -c Release bench/EventPipeBench -o $(OUTPUT)/eventpipe-bench >$(OUTPUT)/eventpipe-bench.log 2>&1 \
		|| { cat $(OUTPUT)/eventpipe-bench.log; exit 1; }; \
	else echo "  SKIP     EventPipe benchmark: dotnet not found (install the .NET SDK)"; fi

# libFuzzer targets always build with clang + ASan + UBSan, whatever SAN says.
$(OUTPUT)/fuzz/%: tests/fuzz/%.c $(LIB_SRCS) $(HDRS) | $(OUTPUT)/fuzz
	$(call msg,FUZZ,$@)
	$(Q)$(CLANG) -std=gnu11 -g -O1 -D_GNU_SOURCE -Iinclude -Iuser \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-o $@ $< $(LIB_SRCS) $(LDLIBS)

fuzz: $(FUZZ_BINS)

$(OUT)/user $(OUT)/tools/ringpipe $(OUT)/tools/demo $(OUT)/tests $(OUT)/bench $(OUTPUT)/fuzz $(OUT)/bpf:
	$(Q)mkdir -p $@

# The TraceEvent-based reference dumper used by the interop tests.
INTEROP_SRCS := $(wildcard tests/interop/TraceDump/*.cs tests/interop/TraceDump/*.csproj)
$(INTEROP_DLL): $(INTEROP_SRCS)
	$(call msg,DOTNET,$@)
	$(Q)if command -v $(DOTNET) >/dev/null 2>&1; then \
		$(DOTNET) build -nologo -v q -c Release tests/interop/TraceDump -o $(OUTPUT)/interop >$(OUTPUT)/interop-build.log 2>&1 \
		|| { cat $(OUTPUT)/interop-build.log; exit 1; }; \
	else echo "  SKIP     interop dumper: dotnet not found (install the .NET SDK)"; fi

interop:
	$(Q)mkdir -p $(OUTPUT)
	$(Q)$(MAKE) --no-print-directory $(INTEROP_DLL)

deps:
	$(Q)scripts/deps.sh

run: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(MAKE) --no-print-directory interop
	$(Q)scripts/run-demo.sh $(OUT)

# the benchmarks are built too (not run), so that `make bench` cannot rot
test: deps
	$(Q)$(MAKE) --no-print-directory all tests fuzz $(if $(SAN),,bench-bins)
	$(Q)$(MAKE) --no-print-directory interop
	$(Q)OUT=$(OUT) OUTPUT=$(OUTPUT) SAN=$(SAN) scripts/run-tests.sh

bench-bins: $(BENCH_BINS) $(LTTNG_BENCH)

eventpipe-bench:
	$(Q)mkdir -p $(OUTPUT)
	$(Q)$(MAKE) --no-print-directory $(EP_BENCH)

# deps first (LTTng, the .NET tools), then a sub-make that sees them
bench: deps
	$(Q)$(MAKE) --no-print-directory all bench-bins
	$(Q)$(MAKE) --no-print-directory eventpipe-bench
	$(Q)OUT=$(OUT) OUTPUT=$(OUTPUT) scripts/run-bench.sh $(BENCH_ARGS)

check-map: $(SHARED_LIB)
	$(Q)scripts/check-exports.sh $(SHARED_LIB) user/libringpipe.map

install: lib tools
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR)/ringpipe $(DESTDIR)$(BINDIR) \
		$(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(MANDIR)/man1
	install -m 644 $(STATIC_LIB) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(SHARED_LIB) $(DESTDIR)$(LIBDIR)/
	ln -sf libringpipe.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libringpipe.so.$(SOVERSION)
	ln -sf libringpipe.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libringpipe.so
	install -m 644 include/ringpipe/*.h $(DESTDIR)$(INCDIR)/ringpipe/
	install -m 755 $(TOOL) $(DEMO) $(DESTDIR)$(BINDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCDIR@|$(INCDIR)|' \
		-e 's|@VERSION@|$(VERSION)|' libringpipe.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/libringpipe.pc
	install -m 644 Documentation/man/*.1 $(DESTDIR)$(MANDIR)/man1/

clean:
	rm -rf $(OUTPUT)
