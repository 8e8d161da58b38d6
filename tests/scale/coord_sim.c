/*
 * coord_sim.c - the member simulator and the coordinator's scale benchmark.
 *
 * One process plays thousands of ranks against the real coordinator
 * (runtime/src/coordinator, the library ftcomm-run and the controller
 * embed), which runs in a child process of its own so that its CPU time and
 * memory are its own. Every simulated member holds a real WebSocket session
 * (libwebsockets client), sends the real JSON messages (runtime/src/proto):
 * hello, heartbeats with "ready", failure reports, dump uploads, a joiner's
 * hello; it reads what the coordinator sends: welcome, views, heartbeat
 * answers, dump requests, errors. Failures are injected as a process would
 * cause them: a crash shuts the member's socket (the kernel's FIN of a
 * process that died) and its ring neighbours report it; a hang stops the
 * member's heartbeats and its reading, and its neighbours report a timeout.
 *
 * Scenarios, in order, each measured from the event to the last member
 * holding the new epoch: the first epoch (from the last hello written), a
 * steady state of heartbeats (the coordinator's CPU per second), a crash, a
 * hang (dump requests answered by every member) and a join into the
 * crashed slot. For each: first and last member's view after the event, the
 * bytes the coordinator sent (WebSocket payload the members read), its CPU
 * time and its resident memory. One line of key=value per scenario on
 * stdout; exit status 0 when every member saw every epoch it should, with
 * the size and order it should (sampled members decode each view whole).
 *
 *   coord_sim [--members N] [--heartbeat-ms MS] [--steady-s S] [--reporters K]
 *             [--dump-bytes B] [--rss-cap-mb MB] [--timeout-s S] [--whole-views]
 *             [--text-views]
 *
 * The coordinator waits in the loop FTCOMM_COORD_LOOP picks (epoll by
 * default, evloop.h); the simulator in epoll whenever the host has it.
 * Members say "deflate" (a big whole view comes deflated, in a binary
 * message) unless --text-views, and "delta" (view deltas) unless --whole-views;
 * sampled members apply each delta with the rank's own code
 * (ftc__proto_view_apply) and check the result.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <libwebsockets.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ftc_coord.h"
#include "coordinator/evloop.h"
#include "ftc_param.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_time.h"
#include "proto/proto.h"

#define JOB "sim"
#define TOKEN "sim-token-6f1c2a"
#define TICK_US 5000
#define INFLIGHT_MAX 512 /* connections being opened at once */
#define DECODE_MAX (64 * 1024) /* messages up to this are decoded whole by every member */
#define SAMPLES 4          /* members that decode every view whole, whatever its size */

enum mstate { S_IDLE, S_CONNECTING, S_OPEN, S_DEAD };

typedef struct smember {
  struct lws *wsi;
  int slot, state, joiner, sample;
  int64_t retry_ns; /* S_IDLE after a connection that failed before its welcome: when to try again */
  int retry_ms;
  int silent;     /* a hang: neither heartbeats nor reads */
  int hello_done; /* its hello frame was written */
  uint64_t id, epoch;
  int64_t next_hb_ns;
  ftc__frameq_t outq;
  ftc__wire_member_t *view; /* a sampled member's current view (addr strings its own) */
  int view_n;
  char *rx; /* the message so far (whole when small or sampled, else its head) */
  int rx_binary; /* ... and it is binary: a deflated view */
  size_t rx_len, rx_cap, rx_total;
} smember_t;

enum phase { P_CONNECT, P_STEADY, P_CRASH, P_HANG, P_JOIN, P_DONE };
static const char *phase_name[] = {"first_epoch", "steady", "crash", "hang", "join", "done"};

static struct {
  int n, hb_ms, steady_s, reporters, dump_bytes, timeout_s, rss_cap_mb;
  int whole; /* members do not say "delta": every epoch comes whole */
  int text_views; /* members do not say "deflate": whole views come as text */
  int view_requests; /* deltas that did not apply: the whole view was asked for */
  int reconnects;    /* connections tried again (failed or closed before the welcome) */
  pid_t coord_pid;
  int port;
  char dump_dir[256];
  struct lws_context *ctx;
  ftc__evloop_t ev; /* the simulator's own loop: epoll when the host has it */
  int coord_epoll; /* the coordinator's loop is epoll (FTCOMM_COORD_LOOP, evloop.h) */
  lws_sorted_usec_list_t sul;
  smember_t *m;  /* n + 1: the last one is the joiner */
  int nm;
  int inflight, next_open, welcomed;
  int phase;
  int64_t phase_start_ns, event_ns, first_ns, last_ns;
  uint64_t target_epoch;
  int target_size, got;
  uint64_t rx_bytes, rx_bytes0, cpu0_ns;
  uint64_t view_bytes; /* of those, in views and deltas during the phase */
  int crash_slot, hang_slot;
  int dumps_requested, dumps_sent;
  int errors;
  int done;
  int reported; /* hang: the neighbours' timeout reports went out */
  int next_phase;      /* after a quiet second (what a phase set off has settled) */
  int64_t settle_ns;   /* 0: none pending */
} g;

