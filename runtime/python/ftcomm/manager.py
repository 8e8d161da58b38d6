"""The fault-tolerant training loop: ``ftcomm.Manager`` (docs/pytorch.md).

A Manager keeps one data-parallel replica of a model and its optimizer in
step with the others over the ftcomm default group, through lost ranks and
replacements, with a fixed global batch::

    mgr = ftcomm.Manager(model, optimizer, global_batch=256)
    net = mgr.wrap(model)                       # DDP whose gradients go through mgr
    while mgr.next_step(steps):                 # False at the end
        idx = mgr.batch_indices(len(data))      # this rank's share of this step's batch
        optimizer.zero_grad()
        loss_fn(net(x[idx]), y[idx]).backward() # mean over this rank's samples
        mgr.commit(loss)                        # reduce, step boundary, optimizer.step(); or recover

What it does, as libftcomm's example trainer (runtime/examples/ftcomm-trainer.c):

- ``commit`` runs the step boundary right after the gradients are reduced,
  while the ranks are still together: a replacement waiting to join is
  admitted there by every rank at once, and the next ``next_step`` hands it
  the state (after this step's update). The boundary's agreement rides on
  the gradient reduction: each rank's vote (``ftc_comm_step_vote``: 1 when
  it has heard of a newer epoch) is one more element of the first gradient
  bucket's SUM, and ``ftc_comm_step_voted`` completes the boundary with no
  collective of its own when the sum is 0; otherwise every rank (all saw the
  same sum) runs ``ftc_comm_step``'s allreduce and moves to the new epoch.
  So a step without a membership change synchronizes the ranks no more
  often than plain DDP.
- A failed collective (a peer lost, hung or the epoch revoked) makes
  ``commit`` (or ``next_step``) recover (``ftc_comm_recover``: the survivors'
  next epoch) instead of raising; the step is redone at the new size.
- After every membership change the ranks agree on the newest state (the
  highest step any of them completed) and the lowest rank holding it
  broadcasts it: model, optimizer state, step and ``state`` (a dict of the
  caller's picklable extras), over the backend, no checkpoint file. So a
  joiner gets it, and survivors that came out of a failure one step apart
  agree again.
- The global batch is fixed: step s covers positions s*B .. s*B+B-1 of the
  data, split contiguously over the current ranks; each rank's gradients are
  weighted by its share (n_rank / B) and summed, which is the batch's mean
  gradient at any size. So the losses after a recovery match the run
  without failures within float tolerance (the summation order changes).
- It ends only at a step boundary that followed the last update with no
  state change since: an update is final once a later collective completed
  on every rank.
"""
import hashlib
import io
import os
import sys
import time

import torch
import torch.distributed as dist

import ftcomm.torch as _ft
from ftcomm import _C
from ftcomm.errors import FtcommError

__all__ = ["Manager"]

# The sync's key packs (step, rank) into one int64 MAX: the highest step, then
# the lowest rank holding it.
_RANK_BITS = 20
_RANK_SPAN = 1 << _RANK_BITS


class _LocalWork(dist._Work):
    """A completed Work: the local group's ops have nothing to wait for."""

    def __init__(self, result):
        super().__init__()
        self._fut = torch.futures.Future()
        self._fut.set_result(result)

    def wait(self, timeout=None):
        return True

    def get_future(self):
        return self._fut


