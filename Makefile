# Makefile - builds, tests and installs ftcomm.
#
#   make                     build everything (warnings are errors; installs the
#                            NCCL/CUDA headers first when they are missing)
#   make DEBUG=1             -O0 -g3, assertions (FTC_ASSERT) on
#   make V=1                 show the commands
#   make SANITIZE=address    (or undefined, thread) build under build/<sanitizer>,
#                            assertions (FTC_ASSERT) on
#   make deps                install what is missing (Debian packages, NCCL/CUDA headers)
#   make test                deps + build + every test suite
#   make demo                deps + build + the local demo
#   make bench               deps + build + benchmarks, side by side with the peers
#   make install PREFIX=DIR  library, header, pkg-config file and binaries
#
# Each part adds itself in its own module.mk; this file holds what they share.

PREFIX ?= /usr/local
DEPS_PREFIX ?= $(CURDIR)/.deps
CC ?= gcc
CXX ?= g++

ifeq ($(SANITIZE),)
  ifeq ($(DEBUG),1)
    BUILD ?= build/debug
  else
    BUILD ?= build/release
  endif
else
  BUILD ?= build/$(SANITIZE)
endif

ifeq ($(V),1)
  Q :=
  say :=@true
else
  Q := @
  say := @printf '  %-7s %s\n'
endif

WARN := -Wall -Wextra -Wvla -Wstrict-prototypes -Wmissing-prototypes -Wshadow -Wno-missing-field-initializers -Werror
CPPFLAGS_ALL := -D_GNU_SOURCE -Icommon -Iruntime/include -Irecorder/include $(CPPFLAGS)
CFLAGS_ALL := -std=gnu11 $(WARN) -fPIC -fvisibility=hidden -pthread -MMD -MP
CXXFLAGS_ALL := -std=c++17 -Wall -Wextra -Werror -fPIC -pthread -MMD -MP
LDFLAGS_ALL := -pthread $(LDFLAGS)

ifeq ($(DEBUG),1)
  CFLAGS_ALL += -O0 -g3
  CXXFLAGS_ALL += -O0 -g3
else
  CFLAGS_ALL += -O2 -g -DNDEBUG
  CXXFLAGS_ALL += -O2 -g -DNDEBUG
endif

ifneq ($(SANITIZE),)
  ifeq ($(filter $(SANITIZE),address undefined thread),)
    $(error SANITIZE must be address, undefined or thread, not '$(SANITIZE)')
  endif
  SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
  ifeq ($(SANITIZE),undefined)
    SAN_FLAGS += -fno-sanitize-recover=all
  endif
  CFLAGS_ALL += $(SAN_FLAGS)
  CXXFLAGS_ALL += $(SAN_FLAGS)
  LDFLAGS_ALL += $(SAN_FLAGS)
endif

# Contracts (FTC_ASSERT, common/ftc_assert.h): checked in debug and
# sanitizer builds, compiled out of release ones.
ifneq ($(filter 1,$(DEBUG))$(SANITIZE),)
  CPPFLAGS_ALL += -DFTC_ASSERTS=1
endif

CFLAGS_ALL += $(CFLAGS)
CXXFLAGS_ALL += $(CXXFLAGS)

# Filled in by the modules.
ALL_TARGETS :=
CLEAN_FILES :=
INSTALL_BINS :=
DEPFILES :=

.PHONY: all deps test demo bench install clean docs-env check-docs
# Keep intermediate objects (example programs are built through a pattern rule).
.SECONDARY:
all:

include common/module.mk
include recorder/module.mk
include runtime/module.mk
include controller/module.mk
include tests/module.mk

all: $(ALL_TARGETS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(EXTRA_CFLAGS_$(subst /,_,$(dir $<))) -c $< -o $@

$(BUILD)/obj/%.o: %.cc
	@mkdir -p $(dir $@)
	$(say) CXX $<
	$(Q)$(CXX) $(CPPFLAGS_ALL) $(CXXFLAGS_ALL) -c $< -o $@

deps:
	@scripts/deps.sh $(DEPS)

clean:
	rm -rf build

-include $(shell find build -name '*.d' 2>/dev/null)

FTC_VERSION := $(shell sed -n 's/^\#define FTC_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' runtime/include/ftcomm.h | paste -sd.)

install: all
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 0644 runtime/include/ftcomm.h $(DESTDIR)$(PREFIX)/include/ftcomm.h
	install -m 0644 $(FTCOMM_A) $(DESTDIR)$(PREFIX)/lib/libftcomm.a
	install -m 0755 $(FTCOMM_SO) $(DESTDIR)$(PREFIX)/lib/libftcomm.so.$(FTC_VERSION)
	ln -sf libftcomm.so.$(FTC_VERSION) $(DESTDIR)$(PREFIX)/lib/libftcomm.so.0
	ln -sf libftcomm.so.0 $(DESTDIR)$(PREFIX)/lib/libftcomm.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(FTC_VERSION)|' runtime/ftcomm.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/ftcomm.pc
	$(if $(strip $(INSTALL_BINS)),install -m 0755 $(INSTALL_BINS) $(DESTDIR)$(PREFIX)/bin/)

# docs/environment.md is generated from common/ftc_params.def.
docs-env:
	@scripts/gen-env-doc.py common/ftc_params.def > docs/environment.md

demo:
	@scripts/deps.sh
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) scripts/demo.sh
