# lmtune: plain Makefile. `make` builds ./lmtune; `make test` builds and runs
# every test; `make test SANITIZE=1` runs them under ASan+UBSan; `make bench`
# runs the benchmarks; `make demo` runs the first-run demo; `make fuzz` builds
# the libFuzzer targets (clang, build/fuzz) and runs each for FUZZ_SECONDS.
# The binary is portable: compiled for x86-64-v3 (AVX2, FMA), with the
# kernels that gain from AVX-512 compiled a second time for x86-64-v4 and
# chosen at start-up from CPUID (src/kernels/isa.h; LMTUNE_NO_AVX512=1 turns
# them off). `make NATIVE=1` builds for this machine only (-march=native, no
# choice at start-up, build/*-native). Other targets (CC=aarch64-linux-gnu-gcc)
# get the compiler's default and the kernels' portable vector code.
CC      ?= gcc
SANITIZE ?= 0
FUZZ    ?= 0
NATIVE  ?= 0
FUZZ_SECONDS ?= 60
MPI     ?= $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1 || echo 0)
OPT     ?= -O2

ifeq ($(FUZZ),1)
  MPI := 0
  CC := clang
  NATIVE := 1
endif
ifeq ($(MPI),1)
  FLAVOUR := -mpi
endif
MACHINE := $(shell $(CC) -dumpmachine)
ifeq ($(NATIVE),1)
  ARCH := -march=native
  FLAVOUR := $(FLAVOUR)-native
else ifneq ($(filter x86_64-%,$(MACHINE)),)
  # -Wno-psabi: kernels/vec.h passes 64-byte vectors to inlined functions only
  ARCH := -march=x86-64-v3 -DLT_ISA_DISPATCH -Wno-psabi
  ISA_VARIANTS := 1
else
  ARCH :=
  FLAVOUR := $(FLAVOUR)-$(firstword $(subst -, ,$(MACHINE)))
endif
ifeq ($(FUZZ),1)
  # The library instrumented for libFuzzer (coverage), ASan and UBSan.
  BUILD  := build/fuzz
  OPT    := -O1 -g -fno-omit-frame-pointer
  SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -Wno-pass-failed -Wno-unknown-pragmas
else ifeq ($(SANITIZE),1)
  BUILD  := build/san$(FLAVOUR)
  OPT    := -O1 -g -fno-omit-frame-pointer
  SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
else
  BUILD  := build/rel$(FLAVOUR)
  SANFLAGS :=
endif

MPI_CFLAGS :=
MPI_LIBS :=
ifeq ($(MPI),1)
  MPI_CFLAGS := -DLT_USE_MPI $(shell pkg-config --cflags ompi-c 2>/dev/null)
  MPI_LIBS := $(shell pkg-config --libs ompi-c 2>/dev/null)
endif

CFLAGS  := -std=c11 -D_GNU_SOURCE $(OPT) $(ARCH) -ffp-contract=fast -fopenmp -Wall -Wextra -Isrc -MMD -MP $(SANFLAGS) $(MPI_CFLAGS) \
           $(EXTRA_CFLAGS)
LDLIBS  := -ldnnl -ljansson -lpcre2-8 -lyaml -lm $(MPI_LIBS)
LDFLAGS := -fopenmp $(SANFLAGS)

LIB_SRC := $(shell find src -name '*.c' -not -path 'src/cli/*' | sort)
CLI_SRC := $(shell find src/cli -name '*.c' | sort)
TEST_SRC := $(shell find tests -name 'test_*.c' -not -path '*/node_modules/*' | sort)
TEST_SUPPORT := $(shell find tests -name '*.c' -not -name 'test_*.c' -not -path '*/fuzz/*' -not -path '*/node_modules/*' | sort)

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
# The kernels with an AVX-512 variant (kernels/isa.h), compiled twice.
ISA_SRC := src/kernels/attention.c src/kernels/attention_cache.c src/kernels/lmhead_xent.c src/kernels/bf16_convert.c \
           src/kernels/dequant_affine.c src/kernels/gemv_affine.c src/kernels/gated_delta.c src/kernels/glu.c
ifeq ($(ISA_VARIANTS),1)
  LIB_OBJ += $(ISA_SRC:%.c=$(BUILD)/%.avx512.o)
