# The two commands of the README, and what CI runs.
#   make demo   the ImageNet training pipeline over built-in photographs
#   make test   format check, lints (also of the engine without its default features: no
#               S3, no analyzer, no serde), and every test (Rust, then Python: python-test);
#               the hostile inputs again with release settings (without the tokenizer and
#               the S3 store, whose tests the debug run has: the release-settings build
#               then compiles neither the tokenizers crate nor object_store's HTTP and TLS
#               stack, aws-lc's C among it)
# Both install what they need when it is missing: the demo only the build's system
# packages (cmake and nasm, to build the vendored libjpeg-turbo 3; FFmpeg's libraries
# and their headers, with pkg-config and libclang to bind them, for videos); the tests also
# chromium (to test the HTML report of `nostall analyze` headless), prometheus (a real
# server scrapes a loader in the live-metrics test), python3-venv, s3s-fs (the
# S3-compatible server the S3 tests run against), and iproute2 and util-linux (`ip`,
# `unshare`: the Ray tests run in a network namespace of their own).

.PHONY: demo test deps build-deps bench python-test

demo: build-deps
	cargo run --release -p nostall-cli -- demo

test: deps
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p nostall --no-default-features --lib -- -D warnings
	cargo test --workspace
	cargo test --profile release-checks -p nostall --no-default-features \
	  --features prometheus,parquet,manifest --lib --test hostile
	$(MAKE) python-test

# The Python package: built into a venv of its own (.venv-test: maturin, pytest, numpy,
# torch, torchvision, timm (the reference of the recipes' operators), mypy, pyarrow (Parquet
# files as Hugging Face's `datasets` writes them), datasets and webdataset (read natively),
# tokenizers and open_clip_torch (the references of `nostall.Tokenizer`: its ids, and OpenCLIP's own),
# pycocotools (how DETR's and torchvision's COCO wrappers make instance masks: the reference
# of the DETR mask test),
# ray (remote prep's tests start a head and three worker nodes, each a `ray start` process,
# in a network namespace of their own: `unshare -rn`) from PyPI; pip's cache makes repeat
# runs fast), then the pytest suite (its S3 tests run s3s-fs, which `deps` installs), the type stubs checked against
# the built module (stubtest), mypy over the example and the benchmark script (settings in
# python/pyproject.toml), and the two-rank torchrun example. A debug build with the engine
# (and the tokenizer) optimised, as Cargo.toml's dev profile says: the Rust tests' build,
# reused (only pyo3 and the bindings are compiled again); much faster to build than a
# release wheel, and fast enough for the tests.
VENV_TEST := $(CURDIR)/.venv-test
PY_TEST := $(VENV_TEST)/bin/python
python-test: deps
	@test -x $(PY_TEST) || python3 -m venv $(VENV_TEST)
	$(PY_TEST) -m pip install -q --disable-pip-version-check maturin pytest numpy torch torchvision \
	  timm mypy types-psutil pyarrow datasets webdataset tokenizers open_clip_torch ray pycocotools
	cd python && VIRTUAL_ENV=$(VENV_TEST) PATH="$(VENV_TEST)/bin:$$PATH" maturin develop -q
	$(PY_TEST) -m pytest -q python/tests
	$(PY_TEST) -m mypy.stubtest nostall
	$(PY_TEST) -m mypy --config-file python/pyproject.toml examples/train_imagenet.py bench/compare.py \
	  bench/gpu_train.py
	$(VENV_TEST)/bin/torchrun --nproc_per_node=2 examples/train_imagenet.py --steps 3 --check-shards

build-deps:
	@command -v cmake >/dev/null && command -v nasm >/dev/null && \
	  pkg-config --exists libavformat libavcodec libswscale 2>/dev/null && \
	  test -n "$$(ls /usr/lib/llvm-*/lib/libclang*.so* 2>/dev/null)" || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    cmake nasm pkg-config libclang-dev libavformat-dev libavcodec-dev libavutil-dev \
	    libswscale-dev >/dev/null; }

deps: build-deps
	@command -v chromium >/dev/null && command -v prometheus >/dev/null && \
	  command -v ip >/dev/null && command -v unshare >/dev/null && \
	  command -v ffmpeg >/dev/null && python3 -m venv --help >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    python3-venv chromium prometheus iproute2 util-linux ffmpeg >/dev/null; }
	@# s3s-fs: the S3-compatible server the S3 tests run against.
	@test -x "$${CARGO_HOME:-$$HOME/.cargo}/bin/s3s-fs" || command -v s3s-fs >/dev/null || \
	  cargo install s3s-fs@0.14.1 --features binary --locked

bench: deps
	bash bench/compare.sh
