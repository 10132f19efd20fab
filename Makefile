# Two entry points for a fresh machine (see README): `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# System tools the tests drive for real: an OpenSSH server on 127.0.0.1, tmux for the
# end-to-end dashboard test, util-linux for the pct stand-in's PID namespaces, Chromium and its
# WebDriver for the --serve browser test (iproute2's ss: the bind-address check); a two-node
# Slurm cluster on 127.0.0.1 (munge, slurmctld, slurmd, the client commands) for the scheduler tests;
# LXC (behind a `pct` shim) and podman with runc (answering as `docker`) for the real-container tests.
SYSTEM_TOOLS := /usr/sbin/sshd:openssh-server tmux:tmux unshare:util-linux chromium:chromium \
	chromedriver:chromium-driver ss:iproute2 /usr/sbin/munged:munge /usr/sbin/slurmctld:slurmctld \
	/usr/sbin/slurmd:slurmd sbatch:slurm-client lxc-attach:lxc podman:podman runc:runc

.PHONY: run test test-latest lock venv system-tools clean

# Every package `make` installs comes from one lock: exact versions with their hashes (pip-compile
# --generate-hashes over pyproject.toml's runtime and every extra, plus requirements/torch.in), so a
# fresh machine gets what CI passed with, not whatever was released since. pyproject.toml keeps
# ranges (the package installs beside other tools); `make lock` refreshes the pins, and
# `make test-latest` runs the suite on the newest releases those ranges allow.
LOCK := requirements/lock.txt
# The resolver that writes the lock is pip's own (pip-tools), so it reads the same pip settings
# (wheel folders, indexes, constraints) that the install reads: both pick the same torch file.
PIP_TOOLS_SPEC := pip-tools==7.7.0

# Each step says what it does first; `make run` shows pip's own progress (the first run
# installs for about a minute), `make test` keeps pip quiet so the test output stays readable.
# PIP_FLAGS is target-specific, so it reaches the venv step from whichever target asked for it.
# The Makefile is a prerequisite so that a change of the install steps reaches an existing venv.
PIP_FLAGS ?= -q
$(BIN)/.installed: pyproject.toml $(LOCK) Makefile
	@echo "make: creating the virtual environment $(VENV) anew (first time, or after a change of pyproject.toml / $(LOCK) / Makefile)"
	$(PY) -m venv --clear $(VENV)
	@echo "make: installing the locked dependencies from $(LOCK) (exact versions and hashes; torch is the largest download)"
	$(BIN)/pip install $(PIP_FLAGS) --require-hashes -r $(LOCK)
	@echo "make: installing dflash-tui itself (editable, its dependencies already there)"
	$(BIN)/pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e .
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

# The same suite on the newest releases pyproject.toml's ranges allow, in a venv of its own (made
# anew each time), so a release that breaks us is seen here before a fresh machine's lock refresh.
# torch stays requirements/torch.in's CPU build: a newer one is a CUDA download of several GB.
LATEST_VENV := .venv-latest
# pip freeze and the lock spell a name differently (PyYAML / pyyaml, gradio_client / gradio-client):
# both sides as PEP 503 names, so the diff shows versions only. The eager upgrade is held to
# torch.in's pin by a constraint (an unpinned torch upgrade pulls the CUDA build, several GB).
NORMALIZE_PINS := awk -F'==' '{ n = tolower($$1); gsub(/[-_.]+/, "-", n); print n "==" $$2 }' | sort
test-latest: system-tools
	@echo "make: creating $(LATEST_VENV) anew with the newest releases the ranges allow"
	$(PY) -m venv --clear $(LATEST_VENV)
	$(LATEST_VENV)/bin/pip install -q -r requirements/torch.in
	$(LATEST_VENV)/bin/pip install -q --upgrade --upgrade-strategy eager -c requirements/torch.in -e ".[train,test,hf]"
	@echo "make: what differs from $(LOCK) (installed now <, locked >):"
	@$(LATEST_VENV)/bin/pip freeze --exclude-editable | $(NORMALIZE_PINS) > $(LATEST_VENV)/freeze.txt
	@grep -E '^[A-Za-z0-9]' $(LOCK) | cut -d' ' -f1 | $(NORMALIZE_PINS) | diff $(LATEST_VENV)/freeze.txt - || true
	$(LATEST_VENV)/bin/python -m pytest -q -n 2 --dist loadgroup --durations=15

# Refreshes the lock in one command: the newest releases within pyproject.toml's ranges, resolved
# by pip-tools in a venv of its own, with every file's hash. Review the diff, then `make test`.
LOCK_VENV := .venv-lock
lock:
	$(PY) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install -q "$(PIP_TOOLS_SPEC)"
	$(LOCK_VENV)/bin/pip-compile --quiet --upgrade --all-extras --generate-hashes --allow-unsafe \
	  --strip-extras --no-emit-index-url --no-emit-find-links --output-file $(LOCK) \
	  pyproject.toml requirements/torch.in

clean:
	rm -rf $(VENV) $(LATEST_VENV) $(LOCK_VENV) build *.egg-info src/*.egg-info
