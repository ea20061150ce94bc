# lmtune: plain Makefile. `make` builds ./lmtune; `make test` builds and runs
# every test; `make test SANITIZE=1` runs them under ASan+UBSan; `make bench`
# runs the benchmarks; `make demo` runs the first-run demo; `make fuzz` builds
# the libFuzzer targets (clang, build/fuzz) and runs each for FUZZ_SECONDS.
CC      ?= gcc
SANITIZE ?= 0
FUZZ    ?= 0
FUZZ_SECONDS ?= 60
MPI     ?= $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1 || echo 0)
OPT     ?= -O2 -march=native

ifeq ($(FUZZ),1)
  MPI := 0
endif
ifeq ($(MPI),1)
  FLAVOUR := -mpi
endif
ifeq ($(FUZZ),1)
  # The library instrumented for libFuzzer (coverage), ASan and UBSan.
  BUILD  := build/fuzz
  CC     := clang
  OPT    := -O1 -g -march=native -fno-omit-frame-pointer
  SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -Wno-pass-failed -Wno-unknown-pragmas
else ifeq ($(SANITIZE),1)
  BUILD  := build/san$(FLAVOUR)
  OPT    := -O1 -g -march=native -fno-omit-frame-pointer
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

CFLAGS  := -std=c11 -D_GNU_SOURCE $(OPT) -ffp-contract=fast -fopenmp -Wall -Wextra -Isrc -MMD -MP $(SANFLAGS) $(MPI_CFLAGS)
LDLIBS  := -ldnnl -ljansson -lpcre2-8 -lyaml -lm $(MPI_LIBS)
LDFLAGS := -fopenmp $(SANFLAGS)

LIB_SRC := $(shell find src -name '*.c' -not -path 'src/cli/*' | sort)
CLI_SRC := $(shell find src/cli -name '*.c' | sort)
TEST_SRC := $(shell find tests -name 'test_*.c' | sort)
TEST_SUPPORT := $(shell find tests -name '*.c' -not -name 'test_*.c' -not -path '*/fuzz/*' -not -path '*/node_modules/*' | sort)

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(TEST_SRC:%.c=$(BUILD)/%)
TEST_SUPPORT_OBJ := $(TEST_SUPPORT:%.c=$(BUILD)/%.o)
LIB := $(BUILD)/liblmtune.a
DEPS_STAMP := build/.deps-ok

.PHONY: all test bench demo clean deps print-build fuzz fuzz-build
all: lmtune

deps: $(DEPS_STAMP)
$(DEPS_STAMP): scripts/install-deps.sh
	@scripts/install-deps.sh
	@mkdir -p build && touch $@

$(BUILD)/%.o: %.c Makefile | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

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

test: $(BUILD)/lmtune $(TEST_BIN)
	@LMTUNE_BIN=$(CURDIR)/$(BUILD)/lmtune BUILD=$(BUILD) SANITIZE=$(SANITIZE) tests/run.sh $(TEST_BIN)

$(BUILD)/bench/gemm_peak: bench/gemm_peak.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/attn_window: bench/attn_window.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

bench: lmtune $(BUILD)/bench/gemm_peak
	@scripts/install-deps.sh --bench
	GEMM_PEAK_BIN=$(CURDIR)/$(BUILD)/bench/gemm_peak bench/run.sh

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