static int64_t now_ns(void) { return ftc__now_ns(); }

/* libwebsockets' retry and idle policy for every connection: zero, so no
 * validity timer (main says why). */
static const lws_retry_bo_t no_validity_timer;

/* A member saw something it should not: counted, and said for the first few. */
#define complain(...)                                        \
  do {                                                       \
    if (g.errors++ < 20) fprintf(stderr, "coord_sim: " __VA_ARGS__); \
  } while (0)

/* ---- the coordinator's process: CPU time and memory ---- */

static uint64_t coord_cpu_ns(void) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task", (int)g.coord_pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  uint64_t sum = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[320];
    snprintf(p, sizeof(p), "/proc/%d/task/%s/schedstat", (int)g.coord_pid, e->d_name);
    FILE *f = fopen(p, "r");
    unsigned long long ns = 0;
    if (f && fscanf(f, "%llu", &ns) == 1) sum += ns;
    if (f) fclose(f);
  }
  closedir(d);
  return sum;
}

static long coord_kb(const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)g.coord_pid);
  FILE *f = fopen(path, "r");
  long kb = -1;
  size_t fl = strlen(field);
  while (f && fgets(line, sizeof(line), f))
    if (!strncmp(line, field, fl) && line[fl] == ':') kb = atol(line + fl + 1);
  if (f) fclose(f);
  return kb;
}

/* The coordinator, as its hosts run it: created, then serving until the
 * parent goes away (the pipe's end). */
static int coord_child(int port_fd, int ctl_fd) {
  ftc__coord_cfg_t cfg = {
      .bind_host = "0.0.0.0",
      .job = JOB,
      .token = TOKEN,
      .world_size = g.n,
      .min_size = g.n / 2 > 0 ? g.n / 2 : 1,
      .heartbeat_ms = g.hb_ms,
      .dump_dir = g.dump_dir,
  };
  ftc__coord_t *co;
  if (ftc__coord_create(&cfg, &co) != FTC_OK) {
    fprintf(stderr, "coord_sim: the coordinator did not start: %s\n", ftc_last_error());
    return 1;
  }
  int said[2] = {ftc__coord_port(co), !strcmp(ftc__coord_loop(co), "epoll")};
  if (write(port_fd, said, sizeof(said)) != (ssize_t)sizeof(said)) return 1;
  char c;
  while (read(ctl_fd, &c, 1) < 0 && errno == EINTR) {
  }
  ftc__coord_destroy(co);
  return 0;
}

/* ---- members ---- */

static void queue(smember_t *m, json_t *msg) {
  ftc__frame_t *f = ftc__proto_encode(msg, LWS_PRE);
  if (!f) {
    fprintf(stderr, "coord_sim: out of memory\n");
    exit(2);
  }
  ftc__frameq_push(&m->outq, f);
  if (m->wsi) lws_callback_on_writable(m->wsi);
}

static void open_member(smember_t *m) {
  struct lws_client_connect_info ci;
  char addr[32];
  /* Sessions spread over loopback addresses: 16k connections and the
   * TIME_WAIT of earlier runs stay within each address's ephemeral ports. */
  snprintf(addr, sizeof(addr), "127.0.%d.%d", 1 + m->slot / 4096 / 250, 1 + (m->slot / 4096) % 250);
  memset(&ci, 0, sizeof(ci));
  ci.context = g.ctx;
  ci.address = addr;
  ci.port = g.port;
  ci.path = FTC__PROTO_WS_PATH;
  ci.host = "127.0.0.1";
  ci.origin = "127.0.0.1";
  ci.protocol = FTC__PROTO_WS_NAME;
  ci.ietf_version_or_minus_one = -1;
  ci.retry_and_idle_policy = &no_validity_timer;
  ci.opaque_user_data = m;
  ci.pwsi = &m->wsi;
  m->state = S_CONNECTING;
  g.inflight++;
  if (!lws_client_connect_via_info(&ci)) {
    complain("slot %d: cannot start a connection\n", m->slot);
    m->state = S_DEAD;
    g.inflight--;
  }
}

