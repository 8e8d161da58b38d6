# images/ - container images (images/<name>/Dockerfile). Each Dockerfile's build stage
# runs `make deps` and then this target; tests/install/images.sh runs the same target
# here (no container engine needed) and checks the tree it makes.
#
#   make image-rootfs IMAGE=controller DESTDIR=/tmp/rootfs
#   make image-rootfs IMAGE=runtime DESTDIR=/tmp/rootfs
#
# DESTDIR receives what the image's final stage copies to / : everything under
# $(IMAGE_PREFIX), root-owned, no file writable by the image's user (65532).
# images/<name>/packages.txt lists the Debian packages the final stage installs so
# that every shared library the binaries need resolves.
IMAGE_PREFIX := /opt/ftcomm
IMAGES := controller runtime

.PHONY: image-rootfs
image-rootfs: all
	@case " $(IMAGES) " in *" $(IMAGE) "*) ;; *) echo "image-rootfs: set IMAGE to one of: $(IMAGES)" >&2; exit 2;; esac
	@case "$(DESTDIR)" in /*) ;; *) echo "image-rootfs: set DESTDIR to an absolute directory (the image's root)" >&2; exit 2;; esac
	$(say) ROOTFS $(IMAGE) $(DESTDIR)
	$(Q)rm -rf "$(DESTDIR)" && mkdir -p "$(DESTDIR)"
	$(Q)$(MAKE) --no-print-directory install PREFIX=$(IMAGE_PREFIX) DESTDIR="$(DESTDIR)/.stage" >/dev/null
	$(Q)images/rootfs.sh "$(IMAGE)" "$(DESTDIR)" "$(IMAGE_PREFIX)" "$(BUILD)"
