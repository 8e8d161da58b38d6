/*
 * tcp.h - the TCP data plane as the core sees it: a listener created before
 * the membership view is known, a transport connected to every peer of one
 * view (authenticated; one connection per direction of each pair, or one
 * for both with FTCOMM_TCP_SOCKETS=1), and ftc__tcp_run() which runs
 * one collective to completion on the calling thread.
 *
 * Threading: ftc__tcp_run() is called by one thread at a time (the progress
 * thread, or the application thread on the direct path). ftc__tcp_shutdown()
 * may be called from any thread: it shuts every peer socket down, which wakes
 * a run blocked in poll(); the run then returns the status stored in
 * *cfg.interrupt. Writing *cfg.intr_fd after setting *cfg.interrupt stops a
 * run the same way without telling the peers. ftc__tcp_destroy() only after the running thread is gone.
 */
#ifndef FTC_TCP_H
#define FTC_TCP_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"
#include "ftcomm.h"
#include "membership/member.h"

#define FTC__TCP_MAGIC 0x46544344u /* "FTCD" */
/* The data-plane protocol version, in every handshake message and in the
 * membership hello ("dataplane"): the coordinator refuses a rank whose number
 * differs from the running ranks'. docs/protocol.md, "Data-plane protocol
 * versions", lists what each version changed; bump it for any change two
 * ranks must agree on. */
#define FTC__TCP_PROTO 8
#define FTC__TCP_NONCE_SIZE 16
#define FTC__TCP_HELLO_SIZE 92
#define FTC__TCP_HELLO 1      /* one socket carries the pair's data both ways */
#define FTC__TCP_ACK 2
#define FTC__TCP_HELLO_UP 3   /* of two: the connector (higher rank) sends on it */
#define FTC__TCP_HELLO_DOWN 4 /* of two: the acceptor (lower rank) sends on it */
/* The same for a spare connection (ftc__tcp_spare_poll): the hello kind + 4. */
#define FTC__TCP_SPARE 5
#define FTC__TCP_SPARE_UP 7
#define FTC__TCP_SPARE_DOWN 8
#define FTC__TCP_SPARE_OF(kind) ((kind) + 4)
#define FTC__TCP_MISMATCH 10  /* the acceptor's answer to a member whose wire settings differ */
#define FTC__TCP_ADOPT 11     /* a pair's spare connections taken for an epoch, sent on its
                               * shared one (9 was one per connection: a peer that sends 9
                               * is an older ftcomm, whose spares are not adopted) */
#define FTC__TCP_ADOPT_SIZE 16

/* FTCOMM_TCP_CONGESTION: which data connections get congestion_name. */
enum { FTC__TCP_CC_AUTO = 0, FTC__TCP_CC_SYSTEM, FTC__TCP_CC_NAMED };

typedef struct ftc__tcp_cfg {
  const char *token;        /* job token (NULL: empty); MACs the handshake */
  int connect_timeout_ms;   /* bound on connecting to every peer */
  int64_t socket_buffer;    /* SO_SNDBUF/SO_RCVBUF, 0 keeps autotuning */
  size_t chunk_bytes;       /* pipeline and staging chunk */
  size_t ring_threshold;    /* bytes from which ring/chain algorithms are used */
  size_t halving_max;       /* allreduce: below it (and from ring_threshold) halving-doubling */
  int spin_us;              /* busy-poll before sleeping in poll() */
  long host_cpus;           /* FTCOMM_HOST_CPUS: the CPUs auto counts (ftc__tcp_usable_cpus),
                             * 0 asks the OS */
  long os_cpus;             /* the OS's count, read once by ftc__tcp_create for its epoch
                             * (its hellos and its crowded decision); 0: ask each time */
  long cpu_quota;           /* the CPU quota of the process's cgroup in whole CPUs
                             * (ftc__tcp_cgroup_cpus), 0 none; FTC__TCP_QUOTA_UNREAD (as
                             * ftc__tcp_cfg_from_env leaves it): the process's, read once
                             * per process when first counted (ftc__tcp_cpu_quota) */
  int sockets;              /* per peer pair: 1 carries both ways, 2 one per direction */
  int allreduce_algo;       /* FTCOMM_ALLREDUCE_ALGO (an ftc_algo_t): where a communicator's
                             * algorithm starts */
  int congestion;           /* FTCOMM_TCP_CONGESTION: an FTC__TCP_CC_* */
  char congestion_name[16]; /* what FTC__TCP_CC_NAMED sets on every data connection
                             * (FTC__TCP_CC_AUTO: reno within one host, see
                             * ftc__tcp_host_ranks) */
  int family;               /* FTCOMM_SOCKET_FAMILY: AF_UNSPEC (auto), AF_INET or AF_INET6 */
  const char *ifname;       /* FTCOMM_SOCKET_IFNAME or NULL: interfaces to advertise */
  const int *interrupt;     /* atomic; nonzero stops a run with that status */
  const int *intr_fd;       /* NULL or an eventfd that a run's poll() also waits on: written
                             * after *interrupt is set, it stops the run without shutting the
                             * sockets (a failure the peers see for themselves) */
  const ftc__member_t *member; /* coordinator session or NULL: a newer epoch it has announced
                                * ends a bootstrap at once (FTC_ERR_REVOKED) */
  struct ftc__tcp_preacc *preacc; /* NULL, or a stopped standby acceptor on this listener:
                                   * the first bootstrap takes its sockets */
  int planned_move;         /* ftc__tcp_connect with prev: prev's epoch did not fail here (a
                             * step boundary's move). To the very next epoch, dropping no
                             * member, each pair keeps prev's connections (no ADOPT): both
                             * ends decide it from the same two views */
} ftc__tcp_cfg_t;

