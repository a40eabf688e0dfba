# clipflow: `make demo` runs the main job on inputs it makes itself; `make test` runs the tests.
# Both install missing system packages first (Debian 12).
SWIFT ?= swift

.PHONY: deps build release demo test format bench fuzz clean

deps:
	@bash scripts/install-deps.sh

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

demo: build
	@bash scripts/demo.sh

# The sources must be formatted as .swift-format says (`make format` does it) before the tests run.
# Each test method runs in a process of its own, TEST_WORKERS at a time: most of the suite waits on
# servers and real time. More than 3 on 2 cores starves the serve tests' nice-10 ladder workers
# past their deadlines. SERIAL_TESTS run one at a time after the rest: each starts a Slurm cluster
# on this host, and two at once disturb each other's job states.
TEST_WORKERS ?= 3
SERIAL_TESTS = BatchSlurmCLITests

test: deps
	$(SWIFT) format lint --strict --recursive Sources Tests Package.swift
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build --disable-swift-testing --parallel --num-workers $(TEST_WORKERS) --skip '$(SERIAL_TESTS)'
	$(SWIFT) test --skip-build --disable-swift-testing --filter '$(SERIAL_TESTS)'

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

# Longer runs of the seeded fuzz sets that `make test` runs briefly (CLIPFLOW_FUZZ_CASES, _SEED).
fuzz: deps
	@bash scripts/fuzz-pipeline
	@bash scripts/fuzz-http
	@bash scripts/fuzz-serve
	@bash scripts/fuzz-mp4

clean:
	rm -rf .build out
