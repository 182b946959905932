# The two commands of the README, and what CI runs.
#   make demo   the ImageNet training pipeline over built-in photographs
#   make test   format check, lints, and every test
# Both install the system packages the build needs (cmake and nasm, to build the vendored
# libjpeg-turbo 3) when they are missing.

.PHONY: demo test deps bench

demo: deps
	cargo run --release -p nostall-cli -- demo

test: deps
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo test --workspace

deps:
	@command -v cmake >/dev/null && command -v nasm >/dev/null || \
	  { apt-get update -qq && apt-get install -y -qq cmake nasm >/dev/null; }
	@# s3s-fs: the S3-compatible server the S3 tests run against.
	@test -x "$${CARGO_HOME:-$$HOME/.cargo}/bin/s3s-fs" || command -v s3s-fs >/dev/null || \
	  cargo install s3s-fs@0.14.1 --features binary --locked

bench: deps
	bash bench/compare.sh
