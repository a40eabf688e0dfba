# clipflow: `make demo` runs the main job on inputs it makes itself; `make test` runs the tests.
# Both install missing system packages first (Debian 12).
SWIFT ?= swift
# `make install PREFIX=...`: where the binary, man pages and completions go (scripts/install.sh).
PREFIX ?= /usr/local

.PHONY: deps build release install demo test format bench fuzz clean

deps:
	@bash scripts/install-deps.sh

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
test: deps
	$(SWIFT) format lint --strict --recursive Sources Tests Package.swift
	$(SWIFT) build --product generate-manual
	$(SWIFT) test --disable-swift-testing

format:
	$(SWIFT) format format --in-place --recursive Sources Tests Package.swift

bench: deps
	@bash benchmarks/merge
	@bash benchmarks/transcode
	@bash benchmarks/merge-conform
	@bash benchmarks/hls
	@bash benchmarks/backpressure
	@bash benchmarks/record
	@bash benchmarks/upload
	@bash benchmarks/serve
	@bash benchmarks/feed

# Longer runs of the seeded fuzz sets that `make test` runs briefly (CLIPFLOW_FUZZ_CASES, _SEED).
fuzz: deps
	@bash scripts/fuzz-pipeline
	@bash scripts/fuzz-http
	@bash scripts/fuzz-serve
	@bash scripts/fuzz-mp4

clean:
	rm -rf .build out
