# tux3: build, test, demo and install. Works with rustup's cargo in ~/.cargo/bin.
export PATH := $(HOME)/.cargo/bin:$(PATH)

CARGO  ?= cargo
PREFIX ?= /usr/local
# mount(8), mkfs(8) and fsck(8) look for mount.tux3, mkfs.tux3 and
# fsck.tux3 in /sbin (or /usr/sbin).
SBINDIR ?= /sbin
# Where cargo builds (CARGO_TARGET_DIR when set).
BUILD  := $(or $(CARGO_TARGET_DIR),target)/release
TUX3   := $(BUILD)/tux3
# Cargo cannot put a dot in a binary's name: mount-tux3 installs as
# mount.tux3, mkfs-tux3 as mkfs.tux3, fsck-tux3 as fsck.tux3.
HELPERS := mount mkfs fsck
# The tree copied into images by `make demo` and the import check.
SAMPLE := $(firstword $(wildcard /usr/include) crates)

.PHONY: all build test demo install clean bench bench-quick fuzz loom

all: build

build:
	$(CARGO) build --release

# Unit, model and integration tests (the mount tests need root and
# /dev/fuse), lints, formatting, the engine's layer check, the import check, and the POSIX suite through
# a real tux3 mount and on tmpfs and ext4 (scripts/posix-all.sh, root), and
# cp -a + diff -r of the sample tree through a mount and a remount (root).
test: build
	$(CARGO) test --release --workspace
	# The pipeline's debug assertions (P1, P2) run only in a debug build.
	$(CARGO) test -p tux3 --test commit_pipeline --test commit_concurrency --test fsync_fast --test orphans --test concurrent_model
	$(MAKE) loom
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) fmt --all -- --check
	scripts/check-layers.sh
	TUX3=$(TUX3) scripts/check-import.sh $(SAMPLE)
	TUX3=$(TUX3) scripts/posix-all.sh
	TUX3=$(TUX3) scripts/cp-diff.sh $(SAMPLE)

# Through a real mount: install what is missing (fuse3, graphviz), format
# demo/demo.img, copy $(SAMPLE) in, check every file's sha256 through the
# mount, df, counters, fsck, dump summary, and draw demo/volume.svg (root).
demo: build
	SAMPLE=$(SAMPLE) scripts/demo.sh

install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(TUX3) $(DESTDIR)$(PREFIX)/bin/tux3
	install -d $(DESTDIR)$(SBINDIR)
	for h in $(HELPERS); do install -m 755 $(BUILD)/$$h-tux3 $(DESTDIR)$(SBINDIR)/$$h.tux3 || exit 1; done

clean:
	$(CARGO) clean
	rm -rf demo

# Benchmarks against ext4, XFS, Btrfs, fuse2fs and tmpfs on loop devices (root);
# results in bench/results/, report in docs/BENCHMARKS.md. BENCH_ARGS e.g. --fs tux3,ext4
bench: build
	bench/run $(BENCH_ARGS)

bench-quick: build
	bench/run --quick $(BENCH_ARGS)

# Fuzz open, fsck and log replay over mutated images (nightly + cargo-fuzz);
# FUZZ_SECONDS in total, split over the three targets.
FUZZ_SECONDS ?= 600
# The pipeline's synchronisation pieces (frontend/pipeline.rs) under every
# interleaving loom explores (three preemptions), in a target dir of their own.
loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --release -p tux3 --lib loom

fuzz:
	fuzz/run.sh $(FUZZ_SECONDS)