static void send_hello(smember_t *m) {
  char pod[64], daddr[64];
  snprintf(pod, sizeof(pod), "llama-70b-worker-%d", m->slot);
  snprintf(daddr, sizeof(daddr), "10.%d.%d.%d:29400", 64 + m->slot / 65536, (m->slot / 256) % 256,
           m->slot % 256);
  ftc__hello_t h = {.job = JOB, .token = TOKEN, .addr = daddr, .pod = pod, .node = pod,
                    .slot = m->slot, .world_size = g.n, .min_size = g.n / 2 > 0 ? g.n / 2 : 1,
                    .joiner = m->joiner, .pid = 1, .delta = !g.whole,
                    .deflate = !g.text_views};
  ftc__frame_t *f = ftc__proto_encode(ftc__proto_hello(&h), LWS_PRE);
  if (!f) exit(2);
  ftc__frameq_push_front(&m->outq, f);
  lws_callback_on_writable(m->wsi);
}

static void start_phase(int p);

static void phase_view(smember_t *m, uint64_t epoch) {
  if (epoch != g.target_epoch || !g.target_epoch) return;
  int64_t t = now_ns();
  if (!g.got) g.first_ns = t;
  g.last_ns = t;
  g.got++;
  (void)m;
}

/* A sampled member's view, decoded whole: its size, its order, itself. */
static void check_view(smember_t *m, const ftc__msg_t *v) {
  if (v->epoch != g.target_epoch) return;
  int self = 0;
  if (v->nmembers != g.target_size) {
    complain("slot %d: epoch %llu has %d members, expected %d\n", m->slot,
            (unsigned long long)v->epoch, v->nmembers, g.target_size);
  }
  for (int i = 0; i < v->nmembers; i++) {
    if (v->members[i].rank != i || (i && v->members[i].slot <= v->members[i - 1].slot)) {
      complain("slot %d: epoch %llu is not in slot order at rank %d\n",
              m->slot, (unsigned long long)v->epoch, i);
      break;
    }
    if (v->members[i].member_id == m->id) self = 1;
    if (g.phase == P_CRASH && v->members[i].slot == g.crash_slot) self = -1000;
  }
  if (self != 1) {
    complain("slot %d: epoch %llu %s\n", m->slot, (unsigned long long)v->epoch,
            self < 0 ? "still holds the crashed member" : "does not name this member");
  }
}

/* A sampled member keeps its view to apply the next delta to. */
static void keep_view(smember_t *m, const ftc__wire_member_t *w, int n) {
  /* (w may point into the old view's strings: copied before they go) */
  ftc__wire_member_t *nv = n ? ftc__calloc((size_t)n, sizeof(*nv)) : NULL;
  if (n && !nv) exit(2);
  for (int i = 0; i < n; i++) {
    nv[i] = w[i];
    if (!(nv[i].addr = ftc__strdup(w[i].addr))) exit(2);
  }
  for (int i = 0; i < m->view_n; i++) ftc__free((char *)m->view[i].addr);
  ftc__free(m->view);
  m->view = nv;
  m->view_n = n;
}

/* "epoch":N from the head of a view too large to decode at every member. */
static uint64_t head_epoch(const char *head, size_t len) {
  static const char key[] = "\"epoch\":";
  const char *p = memmem(head, len, key, sizeof(key) - 1);
  return p ? strtoull(p + sizeof(key) - 1, NULL, 10) : 0;
}

/* A message: text[0..have) of its whole (whole bytes of text), wire bytes
 * on the wire; head: only its head was read (a big view at a member that
 * is not sampled). */
static void on_message(smember_t *m, const char *text, size_t have, size_t whole, size_t wire,
                       int head) {
  if (have > 24 && (!memcmp(text, "{\"v\":1,\"type\":\"view\"", 20) ||
                    !memcmp(text, "{\"v\":1,\"type\":\"view_delta\"", 26)))
    g.view_bytes += wire;
  if (head) {
    if (memmem(text, have < 64 ? have : 64, "\"type\":\"view\"", 13)) {
      uint64_t e = head_epoch(text, have);
      if (e > m->epoch) m->epoch = e;
      phase_view(m, e);
      return;
    }
    complain("slot %d: a message of %zu bytes that is not a view\n", m->slot, wire);
    return;
  }
  ftc__msg_t msg;
  char why[256];
  if (ftc__proto_decode(text, whole, FTC__PROTO_MAX_COORD_MSG, &msg, why, sizeof(why)) !=
      FTC__PERR_NONE) {
    complain("slot %d: undecodable message: %s\n", m->slot, why);
    return;
  }
  switch (msg.type) {
    case FTC__MSG_WELCOME:
      m->id = msg.member_id;
      m->state = S_OPEN;
      if (!m->joiner) g.welcomed++;
      m->next_hb_ns = now_ns() + (int64_t)(rand() % g.hb_ms) * 1000000LL;
      break;
    case FTC__MSG_VIEW:
      if (msg.epoch > m->epoch) m->epoch = msg.epoch;
      if (m->sample) {
        check_view(m, &msg);
        keep_view(m, msg.members, msg.nmembers);
      }
      phase_view(m, msg.epoch);
      break;
    case FTC__MSG_VIEW_DELTA: {
      if (g.whole) complain("slot %d: a delta, though its hello did not ask for them\n", m->slot);
      int n = -1;
      ftc__wire_member_t *wm = NULL;
      if (msg.base_epoch == m->epoch) {
        /* Sampled members apply it (the rank's own code); the others
         * only follow the numbers. */
        n = m->sample ? ftc__proto_view_apply(m->view, m->view_n, &msg, &wm) : msg.view_size;
        if (m->sample && n < 0) complain("slot %d: the delta to epoch %llu does not apply\n",
                                         m->slot, (unsigned long long)msg.epoch);
      }
      if (n < 0) {
        g.view_requests++;
        queue(m, ftc__proto_view_request());
        break;
      }
      if (m->sample) {
        ftc__msg_t made = msg;
        made.members = wm, made.nmembers = n;
        check_view(m, &made);
        keep_view(m, wm, n);
        ftc__free(wm);
      } else if (n != g.target_size && msg.epoch == g.target_epoch) {
        complain("slot %d: epoch %llu has %d members, expected %d\n", m->slot,
                 (unsigned long long)msg.epoch, n, g.target_size);
      }
      m->epoch = msg.epoch;
      phase_view(m, msg.epoch);
      break;
    }
    case FTC__MSG_HEARTBEAT: break;
    case FTC__MSG_DUMP_REQUEST: {
      g.dumps_requested++;
      size_t n = (size_t)g.dump_bytes;
      char *d = ftc__malloc(n + 1);
      if (!d) exit(2);
      int h = snprintf(d, n + 1, "{\"format\":1,\"simulated\":true,\"slot\":%d,\"pad\":\"", m->slot);
      for (size_t i = (size_t)h; i + 2 < n; i++) d[i] = 'x';
      if (n >= 2) memcpy(d + n - 2, "\"}", 2);
      queue(m, ftc__proto_dump(msg.incident, m->slot, 0, n, d, n, 1));
      ftc__free(d);
      g.dumps_sent++;
      break;
    }
    case FTC__MSG_BACKEND:
    case FTC__MSG_PROSPECT: break;
    case FTC__MSG_ERROR:
      if (!(msg.code == FTC__PERR_EXCLUDED && m->slot == g.hang_slot)) {
        complain("slot %d: refused: %s: %s\n", m->slot, msg.code_name,
                msg.reason ? msg.reason : "");
      }
      break;
    default:
      complain("slot %d: unexpected %s\n", m->slot, ftc__msg_type_name(msg.type));
  }
  ftc__msg_clear(&msg);
}

static int on_receive(smember_t *m, struct lws *wsi, const void *in, size_t len) {
  g.rx_bytes += len;
  if (!m->rx_total) m->rx_binary = lws_frame_is_binary(wsi);
  size_t keep = m->rx_total + len;
  /* (a deflated view's head inflates from its first few KiB) */
  size_t limit = m->sample ? (size_t)FTC__PROTO_MAX_COORD_MSG : m->rx_binary ? 4096 : DECODE_MAX;
  if (keep > limit) keep = limit; /* a big view: only its head is read */
  if (keep > m->rx_cap) {
    size_t ncap = m->rx_cap ? m->rx_cap : 512;
    while (ncap < keep) ncap *= 2;
    char *nb = ftc__realloc(m->rx, ncap);
    if (!nb) exit(2);
    m->rx = nb, m->rx_cap = ncap;
  }
  if (keep > m->rx_len && keep <= m->rx_total + len) {
    memcpy(m->rx + m->rx_len, in, keep - m->rx_len);
    m->rx_len = keep;
  }
  m->rx_total += len;
  if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi) > 0) return 0;
  if (!m->rx_binary) {
    on_message(m, m->rx, m->rx_len, m->rx_total, m->rx_total, m->rx_total > DECODE_MAX && !m->sample);
  } else {
    /* A deflated whole view: a sampled member inflates it all, the others
     * its head (from the pieces they kept), as a rank's own CPU would. */
    if (g.text_views) complain("slot %d: a binary message, though its hello did not say deflate\n", m->slot);
    char *text;
    size_t tn;
    int z = ftc__proto_inflate(m->rx, m->rx_len, m->sample ? FTC__PROTO_MAX_COORD_MSG : 256, &text, &tn);
    if (z < 0 || (z > 0 && m->sample))
      complain("slot %d: a binary message of %zu bytes that does not inflate\n", m->slot, m->rx_total);
    else
      on_message(m, text, tn, tn, m->rx_total, z > 0);
    ftc__free(text);
  }
  m->rx_len = m->rx_total = 0;
  if (m->rx_cap > DECODE_MAX) { /* a sampled member's big view: give it back */
    ftc__free(m->rx);
    m->rx = NULL, m->rx_cap = 0;
  }
  return 0;
}

static int on_writeable(smember_t *m, struct lws *wsi) {
  if (m->silent) return 0;
  ftc__frame_t *f = ftc__frameq_pop(&m->outq);
  if (!f) return 0;
  int w = lws_write(wsi, f->buf + LWS_PRE, f->len, LWS_WRITE_TEXT);
  int short_write = w < (int)f->len;
  ftc__free(f);
  if (short_write) return -1;
  if (!m->hello_done) {
    m->hello_done = 1;
    if (m->joiner && g.phase == P_JOIN) g.event_ns = now_ns();
    else if (g.phase == P_CONNECT) g.event_ns = now_ns(); /* the last one counts */
  }
  if (m->outq.head) lws_callback_on_writable(wsi);
  return 0;
}

/* A connection that failed or closed before its welcome is tried again
 * after 50 ms, doubling to 1 s, as a rank's client does (member.c): a
 * coordinator accepting thousands at once closes those it did not take in
 * time. */
static void retry_later(smember_t *m) {
  m->state = S_IDLE;
  m->hello_done = 0;
  m->rx_len = m->rx_total = 0;
  m->retry_ms = m->retry_ms ? (m->retry_ms * 2 > 1000 ? 1000 : m->retry_ms * 2) : 50;
  m->retry_ns = now_ns() + (int64_t)m->retry_ms * 1000000LL;
  g.reconnects++;
}