/* A standby member's listener while the process waits to join
 * (ftc_comm_create_begin): a thread ("ftc-standby") accepts the connections
 * the running ranks make on the coordinator's prospect (the epoch its join
 * would form) and sends each its nonce, so that their handshakes are already
 * waiting when the first bootstrap (cfg->preacc) answers them; the join's
 * way then has no round trip through the running ranks' threads. Sockets
 * whose caller went away are closed; at most MAX_PENDING_ACCEPTS are held. */
typedef struct ftc__tcp_preacc ftc__tcp_preacc_t;
ftc_status_t ftc__tcp_preaccept_start(int listen_fd, int64_t socket_buffer,
                                      ftc__tcp_preacc_t **out);
/* Stop the thread (idempotent); the sockets stay for the bootstrap. */
void ftc__tcp_preaccept_stop(ftc__tcp_preacc_t *pa);
/* Stop, close the sockets no bootstrap took, free. NULL is a no-op. */
void ftc__tcp_preaccept_free(ftc__tcp_preacc_t *pa);

/* Defaults for the tunables from the FTCOMM_* table (token and interrupt
 * untouched). */
ftc_status_t ftc__tcp_cfg_from_env(ftc__tcp_cfg_t *cfg);

typedef struct ftc__tcp ftc__tcp_t;

/* Whether the ranks of view crowd the CPUs they share: every member
 * advertises the same host and there are at least 2 * ncpu of them, ncpu
 * being ftc__tcp_usable_cpus (every rank of one host counts the same:
 * their hellos compare it), so every core runs two ranks or more. Then
 * FTC_ALGO_AUTO reduces allreduces below FTCOMM_RING_THRESHOLD flat (to
 * rank 0 and back) rather than by recursive doubling, whose every step
 * waits for ranks to get a turn on a core. Below 2 ranks per core flat
 * measured a tie at best (3 ranks on 2 cores), and rank 0's serial share
 * (n - 1 receives and sends) would cost more on a big host with a rank or
 * so per core (docs/performance/tcp.md, "Small allreduces when ranks outnumber
 * cores"). */
int ftc__tcp_crowded(const ftc__view_t *view, long ncpu);

/* How many ranks of the view share rank r's host (r included; hosts compared
 * as in ftc__tcp_same_host). FTCOMM_TCP_CONGESTION=auto sets reno on the
 * connections between ranks of one host while it has a CPU per 2 of these
 * ranks: bbr, the default of some distributions, paces with timers and keeps
 * the data in flight near its estimate of the path, which costs a loopback
 * connection CPU and time where the receiver runs; on a more crowded host
 * reno is slower for mid-size messages, so the system's stays there
 * (docs/performance/tcp.md, "Congestion control within one host"). */
int ftc__tcp_host_ranks(const ftc__view_t *view, int r);

/* Listen on bind_host (ephemeral port) with family (AF_UNSPEC, AF_INET,
 * AF_INET6; see FTCOMM_BIND_HOST and FTCOMM_SOCKET_FAMILY: a wildcard with
 * auto is one dual-stack IPv6 socket, or IPv4 on a host without IPv6).
 * *addr gets "host:port" or "[IPv6]:port" with the host peers should use:
 * advertise_host, else the first address of an interface ifname selects
 * (NCCL_SOCKET_IFNAME's syntax; none is FTC_ERR_CONFIG), else $POD_IP,
 * else bind_host when it is a specific address, else the first
 * non-loopback address the listener serves (IPv4 first), else loopback. An
 * advertised literal the listener cannot serve is FTC_ERR_CONFIG. */
ftc_status_t ftc__tcp_listen(const char *bind_host, const char *advertise_host, int family,
                             const char *ifname,
                             int64_t socket_buffer, int *fd, char *addr, size_t addrlen);

/* Connect to every peer of view (lower rank accepts, higher connects), with
 * the authenticated handshake; strangers are refused and logged. Blocks up
 * to cfg->connect_timeout_ms (FTC_ERR_TIMEOUT naming the missing ranks).
 * A member whose wire settings (ftc__tcp_wire_t) differ from this rank's is
 * refused; without prev (the communicator is being created) that is
 * FTC_ERR_CONFIG saying which settings differ, once every other peer is
 * connected or refused (at most 3 s more).
 * listen_fd stays owned by the caller. cfg is copied.
 *
 * prev (or NULL) is the transport of the previous epoch: the spare
 * connections it holds to a member of view (see ftc__tcp_spare_poll), one
 * for each socket of the pair, are taken from it and adopted instead of
 * connecting anew. Both ends send ADOPT {magic, protocol, epoch} on the
 * pair's shared socket (the UP one) and read the other's there, before
 * anything else is read from either socket: the same epoch makes both that
 * pair's connections of the epoch (each end takes the pair's spares
 * together, and both of a pair were made by the same two transports);
 * anything else (the peer adopted them for another epoch, closed them, or
 * lacked one) closes both and the pair connects through the listener as
 * usual. A rank lacking one of a pair's spares closes the other at once. So
 * survivors of a failure reconnect with one message each way per pair and
 * no new connection. prev is otherwise left alone (the caller destroys
 * it).
 *
 * The adoption is lazy: this returns without sending or waiting for any
 * ADOPT. An adopted pair is unconfirmed until its peer's ADOPT is read,
 * and no byte of a run moves on it before: the first run that uses the
 * pair sends this end's ADOPT and reads the peer's (waiting for it with
 * its other streams); a run that finds the peer did not adopt the pair
 * (its end, or another epoch's ADOPT; it watches every unconfirmed pair
 * for its end) connects the pair anew for this epoch first, or fails with
 * FTC_ERR_PEER_LOST when the peer's process is gone (ftc__tcp_settle). A
 * survivor of a failure thus goes from its view to its first collective
 * without a round trip through every peer, and pairs that no run uses
 * (those of two non-root ranks under the flat allreduce) send nothing. */
ftc_status_t ftc__tcp_connect(const ftc__tcp_cfg_t *cfg, const ftc__view_t *view, int listen_fd,
                              ftc__tcp_t *prev, ftc__tcp_t **out);

/* Settle the lazily adopted pair with `rank`: read the peer's ADOPT
 * (waiting until deadline for it), or, when the peer did not adopt the
 * pair for this epoch, connect it anew (within FTCOMM_CONNECT_TIMEOUT_MS).
 * FTC_OK once the pair carries this epoch's bytes (at once for a pair that
 * was not adopted); FTC_ERR_TIMEOUT when no ADOPT came by deadline (still
 * unconfirmed: settle again); FTC_ERR_REVOKED when a newer epoch was
 * announced or the epoch stopped; else the reconnection's failure. */
ftc_status_t ftc__tcp_settle(ftc__tcp_t *tp, int rank, int64_t deadline);
/* 1 while the pair with `rank` waits for its peer's ADOPT. */
int ftc__tcp_unconfirmed(const ftc__tcp_t *tp, int rank);

/* Spare connections: between collectives the idle progress thread makes a
 * second authenticated connection per pair of the epoch (the higher rank
 * connects with a SPARE hello; the lower accepts it on the listener, which
 * refuses anyone else), idle until the next epoch adopts it. Unlike the
 * epoch's connections they are never shut down when the epoch fails, so
 * they stay clean. ftc__tcp_spare_poll fills pfd (at most max, the listener
 * first) with what to wait for; with build set it first starts connecting
 * the spares this rank makes (once per epoch; a failed one is not retried).
 * ftc__tcp_spare_events handles what poll() returned for those entries.
 * A valid hello for a later epoch (a peer that learned of it first) is
 * kept, not refused, and answered by that epoch's ftc__tcp_connect.
 * ftc__tcp_spare_stop abandons the handshakes in progress (the epoch is
 * ending); finished spares and kept hellos stay. ftc__tcp_spare_count
 * counts finished spares. */
int ftc__tcp_spare_poll(ftc__tcp_t *tp, int listen_fd, int build, struct pollfd *pfd, int max);
void ftc__tcp_spare_events(ftc__tcp_t *tp, int listen_fd, const struct pollfd *pfd, int n);
void ftc__tcp_spare_stop(ftc__tcp_t *tp);
int ftc__tcp_spare_count(const ftc__tcp_t *tp);
/* Early connections to joiners: when the coordinator announced a later
 * epoch `next` that adds members (a joiner was admitted), the idle progress
 * thread starts that epoch's bootstrap for the new members only, before the
 * step boundary at which every rank moves: this rank connects to the new
 * members below it and the listener takes the hellos of those above it
 * (and of any member of `next` that connects early), with the same
 * authenticated handshake. ftc__tcp_connect for `next` then continues that
 * bootstrap (its connections to the survivors are adopted spares as
 * usual), so the joiner's connections are already made. ftc__tcp_early_start
 * returns 1 when there is something to connect early (0: a later epoch
 * without new members, or tp is not part of next); a previous early
 * bootstrap for another epoch is abandoned. ftc__tcp_early_poll and
 * ftc__tcp_early_events are driven like the spare functions (0 entries:
 * none running). */
int ftc__tcp_early_start(ftc__tcp_t *tp, const ftc__view_t *next);
int ftc__tcp_early_poll(ftc__tcp_t *tp, int listen_fd, struct pollfd *pfd, int max);
void ftc__tcp_early_events(ftc__tcp_t *tp, int listen_fd, const struct pollfd *pfd, int n);
/* Sockets of this epoch that were adopted spares (for tests and logs). */
int ftc__tcp_adopted(const ftc__tcp_t *tp);

/* Close tp's spare connections (and stop making them): a retired epoch's,
 * before a move that follows a failure (backend.c). */
void ftc__tcp_close_spares(ftc__tcp_t *tp);

/* How many of tp's connections it kept from the epoch before (a planned
 * move to the next epoch: ftc__tcp_cfg_t.planned_move). */
int ftc__tcp_kept(const ftc__tcp_t *tp);
void ftc__tcp_destroy(ftc__tcp_t *tp);
void ftc__tcp_shutdown(ftc__tcp_t *tp);

/* Run one collective; deadline is monotonic ns (INT64_MAX: none). */
ftc_status_t ftc__tcp_run(ftc__tcp_t *tp, const ftc__op_t *op, int64_t deadline_ns);

/* Run send/recv operations together, each message on a stream of its own:
 * those of one peer and direction in order (MPI's non-overtaking rule, per
 * pair), all others at once, so that any order of posted sends and receives
 * completes once the matching ones are posted. Each message is led by a
 * descriptor (its sequence in its pair's direction, dtype, count): a
 * receive whose sender's message differs fails with FTC_ERR_MISMATCH. At
 * most cap messages are in flight. While it runs, more(ctx, ops, n, cap,
 * done) is called before each round: ops[i] with done[i] set (every one
 * when done is NULL) have moved all their bytes: it completes them and drops them from ops (the others
 * keep their order), appends operations queued meanwhile up to cap, and
 * returns the new count; wake_fd wakes the run when one is queued. */
typedef int (*ftc__tcp_more_fn)(void *ctx, const ftc__op_t **ops, int n, int cap,
                                const unsigned char *done);
ftc_status_t ftc__tcp_run_p2p(ftc__tcp_t *tp, const ftc__op_t **ops, int n, int cap,
                              int64_t deadline_ns, ftc__tcp_more_fn more, void *ctx, int wake_fd);

/* The peer whose connection broke or timed out in the last failed run, -1
 * if none (or tp is NULL). */
int ftc__tcp_failed_peer(const ftc__tcp_t *tp);

/* Fault injection: break the connection to `rank` (shutdown, both ways), as
 * a network fault would; both ends then fail their runs with peer lost. */
void ftc__tcp_drop_peer(ftc__tcp_t *tp, int rank);

/* Best effort, before closing: tell every peer this rank is leaving on
 * purpose (one byte the peer's idle watch recognises), so a peer that is
 * still between collectives does not take it for a crash. */
void ftc__tcp_say_goodbye(ftc__tcp_t *tp);
#define FTC__TCP_GOODBYE 0xFF

/* The idle watch saw `rank` say goodbye: later runs that need that peer
 * fail with FTC_ERR_PEER_LOST instead of reading the goodbye as data. */
void ftc__tcp_mark_left(ftc__tcp_t *tp, int rank);

/* The idle watch saw `rank`'s connection end (no goodbye) while a run was
 * going on: that run, if it waits in poll(), and any later run of this
 * epoch fail with FTC_ERR_PEER_LOST naming it, as if they had read the end
 * themselves (cfg.intr_fd wakes the waiting one). A run blocked on another
 * peer, one that failed quietly (core/comm.c), would not look at this
 * connection otherwise. */
void ftc__tcp_mark_ended(ftc__tcp_t *tp, int rank);

/* Record `rank` as the failed peer (the idle watch saw it close). */
void ftc__tcp_note_failed_peer(ftc__tcp_t *tp, int rank);

/* 1 when `rank` said goodbye (see ftc__tcp_mark_left). */
int ftc__tcp_peer_left(const ftc__tcp_t *tp, int rank);

/* Peer sockets, for the idle watch (POLLRDHUP) of the progress thread: for
 * each peer the socket its data arrives on, then, for a peer that sends on
 * two (a lower rank: small collectives on the shared socket), the second;
 * the goodbye comes on each, after the data. A rank appears once or twice.
 * Not the unconfirmed pairs (lazy adoption, ftc__tcp_connect): the runs
 * watch those, and only they (on the thread that owns the data plane) may
 * connect one anew, closing the sockets listed here. Returns how many were
 * written (at most max). */
int ftc__tcp_peer_fds(const ftc__tcp_t *tp, int *fds, int *ranks, int max);

/* Accept every pending connection on listen_fd and refuse it: no view is
 * being built, so any caller is a stranger. */
void ftc__tcp_refuse_pending(int listen_fd);

/* The settings that decide which bytes go to which peer on which socket:
 * ranks that differ in any of them run different algorithms, so they would
 * reduce the wrong blocks or wait for bytes that never come. Every hello
 * and answer carries the sender's; a member whose settings differ is
 * refused (FTC__TCP_MISMATCH). Under FTCOMM_ALLREDUCE_ALGO=auto two ranks
 * of one host (same_host: the view advertises the same host for both) must
 * also count the same CPUs: ftc__tcp_crowded decides from each rank's own
 * count, and ranks that count differently (containers with their own view
 * of /sys, another libc, other CPU quotas) would pick flat and recursive doubling for the
 * same call, in this view or a later one. FTCOMM_CHUNK_BYTES, FTCOMM_SPIN_US and
 * FTCOMM_SOCKET_BUFFER only change how a rank moves the same bytes, so they
 * may differ. */
typedef struct ftc__tcp_wire {
  uint64_t ring_threshold; /* FTCOMM_RING_THRESHOLD */
  uint64_t halving_max;    /* FTCOMM_HALVING_MAX */
  uint32_t algo;           /* FTCOMM_ALLREDUCE_ALGO, an ftc_algo_t */
  uint32_t sockets;        /* FTCOMM_TCP_SOCKETS */
  uint32_t ncpu;           /* the CPUs it counts (ftc__tcp_usable_cpus): compared under
                            * auto between ranks of one host */
} ftc__tcp_wire_t;

/* The online CPUs this process counts: cfg->host_cpus, else the OS's
 * (cfg->os_cpus once read: sysconf reads a sysfs file each time, and every
 * handshake of an epoch asks, 30 times in a 16-rank move). */
long ftc__tcp_ncpu(const ftc__tcp_cfg_t *cfg);

/* The CPUs this process may use as FTCOMM_TCP_CONGESTION=auto and
 * FTCOMM_ALLREDUCE_ALGO=auto (ftc__tcp_crowded) count them:
 * cfg->host_cpus when set, else the online CPUs (ftc__tcp_ncpu) bounded by
 * cfg->cpu_quota (a container's CPU limit: a pod limited to 2 CPUs on a
 * 64-CPU node has 2). Ranks of one host in cgroups of their own (several
 * containers on the host's network) each count their own quota: ranks whose
 * counts differ are refused (ftc__tcp_wire_diff), and FTCOMM_HOST_CPUS set
 * alike on every rank is the way out. */
long ftc__tcp_usable_cpus(const ftc__tcp_cfg_t *cfg);

/* cfg->cpu_quota not read yet: ftc__tcp_usable_cpus reads the process's. */
#define FTC__TCP_QUOTA_UNREAD (-1L)

/* This process's cgroup CPU quota (ftc__tcp_cgroup_cpus of its own cgroup),
 * read at the first call and kept: reading the files is slow enough that
 * ftc_comm_create reads them while the coordinator answers its hello, not
 * before it connects (a joiner's admission). */
long ftc__tcp_cpu_quota(void);

/* The CPU quota along this process's cgroup path, rounded up to whole CPUs
 * (the smallest from its cgroup up to the mount's root; cgroup v2 cpu.max,
 * v1 cpu.cfs_quota_us / cpu.cfs_period_us), 0 when there is none. root is
 * the cgroup mount ("/sys/fs/cgroup"), proc_cgroup a /proc/PID/cgroup. */
long ftc__tcp_cgroup_cpus(const char *root, const char *proc_cgroup);

/* This rank's wire settings, from its configuration. */
void ftc__tcp_wire_of(const ftc__tcp_cfg_t *cfg, ftc__tcp_wire_t *w);

/* 0 when theirs (rank `peer`'s) equals ours (rank `me`'s); else 1, and
 * out[len] says which settings differ and what to do, e.g. "rank 1 has
 * FTCOMM_RING_THRESHOLD=2048, this rank (0) 262144: set the same value on
 * every rank of the job ...". */
int ftc__tcp_wire_diff(const ftc__tcp_wire_t *theirs, int peer, const ftc__tcp_wire_t *ours,
                       int me, int same_host, char *out, size_t len);

/* Whether view advertises the same host for ranks a and b. */
int ftc__tcp_same_host(const ftc__view_t *view, int a, int b);

/* Handshake messages (exposed for tests that play a stranger). */
typedef struct ftc__tcp_hello {
  uint16_t kind; /* FTC__TCP_HELLO, _HELLO_UP, _HELLO_DOWN, their _SPARE kinds, FTC__TCP_ACK
                  * or FTC__TCP_MISMATCH */
  uint64_t epoch;
  uint64_t member_id;
  uint32_t rank;
  uint32_t size;
  ftc__tcp_wire_t wire; /* the sender's */
} ftc__tcp_hello_t;
void ftc__tcp_hello_encode(uint8_t out[FTC__TCP_HELLO_SIZE], const ftc__tcp_hello_t *h,
                           const char *token, const uint8_t nonce[FTC__TCP_NONCE_SIZE]);
/* 0 when well-formed and MACed with token over nonce; -1 bad magic or
 * version, -2 bad MAC. */
int ftc__tcp_hello_decode(const uint8_t in[FTC__TCP_HELLO_SIZE], ftc__tcp_hello_t *h,
                          const char *token, const uint8_t nonce[FTC__TCP_NONCE_SIZE]);
/* The first FTC__TCP_PREFIX_SIZE bytes of every message (magic, protocol)
 * are enough to refuse a peer of another version before the rest, whose
 * size may differ: the protocol version they name, -1 when they are not
 * ftcomm's magic. */
#define FTC__TCP_PREFIX_SIZE 8
int ftc__tcp_hello_version(const uint8_t in[FTC__TCP_PREFIX_SIZE]);

void ftc__sha256(const void *data, size_t n, uint8_t out[32]);
void ftc__hmac_sha256(const void *key, size_t keylen, const void *msg, size_t n, uint8_t out[32]);

#endif
