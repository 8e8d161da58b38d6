/*
 * member.c - the rank's membership session (member.h): a libwebsockets
 * client with its own service thread ("ftc-member") that connects to the
 * coordinator (retrying until the connect timeout), says hello, keeps the
 * latest view, sends heartbeats, failure reports, dump fragments and the
 * final leave, and stores the session's error for the callers.
 *
 * Threads and locks: the service thread alone touches the lws context, the
 * connection (m->wsi), the receive buffer and the timers, once the opening
 * caller handed them over: until ftc__member_finish returns, the caller's
 * thread services the context itself (the first connection, its hello, the
 * welcome, and with cfg->first_view the first view) while the service
 * thread, already started, waits at m->gate; no thread's first schedule
 * is on the way to the admission (docs/performance/recovery.md, "The grow
 * path"). Caller threads and
 * the service thread share the state under m->lock (session state, error,
 * member id, latest view, outgoing queue, pending dump request); callers
 * queue frames under it and wake the service thread with lws_cancel_service(),
 * which then asks for a writeable callback; frames are written only from
 * that callback. m->lock is a leaf: never held across an lws call other than
 * lws_cancel_service() (which only writes to a pipe), never held with
 * another ftcomm lock. Waiters sleep on m->cond (CLOCK_MONOTONIC).
 */
#include "membership/member.h"

#include <errno.h>
#include <fcntl.h>
#include <libwebsockets.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ftc_addr.h"
#include "ftc_alloc.h"
#include "ftc_assert.h"
#include "ftc_error.h"
#include "ftc_param.h"
#include "ftc_time.h"
#include "proto/proto.h"

#define RETRY_FIRST_MS 50
#define RETRY_MAX_MS 1000
#define CONNECT_ATTEMPT_S 2
#define LEAVE_WAIT_MS 1000
#define LEFT_KEEP 256
#define DROP_KEEP 64

enum session_state {
  S_CONNECTING,   /* first connection: connecting or waiting for welcome */
  S_OPEN,         /* welcomed */
  S_RECONNECTING, /* the connection dropped without a refusal (e.g. the
                   * coordinator restarted): reconnecting, views kept */
  S_CLOSED,       /* closed: after leave, or with m->error set */
};

struct ftc__member {
  /* Immutable after open. */
  char *coord, *host_name, *host_hdr, *job, *token, *data_addr, *pod, *node, *host;
  int port, slot, world_size, min_size, joiner, dataplane, cfg_heartbeat_ms, connect_timeout_ms, first_view;
  /* ftc__member_finish gives up then; set by ftc__member_start and again by
   * ftc__member_join, read and written by the opening caller's thread only. */
  int64_t open_deadline_ns;
  struct lws_context *ctx;
  struct lws_protocols protocols[2];
  pthread_t thread;
  int started;
  int stop; /* atomic */
  int drop;  /* atomic: fault injection asks the service thread to drop the connection */
  int late_view_ms; /* atomic: fault injection stalls on views that admit a member */

  /* Owned by the service thread. */
  struct lws *wsi;
  lws_sorted_usec_list_t sul_connect, sul_heartbeat, sul_guard;
  int hello_out; /* a hello was written (read by ftc__member_start only) */
  char *hello_hdr;      /* this attempt's hello for the request header (base64url), or NULL */
  size_t hello_hdr_len;
  int hello_in_request; /* the coordinator selected FTC__PROTO_WS_NAME_HELLO: no hello frame */
  int in_caller; /* the opening caller services the context (ftc__member_finish) */
  int retry_ms;
  int64_t reconnect_deadline_ns; /* 0 while connected */
  int heartbeat_ms;
  int silence_ms;        /* nothing from the coordinator this long: reconnect */
  int64_t last_rx_ns;    /* the last frame from the coordinator (or the connection's start) */
  char *rx;
  size_t rx_len, rx_cap;
  int rx_binary; /* the message being received is binary: a deflated view */
  int rx_skip;
  char conn_err[160];

  /* Shared; under lock. */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  pthread_cond_t gate; /* the service thread waits here until handoff (or stop) */
  int handoff;         /* the caller handed the context to the service thread */
  int state;
  ftc_status_t error;
  char error_msg[512];
  uint64_t member_id;
  uint64_t known_epoch;
  uint64_t ready_epoch; /* first completed step boundary, 0: none (ftc__member_set_ready) */
  int standby;          /* hellos say "standby" (until ftc__member_join) */
  int standby_acked;    /* this session's welcome said "standby": a join is due when ready */
  int join_wanted;      /* ftc__member_join came before the welcome */
  ftc__view_t *view;
  ftc__frameq_t outq;
  int sending;          /* a frame taken from outq is being written (ftc__member_sent_all) */
  int leaving;
  char dump_incident[FTC__PROTO_MAX_NAME + 1];
  char dump_reason[256];
  uint64_t dump_epoch;
  int dump_pending;
  uint64_t backend_epoch; /* the epoch of backend_blob, 0: none */
  char *backend_blob;     /* the newest backend blob the coordinator relayed */
  int notify_fd;          /* eventfd written on a new view or dump request, -1 */
  int view_fd;            /* eventfd also written on a view that admits a member, -1 */
  int sock_fd;            /* the connection's socket while established, -1 */
  int exit_fd;            /* the same socket at a high descriptor (hold_for_exit), -1 */
  int want_above;         /* atomic: the highest data-plane socket (ftc__member_hold_above) */
  int hold_tried;         /* service thread: the last `above` maybe_hold tried for */
  uint64_t latest_epoch;  /* atomic copy of view->epoch, for the step boundary */
  ftc__view_t *prospect;  /* the coordinator's latest prospect, NULL: none */
  uint64_t prospect_seq;  /* atomic: prospects received */
  uint64_t left[LEFT_KEEP]; /* members the views said left cleanly, the newest LEFT_KEEP */
  int nleft;
  struct dropped_rec {      /* members the views said were dropped, and why: the newest DROP_KEEP */
    uint64_t id;
    char reason[FTC__PROTO_MAX_DROP_REASON + 1];
    char detail[FTC__PROTO_MAX_DROP_DETAIL + 1];
  } drops[DROP_KEEP];
  int ndrops;
  /* Probes (the coordinator's "probe", answered with a "reach"): the
   * "ftc-probe" thread, started for the first probe and joined at stop;
   * probe_epoch is the newest epoch asked about (under lock), probe_done
   * the last one answered; the thread sleeps on cond until another. */
  pthread_t probe_thread;
  int probe_started;
  uint64_t probe_epoch, probe_done;
  int probe_bound_ms; /* set with probe_epoch by the service thread (probe_ms) */
};

/* Wake the owner's watchdog (caller holds m->lock). */
static void kick(int fd) {
  if (fd < 0) return;
  uint64_t one = 1;
  ssize_t w = write(fd, &one, sizeof(one));
  (void)w;
}

static void notify_locked(ftc__member_t *m) {
  FTC_ASSERT_HELD(&m->lock);
  kick(m->notify_fd);
}


/* Store the session's error (the first one wins) and wake waiters. Caller
 * holds m->lock. */
static void set_error_locked(ftc__member_t *m, ftc_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_error_locked(ftc__member_t *m, ftc_status_t st, const char *fmt, ...) {
  FTC_ASSERT_HELD(&m->lock);
  if (m->error == FTC_OK) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->error_msg, sizeof(m->error_msg), fmt, ap);
    va_end(ap);
    m->error = st;
    FTC_WARN(FTC_SUB_COORD, "slot %d: %s", m->slot, m->error_msg);
  }
  m->state = S_CLOSED;
  pthread_cond_broadcast(&m->cond);
}

/* Queue the join of a standby member (caller holds m->lock); out of memory
 * fails the session. 0 or -1. */
static int queue_join_locked(ftc__member_t *m) {
  FTC_ASSERT_HELD(&m->lock);
  ftc__frame_t *f = ftc__proto_encode(ftc__proto_join(), LWS_PRE);
  if (!f) {
    set_error_locked(m, FTC_ERR_NO_MEMORY, "out of memory building the join");
    return -1;
  }
  ftc__frameq_push(&m->outq, f);
  return 0;
}

/* Queue a message (reference stolen) and wake the service thread. Fails when
 * the session is not open. */
static ftc_status_t queue_msg(ftc__member_t *m, json_t *msg, int close_after) {
  ftc__frame_t *f = ftc__proto_encode(msg, LWS_PRE);
  if (!f) return ftc__error(FTC_ERR_NO_MEMORY, "out of memory encoding a message");
  f->close_after = close_after;
  pthread_mutex_lock(&m->lock);
  /* While reconnecting, messages wait for the new session. */
  if ((m->state != S_OPEN && m->state != S_RECONNECTING) || m->leaving) {
    ftc_status_t st = m->error;
    char msgbuf[512];
    snprintf(msgbuf, sizeof(msgbuf), "%s", m->error_msg);
    pthread_mutex_unlock(&m->lock);
    ftc__free(f);
    if (st != FTC_OK) return ftc__error(st, "%s", msgbuf);
    return ftc__error(FTC_ERR_COORDINATOR, "the coordinator session is not open");
  }
  ftc__frameq_push(&m->outq, f);
  pthread_mutex_unlock(&m->lock);
  lws_cancel_service(m->ctx);
  return FTC_OK;
}

/* ---- probes ---- */

/*
 * When an epoch breaks and every member still heartbeats, the coordinator
 * asks each to try every other member's data-plane address (a TCP connect,
 * closed at once: the listener takes a connection that sends nothing for a
 * probe) and to say whom it could not reach; it drops the fewest members
 * that leave the rest all reachable (docs/recovery.md, "Network faults").
 * The connects run in parallel, bounded by probe_ms; a name that does not
 * resolve, a refusal or no answer in time is unreachable.
 */
/* (service thread: heartbeat_ms is its own) */
static int probe_ms(const ftc__member_t *m) {
  int ms = 2 * m->heartbeat_ms + 100;
  return ms < 200 ? 200 : ms > 2000 ? 2000 : ms;
}

/* Connect to every address of addrs[n] at once; reached[i] = 1 for those
 * that answered within ms. */