static int sim_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                        size_t len) {
  smember_t *m = wsi ? lws_get_opaque_user_data(wsi) : NULL;
  if (!m) return lws_callback_http_dummy(wsi, reason, user, in, len);
  switch (reason) {
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
      if (m->state == S_CONNECTING) g.inflight--;
      m->wsi = NULL;
      retry_later(m);
      return 0;
    case LWS_CALLBACK_CLIENT_ESTABLISHED: {
      /* Both ends share this host's TCP memory (tcp_mem): 16,384 receive
       * buffers autotuned to megabytes while a view is read would exhaust
       * it and the kernel resets connections. A rank has its own host. */
      int rcv = 16 * 1024;
      setsockopt(lws_get_socket_fd(wsi), SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
      m->wsi = wsi;
      g.inflight--;
      send_hello(m);
      return 0;
    }
    case LWS_CALLBACK_CLIENT_RECEIVE: return on_receive(m, wsi, in, len);
    case LWS_CALLBACK_CLIENT_WRITEABLE: return on_writeable(m, wsi);
    case LWS_CALLBACK_CLIENT_CLOSED:
      if (!m->id && m->state != S_DEAD && !g.done) { /* not welcomed yet: as a rank, again */
        m->wsi = NULL;
        ftc__frameq_clear(&m->outq);
        retry_later(m);
        return 0;
      }
      if (m->state != S_DEAD && !g.done && m->slot != g.hang_slot) {
        complain("slot %d: the coordinator closed its session\n", m->slot);
      }
      m->state = S_DEAD;
      m->wsi = NULL;
      ftc__frameq_clear(&m->outq);
      return 0;
    default: return lws_callback_http_dummy(wsi, reason, user, in, len);
  }
}

/* ---- the driver ---- */

static smember_t *by_slot(int slot) { return &g.m[slot]; }

static void report_failure(int reporter_slot, smember_t *x, int rank, ftc_status_t why) {
  smember_t *r = by_slot(reporter_slot);
  if (r->state != S_OPEN || r->silent) return;
  queue(r, ftc__proto_failure(r->epoch, &rank, &x->id, 1, why));
}

/* Neighbours in the current view (every slot below the crash keeps its
 * rank; ranks shift past a dropped slot, so the view's rank of slot s is s
 * minus the dropped slots below it). */
static int rank_of(int slot) {
  int r = slot;
  if (g.phase >= P_HANG && g.crash_slot < slot) r--;
  return r;
}

static void reporters(int slot, ftc_status_t why) {
  smember_t *x = by_slot(slot);
  for (int k = 1; k <= g.reporters; k++) {
    int s = (slot + (k % 2 ? 1 : -1) * ((k + 1) / 2) + g.n) % g.n;
    if (s == g.crash_slot && g.phase > P_CRASH) s = (s + 1) % g.n;
    report_failure(s, x, rank_of(slot), why);
  }
}

static void result(void) {
  uint64_t cpu = coord_cpu_ns() - g.cpu0_ns;
  double dur_s = (double)(now_ns() - g.phase_start_ns) / 1e9;
  printf("members=%d views=%s%s loop=%s scenario=%s", g.n, g.whole ? "whole" : "delta",
         g.text_views ? "" : "+deflate", g.coord_epoll ? "epoll" : "poll", phase_name[g.phase]);
  if (g.phase == P_STEADY) {
    printf(" seconds=%.1f coord_cpu_pct=%.2f coord_bytes_per_s=%.0f", dur_s,
           100.0 * (double)cpu / 1e9 / dur_s, (double)(g.rx_bytes - g.rx_bytes0) / dur_s);
  } else {
    printf(" first_view_ms=%.1f last_view_ms=%.1f epoch=%llu size=%d", (double)(g.first_ns - g.event_ns) / 1e6,
           (double)(g.last_ns - g.event_ns) / 1e6, (unsigned long long)g.target_epoch,
           g.target_size);
    printf(" coord_bytes=%llu view_bytes=%llu coord_cpu_ms=%.1f",
           (unsigned long long)(g.rx_bytes - g.rx_bytes0), (unsigned long long)g.view_bytes,
           (double)cpu / 1e6);
  }
  if (g.phase == P_HANG) printf(" dumps=%d", g.dumps_sent);
  if (g.view_requests) printf(" view_requests=%d", g.view_requests);
  if (g.reconnects) printf(" reconnects=%d", g.reconnects);
  printf(" coord_rss_mb=%.1f coord_peak_rss_mb=%.1f\n", coord_kb("VmRSS") / 1024.0,
         coord_kb("VmHWM") / 1024.0);
  fflush(stdout);
}

static void start_phase(int p) {
  g.phase = p;
  g.phase_start_ns = now_ns();
  g.rx_bytes0 = g.rx_bytes;
  g.view_bytes = 0;
  g.cpu0_ns = coord_cpu_ns();
  g.got = 0;
  g.first_ns = g.last_ns = 0;
  g.event_ns = now_ns();
  switch (p) {
    case P_CONNECT:
      g.target_epoch = 1, g.target_size = g.n;
      break;
    case P_STEADY: g.target_epoch = 0; break;
    case P_CRASH: {
      smember_t *x = by_slot(g.crash_slot);
      g.target_epoch = x->epoch + 1, g.target_size = g.n - 1;
      /* The process dies: the kernel closes its socket; its ring peers see
       * the data plane break and report it. */
      x->state = S_DEAD;
      g.event_ns = now_ns();
      shutdown(lws_get_socket_fd(x->wsi), SHUT_RDWR);
      reporters(g.crash_slot, FTC_ERR_PEER_LOST);
      break;
    }
    case P_HANG: {
      smember_t *x = by_slot(g.hang_slot);
      g.target_epoch = x->epoch + 1, g.target_size = g.n - 2;
      x->silent = 1;
      lws_rx_flow_control(x->wsi, 0);
      g.reported = 0;
      g.event_ns = now_ns();
      break;
    }
    case P_JOIN: {
      smember_t *j = &g.m[g.n];
      j->slot = g.crash_slot;
      j->joiner = 1;
      j->sample = 1;
      g.target_epoch = by_slot(0)->epoch + 1, g.target_size = g.n - 1;
      open_member(j);
      break;
    }
  }
}

/* The members expected to hold the phase's epoch. */
static int expected(void) {
  switch (g.phase) {
    case P_CONNECT: return g.n;
    case P_CRASH: return g.n - 1;
    case P_HANG: return g.n - 2;
    case P_JOIN: return g.n - 1;
  }
  return 0;
}

/* The next phase starts after a quiet second, so that what this one set
 * off (dumps being stored, late answers) is not counted in it. */
static void settle(int next) {
  g.next_phase = next;
  g.settle_ns = now_ns() + 1000000000LL;
  if (next == P_DONE) g.settle_ns = now_ns();
}

static void tick(lws_sorted_usec_list_t *sul) {
  (void)sul;
  int64_t now = now_ns();
  /* Open sessions a few hundred at a time, as pods starting would. */
  while (g.phase == P_CONNECT && g.next_open < g.n && g.inflight < INFLIGHT_MAX)
    open_member(&g.m[g.next_open++]);
  for (int i = 0; g.reconnects && i < g.nm && g.inflight < INFLIGHT_MAX; i++)
    if (g.m[i].state == S_IDLE && g.m[i].retry_ns && now >= g.m[i].retry_ns) {
      g.m[i].retry_ns = 0;
      open_member(&g.m[i]);
    }
  for (int i = 0; i < g.nm; i++) {
    smember_t *m = &g.m[i];
    if (m->state != S_OPEN || m->silent || now < m->next_hb_ns) continue;
    queue(m, ftc__proto_heartbeat_ready(m->epoch, m->epoch ? 1 : 0));
    m->next_hb_ns += (int64_t)g.hb_ms * 1000000LL;
    if (m->next_hb_ns < now) m->next_hb_ns = now + (int64_t)g.hb_ms * 1000000LL;
  }
  long rss = coord_kb("VmRSS");
  if (rss > (long)g.rss_cap_mb * 1024) {
    printf("members=%d loop=%s scenario=%s stopped=rss_over_%d_mb coord_rss_mb=%.1f\n", g.n,
           g.coord_epoll ? "epoll" : "poll", phase_name[g.phase], g.rss_cap_mb, rss / 1024.0);
    fflush(stdout);
    g.errors++;
    g.done = 1;
    return;
  }
  if (now - g.phase_start_ns > (int64_t)g.timeout_s * 1000000000LL) {
    printf("members=%d loop=%s scenario=%s stopped=timeout_%ds got=%d of %d\n", g.n,
           g.coord_epoll ? "epoll" : "poll", phase_name[g.phase], g.timeout_s, g.got, expected());
    fflush(stdout);
    g.errors++;
    g.done = 1;
    return;
  }
  if (g.settle_ns) {
    if (now >= g.settle_ns) {
      g.settle_ns = 0;
      start_phase(g.next_phase);
    }
    if (g.phase != P_DONE) lws_sul_schedule(g.ctx, 0, &g.sul, tick, TICK_US);
    else g.done = 1, lws_cancel_service(g.ctx);
    return;
  }
  int joiner_has = g.phase != P_JOIN || g.m[g.n].epoch >= g.target_epoch;
  switch (g.phase) {
    case P_CONNECT:
    case P_CRASH:
    case P_JOIN:
      if (g.got >= expected() + (g.phase == P_JOIN ? 0 : 0) && joiner_has) {
        result();
        settle(g.phase == P_CONNECT ? P_STEADY : g.phase == P_CRASH ? P_HANG : P_DONE);
      }
      break;
    case P_STEADY:
      if (now - g.phase_start_ns >= (int64_t)g.steady_s * 1000000000LL) {
        result();
        settle(P_CRASH);
      }
      break;
    case P_HANG:
      /* Its neighbours' collectives time out (here after two heartbeat
       * intervals) and they report it as a hang. */
      if (!g.reported && now - g.event_ns > 2LL * g.hb_ms * 1000000LL) {
        g.reported = 1;
        reporters(g.hang_slot, FTC_ERR_TIMEOUT);
      }
      /* (and every asked member's dump is out) */
      if (g.got >= expected() && g.dumps_sent >= g.n - 2) {
        result();
        settle(P_JOIN);
      }
      break;
  }
  if (g.phase == P_DONE) {
    g.done = 1;
    lws_cancel_service(g.ctx); /* the service loop sees it now, not at the next event */
    return;
  }
  lws_sul_schedule(g.ctx, 0, &g.sul, tick, TICK_US);
}

/* Descriptors: a deployment raises the soft limit to the hard one (a
 * container's is 1048576 under containerd and CRI-O); as root this also
 * lifts the hard limit up to fs.nr_open. */
static void raise_nofile(int need) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl)) return;
  if (rl.rlim_max < (rlim_t)need) {
    struct rlimit up = {(rlim_t)need, (rlim_t)need};
    if (!setrlimit(RLIMIT_NOFILE, &up)) return;
  }
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < (rlim_t)need)
    fprintf(stderr, "coord_sim: only %llu descriptors (RLIMIT_NOFILE); %d members need %d\n",
            (unsigned long long)rl.rlim_cur, g.n, need);
}

