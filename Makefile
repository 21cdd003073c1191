# The workbook's commands. `make lab` and `make test` do all set-up themselves on a fresh machine.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8888
# The learner's own copy of course/, made once and never overwritten (git ignores it).
WORK ?= my-work
# Jupyter refuses to run as root without --allow-root; containers and cloud GPU images often run as root.
USER_ID ?= $(shell id -u)
LAB_ROOT = $(if $(filter 0,$(USER_ID)),--allow-root)
# torch: a CPU build where there is no NVIDIA driver (never pull several GB of CUDA wheels onto a CPU machine).
TORCH ?= torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# `make test` runs the CPU suite on this many pytest-xdist workers: one per core, at most 4 (grading tests start
# worker processes of their own). TEST_JOBS=0 runs it in one process.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))

.PHONY: lab test test-gpu test-browser course grade-demo bench lint clean help score

help:
	@echo "make lab          set up .venv and start JupyterLab on your own copy of course/ (my-work/)"
	@echo "make test         set up .venv and run the whole CPU test suite (what CI runs)"
	@echo "make test-gpu     run the GPU-marked tests (on a CUDA machine)"
	@echo "make test-browser run the lessons' widgets in JupyterLab in headless Chromium"
	@echo "make course       build the course: solutions/ -> grader/source/ -> course/ (and the lesson tables)"
	@echo "make grade-demo   build, collect, grade and report a demo class"
	@echo "make student-dist the students' hand-out (dist/student: kernels without the answers, the notebooks)"
	@echo "make grade-collect SUBMISSIONS=dir|lms.zip [ROSTER=csv] | grade-autograde [L=..]"
	@echo "     grade-feedback | grade-export [EXPORT=grades.csv] | grade-lint: a class's steps (grader/GUIDE.md)"
	@echo "make bench T=...  validate then time one topic's ladder"
	@echo "make score [L=NN] run every check (hidden ones too) on your notebooks in my-work/ and print your points"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@if $(BIN)/python -c "import torch" 2>/dev/null; then :; \
	elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  $(BIN)/python -m pip install -q "$(TORCH)"; \
	else \
	  rm -rf $(VENV)/.torch; \
	  if $(BIN)/python -m pip download -q --no-deps --no-index -d $(VENV)/.torch "$(TORCH)" 2>/dev/null; then \
	    $(BIN)/python -m pip install -q $(VENV)/.torch/*.whl; \
	  else \
	    $(BIN)/python -m pip install -q "$(TORCH)" --index-url $(TORCH_CPU_INDEX) --extra-index-url https://pypi.org/simple; \
	  fi; \
	  rm -rf $(VENV)/.torch; \
	fi
	@$(BIN)/python -m pip install -q -e ".[course,test]"
	@touch $(STAMP)

lab: $(STAMP)
	@$(BIN)/python -m kernels
	@$(BIN)/python -m grader.course.workcopy $(WORK)
	@if $(BIN)/python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then \
	  echo "CUDA found: kernels run on the GPU"; \
	else \
	  echo "No CUDA: TRITON_INTERPRET=1 is set for the notebook kernel, kernels run in Triton's interpreter on the CPU"; \
	  export TRITON_INTERPRET=1; \
	fi; \
	$(BIN)/jupyter lab --no-browser --port=$(PORT) --notebook-dir=$(WORK) $(LAB_ROOT) $(LAB_ARGS)

test: $(STAMP) sandbox-tool
	@$(BIN)/python -m kernels
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m "not browser" -n $(TEST_JOBS) --dist loadgroup
	@$(MAKE) --no-print-directory test-browser

test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q -m gpu

# JupyterLab in Debian's headless Chromium, driven by Playwright (its own browser download cannot work offline).
test-browser: $(STAMP)
	@test -x /usr/bin/chromium || { apt-get install -y -qq chromium >/dev/null 2>&1 \
	  || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }; } \
	  || { echo "cannot install chromium: run as root, or apt-get install chromium"; exit 1; }
	$(BIN)/python -m pytest -q -m browser tests/browser

bench: $(STAMP)
	$(BIN)/python -m kernels.bench $(T)

score: $(STAMP)
	$(BIN)/python -m grader.score $(L) --work $(WORK)

# L=NN builds one lesson; course-check changes nothing and fails if course/ differs from what solutions/ builds.
.PHONY: course-check
course: $(STAMP)
	$(BIN)/python -m grader.course $(L)

course-check: $(STAMP)
	$(BIN)/python -m grader.course --check $(L)

# The grader (grader/README.md), one step per target over the nbgrader course folder grader/:
# make grade-collect SUBMISSIONS=dir (dir/<student>/*.ipynb) or SUBMISSIONS=lms.zip [ROSTER=roster.csv];
# EXPORT=grades.csv.
.PHONY: grade-collect grade-autograde grade-feedback grade-export grade-lint
# The grader's sandbox is bubblewrap (Debian's bubblewrap), installed like chromium when missing.
.PHONY: sandbox-tool
sandbox-tool:
	@command -v bwrap >/dev/null || { apt-get install -y -qq bubblewrap >/dev/null 2>&1 \
	  || { apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; }; } \
	  || { echo "cannot install bubblewrap: run as root, or apt-get install bubblewrap"; exit 1; }

grade-demo: $(STAMP) sandbox-tool
	$(BIN)/python -m grader demo

grade-collect: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "make grade-collect needs SUBMISSIONS=dir (dir/<student>/*.ipynb) or \
	SUBMISSIONS=lms.zip [ROSTER=roster.csv]" >&2; exit 2; }
	$(BIN)/python -m grader collect $(SUBMISSIONS) $(if $(ZIP),--zip) $(if $(ROSTER),--roster $(ROSTER))

grade-autograde: $(STAMP) sandbox-tool
	$(BIN)/python -m grader autograde $(if $(L),--lessons $(L)) $(if $(SPEED),--speed-policy $(SPEED)) $(if $(CLUSTER),--cluster $(CLUSTER)) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(if $(STUDENTS),--students $(STUDENTS)) $(if $(REDO),--redo)

grade-feedback: $(STAMP)
	$(BIN)/python -m grader feedback

grade-export: $(STAMP)
	$(BIN)/python -m grader export --to $(or $(EXPORT),grades.csv)

grade-lint: $(STAMP)
	$(BIN)/python -m grader lint

.PHONY: student-dist
student-dist: $(STAMP)
	$(BIN)/python -m grader.dist $(if $(OUT_DIR),--out $(OUT_DIR))

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache
