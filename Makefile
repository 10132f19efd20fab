# Two entry points for a fresh machine (see README): `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch is enough to run the bundled trainer here; on a GPU host, set
# TORCH_SPEC to the CUDA build you want (e.g. TORCH_SPEC=torch==2.11.0).
TORCH_SPEC ?= torch==2.13.0
# System tools the tests drive for real: an OpenSSH server on 127.0.0.1, tmux for the
# end-to-end dashboard test, util-linux for the pct stand-in's PID namespaces, Chromium and its
# WebDriver for the --serve browser test (iproute2's ss: the bind-address check); a two-node
# Slurm cluster on 127.0.0.1 (munge, slurmctld, slurmd, the client commands) for the scheduler tests;
# LXC (behind a `pct` shim) and podman with runc (answering as `docker`) for the real-container tests.
SYSTEM_TOOLS := /usr/sbin/sshd:openssh-server tmux:tmux unshare:util-linux chromium:chromium \
	chromedriver:chromium-driver ss:iproute2 /usr/sbin/munged:munge /usr/sbin/slurmctld:slurmctld \
	/usr/sbin/slurmd:slurmd sbatch:slurm-client lxc-attach:lxc podman:podman runc:runc

.PHONY: run test venv system-tools clean

# Extra hf (transformers, for --target-checkpoint and its tests) costs ~45 MB of wheels and ~30 s,
# and leaves the torch installed first alone (transformers does not depend on torch).
# The Makefile is a prerequisite so that a change of extras here reaches an existing venv.
# Each step says what it does first; `make run` shows pip's own progress (the first run
# installs for about a minute), `make test` keeps pip quiet so the test output stays readable.
# PIP_FLAGS is target-specific, so it reaches the venv step from whichever target asked for it.
PIP_FLAGS ?= -q
$(BIN)/.installed: pyproject.toml Makefile
	@echo "make: creating the virtual environment $(VENV) (first time, or after a change of pyproject.toml / Makefile)"
	$(PY) -m venv $(VENV)
	@echo "make: installing $(TORCH_SPEC) (the largest download)"
	$(BIN)/pip install $(PIP_FLAGS) "$(TORCH_SPEC)"
	@echo "make: installing dflash-tui and its extras (train, test, hf)"
	$(BIN)/pip install $(PIP_FLAGS) -e ".[train,test,hf]"
	touch $@

venv: $(BIN)/.installed

run: PIP_FLAGS =
run: venv
	$(BIN)/dflash-tui

system-tools:
	@missing=""; for pair in $(SYSTEM_TOOLS); do \
	  tool=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$tool >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "note: missing$$missing; the tests that need them will skip (they must run in CI)"; \
	  fi; \
	fi

test: PIP_FLAGS = -q
test: venv system-tools
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=15


clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