class _LocalGroup(dist.ProcessGroup):
    """A group of one process that moves no data. DDP is built on it, so its
    construction (a broadcast and a shape check) and its bucket handling run
    without collectives, and a replacement can build its DDP alone; the
    gradients go through the Manager's communication hook."""

    def __init__(self):
        super().__init__(0, 1)

    def getBackendName(self):
        return "ftcomm-local"

    def allreduce(self, tensors, opts=None):
        return _LocalWork(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return _LocalWork(tensors)

    def broadcast(self, tensors, opts=None):
        return _LocalWork(tensors)

    def allgather(self, outputs, inputs, opts=None):
        for o, i in zip(outputs[0], inputs):
            o.copy_(i)
        return _LocalWork(outputs)

    def _allgather_base(self, output, input, opts=None):
        output.copy_(input.reshape(output.shape))
        return _LocalWork([output])

    def barrier(self, opts=None):
        return _LocalWork(None)


def _log(msg):
    sys.stderr.write(f"ftcomm.Manager: {msg}\n")
    sys.stderr.flush()


class Manager:
    """Fault-tolerant data-parallel training on the ftcomm default group.

    model, optimizer: this replica's; every rank builds them the same way
        (the first step boundary gives every rank rank 0's parameters).
    global_batch: samples per step over all ranks (fixed whatever the size).
    state: a dict of picklable extras that travel with the model (e.g. a
        scheduler's state_dict, a data loader's epoch); the Manager keeps it.
    timeout: seconds for the step boundary and recovery (None: the job's
        FTCOMM_TIMEOUT_MS / FTCOMM_RECOVER_TIMEOUT_MS).
    log: print one line per membership change to stderr.
    """

    def __init__(self, model, optimizer, global_batch, *, state=None, timeout=None, log=True):
        if not dist.is_initialized():
            raise RuntimeError("ftcomm.Manager: call dist.init_process_group(\"ftcomm\") first")
        global_batch = int(global_batch)
        self._backend = _ft.backend_of(None)
        info = _C.comm_info(self._backend)
        if global_batch < 1:
            raise ValueError(f"ftcomm.Manager: global_batch must be >= 1, not {global_batch}")
        world = int(os.environ.get("FTCOMM_WORLD_SIZE", info["size"]) or info["size"])
        if global_batch < max(world, info["size"]):
            raise ValueError(
                f"ftcomm.Manager: global_batch {global_batch} is smaller than the job's {world} ranks: "
                "every rank needs at least one sample per step")
        self.model = model
        self.optimizer = optimizer
        self.global_batch = global_batch
        self.state = state if state is not None else {}
        self.timeout = timeout
        self.log = log
        self.joiner = bool(info["joiner"])
        # -1: holds no state yet (a replacement): it takes the survivors'.
        self.step = -1 if self.joiner else 0
        self.epoch = info["epoch"]
        self.rank, self.size = info["rank"], info["size"]
        self.recoveries = 0
        self.last_loss = None
        self._recovered = False
        self._first = not self.joiner  # the initial ranks take rank 0's model first
        self._grown = None  # the epoch info of a boundary that admitted a replacement
        self._whole = True  # reduce the gradients in one piece in commit, not by bucket
        self._ddp = None
        self._weight = 1.0
        self._failed = None
        # The step's summed votes (a one-element view of the reduction that
        # carried them); None: no reduction carried them this step.
        self._votes = None
        self._lo = self._hi = 0
        self._fail_time = None
        if self.joiner and log:
            _log(f"joined at epoch {self.epoch} as rank {self.rank} of {self.size}")

    # ---- the model's gradients ----

    def wrap(self, module, **ddp_kwargs):
        """module in torch's DistributedDataParallel whose gradient buckets are
        reduced by this Manager (over the live ranks, weighted by their share
        of the global batch). Every rank, a replacement too, builds it alone:
        its own construction moves no data."""
        if self._ddp is not None:
            raise RuntimeError("ftcomm.Manager.wrap: one model per Manager")
        self._ddp = torch.nn.parallel.DistributedDataParallel(module, process_group=_LocalGroup(), **ddp_kwargs)
        self._ddp.register_comm_hook(self, Manager._comm_hook)
        return self._ddp

    @staticmethod
    def _comm_hook(self, bucket):
        buf = bucket.buffer()
        if self._failed is not None or self._whole:
            # commit reduces the gradients (a failed step: discards them)
            fut = torch.futures.Future()
            fut.set_result(buf)
            return fut
        out = buf
        try:
            if bucket.index() == 0:
                # The first bucket reduced carries the step boundary's vote:
                # one more element, not weighted, in a copy of the bucket
                # (DDP copies the returned view back into the bucket).
                n = buf.numel()
                red = torch.empty(n + 1, dtype=buf.dtype, device=buf.device)
                torch.mul(buf, self._weight, out=red[:n])
                red[n] = _C.comm_step_vote(self._backend)
                self._votes = red[n:]
                out = red[:n]
            else:
                red = buf.mul_(self._weight)
            work = dist.all_reduce(red, op=dist.ReduceOp.SUM, async_op=True)
        except FtcommError as e:
            self._note_failure(e)
            fut = torch.futures.Future()
            fut.set_result(buf)
            return fut

        def done(f):
            try:
                f.wait()
            except Exception as e:  # the step is redone after a recovery
                self._note_failure(e)
            return out

        return work.get_future().then(done)

    def _note_failure(self, e):
        if self._failed is None:
            self._failed = e
            self._fail_time = time.monotonic()

    # ---- the loop ----

    def shard(self):
        """(lo, hi): this rank's positions lo..hi-1 in this step's global batch."""
        return self._lo, self._hi

    def batch_indices(self, n, shuffle=False, seed=0):
        """The indices into a data set of n samples of this rank's share of
        the current step's global batch: positions step*B+lo .. step*B+hi-1 of
        the data read in order (shuffle: each pass over it in a permutation
        drawn from seed and the pass number). The same positions at any size."""
        pos = torch.arange(self._lo, self._hi, dtype=torch.int64) + self.step * self.global_batch
        if not shuffle:
            return pos % n
        out = torch.empty_like(pos)
        passes = pos // n
        for p in passes.unique().tolist():
            g = torch.Generator().manual_seed(seed * 1000003 + p)
            perm = torch.randperm(n, generator=g)
            m = passes == p
            out[m] = perm[pos[m] % n]
        return out

    def next_step(self, steps):
        """Before step ``self.step``: hand the state to whoever lacks it (a
        replacement, survivors after a recovery), recover from a failure.
        True: run the step; False: ``steps`` steps are done and final on
        every rank."""
        while True:
            try:
                if self._recovered or self._first:
                    self._recovered = False
                    self._sync(force=self._first)
                    self._first = False
                elif self._grown is not None:
                    info, self._grown = self._grown, None
                    self._took(info, "grew")
                    self._sync()
                elif self.step < 0 or self.step >= steps:
                    # A joiner's first boundary: the one at which the others
                    # admitted it. The end: a boundary after the last update
                    # makes it final on every rank (and admits nobody).
                    if not self._boundary():
                        return False
                    continue
            except FtcommError as e:
                self._recover(e)
                continue
            if self.step >= steps:
                continue
            self._begin()
            return True

    def _boundary(self):
        """The step boundary (ftc_comm_step). When it admitted a replacement,
        every rank hands it the state; True then."""
        info = _C.comm_step(self._backend, self.timeout)
        if not info["changed"]:
            return False
        self._took(info, "grew")
        self._sync()
        return True

    def _begin(self):
        self._lo = self.global_batch * self.rank // self.size
        self._hi = self.global_batch * (self.rank + 1) // self.size
        self._weight = (self._hi - self._lo) / self.global_batch
        self._failed = None
        self._votes = None

    def commit(self, loss=None):
        """End the step: reduce the gradients (those the wrapped model's
        hooks did not already), and the loss (the mean over this rank's
        samples) if given; then the step boundary, the optimizer's update,
        and a replacement admitted at that boundary receives the state.
        On a failure: recover, return False (``next_step`` redoes the step)."""
        try:
            if self._failed is None and (self._ddp is None or self._whole):
                self._reduce_grads()
            if self._failed is None and loss is not None:
                t = loss.detach().to(torch.float64).reshape(1) * self._weight
                t = t.cpu()
                dist.all_reduce(t, op=dist.ReduceOp.SUM)
                self.last_loss = float(t.item())
            if self._failed is None:
                # The step boundary sits right after the reduction, which has
                # just brought the ranks together and carried their votes:
                # with none, no collective of its own. (Without the votes,
                # its 8-byte all_reduce; at the top of the step that would
                # wait out the ranks' drift over the update and the loop.) A
                # replacement admitted here gets the state after this update.
                if self._votes is not None:
                    info = _C.comm_step_voted(self._backend, bool(self._votes.item() != 0), self.timeout)
                else:
                    info = _C.comm_step(self._backend, self.timeout)
        except FtcommError as e:
            self._note_failure(e)
        if self._failed is not None:
            e, self._failed = self._failed, None
            self._recover(e)
            return False
        self.optimizer.step()
        self.step += 1
        self._whole = False
        if info["changed"]:
            # The next next_step hands the state over: rank and size stay
            # those of the step just done until then.
            self._grown = info
        return True

    def _reduce_grads(self):
        grads = [p.grad for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
        if not grads:
            return
        # The last element carries the step boundary's vote (see _comm_hook).
        flat = torch.cat([g.reshape(-1) for g in grads] + [grads[0].new_zeros(1)])
        flat.mul_(self._weight)
        flat[-1] = _C.comm_step_vote(self._backend)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        self._votes = flat[-1:]
        off = 0
        for g in grads:
            g.copy_(flat[off:off + g.numel()].view_as(g))
            off += g.numel()

    # ---- membership changes ----

    def _recover(self, err):
        if self.log:
            _log(f"rank {self.rank}: step {self.step} failed: {type(err).__name__}: "
                 f"{str(err).splitlines()[0]}; recovering")
        info = _C.comm_recover(self._backend, self.timeout)
        self.recoveries += 1
        self._recovered = True
        self._took(info, "recovered")

    def _took(self, info, how):
        self.epoch = info["epoch"]
        self.rank, self.size = info["rank"], info["size"]
        if not self.log:
            return
        lost = ", ".join(f"rank {r} (slot {s}, {why})" for r, s, why in _C.comm_lost(self._backend))
        new = _C.comm_new_ranks(self._backend)
        _log(f"{how} at step {self.step}: epoch {self.epoch}, rank {self.rank} of {self.size} "
             f"(was {info['prev_rank']} of {info['prev_size']}); lost: {lost or 'none'}; "
             f"new ranks: {' '.join(map(str, new)) or 'none'}")

    def _sync(self, force=False):
        """Every rank takes the newest state any of them holds (force: rank
        0's, the start of the job)."""
        # DDP lays its buckets out anew after a process's first backward pass
        # (in the order the gradients became ready); a replacement's first
        # step still has the layout of construction, unlike the survivors'.
        # Until a step completes after a sync (every rank syncs at the same
        # point), gradients are reduced whole, in the optimizer's parameter
        # order, whatever the buckets.
        self._whole = True
        rank = self.rank
        key = torch.tensor([self.step * _RANK_SPAN + (_RANK_SPAN - 1 - rank), -self.step], dtype=torch.int64)
        if force:
            key[0] = 0 * _RANK_SPAN + (_RANK_SPAN - 1 - rank) if rank == 0 else -1 * _RANK_SPAN
        dist.all_reduce(key, op=dist.ReduceOp.MAX)
        newest = int(key[0].item()) // _RANK_SPAN
        root = _RANK_SPAN - 1 - int(key[0].item()) % _RANK_SPAN
        oldest = -int(key[1].item())
        if newest < 0:
            raise RuntimeError("ftcomm.Manager: no rank holds the model (every rank is a replacement)")
        if oldest == newest and not force:
            return  # the same step everywhere: the same state
        if rank == root:
            buf = io.BytesIO()
            torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                        "step": self.step, "state": self.state, "loss": self.last_loss}, buf)
            data = torch.frombuffer(bytearray(buf.getbuffer()), dtype=torch.uint8)
            n = torch.tensor([data.numel()], dtype=torch.int64)
        else:
            n = torch.zeros(1, dtype=torch.int64)
        dist.broadcast(n, src=root)
        if rank != root:
            data = torch.empty(int(n.item()), dtype=torch.uint8)
        dist.broadcast(data, src=root)
        if rank == root:
            return
        device = next(self.model.parameters()).device
        blob = torch.load(io.BytesIO(data.numpy().tobytes()), map_location=device, weights_only=False)
        self.model.load_state_dict(blob["model"])
        self.optimizer.load_state_dict(blob["optimizer"])
        self.state.clear()
        self.state.update(blob["state"])
        self.last_loss = blob["loss"]
        if self.log and self.step != blob["step"] and not force:
            _log(f"rank {rank}: took the state of step {blob['step']} from rank {root}")
        self.step = blob["step"]

    # ---- checks ----

    def params_hash(self):
        """A hash of this replica's parameter bytes (equal on every rank)."""
        h = hashlib.sha256()
        for p in self.model.parameters():
            h.update(p.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()[:16]
