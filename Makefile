# tux3: build, test, demo and install. Works with rustup's cargo in ~/.cargo/bin.
export PATH := $(HOME)/.cargo/bin:$(PATH)

CARGO  ?= cargo
PREFIX ?= /usr/local
# mount(8) looks for its helper mount.tux3 in /sbin (or /usr/sbin).
SBINDIR ?= /sbin
TUX3   := target/release/tux3
# Cargo cannot put a dot in a binary's name: mount-tux3 installs as mount.tux3.
MOUNT_HELPER := target/release/mount-tux3
# The tree copied into images by `make demo` and the import check.
SAMPLE := $(firstword $(wildcard /usr/include) src)
DEMO_IMG := demo/demo.img

.PHONY: all build test demo install clean

all: build

build:
	$(CARGO) build --release

# Unit, model and integration tests, lints, formatting, and the import check.
test: build
	$(CARGO) test --release --workspace
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) fmt --all -- --check
	TUX3=$(TUX3) scripts/check-import.sh $(SAMPLE)

# Format an image from a sample tree and look inside it.
demo: build
	@mkdir -p demo
	rm -f $(DEMO_IMG)
	$(TUX3) mkfs --size 4G --from $(SAMPLE) $(DEMO_IMG)
	$(TUX3) fsck $(DEMO_IMG)
	@echo; echo "== tux3 dump $(DEMO_IMG)"
	$(TUX3) dump $(DEMO_IMG)
	@echo; echo "== tux3 ls -l $(DEMO_IMG) /"
	$(TUX3) ls -l $(DEMO_IMG) /
	@echo; echo "== tux3 ls -R $(DEMO_IMG) / | head -40"
	$(TUX3) ls -R $(DEMO_IMG) / | head -40
	@echo; echo "The image is $(DEMO_IMG) (sparse: du -h shows what it really uses)."
	@du -h $(DEMO_IMG)

install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(TUX3) $(DESTDIR)$(PREFIX)/bin/tux3
	install -d $(DESTDIR)$(SBINDIR)
	install -m 755 $(MOUNT_HELPER) $(DESTDIR)$(SBINDIR)/mount.tux3

clean:
	$(CARGO) clean
	rm -rf demo