static void probe_connect(char (*addrs)[128], int n, int ms, int *reached) {
  int *fds = ftc__calloc((size_t)(n ? n : 1), sizeof(int));
  struct pollfd *pf = ftc__calloc((size_t)(n ? n : 1), sizeof(*pf));
  if (!fds || !pf) goto out_free;
  for (int i = 0; i < n; i++) {
    char host[FTC__ADDR_HOST_MAX], port_s[8];
    int port;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai = NULL;
    fds[i] = -1;
    pf[i] = (struct pollfd){.fd = -1};
    if (ftc__addr_split("a member's address", addrs[i], host, sizeof(host), &port) != FTC_OK)
      continue;
    snprintf(port_s, sizeof(port_s), "%d", port);
    if (getaddrinfo(host, port_s, &hints, &ai) || !ai) continue;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      reached[i] = 1;
      close(fd);
    } else if (fd >= 0 && errno == EINPROGRESS) {
      fds[i] = fd;
      pf[i] = (struct pollfd){.fd = fd, .events = POLLOUT};
    } else if (fd >= 0) {
      close(fd);
    }
    freeaddrinfo(ai);
  }
  int64_t deadline = ftc__deadline_ns(ms);
  for (;;) {
    int waiting = 0;
    for (int i = 0; i < n; i++) waiting += pf[i].fd >= 0;
    int64_t left = deadline - ftc__now_ns();
    if (!waiting || left <= 0) break;
    if (poll(pf, (nfds_t)n, (int)((left + 999999) / 1000000)) < 0 && errno != EINTR) break;
    for (int i = 0; i < n; i++) {
      if (pf[i].fd < 0 || !pf[i].revents) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(pf[i].fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) reached[i] = 1;
      pf[i].fd = -1;
    }
  }
out_free:
  for (int i = 0; fds && i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
  ftc__free(fds);
  ftc__free(pf);
}

/* One probe of `epoch`, bounded by ms, if this process holds that epoch's view. */
static void probe_epoch(ftc__member_t *m, uint64_t epoch, int ms) {
  int n = 0;
  char (*addrs)[128] = NULL;
  uint64_t *ids = NULL;
  int *reached = NULL;
  pthread_mutex_lock(&m->lock);
  if (m->view && m->view->epoch == epoch && m->view->size > 1) {
    addrs = ftc__calloc((size_t)m->view->size, sizeof(*addrs));
    ids = ftc__calloc((size_t)m->view->size, sizeof(*ids));
    reached = ftc__calloc((size_t)m->view->size, sizeof(*reached));
    for (int i = 0; addrs && ids && reached && i < m->view->size; i++) {
      const ftc__view_member_t *vm = &m->view->members[i];
      if (vm->member_id == m->member_id) continue;
      memcpy(addrs[n], vm->addr, sizeof(addrs[n]));
      ids[n++] = vm->member_id;
    }
  }
  pthread_mutex_unlock(&m->lock);
  if (!addrs || !ids || !reached) {
    FTC_DEBUG(FTC_SUB_COORD, "slot %d: probe of epoch %llu not answered (not this view's, or "
              "out of memory)", m->slot, (unsigned long long)epoch);
    goto out_free;
  }
  probe_connect(addrs, n, ms, reached);
  int k = 0;
  for (int i = 0; i < n; i++)
    if (!reached[i]) ids[k++] = ids[i];
  FTC_INFO(FTC_SUB_COORD, "slot %d: probed the %d other member%s of epoch %llu: %d unreachable "
           "within %d ms", m->slot, n, n == 1 ? "" : "s", (unsigned long long)epoch, k, ms);
  (void)queue_msg(m, ftc__proto_reach(epoch, ids, k), 0); /* (closed: nobody asks any more) */
out_free:
  ftc__free(addrs);
  ftc__free(ids);
  ftc__free(reached);
}

static void *probe_main(void *arg) {
  ftc__member_t *m = arg;
  pthread_setname_np(pthread_self(), "ftc-probe");
  pthread_mutex_lock(&m->lock);
  while (!__atomic_load_n(&m->stop, __ATOMIC_ACQUIRE)) {
    if (m->probe_epoch == m->probe_done) {
      pthread_cond_wait(&m->cond, &m->lock);
      continue;
    }
    uint64_t e = m->probe_done = m->probe_epoch;
    int ms = m->probe_bound_ms;
    pthread_mutex_unlock(&m->lock);
    probe_epoch(m, e, ms);
    pthread_mutex_lock(&m->lock);
  }
  pthread_mutex_unlock(&m->lock);
  return NULL;
}

/* (caller holds m->lock; the service thread) */
static void start_probe_locked(ftc__member_t *m) {
  int err = pthread_create(&m->probe_thread, NULL, probe_main, m);
  if (err) {
    FTC_WARN(FTC_SUB_COORD, "slot %d: cannot start the probe thread: %s; the coordinator decides "
             "without this rank's probe", m->slot, strerror(err));
    return;
  }
  m->probe_started = 1;
}

/* ---- service thread ---- */

/*
 * When the process dies, its session to the coordinator should close before
 * its data-plane sockets: the coordinator then knows the session is gone
 * when the first survivor's report arrives, and decides at once (a report
 * about a member whose session is still open only makes it a suspect). At
 * exit the kernel releases a process's sockets from its highest descriptor
 * down (close_files() queues each release, and the queue runs last-in
 * first-out), one FIN at a time, each waking a peer that may take the CPU
 * from the dying process; the session, opened before the data plane, would
 * close last, milliseconds after the first data-plane EOF in a large job
 * (docs/performance/recovery.md, "The shrink path"). A second descriptor of
 * the socket, above every data-plane one, makes its last reference the one
 * released first.
 *
 * It goes in the highest free slot of the descriptor table as it is (its
 * size is FDSize in /proc/self/status): a descriptor past the table's end
 * grows it, which in a threaded process waits for an RCU grace period.
 * The whole table above the data plane is searched, top down, 256 slots
 * per poll() (POLLNVAL marks a free one), so a process whose table top is
 * taken still gets the session above its data plane. It is placed by the
 * opening caller while the coordinator answers its first hello
 * (ftc__member_finish), by the service thread after a reconnection's
 * welcome, and moved up at a heartbeat when the data plane outgrew it (the
 * /proc read is kept off a joiner's admission and off a recovery). It is
 * closed with the connection (before lws closes its own), so a deliberate
 * close or a drop is seen as without it. exit_fd and sock_fd are under m->lock.
 */
#define EXIT_FD_BATCH 256 /* slots looked at per poll() */

static int fd_table_size(void) {
  char buf[2048];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *p = strstr(buf, "\nFDSize:");
  return p ? atoi(p + 8) : 0;
}

int ftc__member_exit_slot(int above) {
  struct pollfd p[EXIT_FD_BATCH];
  struct rlimit rl;
  int size = fd_table_size();
  /* A slot at or past the descriptor limit is refused by F_DUPFD (the table
   * can be larger: under valgrind it holds the tool's own descriptors). */
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (rlim_t)size > rl.rlim_cur)
    size = (int)rl.rlim_cur;
  if (above < -1) above = -1;
  for (int hi = size; hi > above + 1;) {
    int lo = hi - EXIT_FD_BATCH > above + 1 ? hi - EXIT_FD_BATCH : above + 1;
    for (int i = 0; i < hi - lo; i++) p[i] = (struct pollfd){lo + i, 0, 0};
    int rc = poll(p, (nfds_t)(hi - lo), 0);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return -1;
    for (int i = hi - lo - 1; rc > 0 && i >= 0; i--)
      if (p[i].revents & POLLNVAL) return lo + i;
    hi = lo;
  }
  return -1;
}

/* The placements of every session of the process, one at a time: F_DUPFD
 * takes the lowest free slot from the one asked for, so a second session
 * that found the same highest free slot would get one past the table's end.
 * Another library can still take the slot in between only by asking for it
 * (dup2, or F_DUPFD from up there): an ordinary open takes the lowest free
 * descriptor, which is this one only when the table is full but for it, and
 * then the table grows at the next open anyway. */
static pthread_mutex_t place_mu = PTHREAD_MUTEX_INITIALIZER;

int ftc__member_dup_high(int fd, int above) {
  pthread_mutex_lock(&place_mu);
  int slot = ftc__member_exit_slot(above);
  int dup = slot > above ? fcntl(fd, F_DUPFD_CLOEXEC, slot) : -1;
  pthread_mutex_unlock(&place_mu);
  return dup;
}

/* Duplicate the session's socket into the highest free slot of the table
 * if that is above `above` and above the current duplicate (which is then
 * closed). On the service thread, the only one that changes m->sock_fd:
 * it stays open meanwhile. Caller does not hold m->lock. */
static void hold_above(ftc__member_t *m, int above) {
  pthread_mutex_lock(&m->lock);
  int sock = m->sock_fd, cur = m->exit_fd;
  pthread_mutex_unlock(&m->lock);
  int fd = sock >= 0 ? ftc__member_dup_high(sock, above > cur ? above : cur) : -1;
  if (fd < 0) return;
  pthread_mutex_lock(&m->lock);
  int old = m->exit_fd;
  m->exit_fd = fd;
  pthread_mutex_unlock(&m->lock);
  if (old >= 0) close(old);
}

void ftc__member_hold_above(ftc__member_t *m, int fd) {
  if (!m) return;
  int cur = __atomic_load_n(&m->want_above, __ATOMIC_RELAXED);
  while (fd > cur && !__atomic_compare_exchange_n(&m->want_above, &cur, fd, 0, __ATOMIC_RELAXED,
                                                  __ATOMIC_RELAXED)) {
  }
}

/* Off every recovery's path (while the first hello is answered, after a
 * reconnection's welcome, at each heartbeat): place or move the duplicate
 * when it is missing or no longer above the highest data-plane socket. */
static void maybe_hold(ftc__member_t *m) {
  int above = __atomic_load_n(&m->want_above, __ATOMIC_RELAXED);
  pthread_mutex_lock(&m->lock);
  if (above < m->sock_fd) above = m->sock_fd;
  int needed = m->sock_fd >= 0 && m->exit_fd <= above;
  pthread_mutex_unlock(&m->lock);
  /* Once per value: with no free slot up there, the next heartbeats would
   * read /proc for nothing. */
  if (needed && above != m->hold_tried) {
    m->hold_tried = above;
    hold_above(m, above);
  }
}

/* A new connection: its socket, not held yet (maybe_hold places it). */
static void hold_for_exit(ftc__member_t *m, struct lws *wsi) {
  pthread_mutex_lock(&m->lock);
  int old = m->exit_fd;
  m->exit_fd = -1;
  m->sock_fd = (int)lws_get_socket_fd(wsi);
  pthread_mutex_unlock(&m->lock);
  m->hold_tried = -2;
  if (old >= 0) close(old);
}

static void release_exit_fd(ftc__member_t *m) {
  pthread_mutex_lock(&m->lock);
  int old = m->exit_fd;
  m->exit_fd = m->sock_fd = -1;
  pthread_mutex_unlock(&m->lock);
  if (old >= 0) close(old);
}

