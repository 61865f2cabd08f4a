# ftwiz — quick start: `make demo`, `make test`. Both create .venv on first use (the demo: ftwiz and the
# training stack from PyPI; the tests add their tools from PyPI and, as root, system tools from apt).
SHELL := /bin/bash
comma := ,
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test bench sysdeps venv clean lint gpu-smoke

# The demo's venv: ftwiz and the training stack (PyPI only). The tests' venv adds the test tools, in one pip run
# (a second run would resolve everything again) that also serves the demo.
TRAIN_STAMP := $(VENV)/.installed-train

# pip byte-compiles what it installs on one core: 40 of the 57 s a fresh test venv took here. --no-compile and
# compileall on every core do the same work side by side (40 s in all). compileall's status is not a verdict on
# ours: torch ships modules for newer Pythons that pip skips the same way; what it said is in .venv/compile.log.
define pip_install
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q --no-compile -c constraints.txt -e '.[$(1)]'
	$(VPY) -m compileall -q -j 0 "$$($(VPY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
	  > $(VENV)/compile.log 2>&1 || true
endef

$(TRAIN_STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(call pip_install,train)
	touch $(TRAIN_STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(call pip_install,train$(comma)dev)
	touch $(TRAIN_STAMP) $(STAMP)

venv: $(STAMP)

# System tools the tests use, none of them the demo's (sshd in every namespace node, iperf3, nftables,
# promtool, tmux, and a Slurm cluster: slurmctld, slurmd, slurm-client, munge; no service starts by itself, the
# tests start their own). Installed with apt only when running as root and missing; otherwise the tests that
# need them say so.
sysdeps:
	@if [ "$$(id -u)" = 0 ]; then \
	  missing=""; \
	  [ -x /usr/sbin/sshd ] || missing="$$missing openssh-server"; \
	  command -v iperf3 >/dev/null || missing="$$missing iperf3"; \
	  command -v nft >/dev/null || missing="$$missing nftables"; \
	  command -v promtool >/dev/null || missing="$$missing prometheus"; \
	  command -v tmux >/dev/null || missing="$$missing tmux"; \
	  command -v slurmctld >/dev/null || missing="$$missing slurmctld"; \
	  command -v slurmd >/dev/null || missing="$$missing slurmd"; \
	  command -v sbatch >/dev/null || missing="$$missing slurm-client"; \
	  command -v munged >/dev/null || missing="$$missing munge"; \
	  if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  fi; \
	fi

# ruff and mypy over the shipped code; their settings live in pyproject.toml, their versions in constraints.txt.
LINT_PATHS := agent tui shared nodeside
RUFF := $(VENV)/bin/ruff check $(LINT_PATHS)
MYPY := $(VENV)/bin/mypy $(LINT_PATHS)
lint: $(STAMP)
	$(RUFF)
	$(MYPY)

# Three pytest-xdist workers on the 2 cores (PYTEST_WORKERS=2 for two, 0 for one process): the held-node, stall and
# shaped-link tests leave a core idle for minutes, which a third worker fills. From a fresh clone on 2026-11-29,
# CI=true .ci/run took 856 and 883 s on three against 949 s on two (README "Tests"). Tests that share a fixed
# resource (the Slurm cluster's ports) carry one xdist_group, which --dist loadgroup keeps on one worker.
# PYTEST_ARGS adds to the command line.
# ruff first (a second); mypy (about 40 s of one core from a fresh clone) runs beside pytest, whose tests leave a
# core idle while they wait on a stall window or a held node, and its report follows pytest's; either failing fails.
PYTEST_WORKERS ?= 3
MYPY_LOG := $(VENV)/mypy.log
test: sysdeps $(STAMP)
	$(RUFF)
	@$(MYPY) > $(MYPY_LOG) 2>&1 & mypy=$$!; \
	$(VPY) -m pytest -q -ra -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS); tests=$$?; \
	wait $$mypy; typed=$$?; echo "mypy $(LINT_PATHS):"; cat $(MYPY_LOG); \
	if [ $$typed != 0 ]; then echo "make test: mypy failed (above)" >&2; fi; \
	[ $$tests = 0 ] && [ $$typed = 0 ]

bench: sysdeps $(STAMP)
	$(VPY) -m bench $(BENCH_ARGS)

# GPU truth in one command: NCCL, QLoRA, FSDP mixed precision, estimator vs max_memory_allocated (bench/gpu_smoke.py).
# Without a GPU it says so and runs the CPU variants.
gpu-smoke: $(STAMP)
	$(VPY) -m bench.gpu_smoke

# The demo needs no system tool and no test tool: only the training venv.
demo: $(TRAIN_STAMP)
	$(VPY) -m tui.demo

clean:
	rm -rf $(VENV) runs demo-work bench-results
