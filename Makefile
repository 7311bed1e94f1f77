# ringpipe top-level build.
#
#   make                 libringpipe.{a,so}, the ringpipe tool
#   make run             the main job on the built-in demo
#   make test            every test: unit, integration, interop, fuzz smoke
#   make test-under-load the same suite beside CPU hogs (RUNS=3: three times)
#   make bench           benchmarks (markdown table on stdout)
#   make deps            install build/test dependencies (apt-get as root)
#   make install         PREFIX=/usr/local DESTDIR=
#   SAN=asan|ubsan|tsan  sanitizer build (separate output directory)
#   V=1                  show the commands
.DELETE_ON_ERROR:
.SECONDARY:
.DEFAULT_GOAL := all

# The version is written once, in include/ringpipe/ringpipe.h; `make
# check-version` checks that the symbol map and the man pages agree.
VERSION   := $(shell sed -n 's/^\#define RP_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$$/\2/p' \
		include/ringpipe/ringpipe.h | paste -sd.)
SOVERSION := $(firstword $(subst ., ,$(VERSION)))
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
           -Wshadow -Wmissing-prototypes -Wno-unused-parameter
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
# The library's modules, lowest layer first (Documentation/architecture.md);
# `make check-deps` proves that no object calls into a module above its own.
LIB_DIRS := util core kernel producer nettrace session ipc startup
# The library's sources (and the internal archive's, the tests', the
# benchmarks') include its headers by bare name; the tools include only
# public headers (-Iinclude, in CFLAGS), internal/'s, and the library
# headers shared with them by folder path ("util/hmap.h", -Iuser), which
# `make check-deps` holds to the list in Documentation/architecture.md.
LIB_INC  := -Iuser $(addprefix -Iuser/,$(LIB_DIRS))
# -MMD -MP: each object depends on the headers it includes, and no more
CFLAGS  += -std=gnu11 $(WARN) -fPIC -fvisibility=hidden -D_GNU_SOURCE \
           -Iinclude -fno-omit-frame-pointer -MMD -MP
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