static void try_connect(lws_sorted_usec_list_t *sul);
static void prepare_hello_header(ftc__member_t *m);

static void schedule_retry(ftc__member_t *m) {
  lws_sul_schedule(m->ctx, 0, &m->sul_connect, try_connect, (lws_usec_t)m->retry_ms * 1000);
  m->retry_ms = m->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : m->retry_ms * 2;
}

static void try_connect(lws_sorted_usec_list_t *sul) {
  ftc__member_t *m = lws_container_of(sul, ftc__member_t, sul_connect);
  pthread_mutex_lock(&m->lock);
  int connecting = m->state == S_CONNECTING || m->state == S_RECONNECTING;
  pthread_mutex_unlock(&m->lock);
  if (!connecting || m->wsi) return;
  struct lws_client_connect_info ci;
  memset(&ci, 0, sizeof(ci));
  ci.context = m->ctx;
  ci.address = m->host_name;
  ci.port = m->port;
  ci.path = FTC__PROTO_WS_PATH;
  ci.host = m->host_hdr;
  ci.origin = m->host_hdr;
  prepare_hello_header(m);
  /* Offer the hello-in-request subprotocol first when the hello fits the
   * header; the connection is bound to our one handler either way. */
  ci.protocol = m->hello_hdr ? FTC__PROTO_WS_NAME_HELLO ", " FTC__PROTO_WS_NAME : FTC__PROTO_WS_NAME;
  ci.local_protocol_name = FTC__PROTO_WS_NAME;
  ci.ietf_version_or_minus_one = -1;
  ci.pwsi = &m->wsi;
  FTC_DEBUG(FTC_SUB_COORD, "slot %d: connecting to the coordinator at %s", m->slot, m->coord);
  if (!lws_client_connect_via_info(&ci)) {
    m->wsi = NULL;
    if (!m->conn_err[0] || strstr(m->conn_err, "cannot start"))
      snprintf(m->conn_err, sizeof(m->conn_err),
               "cannot start a connection to %s (does the host name resolve?)", m->coord);
    schedule_retry(m);
  }
}

static void send_heartbeat(lws_sorted_usec_list_t *sul) {
  ftc__member_t *m = lws_container_of(sul, ftc__member_t, sul_heartbeat);
  if (!m->wsi) return;
  pthread_mutex_lock(&m->lock);
  int open = m->state == S_OPEN && !m->leaving;
  uint64_t epoch = m->known_epoch, ready = m->ready_epoch;
  pthread_mutex_unlock(&m->lock);
  if (!open) return;
  /* The coordinator answers every heartbeat. A session that hears nothing
   * for FTCOMM_HEARTBEAT_TIMEOUT_MS lost its path (a cut link, a stopped
   * or moved coordinator: TCP would resend into it with growing backoff for
   * many minutes): a new connection gets through as soon as the path is
   * back, within a retry interval (docs/recovery.md, "Network faults"). */
  int64_t quiet_ms = (ftc__now_ns() - m->last_rx_ns) / 1000000;
  if (m->last_rx_ns && quiet_ms > m->silence_ms) {
    snprintf(m->conn_err, sizeof(m->conn_err), "nothing heard from it for %lld ms",
             (long long)quiet_ms);
    lws_set_timeout(m->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
    return;
  }
  ftc__frame_t *f = ftc__proto_encode(ftc__proto_heartbeat_ready(epoch, ready), LWS_PRE);
  if (f) {
    pthread_mutex_lock(&m->lock);
    ftc__frameq_push(&m->outq, f);
    pthread_mutex_unlock(&m->lock);
    lws_callback_on_writable(m->wsi);
  }
  lws_sul_schedule(m->ctx, 0, &m->sul_heartbeat, send_heartbeat,
                   (lws_usec_t)m->heartbeat_ms * 1000);
  maybe_hold(m);
}

/* This process's hello as it stands (the same message for the frame and
 * for the request header). Caller holds m->lock; NULL when out of memory. */
static ftc__frame_t *build_hello_locked(ftc__member_t *m) {
  FTC_ASSERT_HELD(&m->lock);
  ftc__wire_member_t *wm = NULL;
  ftc__hello_t h = {
      .job = m->job,
      .token = m->token,
      .addr = m->data_addr,
      .pod = m->pod,
      .node = m->node,
      .host = m->host,
      .slot = m->slot,
      .world_size = m->world_size,
      .min_size = m->min_size,
      .joiner = m->joiner,
      .dataplane = m->dataplane,
      .standby = m->standby,
      .delta = 1, /* it applies view deltas (handle_message) */
      .probes = 1,
      .deflate = 1, /* it inflates a binary message (on_receive) */
      .pid = (int64_t)getpid(),
      .known_epoch = m->known_epoch,
      .prev_member_id = m->member_id,
  };
  /* A reconnecting rank brings its view: a restarted coordinator learns the
   * running epoch from it. */
  if (m->view && m->view->size > 0 && (wm = ftc__calloc((size_t)m->view->size, sizeof(*wm)))) {
    for (int i = 0; i < m->view->size; i++) {
      const ftc__view_member_t *vm = &m->view->members[i];
      wm[i] = (ftc__wire_member_t){vm->rank, vm->slot, vm->member_id, vm->joined_epoch, vm->addr,
                                    vm->state};
      if (vm->member_id == m->member_id && m->ready_epoch) wm[i].state = FTC__STATE_HELD;
    }
    h.view = wm;
    h.view_n = m->view->size;
    h.known_epoch = m->view->epoch;
  }
  ftc__frame_t *f = ftc__proto_encode(ftc__proto_hello(&h), LWS_PRE);
  ftc__free(wm);
  return f;
}

static void send_hello(ftc__member_t *m) {
  pthread_mutex_lock(&m->lock);
  ftc__frame_t *f = build_hello_locked(m);
  if (!f) {
    set_error_locked(m, FTC_ERR_NO_MEMORY, "out of memory building the hello");
  } else {
    /* First on the new connection, before messages kept from the old one. */
    ftc__frameq_push_front(&m->outq, f);
  }
  pthread_mutex_unlock(&m->lock);
  if (f) lws_callback_on_writable(m->wsi);
}

/* lws's own request lines around ours (request line, Host, Origin, Upgrade,
 * Connection, Sec-WebSocket-Key, -Version, Pragma, Cache-Control, ...):
 * about 250 bytes besides the host name twice, with room to spare. */
#define REQUEST_OVERHEAD 384

/* This attempt's hello for the request header, when the whole request
 * stays within FTC__PROTO_HELLO_REQUEST_BUDGET (what a coordinator from
 * before the header accepts too); else none, and the hello goes as a frame. */
static void prepare_hello_header(ftc__member_t *m) {
  ftc__free(m->hello_hdr);
  m->hello_hdr = NULL;
  m->hello_hdr_len = 0;
  m->hello_in_request = 0;
  pthread_mutex_lock(&m->lock);
  ftc__frame_t *f = build_hello_locked(m);
  pthread_mutex_unlock(&m->lock);
  if (!f) return; /* the frame path reports it */
  size_t fixed = REQUEST_OVERHEAD + 2 * strlen(m->host_hdr) + strlen(FTC__PROTO_WS_PATH) +
                 strlen(FTC__PROTO_WS_NAME_HELLO ", " FTC__PROTO_WS_NAME) +
                 strlen(FTC__PROTO_HELLO_HEADER ": \r\n");
  size_t enc = ftc__b64url_len(f->len);
  if (fixed + enc <= FTC__PROTO_HELLO_REQUEST_BUDGET && (m->hello_hdr = ftc__malloc(enc + 1))) {
    m->hello_hdr_len = ftc__b64url_encode(f->buf + LWS_PRE, f->len, m->hello_hdr);
  } else {
    FTC_DEBUG(FTC_SUB_COORD,
              "slot %d: a hello of %zu bytes makes the request too long for the header "
              "(%zu bytes, at most %d): it goes as the first frame",
              m->slot, f->len, fixed + enc, FTC__PROTO_HELLO_REQUEST_BUDGET);
  }
  ftc__free(f);
}

/* LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: *pp is where the next header
 * line goes, len the room left. */
static int append_hello_header(ftc__member_t *m, char **pp, size_t len) {
  if (!m->hello_hdr) return 0;
  static const char name[] = FTC__PROTO_HELLO_HEADER ": ";
  size_t need = sizeof(name) - 1 + m->hello_hdr_len + 2;
  if (need >= len) { /* cannot happen within the budget; lws drops the request */
    FTC_WARN(FTC_SUB_COORD, "slot %d: no room for the hello header (%zu bytes, %zu left)",
             m->slot, need, len);
    return -1;
  }
  char *p = *pp;
  memcpy(p, name, sizeof(name) - 1);
  p += sizeof(name) - 1;
  memcpy(p, m->hello_hdr, m->hello_hdr_len);
  p += m->hello_hdr_len;
  *p++ = '\r';
  *p++ = '\n';
  *pp = p;
  /* The hello is out with the request: the opening caller need not wait
   * for the 101 (ftc__member_start; an older coordinator's selection
   * still gets the frame at CLIENT_ESTABLISHED). */
  m->hello_out = 1;
  return 0;
}

static ftc__view_t *view_from_msg(const ftc__msg_t *msg, uint64_t my_id) {
  ftc__view_t *v = ftc__calloc(1, sizeof(*v));
  if (!v) return NULL;
  v->epoch = msg->epoch;
  v->size = msg->nmembers;
  v->my_rank = -1;
  v->my_member_id = my_id;
  v->members = ftc__calloc((size_t)(msg->nmembers ? msg->nmembers : 1), sizeof(*v->members));
  if (!v->members) goto out_free_view;
  if (msg->backend && !(v->backend_blob = ftc__strdup(msg->backend))) goto out_free_view;
  for (int i = 0; i < msg->nmembers; i++) {
    const ftc__wire_member_t *w = &msg->members[i];
    ftc__view_member_t *vm = &v->members[i];
    vm->rank = w->rank;
    vm->slot = w->slot;
    vm->member_id = w->member_id;
    vm->joined_epoch = w->joined_epoch;
    vm->state = w->state;
    snprintf(vm->addr, sizeof(vm->addr), "%s", w->addr);
    if (w->member_id == my_id) v->my_rank = i;
  }
  return v;
out_free_view:
  ftc__view_free(v);
  return NULL;
}


/* Take a view (whole, or made from a delta) as this rank's newest epoch
 * (caller holds m->lock). 0, or -1 to close (out of memory). */
static int take_view_locked(ftc__member_t *m, const ftc__msg_t *msg) {
  ftc__view_t *v = view_from_msg(msg, m->member_id);
  if (!v) {
    set_error_locked(m, FTC_ERR_NO_MEMORY, "out of memory storing epoch %llu",
                     (unsigned long long)msg->epoch);
    return -1;
  }
  int late_ms = __atomic_load_n(&m->late_view_ms, __ATOMIC_ACQUIRE);
  if (late_ms > 0 && ftc__view_admits(v)) {
    pthread_mutex_unlock(&m->lock);
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: slot %d: taking epoch %llu %d ms late",
             m->slot, (unsigned long long)msg->epoch, late_ms);
    struct timespec late = {late_ms / 1000, (long)(late_ms % 1000) * 1000000L};
    while (nanosleep(&late, &late) != 0) {
    }
    pthread_mutex_lock(&m->lock);
  }
  if (m->view && msg->epoch <= m->view->epoch) {
    FTC_WARN(FTC_SUB_COORD, "slot %d: ignoring epoch %llu, not newer than %llu", m->slot,
             (unsigned long long)msg->epoch, (unsigned long long)m->view->epoch);
    ftc__view_free(v);
    return 0;
  }
  FTC_INFO(FTC_SUB_COORD, "slot %d: epoch %llu: rank %d of %d", m->slot,
           (unsigned long long)v->epoch, v->my_rank, v->size);
  for (int i = 0; i < msg->nleft; i++) m->left[m->nleft++ % LEFT_KEEP] = msg->left[i];
  for (int i = 0; i < msg->ndropped; i++) {
    struct dropped_rec *d = &m->drops[m->ndrops++ % DROP_KEEP];
    d->id = msg->dropped[i].member_id;
    snprintf(d->reason, sizeof(d->reason), "%s", msg->dropped[i].reason);
    snprintf(d->detail, sizeof(d->detail), "%s",
             msg->dropped[i].detail ? msg->dropped[i].detail : "");
  }
  ftc__view_free(m->view);
  m->view = v;
  m->known_epoch = v->epoch;
  __atomic_store_n(&m->latest_epoch, v->epoch, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&m->cond);
  notify_locked(m);
  /* Only a view that admits a member gives the progress thread work (its
   * early connections); on a failure it would be one more thread woken
   * while the survivors recover. */
  if (ftc__view_admits(v)) kick(m->view_fd);
  return 0;
}

