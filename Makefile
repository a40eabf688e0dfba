# clipflow: `make demo` runs the main job on inputs it makes itself; `make test` runs the tests.
# Each installs the system packages it misses first (Debian 12): building and the demo need what
# scripts/install-deps.sh installs; the tests and the fuzz sets also scripts/install-test-deps.sh's
# (test servers and judges: PostgreSQL, nginx, Slurm, PulseAudio, chromium, PyPI packages).
SWIFT ?= swift
# `make install PREFIX=...`: where the binary, man pages and completions go (scripts/install.sh).
PREFIX ?= /usr/local

.PHONY: deps test-deps build release install demo test format bench fuzz clean

deps:
	@bash scripts/install-deps.sh

test-deps:
	@bash scripts/install-test-deps.sh

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

install: release
	$(SWIFT) build -c release --product generate-manual
	@bash scripts/install.sh "$(DESTDIR)$(PREFIX)" .build/release

demo: build
	@bash scripts/demo.sh

# The sources must be formatted as .swift-format says (`make format` does it) before the tests run.
# The tests run in parallel worker processes (CLIPFLOW_TEST_JOBS, default 3): docs/testing.md.
test: test-deps
	$(SWIFT) format lint --strict --recursive Sources Tests Package.swift
	$(SWIFT) build --product generate-manual
	SWIFT="$(SWIFT)" scripts/test-parallel

format:
	$(SWIFT) format format --in-place --recursive Sources Tests Package.swift

bench: deps
	@bash benchmarks/merge
	@bash benchmarks/joins
	@bash benchmarks/transcode
	@bash benchmarks/merge-conform
	@bash benchmarks/hls
	@bash benchmarks/backpressure
	@bash benchmarks/record
	@bash benchmarks/upload
	@bash benchmarks/serve
	@bash benchmarks/feed

# Longer runs of the seeded fuzz sets that `make test` runs briefly (CLIPFLOW_FUZZ_CASES, _SEED).
fuzz: test-deps
	@bash scripts/fuzz-pipeline
	@bash scripts/fuzz-http
	@bash scripts/fuzz-serve
	@bash scripts/fuzz-mp4

clean:
	rm -rf .build out