endif
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(TEST_SRC:%.c=$(BUILD)/%)
TEST_SUPPORT_OBJ := $(TEST_SUPPORT:%.c=$(BUILD)/%.o)
LIB := $(BUILD)/liblmtune.a
DEPS_STAMP := build/.deps-ok
# The test references (torch, jinja2, node modules, ...): installed by
# `install-deps.sh --test` before any test runs, again when the script or a
# lock file of the npm references changes.
TEST_DEPS_STAMP := build/.deps-test-ok
NPM_LOCKS := $(wildcard tests/*/package-lock.json)

.PHONY: all test bench demo clean deps test-deps print-build fuzz fuzz-build cross-check cross-objects
all: lmtune

deps: $(DEPS_STAMP)
test-deps: $(TEST_DEPS_STAMP)
$(DEPS_STAMP): scripts/install-deps.sh
	@scripts/install-deps.sh
	@mkdir -p build && touch $@

$(BUILD)/%.o: %.c Makefile | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.avx512.o: %.c Makefile | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -march=x86-64-v4 -DLT_ISA_AVX512 -c $< -o $@

$(TEST_DEPS_STAMP): scripts/install-deps.sh $(NPM_LOCKS)
	@scripts/install-deps.sh --test
	@mkdir -p build && touch $@

# ggml's reference conversions round each product on its own: no fused
# multiply-add there (src/kernels/ggml_quants.c), or they are not bit-exact.
$(BUILD)/src/kernels/ggml_quants.o: CFLAGS += -ffp-contract=off

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/lmtune: $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(LIB) $(LDLIBS)

ifeq ($(SANITIZE),1)
lmtune: $(BUILD)/lmtune
else
lmtune: $(BUILD)/lmtune
	cp $(BUILD)/lmtune lmtune
endif

$(BUILD)/tests/%: tests/%.c $(TEST_SUPPORT_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(TEST_SUPPORT_OBJ) $(LIB) $(LDFLAGS) $(LDLIBS)

# The bench programs are built (not run) by `make test` too, so that an API
# change cannot leave them uncompilable until the next bench.
BENCH_BIN := $(addprefix $(BUILD)/bench/,gemm_peak attn_window attn_speed decode_speed gguf_requant frozen_product lora_fold)

# Strict unless LMTUNE_TEST_STRICT=0: a skipped test fails `make test`.
test: $(TEST_DEPS_STAMP) $(BUILD)/lmtune $(TEST_BIN) $(BENCH_BIN)
	@LMTUNE_TEST_STRICT=$${LMTUNE_TEST_STRICT:-1} LMTUNE_BIN=$(CURDIR)/$(BUILD)/lmtune BUILD=$(BUILD) \
	  SANITIZE=$(SANITIZE) tests/run.sh $(TEST_BIN)

$(BUILD)/bench/gemm_peak: bench/gemm_peak.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/attn_window: bench/attn_window.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/attn_speed: bench/attn_speed.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/decode_speed: bench/decode_speed.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/gguf_requant: bench/gguf_requant.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/frozen_product: bench/frozen_product.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/lora_fold: bench/lora_fold.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

bench: lmtune $(BUILD)/bench/gemm_peak $(BUILD)/bench/decode_speed $(BUILD)/bench/attn_speed
	@scripts/install-deps.sh --bench
	GEMM_PEAK_BIN=$(CURDIR)/$(BUILD)/bench/gemm_peak bench/run.sh

# Every source file compiled for aarch64 with -Wall -Wextra (CI): the x86
# intrinsics are guarded and the kernels' vectors are generic. Compiled, not
# linked: the aarch64 -dev libraries are not installed, so the host's
# library headers stand in (-idirafter: the cross compiler's own system
# headers come first).
CROSS_CC ?= aarch64-linux-gnu-gcc
cross-check:
	@$(MAKE) --no-print-directory CC=$(CROSS_CC) MPI=0 EXTRA_CFLAGS="-idirafter /usr/include -Werror" cross-objects
	@echo "cross-check: every file of src/ compiles for $$($(CROSS_CC) -dumpmachine)"
cross-objects: $(LIB_OBJ) $(CLI_OBJ)

print-build:
	@echo $(BUILD)

demo: lmtune
	scripts/demo.sh

# libFuzzer targets: tests/fuzz/fuzz_*.c, each with tests/fuzz/corpus/NAME/.
FUZZ_BIN := $(patsubst %.c,build/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
ifeq ($(FUZZ),1)
$(BUILD)/tests/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(LIB) $(BUILD)/src/cli/args.o $(BUILD)/src/cli/train_args.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -Itests -o $@ $< $(BUILD)/src/cli/args.o $(BUILD)/src/cli/train_args.o $(LIB) $(LDFLAGS) $(LDLIBS)
fuzz-build: $(FUZZ_BIN)
else
fuzz-build:
	@$(MAKE) --no-print-directory FUZZ=1 fuzz-build
endif
fuzz: fuzz-build
	tests/fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf build lmtune

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_SUPPORT_OBJ:.o=.d) $(TEST_BIN:=.d)