/* The message handlers: one per kind the coordinator sends, called by
 * handle_message under m->lock with the decoded message. Each returns 0,
 * or -1 to close the session (with the error set), and leaves in *after
 * what handle_message does once the lock is released. */
typedef struct after_msg {
  int write_due;        /* a frame was queued: ask lws for a writable callback */
  int start_heartbeats; /* the welcome came: schedule the heartbeats */
} after_msg_t;

static int on_welcome_locked(ftc__member_t *m, const ftc__msg_t *msg, after_msg_t *after) {
  FTC_ASSERT_HELD(&m->lock);
  if (m->state != S_CONNECTING && m->state != S_RECONNECTING) {
    set_error_locked(m, FTC_ERR_PROTOCOL, "the coordinator at %s sent a second welcome",
                     m->coord);
    return -1;
  }
  if (m->state == S_RECONNECTING) {
    FTC_WARN(FTC_SUB_COORD,
             "slot %d: reconnected to the coordinator at %s (member %llu%s, its epoch %llu)",
             m->slot, m->coord, (unsigned long long)msg->member_id,
             msg->member_id == m->member_id ? ", kept" : ", new", (unsigned long long)msg->epoch);
  }
  m->member_id = msg->member_id;
  m->state = S_OPEN;
  /* Held as standby (our hello said so, and the coordinator knows the
   * word): ftc__member_join sends the join, or sends it now if it came
   * first. Otherwise this member was admitted with its hello. */
  m->standby_acked = msg->standby && m->standby + m->join_wanted > 0;
  if (!m->standby_acked) m->standby = 0;
  if (m->standby_acked && m->join_wanted) {
    if (queue_join_locked(m) != 0) return -1;
    after->write_due = 1;
  }
  m->join_wanted = 0;
  m->reconnect_deadline_ns = 0;
  m->retry_ms = RETRY_FIRST_MS;
  m->heartbeat_ms = msg->heartbeat_ms;
  if (m->cfg_heartbeat_ms > 0 && m->cfg_heartbeat_ms < m->heartbeat_ms)
    m->heartbeat_ms = m->cfg_heartbeat_ms;
  FTC_INFO(FTC_SUB_COORD, "slot %d: %s job %s as member %llu (coordinator epoch %llu)%s",
           m->slot, m->standby_acked ? "registered with" : "joined", m->job,
           (unsigned long long)m->member_id, (unsigned long long)msg->epoch,
           m->standby_acked ? ", standby until it is ready" : "");
  pthread_cond_broadcast(&m->cond);
  after->start_heartbeats = 1; /* after the unlock: no lws call under m->lock */
  return 0;
}

/* The change from the epoch this rank holds; anything else (it missed one,
 * or the result is not the one the hash names) and it asks for the whole
 * view, which follows. */
static int on_view_delta_locked(ftc__member_t *m, const ftc__msg_t *msg, after_msg_t *after) {
  FTC_ASSERT_HELD(&m->lock);
  ftc__wire_member_t *base = NULL, *wm = NULL;
  int n = -1, rc = 0;
  if (m->view && m->view->epoch == msg->base_epoch &&
      (base = ftc__calloc((size_t)(m->view->size ? m->view->size : 1), sizeof(*base)))) {
    for (int i = 0; i < m->view->size; i++) {
      const ftc__view_member_t *vm = &m->view->members[i];
      base[i] = (ftc__wire_member_t){vm->rank, vm->slot, vm->member_id, vm->joined_epoch,
                                     vm->addr, vm->state};
    }
    n = ftc__proto_view_apply(base, m->view->size, msg, &wm);
  }
  if (n >= 0) {
    ftc__msg_t whole = *msg;
    whole.type = FTC__MSG_VIEW;
    whole.members = wm;
    whole.nmembers = n;
    whole.backend = NULL;
    rc = take_view_locked(m, &whole);
  } else if (!m->view || msg->epoch > m->view->epoch) {
    FTC_INFO(FTC_SUB_COORD, "slot %d: epoch %llu came as a change from %llu, which this rank "
             "does not hold (it holds %llu); asking for it whole", m->slot,
             (unsigned long long)msg->epoch, (unsigned long long)msg->base_epoch,
             (unsigned long long)(m->view ? m->view->epoch : 0));
    ftc__frame_t *f = ftc__proto_encode(ftc__proto_view_request(), LWS_PRE);
    if (f) {
      ftc__frameq_push(&m->outq, f);
      after->write_due = 1;
    } else {
      set_error_locked(m, FTC_ERR_NO_MEMORY, "out of memory asking for epoch %llu",
                       (unsigned long long)msg->epoch);
      rc = -1;
    }
  }
  ftc__free(base);
  ftc__free(wm);
  return rc;
}

/* Kept for the data plane's early connections to the standby members it
 * adds; never taken for an epoch. */
static int on_prospect_locked(ftc__member_t *m, const ftc__msg_t *msg) {
  FTC_ASSERT_HELD(&m->lock);
  ftc__view_t *v = view_from_msg(msg, m->member_id);
  if (!v || v->my_rank < 0) {
    ftc__view_free(v); /* out of memory, or not ours: the join goes the usual way */
    return 0;
  }
  FTC_DEBUG(FTC_SUB_COORD, "slot %d: prospect of epoch %llu: rank %d of %d", m->slot,
            (unsigned long long)v->epoch, v->my_rank, v->size);
  ftc__view_free(m->prospect);
  m->prospect = v;
  __atomic_add_fetch(&m->prospect_seq, 1, __ATOMIC_ACQ_REL);
  kick(m->view_fd);
  return 0;
}

static int on_backend_locked(ftc__member_t *m, const ftc__msg_t *msg) {
  FTC_ASSERT_HELD(&m->lock);
  if (msg->epoch < m->backend_epoch) return 0;
  char *b = ftc__strdup(msg->backend);
  if (!b) {
    set_error_locked(m, FTC_ERR_NO_MEMORY, "out of memory storing a backend blob");
    return -1;
  }
  ftc__free(m->backend_blob);
  m->backend_blob = b;
  m->backend_epoch = msg->epoch;
  if (m->view && m->view->epoch == msg->epoch) {
    char *vb = ftc__strdup(b);
    if (vb) {
      ftc__free(m->view->backend_blob);
      m->view->backend_blob = vb;
    }
  }
  pthread_cond_broadcast(&m->cond);
  return 0;
}

static int on_heartbeat_locked(ftc__member_t *m, const ftc__msg_t *msg) {
  FTC_ASSERT_HELD(&m->lock);
  if (msg->epoch > m->known_epoch)
    FTC_DEBUG(FTC_SUB_COORD, "slot %d: the coordinator is at epoch %llu", m->slot,
              (unsigned long long)msg->epoch);
  return 0;
}

static int on_probe_locked(ftc__member_t *m, const ftc__msg_t *msg) {
  FTC_ASSERT_HELD(&m->lock);
  if (msg->epoch > m->probe_epoch) {
    m->probe_epoch = msg->epoch;
    m->probe_bound_ms = probe_ms(m);
    if (!m->probe_started) start_probe_locked(m);
    pthread_cond_broadcast(&m->cond);
  }
  return 0;
}

static int on_dump_request_locked(ftc__member_t *m, const ftc__msg_t *msg) {
  FTC_ASSERT_HELD(&m->lock);
  snprintf(m->dump_incident, sizeof(m->dump_incident), "%s", msg->incident);
  snprintf(m->dump_reason, sizeof(m->dump_reason), "%s", msg->reason ? msg->reason : "");
  m->dump_epoch = msg->epoch;
  m->dump_pending = 1;
  FTC_INFO(FTC_SUB_COORD, "slot %d: the coordinator asks for a dump (incident %s)", m->slot,
           m->dump_incident);
  pthread_cond_broadcast(&m->cond);
  notify_locked(m);
  return 0;
}

static int on_error_locked(ftc__member_t *m, const ftc__msg_t *msg) {
  FTC_ASSERT_HELD(&m->lock);
  ftc_status_t st = ftc__perr_status(msg->code);
  set_error_locked(m, st, "the coordinator at %s refused slot %d: %s (%s)", m->coord, m->slot,
                   msg->reason ? msg->reason : "", msg->code_name);
  return -1;
}

/* Handle one complete message from the coordinator: decode it, check that
 * the session's state allows it, and hand it to its kind's handler.
 * Returns -1 to close. */
static int handle_message(ftc__member_t *m, const char *text, size_t len) {
  ftc__msg_t msg;
  char why[256];
  ftc__perr_t perr = ftc__proto_decode(text, len, FTC__PROTO_MAX_COORD_MSG, &msg, why, sizeof(why));
  after_msg_t after = {0, 0};
  int rc = 0;
  pthread_mutex_lock(&m->lock);
  if (perr != FTC__PERR_NONE) {
    set_error_locked(m, FTC_ERR_PROTOCOL, "malformed message from the coordinator at %s: %s: %s",
                     m->coord, ftc__perr_name(perr), why);
    pthread_mutex_unlock(&m->lock);
    return -1;
  }
  if ((m->state == S_CONNECTING || m->state == S_RECONNECTING) &&
      msg.type != FTC__MSG_WELCOME && msg.type != FTC__MSG_ERROR) {
    set_error_locked(m, FTC_ERR_PROTOCOL,
                     "the coordinator at %s sent \"%s\" before welcome", m->coord,
                     ftc__msg_type_name(msg.type));
    rc = -1;
    goto out_unlock;
  }
  switch (msg.type) {
    case FTC__MSG_WELCOME: rc = on_welcome_locked(m, &msg, &after); break;
    case FTC__MSG_VIEW: rc = take_view_locked(m, &msg); break;
    case FTC__MSG_VIEW_DELTA: rc = on_view_delta_locked(m, &msg, &after); break;
    case FTC__MSG_PROSPECT: rc = on_prospect_locked(m, &msg); break;
    case FTC__MSG_BACKEND: rc = on_backend_locked(m, &msg); break;
    case FTC__MSG_HEARTBEAT: rc = on_heartbeat_locked(m, &msg); break;
    case FTC__MSG_PROBE: rc = on_probe_locked(m, &msg); break;
    case FTC__MSG_DUMP_REQUEST: rc = on_dump_request_locked(m, &msg); break;
    case FTC__MSG_ERROR: rc = on_error_locked(m, &msg); break;
    default:
      set_error_locked(m, FTC_ERR_PROTOCOL, "the coordinator at %s sent an unexpected \"%s\"",
                       m->coord, ftc__msg_type_name(msg.type));
      rc = -1;
      break;
  }
out_unlock:
  pthread_mutex_unlock(&m->lock);
  ftc__msg_clear(&msg);
  if (after.write_due && m->wsi) lws_callback_on_writable(m->wsi);
  if (after.start_heartbeats) {
    m->last_rx_ns = ftc__now_ns();
    lws_sul_schedule(m->ctx, 0, &m->sul_heartbeat, send_heartbeat,
                     (lws_usec_t)m->heartbeat_ms * 1000);
    /* After the welcome woke the caller: not on its way. The opening
     * caller placed it before it waited for the welcome. */
    if (!m->in_caller) maybe_hold(m);
  }
  return rc;
}

static int on_receive(ftc__member_t *m, struct lws *wsi, const void *in, size_t len) {
  m->last_rx_ns = ftc__now_ns();
  if (m->rx_skip) return 0;
  size_t need = m->rx_len + len;
  if (need + lws_remaining_packet_payload(wsi) > FTC__PROTO_MAX_COORD_MSG) {
    pthread_mutex_lock(&m->lock);
    set_error_locked(m, FTC_ERR_PROTOCOL, "the coordinator at %s sent a message over %d bytes",
                     m->coord, FTC__PROTO_MAX_COORD_MSG);
    pthread_mutex_unlock(&m->lock);
    return -1;
  }
  if (need > m->rx_cap) {
    size_t ncap = m->rx_cap ? m->rx_cap : 4096;
    while (ncap < need) ncap *= 2;
    char *nb = ftc__realloc(m->rx, ncap);
    if (!nb) {
      pthread_mutex_lock(&m->lock);
      set_error_locked(m, FTC_ERR_NO_MEMORY, "out of memory receiving from the coordinator");
      pthread_mutex_unlock(&m->lock);
      return -1;
    }
    m->rx = nb;
    m->rx_cap = ncap;
  }
  if (!m->rx_len) m->rx_binary = lws_frame_is_binary(wsi);
  memcpy(m->rx + m->rx_len, in, len);
  m->rx_len = need;
  if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi) > 0) return 0;
  size_t n = m->rx_len;
  m->rx_len = 0;
  if (!m->rx_binary) return handle_message(m, m->rx, n);
  /* A whole view deflated (the hello said "deflate"): its text is handled
   * as any other. */
  char *text;
  size_t tn;
  int z = ftc__proto_inflate(m->rx, n, FTC__PROTO_MAX_COORD_MSG, &text, &tn);
  if (z != 0) {
    ftc__free(text);
    pthread_mutex_lock(&m->lock);
    if (z > 0)
      set_error_locked(m, FTC_ERR_PROTOCOL, "the coordinator at %s sent a deflated message over %d bytes",
                       m->coord, FTC__PROTO_MAX_COORD_MSG);
    else
      set_error_locked(m, FTC_ERR_PROTOCOL,
                       "the coordinator at %s sent a binary message that does not inflate (a "
                       "deflated view was expected)", m->coord);
    pthread_mutex_unlock(&m->lock);
    return -1;
  }
  int rc = handle_message(m, text, tn);
  ftc__free(text);
  return rc;
}

static int on_writeable(ftc__member_t *m, struct lws *wsi) {
  pthread_mutex_lock(&m->lock);
  ftc__frame_t *f = ftc__frameq_pop(&m->outq);
  int more = m->outq.head != NULL;
  m->sending = f != NULL;
  pthread_mutex_unlock(&m->lock);
  if (!f) return 0;
  int close_after = f->close_after;
  int w = lws_write(wsi, f->buf + LWS_PRE, f->len, LWS_WRITE_TEXT);
  int short_write = w < (int)f->len;
  ftc__free(f);
  pthread_mutex_lock(&m->lock);
  m->sending = 0;
  pthread_mutex_unlock(&m->lock);
  if (short_write) {
    pthread_mutex_lock(&m->lock);
    set_error_locked(m, FTC_ERR_COORDINATOR, "writing to the coordinator at %s failed", m->coord);
    pthread_mutex_unlock(&m->lock);
    return -1;
  }
  m->hello_out = 1; /* the first frame on a connection is its hello */
  if (close_after) {
    static const char bye[] = "leave";
    lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, (unsigned char *)bye, sizeof(bye) - 1);
    return -1;
  }
  if (more) lws_callback_on_writable(wsi);
  return 0;
}

/* The connection failed or closed. The first connection retries until
 * open()'s deadline (open() gives up); a welcomed session that drops without
 * a refusal reconnects for up to connect_timeout_ms, keeping its views and
 * queued messages; after a leave or a refusal the session is closed. */
static void connection_lost(ftc__member_t *m) {
  int retry = 0;
  pthread_mutex_lock(&m->lock);
  if (m->leaving || m->state == S_CLOSED || __atomic_load_n(&m->stop, __ATOMIC_ACQUIRE)) {
    m->state = S_CLOSED;
    ftc__frameq_clear(&m->outq);
    pthread_cond_broadcast(&m->cond);
  } else if (m->state == S_CONNECTING) {
    retry = 1;
  } else {
    int64_t now = ftc__now_ns();
    if (m->state == S_OPEN) {
      m->state = S_RECONNECTING;
      m->reconnect_deadline_ns = now + (int64_t)m->connect_timeout_ms * 1000000LL;
      m->retry_ms = RETRY_FIRST_MS;
      FTC_WARN(FTC_SUB_COORD,
               "slot %d: lost the coordinator at %s (%s); reconnecting for up to %d ms",
               m->slot, m->coord, m->conn_err, m->connect_timeout_ms);
    }
    if (now < m->reconnect_deadline_ns) {
      retry = 1;
    } else {
      set_error_locked(m, FTC_ERR_COORDINATOR,
                       "lost the coordinator at %s and could not reconnect within %d ms (last "
                       "attempt: %s)",
                       m->coord, m->connect_timeout_ms, m->conn_err);
      ftc__frameq_clear(&m->outq);
    }
  }
  pthread_mutex_unlock(&m->lock);
  if (retry) schedule_retry(m);
}

static int member_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                           void *in, size_t len) {
  struct lws_context *ctx = lws_get_context(wsi);
  ftc__member_t *m = ctx ? lws_context_user(ctx) : NULL;
  if (!m) return lws_callback_http_dummy(wsi, reason, user, in, len);
  switch (reason) {
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
      snprintf(m->conn_err, sizeof(m->conn_err), "%s", in ? (const char *)in : "connection failed");
      FTC_DEBUG(FTC_SUB_COORD, "slot %d: cannot reach the coordinator at %s: %s", m->slot,
                m->coord, m->conn_err);
      m->wsi = NULL;
      m->rx_len = 0;
      connection_lost(m);
      return 0;
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
      return append_hello_header(m, (char **)in, len);
    case LWS_CALLBACK_CLIENT_FILTER_PRE_ESTABLISH: {
      /* The 101's headers go before CLIENT_ESTABLISHED: which subprotocol? */
      char sel[64];
      int n = lws_hdr_copy(wsi, sel, sizeof(sel), WSI_TOKEN_PROTOCOL);
      m->hello_in_request = m->hello_hdr && n > 0 && !strcmp(sel, FTC__PROTO_WS_NAME_HELLO);
      return 0;
    }
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
      m->wsi = wsi;
      m->rx_len = 0;
      hold_for_exit(m, wsi);
      if (m->hello_in_request) {
        /* The coordinator took the request's hello: its answer is on the way. */
        m->hello_out = 1;
        pthread_mutex_lock(&m->lock);
        int has = m->outq.head != NULL;
        pthread_mutex_unlock(&m->lock);
        if (has) lws_callback_on_writable(wsi);
      } else {
        send_hello(m);
      }
      return 0;
    case LWS_CALLBACK_CLIENT_RECEIVE: return on_receive(m, wsi, in, len);
    case LWS_CALLBACK_CLIENT_WRITEABLE: return on_writeable(m, wsi);
    case LWS_CALLBACK_CLIENT_CLOSED:
      release_exit_fd(m);
      m->wsi = NULL;
      m->rx_len = 0;
      snprintf(m->conn_err, sizeof(m->conn_err), "the connection closed");
      lws_sul_cancel(&m->sul_heartbeat);
      connection_lost(m);
      return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED: {
      if (__atomic_exchange_n(&m->drop, 0, __ATOMIC_ACQ_REL) && m->wsi) {
        snprintf(m->conn_err, sizeof(m->conn_err), "dropped by fault injection");
        lws_set_timeout(m->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
        return 0;
      }
      pthread_mutex_lock(&m->lock);
      int has = m->outq.head != NULL;
      pthread_mutex_unlock(&m->lock);
      if (has && m->wsi) lws_callback_on_writable(m->wsi);
      return 0;
    }
    default: return lws_callback_http_dummy(wsi, reason, user, in, len);
  }
}

static void guard_expired(lws_sorted_usec_list_t *sul) { (void)sul; }

static void *service_main(void *arg) {
  ftc__member_t *m = arg;
  pthread_setname_np(pthread_self(), "ftc-member"); /* (by itself: see engine.c) */
  pthread_mutex_lock(&m->lock);
  while (!m->handoff && !__atomic_load_n(&m->stop, __ATOMIC_ACQUIRE))
    pthread_cond_wait(&m->gate, &m->lock);
  pthread_mutex_unlock(&m->lock);
  while (!__atomic_load_n(&m->stop, __ATOMIC_ACQUIRE)) {
    if (lws_service(m->ctx, 0) < 0) break;
  }
  return NULL;
}

/* ---- API ---- */

static void free_strings(ftc__member_t *m) {
  ftc__free(m->coord);
  ftc__free(m->host_name);
  ftc__free(m->host_hdr);
  ftc__free(m->hello_hdr);
  ftc__free(m->job);
  ftc__free(m->token);
  ftc__free(m->data_addr);
  ftc__free(m->pod);
  ftc__free(m->node);
  ftc__free(m->host);
}

/* Split "host:port" or "[IPv6]:port", optionally as a URL
 * "ws://host:port/path" (the path, if any, the one the coordinator serves);
 * host_hdr is the host as an HTTP Host header writes it (an IPv6 literal in
 * brackets). */
static ftc_status_t parse_coord(ftc__member_t *m, const char *s) {
  char host[FTC__ADDR_HOST_MAX], hp[FTC__ADDR_MAX];
  const char *a = s;
  if (strncmp(a, "wss://", 6) == 0)
    return ftc__error(FTC_ERR_CONFIG,
                      "FTCOMM_COORDINATOR=\"%.300s\": the coordinator speaks ws://, not wss://", s);
  if (strncmp(a, "ws://", 5) == 0) a += 5;
  const char *slash = strchr(a, '/');
  size_t n = slash ? (size_t)(slash - a) : strlen(a);
  if (slash && strcmp(slash, "/") != 0 && strcmp(slash, FTC__PROTO_WS_PATH) != 0)
    return ftc__error(FTC_ERR_CONFIG,
                      "FTCOMM_COORDINATOR=\"%.300s\": the coordinator serves the path %s, not %s; "
                      "write host:port",
                      s, FTC__PROTO_WS_PATH, slash);
  if (n >= sizeof(hp))
    return ftc__error(FTC_ERR_CONFIG, "FTCOMM_COORDINATOR=\"%.300s\" is too long", s);
  memcpy(hp, a, n);
  hp[n] = '\0';
  ftc_status_t st = ftc__addr_split("FTCOMM_COORDINATOR", hp, host, sizeof(host), &m->port);
  if (st != FTC_OK) return st;
  m->host_name = ftc__strdup(host);
  size_t hl = strlen(host) + 3;
  m->host_hdr = ftc__malloc(hl);
  if (!m->host_name || !m->host_hdr) return ftc__error(FTC_ERR_NO_MEMORY, "out of memory");
  snprintf(m->host_hdr, hl, strchr(host, ':') ? "[%s]" : "%s", host);
  return FTC_OK;
}

static char *dup_opt(const char *s, int *failed) {
  if (!s) return NULL;
  char *d = ftc__strdup(s);
  if (!d) *failed = 1;
  return d;
}

/* Stop and join the service thread (idempotent). */
static void member_stop(ftc__member_t *m) {
  if (!m->started) return;
  __atomic_store_n(&m->stop, 1, __ATOMIC_RELEASE);
  pthread_mutex_lock(&m->lock);
  pthread_cond_broadcast(&m->gate);
  pthread_mutex_unlock(&m->lock);
  lws_cancel_service(m->ctx);
  pthread_join(m->thread, NULL);
  m->started = 0;
  pthread_mutex_lock(&m->lock);
  pthread_cond_broadcast(&m->cond);
  pthread_mutex_unlock(&m->lock);
  if (m->probe_started) pthread_join(m->probe_thread, NULL);
  m->probe_started = 0;
}

/* Stop the service thread if it runs and free everything. */
static void member_free(ftc__member_t *m) {
  member_stop(m);
  if (m->ctx) {
    pthread_mutex_lock(&m->lock);
    m->leaving = 1; /* the close while destroying is ours, not an error */
    pthread_mutex_unlock(&m->lock);
    lws_context_destroy(m->ctx);
  }
  release_exit_fd(m);
  ftc__frameq_clear(&m->outq);
  ftc__view_free(m->view);
  ftc__view_free(m->prospect);
  ftc__free(m->backend_blob);
  ftc__free(m->rx);
  pthread_cond_destroy(&m->cond);
  pthread_cond_destroy(&m->gate);
  pthread_mutex_destroy(&m->lock);
  free_strings(m);
  ftc__free(m);
}

ftc_status_t ftc__member_open(const ftc__member_cfg_t *cfg, ftc__member_t **out) {
  ftc_status_t st = ftc__member_start(cfg, out);
  if (st != FTC_OK) return st;
  return ftc__member_finish(out);
}

/* The opening caller services the context (m->in_caller) until done(m)
 * or the open deadline; lws_service waits for the next event or timer, so
 * a guard timer at the deadline bounds each wait. */
static void service_in_caller(ftc__member_t *m, int (*done)(ftc__member_t *)) {
  int64_t left_ns = m->open_deadline_ns - ftc__now_ns();
  lws_sul_schedule(m->ctx, 0, &m->sul_guard, guard_expired,
                   left_ns > 1000 ? (lws_usec_t)(left_ns / 1000) : 1);
  while (!done(m) && ftc__now_ns() < m->open_deadline_ns)
    if (lws_service(m->ctx, 0) < 0) break;
  lws_sul_cancel(&m->sul_guard);
}

/* The first attempt's hello is out (or the attempt is over). */
static int hello_sent(ftc__member_t *m) {
  return !m->wsi || m->hello_out || m->state != S_CONNECTING;
}

/* The coordinator answered: the welcome (with first_view, and the first
 * view), or the session closed. */
static int answered(ftc__member_t *m) {
  pthread_mutex_lock(&m->lock);
  int state = m->state, viewed = m->view != NULL;
  pthread_mutex_unlock(&m->lock);
  return state == S_CLOSED || (state != S_CONNECTING && (!m->first_view || viewed));
}

ftc_status_t ftc__member_start(const ftc__member_cfg_t *cfg, ftc__member_t **out) {
  ftc_status_t st;
  if (!out) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc__member_open: out is NULL");
  *out = NULL;
  if (!cfg || !cfg->coordinator || !*cfg->coordinator)
    return ftc__error(FTC_ERR_CONFIG,
                      "no coordinator address: set FTCOMM_COORDINATOR (ftcomm-run and the "
                      "controller set it)");
  if (!cfg->token || !*cfg->token)
    return ftc__error(FTC_ERR_CONFIG, "no job token: set FTCOMM_TOKEN");
  if (cfg->slot < 0 || cfg->world_size < 1 || cfg->min_size < 0 ||
      (cfg->data_addr && strlen(cfg->data_addr) > FTC__PROTO_MAX_ADDR))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "membership config: slot %d, world size %d, min size %d out of range",
                      cfg->slot, cfg->world_size, cfg->min_size);
  ftc__proto_init();
  ftc__member_t *m = ftc__calloc(1, sizeof(*m));
  if (!m) return ftc__error(FTC_ERR_NO_MEMORY, "out of memory opening the membership session");
  m->exit_fd = m->sock_fd = m->want_above = -1;
  pthread_mutex_init(&m->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&m->cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_cond_init(&m->gate, NULL);
  int failed = 0;
  m->coord = dup_opt(cfg->coordinator, &failed);
  m->job = dup_opt(cfg->job ? cfg->job : "local", &failed);
  m->token = dup_opt(cfg->token, &failed);
  m->data_addr = dup_opt(cfg->data_addr ? cfg->data_addr : "", &failed);
  m->pod = dup_opt(cfg->pod, &failed);
  m->node = dup_opt(cfg->node, &failed);
  m->host = dup_opt(cfg->host, &failed);
  if (failed) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "out of memory opening the membership session");
    goto out_free;
  }
  FTC_CHECK_GOTO(parse_coord(m, cfg->coordinator), st, out_free);
  m->slot = cfg->slot;
  m->world_size = cfg->world_size;
  m->min_size = cfg->min_size;
  m->joiner = cfg->joiner;
  m->dataplane = cfg->dataplane > 0 ? cfg->dataplane : 0;
  m->first_view = cfg->first_view == 1;
  m->standby = cfg->standby == 1;
  m->cfg_heartbeat_ms = cfg->heartbeat_ms;
  m->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 60000;
  int64_t silence = 15000;
  (void)ftc__param_int(FTC_P_HEARTBEAT_TIMEOUT_MS, &silence); /* (a bad value: the default) */
  m->silence_ms = (int)silence;
  m->heartbeat_ms = cfg->heartbeat_ms > 0 ? cfg->heartbeat_ms : FTC__PROTO_DEFAULT_HEARTBEAT_MS;
  m->retry_ms = RETRY_FIRST_MS;
  m->state = S_CONNECTING;
  m->notify_fd = -1;
  m->view_fd = -1;

  m->protocols[0] = (struct lws_protocols){
      .name = FTC__PROTO_WS_NAME,
      .callback = member_callback,
      .per_session_data_size = 0,
      .rx_buffer_size = 0,
  };
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof(info));
  info.port = CONTEXT_PORT_NO_LISTEN;
  info.protocols = m->protocols;
  info.user = m;
  info.count_threads = 1;
  /* One connection and lws's own wake-up pipe. Without a limit lws sizes
   * its tables by RLIMIT_NOFILE and zeroes them, on every ftc_comm_create,
   * a joiner's included (docs/performance/recovery.md, "The grow path"). */
  info.fd_limit_per_thread = 8;
  /* Each connect attempt gives up after CONNECT_ATTEMPT_S (lws's default is
   * 20 s): an attempt made while the path was cut waits out the kernel's
   * SYN backoff (1, 3, 7, 15 s ...), and would get through up to 8 s after
   * the path is back; a fresh attempt every few seconds gets through within
   * about CONNECT_ATTEMPT_S + RETRY_MAX_MS of it, which the coordinator's
   * rejoin window after an outage counts on (docs/recovery.md, "Network
   * faults"). */
  info.connect_timeout_secs = CONNECT_ATTEMPT_S;
  m->ctx = lws_create_context(&info);
  if (!m->ctx) {
    st = ftc__error(FTC_ERR_SYSTEM, "cannot create the libwebsockets client context");
    goto out_free;
  }
  /* The first attempt runs here, in the caller's thread, up to its hello;
   * the caller has other work while the coordinator answers
   * (ftc_comm_create's backend probe), then reads the answer in
   * ftc__member_finish, and a failed attempt's retries run there too. The
   * service thread is started meanwhile and waits until finish hands it
   * the context. */
  m->open_deadline_ns = ftc__deadline_ns(m->connect_timeout_ms);
  m->in_caller = 1;
  try_connect(&m->sul_connect);
  if (m->wsi) service_in_caller(m, hello_sent);
  if (m->standby) {
    /* Nobody waits for the answer now: the membership thread reads it, and
     * heartbeats until the join (the application initializes meanwhile). */
    m->in_caller = 0;
    m->handoff = 1;
  }
  int err = pthread_create(&m->thread, NULL, service_main, m);
  if (err) {
    st = ftc__error(FTC_ERR_SYSTEM, "cannot start the membership thread: %s", strerror(err));
    goto out_free;
  }
  m->started = 1;
  *out = m;
  return FTC_OK;

out_free:
  member_free(m);
  return st;
}

/* The opening caller services the context until the welcome (with
 * first_view, until the first view: a joiner's follows its welcome at
 * once), or the open deadline, then hands it to the service thread: the
 * coordinator's answer is read by the thread that waits for it, not by a
 * thread that must first be woken and scheduled, which on a crowded host
 * comes late (docs/performance/recovery.md, "The grow path"). */
static void finish_in_caller(ftc__member_t *m) {
  /* The session's exit descriptor (hold_above) while the coordinator
   * answers, not between the welcome and the view. */
  maybe_hold(m);
  service_in_caller(m, answered);
  m->in_caller = 0;
  pthread_mutex_lock(&m->lock);
  m->handoff = 1;
  pthread_cond_signal(&m->gate);
  pthread_mutex_unlock(&m->lock);
}

void ftc__member_join(ftc__member_t *m) {
  int send = 0;
  pthread_mutex_lock(&m->lock);
  m->open_deadline_ns = ftc__deadline_ns(m->connect_timeout_ms);
  if (m->standby) {
    m->standby = 0;
    if (m->state == S_OPEN && m->standby_acked) {
      send = 1;
    } else {
      m->join_wanted = 1; /* the welcome sends it if it says standby */
    }
  }
  if (send) (void)queue_join_locked(m); /* (out of memory: the session fails, finish says so) */
  pthread_mutex_unlock(&m->lock);
  if (send) lws_cancel_service(m->ctx); /* the service thread writes it */
}

ftc_status_t ftc__member_finish(ftc__member_t **mp) {
  ftc__member_t *m = *mp;
  ftc_status_t st;
  int timeout_ms = m->connect_timeout_ms;
  int64_t deadline = m->open_deadline_ns;
  struct timespec ts = {(time_t)(deadline / 1000000000LL), (long)(deadline % 1000000000LL)};
  if (m->in_caller) finish_in_caller(m);
  pthread_mutex_lock(&m->lock);
  /* A standby session may be reconnecting when its join comes (its
   * coordinator restarted while the application initialized): the
   * reconnection's welcome is the answer, within the same deadline. */
  while ((m->state == S_CONNECTING || m->state == S_RECONNECTING) && ftc__now_ns() < deadline)
    pthread_cond_timedwait(&m->cond, &m->lock, &ts);
  int state = m->state;
  st = m->error;
  char msg[512];
  snprintf(msg, sizeof(msg), "%s", m->error_msg);
  pthread_mutex_unlock(&m->lock);
  if (state == S_OPEN) return FTC_OK;
  *mp = NULL;
  if (state == S_CONNECTING || state == S_RECONNECTING) {
    /* conn_err belongs to the service thread: stop it before reading. */
    member_stop(m);
    snprintf(msg, sizeof(msg), "%s", m->conn_err[0] ? m->conn_err : "no welcome");
    char coord[512];
    snprintf(coord, sizeof(coord), "%s", m->coord);
    member_free(m);
    return ftc__error(FTC_ERR_COORDINATOR,
                      "could not join the coordinator at %s within %d ms (last attempt: %s); "
                      "is it running, and is FTCOMM_COORDINATOR right?",
                      coord, timeout_ms, msg);
  }
  member_free(m);
  return ftc__error(st != FTC_OK ? st : FTC_ERR_COORDINATOR, "%s",
                    msg[0] ? msg : "the coordinator closed the session");
}

/* A copy of src for a caller (ftc__view_free), NULL when out of memory. */
static ftc__view_t *view_dup(const ftc__view_t *src) {
  ftc__view_t *v = ftc__calloc(1, sizeof(*v));
  if (!v) return NULL;
  *v = *src;
  v->members = ftc__malloc((size_t)(src->size ? src->size : 1) * sizeof(*v->members));
  v->backend_blob = src->backend_blob ? ftc__strdup(src->backend_blob) : NULL;
  if (!v->members || (src->backend_blob && !v->backend_blob)) {
    ftc__free(v->members);
    ftc__free(v->backend_blob);
    ftc__free(v);
    return NULL;
  }
  memcpy(v->members, src->members, (size_t)src->size * sizeof(*v->members));
  return v;
}

ftc_status_t ftc__member_wait_view(ftc__member_t *m, uint64_t after, int timeout_ms,
                                   ftc__view_t **view) {
  if (!m || !view) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "wait_view: NULL argument");
  *view = NULL;
  int64_t deadline = timeout_ms < 0 ? INT64_MAX : ftc__deadline_ns(timeout_ms);
  struct timespec ts = {(time_t)(deadline / 1000000000LL), (long)(deadline % 1000000000LL)};
  ftc_status_t st = FTC_OK;
  char msg[512] = "";
  pthread_mutex_lock(&m->lock);
  for (;;) {
    if (m->view && m->view->epoch > after) break;
    if (m->state == S_CLOSED) {
      st = m->error != FTC_OK ? m->error : FTC_ERR_COORDINATOR;
      snprintf(msg, sizeof(msg), "%s", m->error_msg[0] ? m->error_msg : "the session is closed");
      goto out_unlock;
    }
    if (ftc__now_ns() >= deadline) {
      st = FTC_ERR_TIMEOUT;
      snprintf(msg, sizeof(msg),
               "no membership epoch after %llu within %d ms (slot %d, job %s)",
               (unsigned long long)after, timeout_ms, m->slot, m->job);
      goto out_unlock;
    }
    if (deadline == INT64_MAX)
      pthread_cond_wait(&m->cond, &m->lock);
    else
      pthread_cond_timedwait(&m->cond, &m->lock, &ts);
  }
  const ftc__view_t *src = m->view;
  ftc__view_t *v = view_dup(src);
  if (!v) {
    st = FTC_ERR_NO_MEMORY;
    snprintf(msg, sizeof(msg), "out of memory copying epoch %llu",
             (unsigned long long)src->epoch);
  }
  *view = v;
out_unlock:
  pthread_mutex_unlock(&m->lock);
  if (st != FTC_OK) return ftc__error(st, "%s", msg);
  return FTC_OK;
}

ftc_status_t ftc__member_publish_backend(ftc__member_t *m, uint64_t epoch, const char *blob) {
  if (!m || !blob || strlen(blob) > FTC__PROTO_MAX_BACKEND)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "publish_backend: no blob, or over %d bytes",
                      FTC__PROTO_MAX_BACKEND);
  json_t *msg = ftc__proto_backend(epoch, blob);
  if (!msg) return ftc__error(FTC_ERR_NO_MEMORY, "out of memory building a backend message");
  return queue_msg(m, msg, 0);
}

ftc_status_t ftc__member_wait_backend(ftc__member_t *m, uint64_t epoch, int timeout_ms,
                                      char *blob, size_t len) {
  if (!m || !blob || !len)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "wait_backend: NULL argument");
  int64_t deadline = timeout_ms < 0 ? INT64_MAX : ftc__deadline_ns(timeout_ms);
  struct timespec ts = {(time_t)(deadline / 1000000000LL), (long)(deadline % 1000000000LL)};
  ftc_status_t st = FTC_OK;
  char msg[512] = "";
  pthread_mutex_lock(&m->lock);
  for (;;) {
    if (m->backend_epoch == epoch && m->backend_blob) {
      if (strlen(m->backend_blob) >= len) {
        st = FTC_ERR_INVALID_ARGUMENT;
        snprintf(msg, sizeof(msg), "the backend blob of epoch %llu does not fit %zu bytes",
                 (unsigned long long)epoch, len);
      } else {
        snprintf(blob, len, "%s", m->backend_blob);
      }
      break;
    }
    if (m->backend_epoch > epoch || (m->view && m->view->epoch > epoch)) {
      st = FTC_ERR_REVOKED;
      snprintf(msg, sizeof(msg), "epoch %llu was replaced before its backend blob arrived",
               (unsigned long long)epoch);
      break;
    }
    if (m->state == S_CLOSED) {
      st = m->error != FTC_OK ? m->error : FTC_ERR_COORDINATOR;
      snprintf(msg, sizeof(msg), "%s", m->error_msg[0] ? m->error_msg : "the session is closed");
      break;
    }
    if (ftc__now_ns() >= deadline) {
      st = FTC_ERR_TIMEOUT;
      snprintf(msg, sizeof(msg), "no backend blob for epoch %llu within %d ms (slot %d, job %s)",
               (unsigned long long)epoch, timeout_ms, m->slot, m->job);
      break;
    }
    if (deadline == INT64_MAX)
      pthread_cond_wait(&m->cond, &m->lock);
    else
      pthread_cond_timedwait(&m->cond, &m->lock, &ts);
  }
  pthread_mutex_unlock(&m->lock);
  if (st != FTC_OK) return ftc__error(st, "%s", msg);
  return FTC_OK;
}

