# tests/install/ - installing ftcomm like a Kubernetes project: the Helm chart
# (charts/ftcomm), the plain manifests (deploy/, generated from the chart), the
# container images' root filesystems (images/), the generated CRD reference.
#   static.sh     helm lint, schema, rendering, generated files fresh (no cluster)
#   chart.sh      helm template | kubectl apply --dry-run=server, install, upgrade,
#                 uninstall, restricted Pod Security, the example TrainingJob
#   manifests.sh  kubectl apply -k deploy/ (server dry run, then for real)
#   images.sh     make image-rootfs for each image, and the tree it makes
include images/module.mk

TEST_SUITES += tests/install/static.sh tests/install/chart.sh tests/install/manifests.sh tests/install/images.sh

.PHONY: crd docs-crd deploy-manifests
# The CRD from crds/trainingjobs.in.yaml and the test API server's pod schema; then the
# chart's and deploy/'s copies and docs/crd-reference.md (tests/controller/crd.sh checks it).
crd:
	@scripts/gen-crd.sh
# docs/crd-reference.md is generated from the CRD (tests/install/static.sh checks it).
docs-crd:
	@scripts/gen-crd-doc.py crds/ftcomm.dev_trainingjobs.yaml > docs/crd-reference.md
# deploy/ and the chart's copy of the CRD are generated from the chart and crds/.
deploy-manifests:
	@scripts/gen-deploy.sh