static void usage(void) {
  fprintf(stderr, "usage: coord_sim [--members N] [--heartbeat-ms MS] [--steady-s S] "
                  "[--reporters K] [--dump-bytes B] [--rss-cap-mb MB] [--timeout-s S] "
                  "[--whole-views] [--text-views]\n");
  exit(2);
}

int main(int argc, char **argv) {
  g.n = 1024, g.hb_ms = 1000, g.steady_s = 5, g.reporters = 2, g.dump_bytes = 4096;
  g.timeout_s = 120, g.rss_cap_mb = 4096;
  static const struct option opts[] = {
      {"members", 1, 0, 'n'},   {"heartbeat-ms", 1, 0, 'h'}, {"steady-s", 1, 0, 's'},
      {"reporters", 1, 0, 'r'}, {"dump-bytes", 1, 0, 'd'},   {"rss-cap-mb", 1, 0, 'c'},
      {"timeout-s", 1, 0, 't'}, {"whole-views", 0, 0, 'w'},
      {"text-views", 0, 0, 'x'}, {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
      case 'n': g.n = atoi(optarg); break;
      case 'h': g.hb_ms = atoi(optarg); break;
      case 's': g.steady_s = atoi(optarg); break;
      case 'r': g.reporters = atoi(optarg); break;
      case 'd': g.dump_bytes = atoi(optarg); break;
      case 'c': g.rss_cap_mb = atoi(optarg); break;
      case 't': g.timeout_s = atoi(optarg); break;
      case 'w': g.whole = 1; break;
      case 'x': g.text_views = 1; break;
      default: usage();
    }
  }
  if (g.n < 8 || g.n > 1048576 || g.hb_ms < 10 || g.reporters < 1 || g.dump_bytes < 64 ||
      g.timeout_s < 1 || g.steady_s < 0) {
    fprintf(stderr, "coord_sim: --members must be 8..1048576, --heartbeat-ms >= 10, "
                    "--reporters >= 1, --dump-bytes >= 64\n");
    return 2;
  }
  raise_nofile(g.n + 256);
  signal(SIGPIPE, SIG_IGN);
  snprintf(g.dump_dir, sizeof(g.dump_dir), "/tmp/coord_sim.XXXXXX");
  if (!mkdtemp(g.dump_dir)) {
    perror("coord_sim: mkdtemp");
    return 2;
  }
  int port_pipe[2], ctl_pipe[2];
  if (pipe(port_pipe) || pipe(ctl_pipe)) return 2;
  g.coord_pid = fork();
  if (g.coord_pid < 0) return 2;
  if (g.coord_pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* (the simulator killed: no coordinator left behind) */
    close(ctl_pipe[1]);
    close(port_pipe[0]);
    _exit(coord_child(port_pipe[1], ctl_pipe[0]));
  }
  close(ctl_pipe[0]);
  close(port_pipe[1]);
  int said[2];
  if (read(port_pipe[0], said, sizeof(said)) != (ssize_t)sizeof(said)) {
    fprintf(stderr, "coord_sim: the coordinator did not start\n");
    return 1;
  }
  g.port = said[0];
  g.coord_epoll = said[1];
  ftc__proto_init();
  lws_set_log_level(LLL_ERR, NULL);
  /* FTCOMM_COORD_LOOP picks the coordinator's loop (the child read it);
   * the simulator waits in epoll whenever it can, so that its own walk of
   * 16k sessions does not slow the members it plays. */
  unsetenv("FTCOMM_COORD_LOOP");
  ftc__param_reset();
  g.nm = g.n + 1;
  g.m = ftc__calloc((size_t)g.nm, sizeof(*g.m));
  if (!g.m) return 2;
  for (int i = 0; i < g.nm; i++) g.m[i].slot = i;
  for (int k = 0; k < SAMPLES; k++) g.m[(g.n / SAMPLES) * k + 1].sample = 1;
  g.crash_slot = g.n / 2;
  g.hang_slot = g.n / 4 + 3;
  g.m[g.crash_slot].sample = g.m[g.hang_slot].sample = 0;
  static struct lws_protocols protocols[] = {
      {FTC__PROTO_WS_NAME, sim_callback, 0, 16 * 1024, 0, NULL, 0}, {NULL, NULL, 0, 0, 0, NULL, 0}};
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof(info));
  info.port = CONTEXT_PORT_NO_LISTEN;
  info.protocols = protocols;
  info.count_threads = 1;
  /* (lws sizes its descriptor table from the limit raised above: it then
   * indexes it; below the limit it walks it on every event.) No lws
   * validity timer: it is re-filed in a sorted list on every message
   * (coordinator.c says more). */
  info.retry_and_idle_policy = &no_validity_timer;
  /* lws's limit on a connection's handshake: a coordinator accepting
   * thousands at once through its poll loop answers late (at 16,384 the
   * sessions past about 10,000 ran into a limit of 60 s). */
  info.timeout_secs = 600;
  if (ftc__evloop_open(&g.ev) > 0)
    ftc__evloop_setup(&g.ev, &info);
  else
    fprintf(stderr, "coord_sim: no epoll loop for the members (%s); they wait in poll(2)\n",
            g.ev.why);
  g.ctx = lws_create_context(&info);
  if (!g.ctx) {
    fprintf(stderr, "coord_sim: cannot create the libwebsockets context\n");
    return 2;
  }
  start_phase(P_CONNECT);
  lws_sul_schedule(g.ctx, 0, &g.sul, tick, TICK_US);
  while (!g.done)
    if (ftc__evloop_service(&g.ev, g.ctx) < 0) break;
  int rc = g.errors ? 1 : 0;
  if (g.phase == P_DONE && g.dumps_sent != g.n - 2) {
    fprintf(stderr, "coord_sim: %d of %d members were asked for a dump\n", g.dumps_sent, g.n - 2);
    rc = 1;
  }
  close(ctl_pipe[1]);
  int status;
  waitpid(g.coord_pid, &status, 0);
  lws_context_destroy(g.ctx);
  ftc__evloop_close(&g.ev);
  for (int i = 0; i < g.nm; i++) {
    ftc__frameq_clear(&g.m[i].outq);
    ftc__free(g.m[i].rx);
    keep_view(&g.m[i], NULL, 0);
  }
  ftc__free(g.m);
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", g.dump_dir);
  if (system(cmd)) {
  }
  if (rc) fprintf(stderr, "coord_sim: %d errors\n", g.errors);
  return rc;
}