int ftc__view_admits(const ftc__view_t *v) {
  for (int i = 0; i < v->size; i++)
    if (v->members[i].joined_epoch == v->epoch) return 1;
  return 0;
}

void ftc__view_free(ftc__view_t *v) {
  if (!v) return;
  ftc__free(v->members);
  ftc__free(v->backend_blob);
  ftc__free(v);
}

void ftc__member_set_ready(ftc__member_t *m, uint64_t epoch) {
  pthread_mutex_lock(&m->lock);
  int first = !m->ready_epoch && epoch;
  if (first) m->ready_epoch = epoch;
  uint64_t known = m->known_epoch;
  pthread_mutex_unlock(&m->lock);
  if (!first) return;
  /* At once, so the next epoch the coordinator forms counts it as holding
   * state; if the session is down, the hello's view and heartbeats carry it. */
  ftc_status_t st = queue_msg(m, ftc__proto_heartbeat_ready(known, epoch), 0);
  if (st != FTC_OK)
    FTC_DEBUG(FTC_SUB_COORD, "ready at epoch %llu not sent now (%s); the next heartbeat says it",
              (unsigned long long)epoch, ftc_strerror(st));
}

ftc_status_t ftc__member_report_failure(ftc__member_t *m, uint64_t epoch, const int *ranks,
                                        int n, ftc_status_t why) {
  if (!m || n < 0 || (n > 0 && !ranks) || n > FTC__PROTO_MAX_FAILED)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "report_failure: bad rank list");
  if (ftc__member_latest_epoch(m) > epoch) {
    /* The coordinator formed a later epoch already (a rank revoked by its
     * view, or one that noticed after the first report did its work): it
     * would ignore this report, and on a crowded host the encoding, the
     * service thread's two passes and the coordinator's parse take CPU from
     * the recovery (docs/recovery.md, "Who decides a failure"). */
    FTC_DEBUG(FTC_SUB_COORD, "slot %d: epoch %llu failed (%s); not reported, epoch %llu is formed",
              m->slot, (unsigned long long)epoch, ftc_strerror(why),
              (unsigned long long)ftc__member_latest_epoch(m));
    return FTC_OK;
  }
  FTC_INFO(FTC_SUB_COORD, "slot %d: reporting %d failed rank%s in epoch %llu (%s)", m->slot, n,
           n == 1 ? "" : "s", (unsigned long long)epoch, ftc_strerror(why));
  /* Name the ranks by member id too when this is the epoch we hold: a
   * coordinator that restarted since may number them differently. */
  uint64_t *ids = n > 0 ? ftc__calloc((size_t)n, sizeof(*ids)) : NULL;
  int have_ids = 0;
  if (ids) {
    pthread_mutex_lock(&m->lock);
    if (m->view && m->view->epoch == epoch) {
      have_ids = 1;
      for (int i = 0; i < n && have_ids; i++) {
        if (ranks[i] < 0 || ranks[i] >= m->view->size) have_ids = 0;
        else ids[i] = m->view->members[ranks[i]].member_id;
      }
    }
    pthread_mutex_unlock(&m->lock);
  }
  json_t *msg = ftc__proto_failure(epoch, ranks, have_ids ? ids : NULL, n, why);
  ftc__free(ids);
  return queue_msg(m, msg, 0);
}

int ftc__member_take_dump_request(ftc__member_t *m, char *incident, size_t len) {
  if (!m) return 0;
  pthread_mutex_lock(&m->lock);
  int got = m->dump_pending;
  if (got && incident && len) snprintf(incident, len, "%s", m->dump_incident);
  m->dump_pending = 0;
  pthread_mutex_unlock(&m->lock);
  return got;
}

ftc_status_t ftc__member_upload_dump(ftc__member_t *m, const char *incident, int rank,
                                     const char *data, size_t len) {
  if (!m || !incident || !*incident || rank < 0 || (!data && len))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "upload_dump: bad arguments");
  if (len && memchr(data, '\0', len))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "a dump is text and holds no NUL byte");
  /* Encode every fragment first, so a dump is queued whole or not at all. */
  ftc__frameq_t q = {0};
  size_t off = 0;
  do {
    size_t n = ftc__proto_utf8_cut(data + off, len - off, FTC__PROTO_DUMP_CHUNK);
    int last = off + n == len;
    ftc__frame_t *f = ftc__proto_encode(
        ftc__proto_dump(incident, rank, off, len, data ? data + off : "", n, last), LWS_PRE);
    if (!f) {
      ftc__frameq_clear(&q);
      return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                        "cannot encode the dump for incident %s at byte %zu: out of memory or "
                        "not UTF-8 text",
                        incident, off);
    }
    ftc__frameq_push(&q, f);
    off += n;
  } while (off < len);
  pthread_mutex_lock(&m->lock);
  if (m->state != S_OPEN || m->leaving) {
    ftc_status_t st = m->error != FTC_OK ? m->error : FTC_ERR_COORDINATOR;
    pthread_mutex_unlock(&m->lock);
    ftc__frameq_clear(&q);
    return ftc__error(st, "cannot upload the dump: the coordinator session is closed");
  }
  size_t nfrag = q.count;
  ftc__frame_t *f;
  while ((f = ftc__frameq_pop(&q))) ftc__frameq_push(&m->outq, f);
  pthread_mutex_unlock(&m->lock);
  lws_cancel_service(m->ctx);
  FTC_INFO(FTC_SUB_COORD, "slot %d: uploading a dump of %zu bytes in %zu fragments (%s)",
           m->slot, len, nfrag, incident);
  return FTC_OK;
}

int ftc__member_sent_all(ftc__member_t *m) {
  if (!m) return 1;
  pthread_mutex_lock(&m->lock);
  int done = (m->outq.head == NULL && !m->sending) || m->state != S_OPEN;
  pthread_mutex_unlock(&m->lock);
  return done;
}

int ftc__member_left_cleanly(ftc__member_t *m, uint64_t member_id) {
  int found = 0;
  if (!m) return 0;
  pthread_mutex_lock(&m->lock);
  int n = m->nleft < LEFT_KEEP ? m->nleft : LEFT_KEEP;
  for (int i = 0; i < n && !found; i++) found = m->left[i] == member_id;
  pthread_mutex_unlock(&m->lock);
  return found;
}

int ftc__member_drop_reason(ftc__member_t *m, uint64_t member_id, char *reason, size_t rlen,
                            char *detail, size_t dlen) {
  int found = 0;
  if (!m) return 0;
  pthread_mutex_lock(&m->lock);
  int n = m->ndrops < DROP_KEEP ? m->ndrops : DROP_KEEP;
  for (int i = 0; i < n && !found; i++) {
    const struct dropped_rec *d = &m->drops[i];
    if (d->id != member_id) continue;
    found = 1;
    if (reason && rlen) snprintf(reason, rlen, "%s", d->reason);
    if (detail && dlen) snprintf(detail, dlen, "%s", d->detail);
  }
  pthread_mutex_unlock(&m->lock);
  return found;
}

uint64_t ftc__member_prospect_seq(const ftc__member_t *m) {
  return __atomic_load_n(&m->prospect_seq, __ATOMIC_ACQUIRE);
}

int ftc__member_prospect(ftc__member_t *m, ftc__view_t **view) {
  *view = NULL;
  pthread_mutex_lock(&m->lock);
  if (m->prospect) *view = view_dup(m->prospect);
  pthread_mutex_unlock(&m->lock);
  return *view != NULL;
}

uint64_t ftc__member_latest_epoch(const ftc__member_t *m) {
  return m ? __atomic_load_n(&m->latest_epoch, __ATOMIC_ACQUIRE) : 0;
}

void ftc__member_set_notify(ftc__member_t *m, int fd) {
  if (!m) return;
  pthread_mutex_lock(&m->lock);
  m->notify_fd = fd;
  pthread_mutex_unlock(&m->lock);
}

void ftc__member_set_view_notify(ftc__member_t *m, int fd) {
  if (!m) return;
  pthread_mutex_lock(&m->lock);
  m->view_fd = fd;
  pthread_mutex_unlock(&m->lock);
}

ftc_status_t ftc__member_error(ftc__member_t *m) {
  if (!m) return FTC_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&m->lock);
  ftc_status_t st = m->error;
  char msg[512];
  snprintf(msg, sizeof(msg), "%s", m->error_msg);
  pthread_mutex_unlock(&m->lock);
  if (st != FTC_OK) return ftc__error(st, "%s", msg);
  return FTC_OK;
}

void ftc__member_fault_drop(ftc__member_t *m) {
  if (!m) return;
  __atomic_store_n(&m->drop, 1, __ATOMIC_RELEASE);
  lws_cancel_service(m->ctx);
}

void ftc__member_fault_late_views(ftc__member_t *m, int ms) {
  if (m) __atomic_store_n(&m->late_view_ms, ms, __ATOMIC_RELEASE);
}

void ftc__member_close(ftc__member_t *m) {
  if (!m) return;
  ftc__frame_t *f = ftc__proto_encode(ftc__proto_leave("closed"), LWS_PRE);
  pthread_mutex_lock(&m->lock);
  if (m->state == S_CONNECTING && m->handoff && !m->leaving) {
    /* A standby session closed before its welcome (ftc_comm_create_cancel
     * right after begin): the welcome is due, and a leave after it frees
     * the slot at once, where a bare close would count as a lost member. */
    int64_t deadline = ftc__deadline_ns(LEAVE_WAIT_MS);
    struct timespec ts = {(time_t)(deadline / 1000000000LL), (long)(deadline % 1000000000LL)};
    while (m->state == S_CONNECTING && ftc__now_ns() < deadline)
      pthread_cond_timedwait(&m->cond, &m->lock, &ts);
  }
  if (f && m->state == S_OPEN && !m->leaving) {
    f->close_after = 1;
    ftc__frameq_push(&m->outq, f);
    f = NULL;
    m->leaving = 1;
    pthread_mutex_unlock(&m->lock);
    lws_cancel_service(m->ctx);
    int64_t deadline = ftc__deadline_ns(LEAVE_WAIT_MS);
    struct timespec ts = {(time_t)(deadline / 1000000000LL), (long)(deadline % 1000000000LL)};
    pthread_mutex_lock(&m->lock);
    while (m->state != S_CLOSED && ftc__now_ns() < deadline)
      pthread_cond_timedwait(&m->cond, &m->lock, &ts);
  }
  m->leaving = 1;
  pthread_mutex_unlock(&m->lock);
  ftc__free(f);
  member_free(m);
}
