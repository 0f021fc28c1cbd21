# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create .venv with Python 3.12 and install everything they need.
SHELL := /bin/bash
PYTHON ?= $(shell for p in python3.12 $$(ls -d $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python 2>/dev/null | sort -V | tail -1) /usr/bin/python3.12; do \
            command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; assert sys.version_info[:2]==(3,12)' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
PY := $(VENV)/bin/python
# No wheel cache, and torch in a step of its own: its wheels are gone before the rest arrive, so the
# install peaks near its final size instead of wheels + cache + venv at once.
PIP := PIP_NO_CACHE_DIR=1 $(PY) -m pip
MIN_FREE_GIB ?= 7
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-8)

export MUJOCO_GL ?= egl
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: venv demo test test-slow lint format bench bench-policies bench-policies-smoke bench-imagination \
	bench-imagination-smoke bench-labels bench-labels-smoke bench-labels-metaworld bench-metaworld bench-metaworld-smoke reproduce-reach clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@if [ -z "$(PYTHON)" ]; then echo "error: Python 3.12 not found; run 'make PYTHON=/path/to/python3.12 ...'" >&2; exit 1; fi
	@free=$$(df -Pk . | awk 'NR==2 {print int($$4 / 1048576)}'); \
	  if [ ! -d $(VENV)/lib/python3.12/site-packages/torch ] && [ "$$free" -lt $(MIN_FREE_GIB) ]; then \
	    echo "error: installing needs about $(MIN_FREE_GIB) GiB of free disk here (PyPI's torch brings ~3 GB of CUDA wheels, 6.3 GB installed);" \
	         "$$free GiB free. Free some space (old clones' .venv folders are 6.3 GB each) and run again." >&2; exit 1; fi
	@command -v ffmpeg >/dev/null 2>&1 || { if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ffmpeg >/dev/null && apt-get clean) || echo "warning: could not install ffmpeg; video decoding falls back to pyav"; \
	  else echo "warning: ffmpeg not found and apt-get unavailable; video decoding falls back to pyav"; fi; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $$(grep -o '"torch[=<>~!][^"]*"' pyproject.toml | tr -d '"')
	$(PIP) install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

demo: venv
	$(VENV)/bin/cosmos3-robot demo

# The shipped Reach set (artefacts/reach/: policy, state estimator, labeller) trained again from
# nothing into artefacts/reach.new, about 2 hours on 2 cores (artefacts/README.md).
REPRODUCE_DATA ?= data/reproduce
reproduce-reach: venv
	bash benchmarks/recipes/reach_artefacts.sh $(REPRODUCE_DATA)

# Issue 20 on Meta-World v3: ours (a state estimator + our policy, `ours-estimator`) vs LeRobot ACT and
# Diffusion Policy at equal minutes per task (20 per arm; 100 demonstrations, 50 held-out seeds).
# MW_TASKS: Meta-World task names (default: the variant's 13), MW_ARMS: the arms (default: all three);
# MW_ENSEMBLE: roll every arm out with temporal ensembling of that weight (0.01 is ACT's; needs
# MW_ARMS without diffusion); about 55 minutes per task for ours and ACT on 2 cores; resumable; the
# table: $(MW_DATA)/table.md.
MW_DATA ?= data/metaworld
MW_TASKS ?=
MW_ARMS ?=
MW_ENSEMBLE ?=
MW_BENCH = $(VENV)/bin/cosmos3-robot benchmark policies --variant metaworld --no-progress \
	$(if $(MW_ARMS),--arms $(MW_ARMS)) $(if $(MW_ENSEMBLE),--ensemble $(MW_ENSEMBLE))
bench-metaworld: venv
	$(MW_BENCH) --out $(MW_DATA) $(if $(MW_TASKS),--tasks $(addprefix cosmos3_robot/MetaWorld-,$(MW_TASKS)))

# The same chain at toy size (reach-v3, 5 demonstrations, 2 minutes per arm of which 1 for the
# estimator, 2 episodes): checks that every stage runs; its figures mean nothing.
bench-metaworld-smoke: venv
	$(MW_BENCH) --out $(MW_DATA)-smoke --tasks cosmos3_robot/MetaWorld-reach-v3 --demos 5 --episodes 2 \
	  --minutes 2 --estimator-minutes 1 --estimator-holdout 1 $(if $(MW_ARMS),,--arms ours-estimator act)

test: venv
	$(PY) -m pytest -q

test-slow: venv
	$(PY) -m pytest -q -m slow

lint: venv
	$(VENV)/bin/ruff check cosmos3_robot tests benchmarks
	$(VENV)/bin/ruff format --check cosmos3_robot tests benchmarks

format: venv
	$(VENV)/bin/ruff format cosmos3_robot tests benchmarks
	$(VENV)/bin/ruff check --fix cosmos3_robot tests benchmarks

bench: venv
	$(PY) benchmarks/speed.py --preset sim-small --out benchmarks/results/speed.json

# Issue 20's policy table: ours vs LeRobot ACT vs Diffusion Policy at equal data, budget and seeds.
# The smoke variant (a random VAE, 3 episodes) shows the harness runs; the full one needs a VAE
# folder (VAE=...; benchmarks/recipes/vae_suite.sh trains one) and takes hours (benchmarks/README.md).
BENCH_OUT ?= runs/bench-policies
bench-policies-smoke: venv
	$(VENV)/bin/cosmos3-robot benchmark policies --variant smoke --out $(BENCH_OUT)-smoke --no-progress

bench-policies: venv
	@test -n "$(VAE)" || { echo "error: give the frozen VAE: make bench-policies VAE=DIR (the vae/ folder of train-vae)" >&2; exit 2; }
	$(VENV)/bin/cosmos3-robot benchmark policies --variant full --vae $(VAE) --out $(BENCH_OUT) --no-progress

IMAGINE_OUT ?= runs/bench-imagination
bench-imagination-smoke: venv
	$(VENV)/bin/cosmos3-robot benchmark imagination --variant smoke --out $(IMAGINE_OUT)-smoke --no-progress

bench-imagination: venv
	@test -n "$(MODEL)$(VAE)" || { echo "error: give a state-free model or the VAE to train one: make bench-imagination MODEL=DIR or VAE=DIR" >&2; exit 2; }
	$(VENV)/bin/cosmos3-robot benchmark imagination --variant full $(if $(MODEL),--model $(MODEL)) $(if $(VAE),--vae $(VAE)) --out $(IMAGINE_OUT) --no-progress

LABELS_OUT ?= runs/bench-labels
bench-labels-smoke: venv
	$(VENV)/bin/cosmos3-robot benchmark labels --variant smoke --out $(LABELS_OUT)-smoke --no-progress

bench-labels: venv
	@test -n "$(VAE)" || { echo "error: give the frozen VAE: make bench-labels VAE=DIR (the vae/ folder of train-vae)" >&2; exit 2; }
	$(VENV)/bin/cosmos3-robot benchmark labels --variant full --vae $(VAE) --out $(LABELS_OUT) --no-progress

# Three Meta-World tasks, the frame-to-frame labeller, ACT on true actions and on labels; ~70 min a task.
bench-labels-metaworld: venv
	$(VENV)/bin/cosmos3-robot benchmark labels --variant metaworld --labeller frames --out $(LABELS_OUT)-metaworld --no-progress

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
