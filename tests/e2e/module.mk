# tests/e2e/ - end-to-end: the whole flow on one machine against a real API server.
#   agent           the node agent: binds the pods of a namespace to its Nodes and
#                   runs them as local processes, reporting their phases (Python)
#   trainingjob.sh  kubectl apply a TrainingJob of ftcomm-trainer ranks; a killed
#                   worker, a hung worker (dumps, analysis, incident, Event),
#                   replacements that rejoin, the job Succeeds with equal parameters
#   pytorch.sh      the PyTorch example (ftcomm.Manager) as a TrainingJob: a deleted pod,
#                   a stopped pod, replacements that get the model, equal parameters
#   hang-ends.sh    a hang leaves its dumps however the job ends next: restartAll, a
#                   pod deleted, the job deleted, the controller restarted (~3 min)
TEST_BINS += $(CONTROLLER_BIN) $(BUILD)/bin/ftcomm-trainer $(TRACE_BIN)
TEST_SUITES += tests/e2e/trainingjob.sh tests/e2e/hang-ends.sh

# pytorch.sh: examples/pytorch/train_ddp.py (ftcomm.Manager) as a TrainingJob, with a
# deleted and a stopped pod (~3 min); it needs the package of `make python`.
ifeq ($(SANITIZE),)
TEST_BINS += $(PY_EXT_STAMP)
TEST_SUITES += tests/e2e/pytorch.sh
endif