LIB_SRCS  := $(sort $(wildcard $(addprefix user/,$(addsuffix /*.c,$(LIB_DIRS)))))
LIB_OBJS  := $(patsubst user/%.c,$(OUT)/user/%.o,$(LIB_SRCS))
# What the tools, tests, benchmarks and fuzzers share with the library but
# applications never call (the nettrace reader and its JSON dump, the trace
# generator, the diagnostics IPC client): libringpipe-internal.a, with its
# headers in internal/. libringpipe.so and .a hold none of it, and the
# library includes none of its headers (make check-deps).
INTERNAL_SRCS := $(sort $(wildcard internal/*.c))
INTERNAL_OBJS := $(patsubst internal/%.c,$(OUT)/internal/%.o,$(INTERNAL_SRCS))
INTERNAL_LIB  := $(OUT)/libringpipe-internal.a
INTERNAL_INC  := -Iinternal
# The tool: main.c and one file per command, over a static library of its
# folders, one concern each, lowest layer first (Documentation/
# architecture.md; `make check-deps` proves the order from the objects and
# from the includes). A file includes another folder's header by its path.
TOOL_DIRS := common wire symbols capture trace host fleet egress agent
TOOL_SRCS := $(sort $(wildcard tools/ringpipe/*.c))
TOOL_OBJS := $(patsubst tools/%.c,$(OUT)/tools/%.o,$(TOOL_SRCS))
TLIB_SRCS := $(sort $(wildcard $(addprefix tools/ringpipe/,$(addsuffix /*.c,$(TOOL_DIRS)))))
TLIB_OBJS := $(patsubst tools/%.c,$(OUT)/tools/%.o,$(TLIB_SRCS))
TOOL_LIB  := $(OUT)/libringpipe-tool.a
TOOL_INC  := -Itools/ringpipe
# The library headers the tools may include (by this path, -Iuser): the
# types and helpers they share with the library (Documentation/
# architecture.md says why each). Every other user/ header is the library's own.
SHARED_WITH_TOOLS := util/bytebuf.h util/hmap.h util/utf.h util/duration.h util/procfs.h \
	util/thread.h core/atomics.h core/clock.h core/futex.h nettrace/nettrace.h \
	producer/write_origin.h session/session.h session/config.h session/agent_wire.h
# The demo runtime: demo.c is its main; the rest is a library the
# benchmarks link too.
DEMO_SRCS := $(sort $(wildcard tools/demo/*.c))
DEMO_OBJS := $(patsubst tools/%.c,$(OUT)/tools/%.o,$(DEMO_SRCS))
DEMO_LIB_OBJS := $(filter-out %/demo.o,$(DEMO_OBJS))
DEMO_LIB  := $(OUT)/libringpipe-demo.a
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
# The tool's HTTP client (tools/ringpipe/wire/http_conn.c): libcurl with
# OpenSSL (libcurl4-openssl-dev), zlib for gzip request bodies
NET_CFLAGS:= $(shell pkg-config --cflags libcurl zlib 2>/dev/null)
NET_LIBS  := $(or $(shell pkg-config --libs libcurl zlib 2>/dev/null),-lcurl -lz)
BPF_CFLAGS:= -I$(OUT)/bpf -Ibpf
# usdt.bpf.h pulls in <linux/errno.h>, which wants the multiarch <asm/...>
BPF_ARCH_INC := $(shell $(CC) -dumpmachine 2>/dev/null)
# headers as the fuzzers and the install rule see them (objects track their
# own through -MMD)
HDRS      := $(wildcard include/ringpipe/*.h user/*/*.h user/*/*.inc internal/*.h)

# ringpipe(1); libringpipe(3), the API's overview, and a page per exported
# function (make check-man3)
MAN1_PAGES := $(wildcard Documentation/man/*.1)
MAN3_PAGES := $(wildcard Documentation/man/*.3)

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

.PHONY: bpf all lib tools tests bench bench-bins eventpipe-bench run test test-under-load deps \
	install clean \
	interop fuzz check-map check-deps check-version check-man3 check-install checks sdt-check \
	uninstall

all: lib tools

lib: $(STATIC_LIB) $(SHARED_LIB)
tools: $(TOOL) $(DEMO)
tests: $(TEST_BINS) $(TOOL) $(DEMO)

$(OUT)/user/%.o: user/%.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(CFLAGS) $(LIB_INC) -c $< -o $@

$(OUT)/internal/%.o: internal/%.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(CFLAGS) $(LIB_INC) $(INTERNAL_INC) -c $< -o $@

# the ringpipe:event USDT probe (user/kernel/usdt.h) needs <sys/sdt.h>
$(OUT)/user/producer/write.o $(OUT)/user/kernel/usdt.o: | sdt-check
sdt-check:
	$(Q)printf '#include <sys/sdt.h>\n' | $(CC) $(filter-out -MMD -MP,$(CFLAGS)) -E -x c - >/dev/null 2>&1 || { \
		echo "missing <sys/sdt.h>: make deps installs systemtap-sdt-dev" \
		     "(or build without the USDT probe: make CFLAGS+=-DRP_NO_USDT)" >&2; exit 1; }

$(OUT)/tools/%.o: tools/%.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(CFLAGS) -Iuser $(INTERNAL_INC) $(BPF_CFLAGS) $(TOOL_INC) $(NET_CFLAGS) \
		-c $< -o $@

# The tool's BPF loaders include the generated skeletons: they exist before
# any tool object compiles (afterwards -MMD tracks them).
$(TOOL_OBJS) $(TLIB_OBJS): | $(BPF_SKELS)

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

# The static library holds the whole library as one relocatable object, as
# the shared library is one file: a program that uses any of it gets all of
# it, the startup session's constructor included (no module below it has to
# reference it to pull it into a link).
$(OUT)/libringpipe.o: $(LIB_OBJS)
	$(call msg,LD,$@)
	$(Q)$(LD) -r -o $@ $^

$(STATIC_LIB): $(OUT)/libringpipe.o
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(TOOL_LIB): $(TLIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(INTERNAL_LIB): $(INTERNAL_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(DEMO_LIB): $(DEMO_LIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

# The shared library exports only what user/libringpipe.map lists.
$(SHARED_LIB): $(LIB_OBJS) user/libringpipe.map
	$(call msg,LD,$@)
	$(Q)$(CC) -shared $(LDFLAGS) -Wl,-soname,libringpipe.so.$(SOVERSION) \
		-Wl,--version-script=user/libringpipe.map -Wl,--no-undefined -o $@ $(LIB_OBJS) $(LDLIBS)
	$(Q)ln -sf libringpipe.so.$(VERSION) $(OUT)/libringpipe.so.$(SOVERSION)
	$(Q)ln -sf libringpipe.so.$(VERSION) $(OUT)/libringpipe.so

$(TOOL): $(TOOL_OBJS) $(TOOL_LIB) $(INTERNAL_LIB) $(STATIC_LIB)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJS) $(TOOL_LIB) $(INTERNAL_LIB) $(STATIC_LIB) $(BPF_LIBS) \
		$(NET_LIBS) $(LDLIBS)

# The demo runtime keeps frame pointers and symbols: it is what users attach to.
# Its options are read as the tool's are (tools/ringpipe/common/tool_opts.h).
$(OUT)/ringpipe-demo: $(OUT)/tools/demo/demo.o $(DEMO_LIB) $(TOOL_LIB) $(STATIC_LIB)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -rdynamic -o $@ $^ $(LDLIBS)

# Tests link the tool's and the demo's libraries too (never a .c of theirs)
$(OUT)/tests/%: tests/%.c $(TOOL_LIB) $(DEMO_LIB) $(INTERNAL_LIB) $(STATIC_LIB) | $(OUT)/tests $(BPF_SKELS)
	$(call msg,TEST,$@)
	$(Q)$(CC) $(CFLAGS) $(LIB_INC) $(INTERNAL_INC) $(BPF_CFLAGS) $(TOOL_INC) -Itools/demo -Itests $(LDFLAGS) \
		-o $@ $< $(TOOL_LIB) $(DEMO_LIB) $(INTERNAL_LIB) $(STATIC_LIB) -lcriterion $(BPF_LIBS) \
		$(NET_LIBS) $(LDLIBS)

# ---- CPU sampling and symbols ------------------------------------------
# bpf/sample.bpf.c builds through the generic bpf/%.bpf.c rule above.
# busy is test_sample's sampled target
$(OUT)/tests/test_sample: $(OUT)/tests/progs/busy $(OUT)/tests/progs/busy-pie
# test_fleet_top: the agent's producer, the demo runtime and busy, sampled
$(OUT)/tests/test_fleet_top: $(OUT)/tests/agent_producer $(OUT)/tests/progs/busy $(DEMO)
$(OUT)/tests/progs/busy: tests/progs/busy.c | $(OUT)/tests
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D) && $(CC) -O1 -g -fno-omit-frame-pointer -no-pie -o $@ $<
$(OUT)/tests/progs/busy-pie: tests/progs/busy.c | $(OUT)/tests
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D) && $(CC) -O1 -g -fno-omit-frame-pointer -fPIE -pie -o $@ $<

# test_agent, test_fleet_egress, test_otlp, test_fleet_cluster: a program on the host,
# linked against the shared library, that joins the agent
$(OUT)/tests/test_agent $(OUT)/tests/test_fleet_egress $(OUT)/tests/test_otlp \
	$(OUT)/tests/test_fleet_cluster: $(OUT)/tests/agent_producer
$(OUT)/tests/agent_producer: tests/agent_producer.c $(SHARED_LIB) | $(OUT)/tests
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(OUT) -lringpipe -Wl,-rpath,$(abspath $(OUT)) -lpthread

# test_stall and bench_stall: the Block write storm they stop, freeze and
# throttle, a process of its own linked against the shared library (and the
# tool: both start the agent)
$(OUT)/tests/test_stall: $(OUT)/tests/progs/stall_producer $(TOOL)
$(OUT)/bench/bench_stall: $(OUT)/tests/progs/stall_producer $(TOOL)
$(OUT)/tests/progs/stall_producer: tests/progs/stall_producer.c $(SHARED_LIB) | $(OUT)/tests
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(OUT) -lringpipe \
		-Wl,-rpath,$(abspath $(OUT)) -lpthread

# test_usdt traces a writer linked against libringpipe.so and one linked
# against libringpipe.a (ringpipe:event must work in both)
$(OUT)/tests/test_usdt: $(OUT)/tests/usdt_writer $(OUT)/tests/usdt_writer_static

$(OUT)/tests/usdt_writer: tests/usdt_writer.c $(SHARED_LIB) | $(OUT)/tests
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(OUT) -lringpipe -Wl,-rpath,$(abspath $(OUT)) -lpthread

$(OUT)/tests/usdt_writer_static: tests/usdt_writer.c $(STATIC_LIB) | $(OUT)/tests
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC_LIB) $(LDLIBS)

# benchmarks link the tool's library (bench_bpf: the BPF loader) and the
# demo's (bench_rundown: its method tables and CLR encoders). BENCH_MARCH=
# (empty) builds them for any x86-64, as valgrind needs on CPUs whose
# instructions it does not know (AVX-512).
BENCH_MARCH ?= -march=native
$(OUT)/bench/%: bench/%.c $(TOOL_LIB) $(DEMO_LIB) $(INTERNAL_LIB) $(STATIC_LIB) | $(OUT)/bench $(BPF_SKELS)
	$(call msg,BENCH,$@)
	$(Q)$(CC) $(CFLAGS) $(LIB_INC) $(INTERNAL_INC) $(BPF_CFLAGS) $(TOOL_INC) -Itools/demo -Itests -O2 \
		$(BENCH_MARCH) $(LDFLAGS) -o $@ $< $(TOOL_LIB) $(DEMO_LIB) $(INTERNAL_LIB) $(STATIC_LIB) \
		$(BPF_LIBS) $(NET_LIBS) $(LDLIBS)

# bench_usdt compares itself with usdt_off: the same program over a copy of
# the library built with -DRP_NO_USDT
$(OUT)/bench/bench_usdt: $(OUT)/bench/usdt_off

NOUSDT_OBJS := $(patsubst user/%.c,$(OUT)/bench/nousdt/%.o,$(LIB_SRCS))
$(OUT)/bench/nousdt/%.o: user/%.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(CFLAGS) $(LIB_INC) -DRP_NO_USDT -c $< -o $@

$(OUT)/bench/usdt_off: bench/bench_usdt.c $(NOUSDT_OBJS) | $(OUT)/bench
	$(call msg,BENCH,$@)
	$(Q)$(CC) $(CFLAGS) $(LIB_INC) -O2 $(BENCH_MARCH) -DRP_NO_USDT $(LDFLAGS) -o $@ $< \
		$(NOUSDT_OBJS) $(LDLIBS)

# The probe is linked in, as in a statically instrumented program.
$(OUT)/bench/lttng_bench: bench/lttng_bench.c bench/lttng_tp.c bench/lttng_tp.h $(HDRS) | $(OUT)/bench
	$(call msg,BENCH,$@)
	$(Q)$(CC) $(CFLAGS) $(LIB_INC) -O2 $(BENCH_MARCH) -Ibench $(LDFLAGS) -o $@ bench/lttng_bench.c \
		bench/lttng_tp.c $$(pkg-config --libs lttng-ust) -ldl -lpthread

$(EP_BENCH): $(EP_SRCS)
	$(call msg,DOTNET,$@)
	$(Q)if command -v $(DOTNET) >/dev/null 2>&1; then \
		$(DOTNET) build -nologo -v q -c Release bench/EventPipeBench -o $(OUTPUT)/eventpipe-bench >$(OUTPUT)/eventpipe-bench.log 2>&1 \
		|| { cat $(OUTPUT)/eventpipe-bench.log; exit 1; }; \
	else echo "  SKIP     EventPipe benchmark: dotnet not found (install the .NET SDK)"; fi

# libFuzzer targets always build with clang + ASan + UBSan, whatever SAN says.
$(OUTPUT)/fuzz/%: tests/fuzz/%.c $(LIB_SRCS) $(INTERNAL_SRCS) $(HDRS) | $(OUTPUT)/fuzz
	$(call msg,FUZZ,$@)
	$(Q)$(CLANG) -std=gnu11 -g -O1 -D_GNU_SOURCE -Iinclude $(LIB_INC) $(INTERNAL_INC) \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-o $@ $< $(LIB_SRCS) $(INTERNAL_SRCS) $(LDLIBS)

fuzz: $(FUZZ_BINS)

$(OUT)/tests $(OUT)/bench $(OUTPUT)/fuzz $(OUT)/bpf:
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
	$(Q)$(MAKE) --no-print-directory checks
	$(Q)$(MAKE) --no-print-directory interop
	$(Q)OUT=$(OUT) OUTPUT=$(OUTPUT) SAN=$(SAN) scripts/run-tests.sh

# The same suite with every CPU busy (scripts/test-under-load.sh: stress-ng
# or busy loops, twice as many as CPUs; RUNS=N repeats it): the tests judge
# outcomes, not speed, and must pass on a loaded host too.
test-under-load: deps
	$(Q)$(MAKE) --no-print-directory all tests fuzz $(if $(SAN),,bench-bins)
	$(Q)$(MAKE) --no-print-directory interop
	$(Q)OUT=$(OUT) OUTPUT=$(OUTPUT) SAN=$(SAN) scripts/test-under-load.sh

bench-bins: $(BENCH_BINS) $(LTTNG_BENCH) $(OUT)/tests/agent_producer $(TOOL)

eventpipe-bench:
	$(Q)mkdir -p $(OUTPUT)
	$(Q)$(MAKE) --no-print-directory $(EP_BENCH)

# deps first (LTTng, the .NET tools), then a sub-make that sees them
bench: deps
	$(Q)$(MAKE) --no-print-directory all bench-bins
	$(Q)$(MAKE) --no-print-directory eventpipe-bench
	$(Q)OUT=$(OUT) OUTPUT=$(OUTPUT) scripts/run-bench.sh $(BENCH_ARGS)

# The build's own checks, run by `make test`: the export list, the module
# graph, one version everywhere, a man page per exported function, and an
# install used as a user would.
checks: check-map check-deps check-version check-man3 $(if $(SAN),,check-install)

check-map: $(SHARED_LIB)
	$(Q)scripts/check-exports.sh $(SHARED_LIB) user/libringpipe.map

# The layers, lowest first: the library, the internal archive, each folder
# of the tool in TOOL_DIRS's order, the commands, the demo.
check-deps: $(LIB_OBJS) $(INTERNAL_OBJS) $(TOOL_OBJS) $(TLIB_OBJS) $(DEMO_OBJS)
	$(Q)scripts/check-deps.py --private internal:user \
		--includes "tools/ringpipe:$(subst $() ,$(comma),$(TOOL_DIRS)):$(subst $() ,$(comma),$(SHARED_WITH_TOOLS))" \
		--includes "tools/demo::$(subst $() ,$(comma),$(SHARED_WITH_TOOLS)):tools/ringpipe" \
		"library:$(subst $() ,$(comma),$(LIB_OBJS))" \
		"internal:$(subst $() ,$(comma),$(INTERNAL_OBJS))" \
		$(foreach d,$(TOOL_DIRS),"tool/$(d):$(subst $() ,$(comma),$(filter $(OUT)/tools/ringpipe/$(d)/%,$(TLIB_OBJS)))") \
		"commands:$(subst $() ,$(comma),$(TOOL_OBJS))" \
		"demo:$(subst $() ,$(comma),$(DEMO_OBJS))"

check-version:
	$(Q)scripts/check-version.sh $(VERSION)

# every function user/libringpipe.map exports has its page in
# Documentation/man/, whose SYNOPSIS is the header's prototype
check-man3:
	$(Q)scripts/check-man3.py

check-install: lib tools
	$(Q)OUT=$(OUT) scripts/check-install.sh

install: lib tools
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR)/ringpipe $(DESTDIR)$(BINDIR) \
		$(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(MANDIR)/man1
	install -m 644 $(STATIC_LIB) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(SHARED_LIB) $(DESTDIR)$(LIBDIR)/
	ln -sf libringpipe.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libringpipe.so.$(SOVERSION)
	ln -sf libringpipe.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libringpipe.so
	install -m 644 include/ringpipe/*.h $(DESTDIR)$(INCDIR)/ringpipe/
	install -m 755 $(TOOL) $(DEMO) $(DESTDIR)$(BINDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(patsubst $(PREFIX)%,$${prefix}%,$(LIBDIR))|' \
		-e 's|@INCDIR@|$(patsubst $(PREFIX)%,$${prefix}%,$(INCDIR))|' \
		-e 's|@VERSION@|$(VERSION)|' libringpipe.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/libringpipe.pc
	install -d $(DESTDIR)$(MANDIR)/man3
	install -m 644 $(MAN1_PAGES) $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(MAN3_PAGES) $(DESTDIR)$(MANDIR)/man3/

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libringpipe.a $(DESTDIR)$(LIBDIR)/libringpipe.so \
		$(DESTDIR)$(LIBDIR)/libringpipe.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libringpipe.so.$(VERSION) \
		$(DESTDIR)$(LIBDIR)/pkgconfig/libringpipe.pc \
		$(DESTDIR)$(BINDIR)/ringpipe $(DESTDIR)$(BINDIR)/ringpipe-demo \
		$(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN1_PAGES))) \
		$(addprefix $(DESTDIR)$(MANDIR)/man3/,$(notdir $(MAN3_PAGES)))
	rm -rf $(DESTDIR)$(INCDIR)/ringpipe

clean:
	rm -rf $(OUTPUT)

comma := ,
# generated header dependencies of every object and binary
-include $(shell find $(OUT) -name '*.d' 2>/dev/null)
