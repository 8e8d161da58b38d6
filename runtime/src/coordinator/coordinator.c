/*
 * coordinator.c - the job's membership coordinator: a libwebsockets server
 * with its own service thread that owns every session, the member table and
 * the epoch counter. It authenticates hellos, refuses anything malformed
 * with an error message (and stays up), forms and announces epochs, drops
 * members that leave, disconnect, stop heartbeating or are reported failed,
 * admits joiners at the next epoch, and reassembles uploaded dumps.
 *
 * Threads and locks: the service thread ("ftc-coord") alone touches the lws
 * context, sessions, members and epochs. Other threads talk to it through
 * co->lock, which guards only the published stats snapshot and the command
 * queue, followed by lws_cancel_service() to wake the service thread. co->lock
 * is a leaf: nothing else is locked or called into lws while it is held.
 */
#include "ftc_coord.h"
#include "coordinator/evloop.h"
#include "coordinator/incident.h"

#include <errno.h>
#include <fcntl.h>
#include <libwebsockets.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftc_addr.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_param.h"
#include "ftc_time.h"
#include "proto/proto.h"

#define TICK_MS_MAX 250
#define DUMP_MAX_TOTAL (256ull * 1024 * 1024)
/* A member's copies of one incident after its first (store_dump). */
#define DUMP_MAX_COPIES 8
#define MAX_QUEUED 4096 /* messages waiting for one session's writeable callback */
/* World sizes from which lws looks sessions up by an index of the
 * process's descriptor limit (ftc__coord_create). */
#define FD_INDEX_MIN_WORLD 1024
static const lws_retry_bo_t no_validity_timer; /* (zero: no ping, no hang-up) */
/* A whole view at least this long goes deflated to ranks that said
 * "deflate" (smaller ones: text, as their zlib header would not pay). */
#define DEFLATE_MIN (16 * 1024)
#define MAX_INCIDENTS 8 /* records kept up to date (incident.json); older ones stay as written */

/* M_STANDBY: said hello with "standby" (ftc_comm_create_begin): it holds its
 * slot and heartbeats, but is neither admitted nor counted for the first
 * epoch until its "join" makes it M_PENDING. */
enum member_state { M_PENDING, M_ACTIVE, M_STANDBY };

struct session;

/* One process incarnation admitted by a hello. Freed when it leaves the job. */
typedef struct member {
  uint64_t id;
  int slot;
  int state;
  int rank; /* in the current view when M_ACTIVE */
  uint64_t joined_epoch;
  uint64_t ready_epoch; /* its first completed step boundary (heartbeat "ready"), 0: fresh */
  char addr[FTC__PROTO_MAX_ADDR + 1];
  char host[64];
  int64_t pid;
  /* The data-plane protocol its hello said ("dataplane"): 0 none said (an
   * older rank, or FTCOMM_BACKEND=nccl); -1 not heard yet (taken from a
   * reconnecting rank's view by a restarted coordinator). */
  int dataplane;
  int delta;            /* its hello said "delta": it takes view deltas */
  int deflate;          /* its hello said "deflate": a big whole view goes deflated */
  uint64_t sent_epoch;  /* the epoch of the last view (whole or delta) queued to it */
  uint64_t in_epoch;    /* the last epoch this coordinator formed with it */
  int sent_state;       /* its "fresh" state as that epoch's view wrote it */
  struct session *sess; /* NULL once detached */
  int64_t last_seen_ns;
  int64_t suspect_ns;    /* when a rank first reported it failed in this epoch, 0: not */
  int64_t detached_ns;   /* an epoch member whose session closed: since when, 0: attached */
  int probes;            /* its hello said it answers probes */
  uint64_t reach_epoch;  /* the epoch its last reach answered, 0: none */
  uint64_t *unreach;     /* that reach: the members it could not connect to */
  int nunreach;
} member_t;

/* A dump being reassembled from fragments. */
typedef struct dump_asm {
  char incident[FTC__PROTO_MAX_NAME + 1];
  int rank;
  char *buf;
  size_t len, total;
} dump_asm_t;

/* Per-connection state, allocated and zeroed by lws (per_session_data). */
typedef struct session {
  struct lws *wsi;
  member_t *m; /* set once the hello is accepted */
  int refused; /* an error is queued; input is ignored until the close */
  char *rx;
  size_t rx_len, rx_cap;
  ftc__frameq_t outq;
  size_t tx_off; /* bytes of the head frame already written (it goes in pieces) */
  dump_asm_t *dump;
  int dump_refused_logged;
  int dumps_dropped; /* uploads past DUMP_MAX_COPIES (logged once at warning) */
  char peer[64];
} session_t;

enum cmd_kind { CMD_DUMPS, CMD_SLOT_LOST };
typedef struct cmd {
  struct cmd *next;
  int kind;
  int slot;
  char *incident;
  char *reason;
} cmd_t;

struct ftc__coord {
  /* Immutable after create. */
  char *job, *token, *bind_host, *dump_dir;
  int world_size, min_size, heartbeat_ms, hb_timeout_ms, hello_timeout_s;
  int port;
  struct lws_context *ctx;
  ftc__evloop_t ev; /* the loop the service thread waits in (epoll, or poll: ev.loop NULL) */
  struct lws_protocols protocols[3];
  unsigned char *tx_scratch; /* LWS_PRE + WRITE_PIECE: a piece of a shared frame (on_writeable) */
  pthread_t thread;
  int stop; /* atomic */

  /* Owned by the service thread. */
  lws_sorted_usec_list_t tick;
  member_t **members;     /* every member, in no order */
  int nmembers, cap;
  member_t **by_slot;     /* world_size entries: the member holding each slot */
  member_t **view; /* current epoch, rank order */
  int view_n, view_cap;
  int view_dirty; /* an active member was dropped since the last epoch */
  uint64_t *left_ids; /* members of the epoch that left cleanly since: the next view says so */
  int nleft, left_cap;
  struct drop_rec *drops; /* members of the epoch dropped since, and why: the next view says so */
  int ndrops, drops_cap;
  struct drop_rec *epoch_drops; /* the current epoch's verdict (what drops held when it was
                                 * formed: the buffers swap), also for a member that asks for
                                 * it whole (view_request: a change did not apply there) */
  int nepoch_drops, epoch_drops_cap;
  uint64_t *epoch_left; /* the current epoch's "left" (left_ids when it was formed: swapped
                         * the same way), for a member that asks for it whole */
  int nepoch_left, epoch_left_cap;
  int lost_since_epoch; /* ... and not by a clean leave */
  uint64_t epoch, max_known_epoch, next_id;
  int formed; /* this coordinator has announced an epoch */
  int form_retry; /* forming the next epoch ran out of memory: the tick retries */
  int stopping;
  int below_min_logged;
  int revoke_pending;    /* a rank reported the current epoch broken: a new one follows */
  uint64_t backend_epoch; /* the epoch whose backend blob is held, 0: none */
  char *backend_blob;     /* that blob (first one published wins), relayed to its members */
  int64_t revoke_ns;     /* when the first such report came */
  uint64_t dumps_epoch;  /* the epoch whose hang already triggered dump requests */
  ftc__incident_t *incidents[MAX_INCIDENTS]; /* the newest records, oldest first */
  int nincidents;
  ftc__coord_stats_t counts; /* lost/left/refused tallies */
  int stats_dirty;
  int64_t stats_pub_ns, view_pub_ns; /* when publish_stats and publish_view last ran */
  uint64_t view_pub_epoch;           /* the epoch publish_view last published */
  int view_pub_dirty;                /* publish_view was put off (publish_stats) */
  uint64_t prospect_sig; /* the last prospect sent (a hash of its epoch and members), 0: none */
  /* The members of the last epoch this coordinator formed (not one adopted
   * from a rank's view), as (member id, slot): the base of the next
   * epoch's delta (docs/protocol.md, "view_delta"). */
  struct sent_rec { uint64_t id; int slot; } *sent;
  int nsent;
  uint64_t sent_of; /* that epoch, 0: none */
  int quorum_lost_logged; /* fewer than half the epoch's members are heard (tick) */
  int64_t rejoin_until_ns; /* after an outage: epoch members away are kept until then */
  uint64_t probe_epoch;  /* the broken epoch whose members were asked to probe, 0: none */
  int64_t probe_ns;      /* when */
  uint64_t probe_decided_epoch; /* the epoch whose probe answers were judged, 0: none */

  ftc__coord_event_fn on_event;
  void *event_arg;
  int (*process_gone)(void *arg, int slot, int64_t pid);
  void *process_gone_arg;

  /* Shared; under lock. */
  pthread_mutex_t lock;
  ftc__coord_stats_t stats;
  ftc__coord_view_t pub_view; /* the current epoch, for ftc__coord_get_view */
  cmd_t *cmd_head, *cmd_tail;
};

static void emit(ftc__coord_t *co, const ftc__coord_event_t *ev) {
  if (co->on_event && !co->stopping) co->on_event(co->event_arg, ev);
}

/* Publish the current epoch for ftc__coord_get_view (membership, and who is
 * connected). Keeps the previous copy when out of memory. */
static void publish_view(ftc__coord_t *co) {
  ftc__coord_member_t *mm = ftc__calloc((size_t)(co->view_n ? co->view_n : 1), sizeof(*mm));
  if (!mm) return;
  int n = 0;
  for (int r = 0; r < co->view_n; r++) {
    const member_t *m = co->view[r];
    if (!m) continue;
    ftc__coord_member_t *c = &mm[n++];
    c->rank = r;
    c->slot = m->slot;
    c->member_id = m->id;
    c->joined_epoch = m->joined_epoch;
    c->connected = m->sess != NULL;
    snprintf(c->addr, sizeof(c->addr), "%s", m->addr);
    snprintf(c->host, sizeof(c->host), "%s", m->host);
  }
  pthread_mutex_lock(&co->lock);
  ftc__coord_member_t *old = co->pub_view.members;
  co->pub_view = (ftc__coord_view_t){co->formed ? co->epoch : 0, n, mm};
  pthread_mutex_unlock(&co->lock);
  ftc__free(old);
}

#define STATS_PUB_NS (2 * 1000000LL)
#define VIEW_PUB_NS (100 * 1000000LL)

static void publish_stats(ftc__coord_t *co) {
  ftc__coord_stats_t s = co->counts;
  s.epoch = co->epoch;
  s.epoch_size = co->view_n;
  s.connected = 0;
  s.pending = 0;
  s.standby = 0;
  for (int i = 0; i < co->nmembers; i++) {
    if (co->members[i]->sess) s.connected++;
    if (co->members[i]->state == M_PENDING) s.pending++;
    if (co->members[i]->state == M_STANDBY) s.standby++;
  }
  pthread_mutex_lock(&co->lock);
  co->stats = s;
  pthread_mutex_unlock(&co->lock);
  co->stats_dirty = 0;
  /* The view's copy costs O(members) with a string copy each: at once for
   * a new epoch, else at most every VIEW_PUB_NS (who is connected). */
  int64_t now = ftc__now_ns();
  co->stats_pub_ns = now;
  if (co->view_pub_epoch != (co->formed ? co->epoch : 0) || now - co->view_pub_ns >= VIEW_PUB_NS ||
      !co->ctx) {
    co->view_pub_ns = now;
    co->view_pub_epoch = co->formed ? co->epoch : 0;
    co->view_pub_dirty = 0;
    publish_view(co);
  } else {
    co->view_pub_dirty = 1;
  }
}

/* After a callback: the counters are published at most every STATS_PUB_NS
 * (each costs O(members): thousands of hellos or drops in a burst would
 * cost O(members^2)), a new epoch at once; the tick publishes the rest. */
static void maybe_publish(ftc__coord_t *co) {
  if (!co->stats_dirty || co->stopping) return;
  if (co->view_pub_epoch != (co->formed ? co->epoch : 0) ||
      ftc__now_ns() - co->stats_pub_ns >= STATS_PUB_NS)
    publish_stats(co);
}

/* ---- sending ---- */

/* A session without a connection (wsi NULL) is an offline coordinator's
 * (ftc__coord_offline_*): what it is sent stays queued, and closing it is
 * its owner's call. */
static void session_timeout(session_t *s, enum pending_timeout why, int secs) {
  if (s->wsi) lws_set_timeout(s->wsi, why, secs);
}

static void session_writable(session_t *s) {
  if (s->wsi) lws_callback_on_writable(s->wsi);
}

static void kill_session(session_t *s) { session_timeout(s, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC); }

/* Queue a message (reference stolen) on a session and ask for a writeable
 * callback; with close_after the session closes once it is written. */
static void send_msg(session_t *s, json_t *msg, int close_after) {
  ftc__frame_t *f = ftc__proto_encode(msg, LWS_PRE);
  if (!f) {
    FTC_ERROR(FTC_SUB_COORD, "out of memory encoding a message for %s; closing the session",
              s->peer);
    kill_session(s);
    return;
  }
  f->close_after = close_after;
  if (s->outq.count >= MAX_QUEUED && !close_after) {
    /* A peer that does not read its messages is not followed forever. */
    FTC_WARN(FTC_SUB_COORD, "%s does not read its messages (%zu queued); closing the session",
             s->peer, s->outq.count);
    ftc__frame_release(f);
    s->refused = 1; /* ignore what it still sends until the close */
    kill_session(s);
    return;
  }
  ftc__frameq_push(&s->outq, f);
  session_writable(s);
}

/* Refuse what a peer sent: log why, send an error, close the session. */
static void refuse(ftc__coord_t *co, session_t *s, ftc__perr_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void refuse(ftc__coord_t *co, session_t *s, ftc__perr_t code, const char *fmt, ...) {
  char reason[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof(reason), fmt, ap);
  va_end(ap);
  if (s->refused) return;
  s->refused = 1;
  co->counts.refused++;
  co->stats_dirty = 1;
  FTC_WARN(FTC_SUB_COORD, "job %s: refusing %s%s: %s: %s", co->job, s->peer,
           s->m ? " (a member)" : "", ftc__perr_name(code), reason);
  /* A peer that never reads must not hold the session open (set first: a
   * failing send_msg kills the session at once instead). */
  session_timeout(s, PENDING_TIMEOUT_USER_OK, 5);
  send_msg(s, ftc__proto_error(code, reason), 1);
}

/* ---- members and epochs ---- */

static member_t *find_slot(ftc__coord_t *co, int slot) {
  return slot >= 0 && slot < co->world_size ? co->by_slot[slot] : NULL;
}

static void add_member(ftc__coord_t *co, member_t *m) {
  co->members[co->nmembers++] = m;
  co->by_slot[m->slot] = m;
}

static member_t *find_id(ftc__coord_t *co, uint64_t id) {
  for (int i = 0; i < co->nmembers; i++)
    if (co->members[i]->id == id) return co->members[i];
  return NULL;
}

static int reserve_members(ftc__coord_t *co, int more) {
  if (co->nmembers + more <= co->cap) return 0;
  int ncap = co->cap ? co->cap : 16;
  while (ncap < co->nmembers + more) ncap *= 2;
  member_t **nm = ftc__realloc(co->members, (size_t)ncap * sizeof(*nm));
  if (!nm) return -1;
  co->members = nm;
  co->cap = ncap;
  return 0;
}

/* Send the current epoch to one session (a member that reconnected after
 * missing it). Nothing while the epoch has dropped members not yet replaced
 * by the next one. */
/* Member m as rank r of an epoch's view on the wire; joined: its
 * joined_epoch there. */
static ftc__wire_member_t wire_member(const member_t *m, int r, uint64_t joined) {
  return (ftc__wire_member_t){r, m->slot, m->id, joined, m->addr, m->ready_epoch ? 2 : 1};
}

/* The number of the next epoch this coordinator forms (above what any rank
 * said it knows). */
static uint64_t next_epoch(const ftc__coord_t *co) {
  return (co->epoch > co->max_known_epoch ? co->epoch : co->max_known_epoch) + 1;
}

/* Queue the encoded frame f on session s without copying it (every member
 * of an epoch is sent the same view): 0, or -1 when out of memory. */
static int queue_ref(session_t *s, ftc__frame_t *f) {
  ftc__frame_t *c = ftc__frame_ref(f);
  if (!c) return -1;
  ftc__frameq_push(&s->outq, c);
  session_writable(s);
  return 0;
}

static json_t *with_epoch_verdict(const ftc__coord_t *co, json_t *v);

static void send_current_view(ftc__coord_t *co, session_t *s) {
  ftc__wire_member_t *wm = ftc__calloc((size_t)(co->view_n ? co->view_n : 1), sizeof(*wm));
  if (!wm) return;
  for (int r = 0; r < co->view_n; r++) {
    member_t *m = co->view[r];
    if (!m) {
      ftc__free(wm);
      return;
    }
    wm[r] = wire_member(m, r, m->joined_epoch);
  }
  /* With the verdict and the "left" the epoch came with, so that a rank
   * that asked for it whole records the same reasons as the others. */
  json_t *v = with_epoch_verdict(co, ftc__proto_view(co->epoch, wm, co->view_n, NULL));
  if (s->m && s->m->deflate) {
    ftc__frame_t *f = ftc__proto_encode(v, LWS_PRE);
    ftc__frame_t *fz = f && f->len >= DEFLATE_MIN ? ftc__proto_deflate(f, LWS_PRE) : NULL;
    if (fz) ftc__frame_release(f), f = fz;
    if (!f || queue_ref(s, f) != 0) kill_session(s);
    ftc__frame_release(f);
  } else {
    send_msg(s, v, 0);
  }
  if (s->m) s->m->sent_epoch = co->epoch;
  ftc__free(wm);
  if (co->backend_blob && co->backend_epoch == co->epoch)
    send_msg(s, ftc__proto_backend(co->epoch, co->backend_blob), 0);
}

/* A coordinator that has formed no epoch yet meets a rank of a running job
 * (it restarted, the ranks kept training): take the rank's view as the
 * current epoch. Its members are active and wait for their ranks to
 * reconnect; one that does not within the heartbeat timeout is lost. Ranks
 * that returned before, without a view (they had missed the epoch), are
 * taken in if the view names them, and are sent it. Anyone else already
 * here makes the view unusable (a standby member only if the view names its
 * slot or its id): the rank then joins as a new member. */
static void adopt_view(ftc__coord_t *co, const ftc__hello_t *h) {
  if (co->formed || h->view_n <= 0 || h->known_epoch == 0) return;
  int self = 0;
  for (int i = 0; i < h->view_n; i++) {
    const ftc__wire_member_t *w = &h->view[i];
    if (w->slot >= co->world_size || w->member_id == 0) return;
    for (int j = 0; j < i; j++)
      if (h->view[j].slot >= w->slot || h->view[j].member_id == w->member_id) return;
    if (w->member_id == h->prev_member_id && w->slot == h->slot) self = 1;
  }
  if (!self) return;
  for (int k = 0; k < co->nmembers; k++) {
    member_t *m = co->members[k];
    if (m->state == M_STANDBY) {
      /* In no epoch, it waits for its join; but a view that names its slot
       * (the member it replaces) or its id (given by this coordinator, in
       * another numbering) cannot be taken with it here. */
      for (int i = 0; i < h->view_n; i++)
        if (h->view[i].member_id == m->id || h->view[i].slot == m->slot) return;
      continue;
    }
    int named = 0;
    for (int i = 0; i < h->view_n; i++)
      if (h->view[i].member_id == m->id && h->view[i].slot == m->slot) named = 1;
    if (!named || m->state != M_PENDING) return;
  }
  int earlier = co->nmembers;
  if (reserve_members(co, h->view_n)) return;
  member_t **nv = ftc__realloc(co->view, (size_t)h->view_n * sizeof(*nv));
  if (!nv) return;
  co->view = nv;
  co->view_cap = h->view_n;
  member_t **fresh = ftc__calloc((size_t)h->view_n, sizeof(*fresh));
  if (!fresh) return;
  for (int i = 0; i < h->view_n; i++) {
    if (find_id(co, h->view[i].member_id)) continue;
    if (!(fresh[i] = ftc__calloc(1, sizeof(member_t)))) {
      /* Undo: nothing was announced, the rank becomes an ordinary joiner. */
      for (int j = 0; j < i; j++) ftc__free(fresh[j]);
      ftc__free(fresh);
      return;
    }
  }
  int64_t now = ftc__now_ns();
  for (int i = 0; i < h->view_n; i++) {
    const ftc__wire_member_t *w = &h->view[i];
    member_t *m = find_id(co, w->member_id);
    if (!m) {
      m = fresh[i];
      m->id = w->member_id;
      m->slot = w->slot;
      m->dataplane = -1; /* said by its own hello when it returns */
      m->last_seen_ns = now;
      snprintf(m->addr, sizeof(m->addr), "%s", w->addr);
      add_member(co, m);
    }
    m->state = M_ACTIVE;
    m->rank = i;
    m->joined_epoch = w->joined_epoch;
    /* The view says who held state; not said (an older rank): all did but
     * those admitted in that epoch. */
    if (w->state == 2 || (!w->state && w->joined_epoch < h->known_epoch))
      m->ready_epoch = h->known_epoch;
    co->view[i] = m;
    if (m->id > co->next_id) co->next_id = m->id;
  }
  ftc__free(fresh);
  co->view_n = h->view_n;
  co->epoch = h->known_epoch;
  co->formed = 1;
  co->stats_dirty = 1;
  FTC_WARN(FTC_SUB_COORD,
           "job %s: adopted running epoch %llu (%d members) from slot %d; waiting for its ranks "
           "to reconnect",
           co->job, (unsigned long long)co->epoch, co->view_n, h->slot);
  /* Those that came back without a view learn the epoch now. */
  for (int k = 0; k < earlier; k++)
    if (co->members[k]->sess && co->members[k]->state == M_ACTIVE)
      send_current_view(co, co->members[k]->sess);
}

/* A member of the current epoch dropped since it was formed: the next
 * view names it with the verdict (docs/protocol.md, view "dropped"). */
struct drop_rec {
  uint64_t id;
  int rank, slot;
  const char *reason; /* static */
  char detail[FTC__PROTO_MAX_DROP_DETAIL + 1];
};

/* The current epoch's verdict as the wire says it; NULL when there is none
 * or out of memory (the view then goes without it). */
static ftc__wire_dropped_t *epoch_wire_drops(const ftc__coord_t *co) {
  ftc__wire_dropped_t *wd = co->nepoch_drops ? ftc__calloc((size_t)co->nepoch_drops, sizeof(*wd)) : NULL;
  for (int i = 0; wd && i < co->nepoch_drops; i++)
    wd[i] = (ftc__wire_dropped_t){co->epoch_drops[i].id, co->epoch_drops[i].reason,
                                  co->epoch_drops[i].detail};
  return wd;
}

/* v with the current epoch's verdict and the members that left before it
 * (out of memory: without the verdict). */
static json_t *with_epoch_verdict(const ftc__coord_t *co, json_t *v) {
  v = ftc__proto_view_left(v, co->epoch_left, co->nepoch_left);
  ftc__wire_dropped_t *wd = v ? epoch_wire_drops(co) : NULL;
  if (wd) v = ftc__proto_view_dropped(v, wd, co->nepoch_drops);
  ftc__free(wd);
  return v;
}

static int session_gone(const struct member *m);
static int64_t evidence_ns(const ftc__coord_t *co);

/* Why m is dropped, in a word: it left; its session is gone (crashed); it
 * is connected but silent past the evidence time (hung); else lost (the
 * host declared its slot lost, ...). Out of memory it is left out. */
static const char *drop_word(const ftc__coord_t *co, const member_t *m, int left) {
  return left                                                 ? "left"
         : session_gone(m)                                    ? "crashed"
         : ftc__now_ns() - m->last_seen_ns > evidence_ns(co) ? "hung"
                                                              : "lost";
}

static void incidents_dropped(ftc__coord_t *co, const member_t *m, const char *word,
                              const char *why);
static void incidents_epoch(ftc__coord_t *co, uint64_t e);

static void note_drop(ftc__coord_t *co, const member_t *m, int left, const char *why) {
  const char *word = drop_word(co, m, left);
  incidents_dropped(co, m, word, why);
  if (co->ndrops == co->drops_cap) {
    int ncap = co->drops_cap ? 2 * co->drops_cap : 16;
    struct drop_rec *nd = ftc__realloc(co->drops, (size_t)ncap * sizeof(*nd));
    if (!nd) return;
    co->drops = nd, co->drops_cap = ncap;
  }
  struct drop_rec *d = &co->drops[co->ndrops++];
  d->id = m->id;
  d->rank = m->rank;
  d->slot = m->slot;
  d->reason = word;
  snprintf(d->detail, sizeof(d->detail), "%s", why ? why : "");
}

/* Remove a member from the job (it left, was lost, timed out or was
 * reported). Its session, if any, is detached; the caller closes it. The
 * next epoch is formed by maybe_form_epoch(). */
static void drop_member(ftc__coord_t *co, member_t *m, int left, const char *why) {
  if (m->state == M_ACTIVE) co->view_dirty = 1, note_drop(co, m, left, why);
  if (left && m->state == M_ACTIVE) {
    /* Named in the next view, so that its peers do not revoke an epoch for
     * a rank that finished (docs/recovery.md, the watchdog). Out of memory
     * it is left out: they still see its connections closed. */
    if (co->nleft == co->left_cap) {
      int ncap = co->left_cap ? 2 * co->left_cap : 16;
      uint64_t *nl = ftc__realloc(co->left_ids, (size_t)ncap * sizeof(*nl));
      if (nl) co->left_ids = nl, co->left_cap = ncap;
    }
    if (co->nleft < co->left_cap) co->left_ids[co->nleft++] = m->id;
  }
  if (left) {
    co->counts.left++;
  } else {
    co->counts.lost++;
    co->lost_since_epoch = 1;
  }
  if (m->state == M_ACTIVE)
    FTC_INFO(FTC_SUB_COORD, "job %s: rank %d (slot %d, member %llu) %s in epoch %llu", co->job,
             m->rank, m->slot, (unsigned long long)m->id, why, (unsigned long long)co->epoch);
  else
    FTC_INFO(FTC_SUB_COORD, "job %s: slot %d (member %llu) %s before joining an epoch",
             co->job, m->slot, (unsigned long long)m->id, why);
  ftc__coord_event_t ev = {.kind = FTC__COORD_EV_DROPPED, .epoch = co->epoch,
                           .slot = m->slot, .rank = m->state == M_ACTIVE ? m->rank : -1,
                           .member_id = m->id, .left = left, .reason = why,
                           .pid = m->pid};
  emit(co, &ev);
  if (m->sess) m->sess->m = NULL;
  for (int i = 0; i < co->view_n; i++)
    if (co->view[i] == m) co->view[i] = NULL;
  for (int i = 0; i < co->nmembers; i++) {
    if (co->members[i] == m) {
      co->members[i] = co->members[--co->nmembers];
      co->by_slot[m->slot] = NULL;
      break;
    }
  }
  ftc__free(m->unreach);
  ftc__free(m);
  co->stats_dirty = 1;
}

static int cmp_slot(const void *a, const void *b) {
  const member_t *x = *(member_t *const *)a, *y = *(member_t *const *)b;
  return (x->slot > y->slot) - (x->slot < y->slot);
}

static void send_prospect(ftc__coord_t *co);

/* Epoch e (its view wm, n members in rank order, ranks assigned) as the
 * change from prev, the last epoch this coordinator formed: who left,
 * who joined, who holds state since, and the hash of the whole. The
 * verdict on the members it drops (wd, co->nepoch_drops; may be NULL) and those
 * that left go with it as with a whole view. NULL when out of memory. */
static ftc__frame_t *encode_delta(ftc__coord_t *co, uint64_t e, uint64_t prev,
                                  const ftc__wire_member_t *wm, int n,
                                  const ftc__wire_dropped_t *wd) {
  uint64_t *removed = ftc__malloc((size_t)(co->nsent + 1) * sizeof(*removed));
  uint64_t *ready = ftc__malloc((size_t)(n + 1) * sizeof(*ready));
  ftc__wire_member_t *joined = ftc__malloc((size_t)(n + 1) * sizeof(*joined));
  ftc__frame_t *f = NULL;
  if (!removed || !ready || !joined) goto out_free;
  int nr = 0, nj = 0, nready = 0, kept = 0, held = 0;
  /* Those named in "dropped" or "left" are removed by that alone: the
   * list says only the others (a verdict lost to a failed allocation). */
  for (int i = 0; i < co->nsent; i++) {
    const member_t *x = co->by_slot[co->sent[i].slot];
    if (x && x->id == co->sent[i].id && x->state != M_STANDBY) continue;
    int named = 0;
    for (int k = 0; wd && !named && k < co->nepoch_drops; k++) named = wd[k].member_id == co->sent[i].id;
    for (int k = 0; !named && k < co->nleft; k++) named = co->left_ids[k] == co->sent[i].id;
    if (!named) removed[nr++] = co->sent[i].id;
  }
  for (int r = 0; r < n; r++) {
    const member_t *m = co->view[r];
    if (m->in_epoch != prev) {
      joined[nj++] = wm[r];
      continue;
    }
    kept++;
    held += wm[r].state == 2;
    if (m->sent_state == 1 && wm[r].state == 2) ready[nready++] = m->id;
  }
  /* The first change after a job starts finds every rank holding state:
   * said in one word, not N ids to each of N members. */
  int ready_all = nready > 1 && held == kept;
  json_t *v = ftc__proto_view_delta(e, prev, ftc__proto_view_hash(wm, n), n, removed, nr, joined,
                                    nj, ready, ready_all ? -1 : nready);
  v = ftc__proto_view_left(v, co->left_ids, co->nleft);
  if (wd) v = ftc__proto_view_dropped(v, wd, co->nepoch_drops);
  f = ftc__proto_encode(v, LWS_PRE);
out_free:
  ftc__free(removed);
  ftc__free(ready);
  ftc__free(joined);
  return f;
}

/* Epoch e is formed with view wm: the base of the next one's delta. Out of
 * memory, the next epoch goes whole to everyone. */
static void remember_sent(ftc__coord_t *co, uint64_t e, const ftc__wire_member_t *wm, int n) {
  struct sent_rec *ns = ftc__realloc(co->sent, (size_t)(n ? n : 1) * sizeof(*ns));
  if (!ns) {
    co->sent_of = 0;
    return;
  }
  co->sent = ns;
  co->nsent = n;
  co->sent_of = e;
  for (int r = 0; r < n; r++) {
    member_t *m = co->view[r];
    ns[r] = (struct sent_rec){m->id, m->slot};
    m->in_epoch = e;
    m->sent_state = wm[r].state;
  }
}

/* Form and announce the next epoch when the membership changed: the first
 * once every slot has joined, later ones without dropped members and with
 * waiting joiners, while at least min_size members remain. */
static void maybe_form_epoch(ftc__coord_t *co) {
  /* (every hello of a starting job comes here: no O(members) walk yet) */
  if (!co->formed && co->nmembers < co->world_size) return;
  int pending = 0, standby = 0;
  for (int i = 0; i < co->nmembers; i++) {
    if (co->members[i]->state == M_PENDING) pending++;
    if (co->members[i]->state == M_STANDBY) standby++;
  }
  int n = co->nmembers - standby;
  if (!co->formed) {
    /* The first epoch of this coordinator (also after a restart, when ranks
     * bring their known epoch) waits for every slot. */
    if (n < co->world_size) return;
  } else {
    if (!co->view_dirty && pending == 0 && !co->revoke_pending) return;
    if (n < co->min_size) {
      /* Ranks leaving cleanly at the end of a job are no cause for alarm. */
      if (!co->below_min_logged) {
        FTC_LOG(co->lost_since_epoch ? FTC_LOG_WARN : FTC_LOG_INFO, FTC_SUB_COORD,
                "job %s: %d members remain, below the minimum of %d; waiting for joiners "
                "before the next epoch",
                co->job, n, co->min_size);
        ftc__coord_event_t ev = {.kind = FTC__COORD_EV_BELOW_MIN, .epoch = co->epoch, .size = n};
        emit(co, &ev);
      }
      co->below_min_logged = 1;
      return;
    }
  }
  co->below_min_logged = 0;
  if (n > co->view_cap) {
    member_t **nv = ftc__realloc(co->view, (size_t)n * sizeof(*nv));
    if (!nv) {
      FTC_ERROR(FTC_SUB_COORD, "job %s: out of memory forming an epoch; retrying later",
                co->job);
      co->form_retry = 1;
      return;
    }
    co->view = nv;
    co->view_cap = n;
  }
  ftc__wire_member_t *wm = ftc__calloc((size_t)n, sizeof(*wm));
  if (!wm) {
    FTC_ERROR(FTC_SUB_COORD, "job %s: out of memory forming an epoch; retrying later", co->job);
    co->form_retry = 1;
    return;
  }
  uint64_t e = next_epoch(co);
  uint64_t prev = co->formed ? co->epoch : 0;
  for (int i = 0, k = 0; i < co->nmembers; i++)
    if (co->members[i]->state != M_STANDBY) co->view[k++] = co->members[i];
  qsort(co->view, (size_t)n, sizeof(*co->view), cmp_slot);
  for (int r = 0; r < n; r++) {
    member_t *m = co->view[r];
    m->rank = r;
    m->state = M_ACTIVE;
    if (!m->joined_epoch) m->joined_epoch = e;
    wm[r] = wire_member(m, r, m->joined_epoch);
  }
  co->view_n = n;
  co->epoch = e;
  co->formed = 1;
  co->view_dirty = 0;
  co->revoke_pending = 0;
  for (int i = 0; i < co->nmembers; i++) co->members[i]->suspect_ns = 0;
  co->lost_since_epoch = 0;
  co->stats_dirty = 1;
  /* The drops since the last epoch become this one's verdict, kept for
   * whoever asks for it whole: the two buffers swap, nothing is copied. */
  struct drop_rec *was = co->epoch_drops;
  int was_cap = co->epoch_drops_cap;
  co->epoch_drops = co->drops, co->epoch_drops_cap = co->drops_cap, co->nepoch_drops = co->ndrops;
  co->drops = was, co->drops_cap = was_cap, co->ndrops = 0;
  ftc__wire_dropped_t *wd = epoch_wire_drops(co);
  /* Members that take deltas and were sent the previous epoch get the
   * change (O(changes) bytes each); the others the whole view, encoded
   * only when one of them needs it. */
  int nwhole = 0;
  for (int r = 0; r < n; r++) {
    const member_t *m = co->view[r];
    if (m->sess && !(m->delta && prev && co->sent_of == prev && m->sent_epoch == prev)) nwhole++;
  }
  ftc__frame_t *df = prev && co->sent_of == prev && nwhole < n
                         ? encode_delta(co, e, prev, wm, n, wd) : NULL;
  ftc__frame_t *f = NULL, *fz = NULL;
  if (nwhole || !df) {
    json_t *v = ftc__proto_view_left(ftc__proto_view(e, wm, n, NULL), co->left_ids, co->nleft);
    if (wd) v = ftc__proto_view_dropped(v, wd, co->nepoch_drops); /* out of memory: no verdict */
    f = ftc__proto_encode(v, LWS_PRE);
    if (!f)
      FTC_ERROR(FTC_SUB_COORD, "job %s: out of memory encoding epoch %llu; closing sessions",
                co->job, (unsigned long long)e);
    /* Deflated once for every rank that takes it so (out of memory: text). */
    int want_z = 0;
    for (int r = 0; f && f->len >= DEFLATE_MIN && !want_z && r < n; r++) {
      const member_t *m = co->view[r];
      want_z = m->sess && m->deflate && !(df && m->delta && m->sent_epoch == prev);
    }
    if (want_z) fz = ftc__proto_deflate(f, LWS_PRE);
  }
  uint64_t *was_left = co->epoch_left;
  int was_left_cap = co->epoch_left_cap;
  co->epoch_left = co->left_ids, co->epoch_left_cap = co->left_cap, co->nepoch_left = co->nleft;
  co->left_ids = was_left, co->left_cap = was_left_cap, co->nleft = 0;
  ftc__free(wd);
  remember_sent(co, e, wm, n);
  ftc__free(wm);
  FTC_INFO(FTC_SUB_COORD, "job %s: epoch %llu formed with %d members (%d joined)", co->job,
           (unsigned long long)e, n, pending);
  incidents_epoch(co, e);
  ftc__coord_event_t ev = {.kind = FTC__COORD_EV_EPOCH, .epoch = e, .size = n, .joined = pending};
  emit(co, &ev);
  for (int r = 0; r < n; r++) {
    member_t *m = co->view[r];
    session_t *s = m->sess;
    if (!s) continue;
    ftc__frame_t *use = df && m->delta && m->sent_epoch == prev ? df : fz && m->deflate ? fz : f;
    if (!use || queue_ref(s, use) != 0)
      kill_session(s);
    else
      m->sent_epoch = e;
  }
  ftc__frame_release(f);
  ftc__frame_release(fz);
  ftc__frame_release(df);
  send_prospect(co); /* standby members still waiting: the epoch after this one */
}

/* Drop a member the coordinator decided to remove while its session is
 * still open: tell it why and close. */
static void exclude_member(ftc__coord_t *co, member_t *m, ftc__perr_t code, const char *why) {
  session_t *s = m->sess;
  drop_member(co, m, 0, why);
  if (s) {
    s->refused = 1;
    session_timeout(s, PENDING_TIMEOUT_USER_OK, 5);
    send_msg(s, ftc__proto_error(code, why), 1);
  }
}

/* ---- message handlers ---- */

/* Words for a data-plane protocol as a hello says it (0: not said). */
static const char *dataplane_words(int v, char *buf, size_t len) {
  if (v > 0)
    snprintf(buf, len, "protocol %d", v);
  else
    snprintf(buf, len, "protocol 3 or older (its hello has no \"dataplane\": an older ftcomm, "
                       "or FTCOMM_BACKEND=nccl)");
  return buf;
}

/* A new member whose data plane differs from the job's members' would wait
 * for them to connect while they wait for it (who connects to a joiner
 * changed in data-plane protocol 4): refuse it now, saying what to fix.
 * Members known only from a view (-1: not heard yet) are not compared. */
static int dataplane_refused(ftc__coord_t *co, session_t *s, const ftc__hello_t *h) {
  for (int k = 0; k < co->nmembers; k++) {
    const member_t *o = co->members[k];
    if (o->dataplane < 0 || o->dataplane == h->dataplane) continue;
    char mine[96], theirs[96];
    refuse(co, s, FTC__PERR_DATAPLANE_MISMATCH,
           "this rank's data plane speaks %s, the job's running ranks (slot %d, member %llu) "
           "speak %s: run the same ftcomm version (and FTCOMM_BACKEND) on every rank",
           dataplane_words(h->dataplane, mine, sizeof(mine)), o->slot,
           (unsigned long long)o->id, dataplane_words(o->dataplane, theirs, sizeof(theirs)));
    return 1;
  }
  return 0;
}

/* A standby member said it is ready (its join, or a returning hello
 * without "standby"): pending, admitted at the next epoch. */
static void mark_joining(ftc__coord_t *co, member_t *m) {
  m->state = M_PENDING;
  co->stats_dirty = 1;
  FTC_INFO(FTC_SUB_COORD, "job %s: slot %d (member %llu) is ready to join", co->job, m->slot,
           (unsigned long long)m->id);
}

/* A member's welcome; a standby member's says so (it then sends "join"
 * when ready; a rank whose welcome does not say it was admitted at once). */
static json_t *welcome_for(const ftc__coord_t *co, const member_t *m) {
  json_t *w = ftc__proto_welcome(m->id, co->epoch, co->heartbeat_ms, FTC__PROTO_MAX_RANK_MSG);
  return m->state == M_STANDBY ? ftc__proto_welcome_standby(w) : w;
}

static void handle_hello(ftc__coord_t *co, session_t *s, const ftc__hello_t *h) {
  if (!ftc__proto_token_equal(h->token, co->token)) {
    refuse(co, s, FTC__PERR_AUTH, "the job token was refused (check FTCOMM_TOKEN)");
    return;
  }
  if (strcmp(h->job, co->job) != 0) {
    refuse(co, s, FTC__PERR_WRONG_JOB, "this coordinator serves job \"%s\", not \"%.64s\"",
           co->job, h->job);
    return;
  }
  if (h->slot >= co->world_size) {
    refuse(co, s, FTC__PERR_BAD_SLOT, "slot %d is outside the job's slots 0..%d", h->slot,
           co->world_size - 1);
    return;
  }
  char ah[FTC__ADDR_HOST_MAX];
  int aport;
  if (h->addr && *h->addr &&
      ftc__addr_split("its data-plane addr", h->addr, ah, sizeof(ah), &aport) != FTC_OK) {
    refuse(co, s, FTC__PERR_BAD_MESSAGE, "slot %d: %s", h->slot, ftc_last_error());
    return;
  }
  if (h->prev_member_id) {
    adopt_view(co, h);
    member_t *back = find_id(co, h->prev_member_id);
    if (back && back->sess && back->sess != s && back->slot == h->slot) {
      /* Its previous session is still open here: the process gave up on
       * it (no answers through a cut path that TCP has not noticed yet).
       * The new session replaces it. */
      session_t *old = back->sess;
      FTC_INFO(FTC_SUB_COORD, "job %s: slot %d (member %llu) reconnected while its previous "
               "session (%s) looked open; closing that one", co->job, back->slot,
               (unsigned long long)back->id, old->peer);
      old->m = NULL;
      old->refused = 1;
      kill_session(old);
      back->sess = NULL;
    }
    if (back && !back->sess && back->slot == h->slot) {
      /* The same process returns to its place: same id, same epoch. */
      back->sess = s;
      s->m = back;
      back->detached_ns = 0;
      back->pid = h->pid;
      back->dataplane = h->dataplane; /* the same process: admitted with it before */
      back->delta = h->delta;
      back->deflate = h->deflate;
      back->sent_epoch = h->known_epoch; /* what it holds, whatever was queued before */
      back->probes = h->probes;
      back->last_seen_ns = ftc__now_ns();
      snprintf(back->host, sizeof(back->host), "%s", h->pod ? h->pod : h->host ? h->host : "");
      co->stats_dirty = 1;
      session_timeout(s, NO_PENDING_TIMEOUT, 0);
      FTC_INFO(FTC_SUB_COORD, "job %s: slot %d (member %llu) reconnected from %s at epoch %llu",
               co->job, back->slot, (unsigned long long)back->id, s->peer,
               (unsigned long long)h->known_epoch);
      /* A standby member that said join while its connection was down
       * says so by a hello without "standby". */
      int joins = back->state == M_STANDBY && !h->standby;
      if (joins) mark_joining(co, back);
      send_msg(s, welcome_for(co, back), 0);
      if (back->state == M_ACTIVE && h->known_epoch < co->epoch) send_current_view(co, s);
      if (joins) maybe_form_epoch(co);
      return;
    }
  }
  member_t *old = find_slot(co, h->slot);
  if (old && !old->sess && old->detached_ns) {
    /* Another process for the slot of a member whose session closed: that
     * one is gone (a replacement started before the place expired). */
    drop_member(co, old, 0, "lost its session and a new process took its slot");
    old = NULL; /* the epoch formed below replaces it (a standby: leaves it out) */
  }
  if (old) {
    refuse(co, s, FTC__PERR_DUPLICATE_SLOT,
           "slot %d already has a live member (member %llu, pid %lld, %s)", h->slot,
           (unsigned long long)old->id, (long long)old->pid, old->addr);
    return;
  }
  if (dataplane_refused(co, s, h)) return;
  if (h->world_size != co->world_size)
    FTC_WARN(FTC_SUB_COORD, "job %s: slot %d says the world size is %d; the job's is %d",
             co->job, h->slot, h->world_size, co->world_size);
  if (h->known_epoch > co->max_known_epoch) {
    co->max_known_epoch = h->known_epoch;
    if (h->known_epoch > co->epoch)
      FTC_INFO(FTC_SUB_COORD, "job %s: slot %d knows epoch %llu; later epochs are numbered above",
               co->job, h->slot, (unsigned long long)h->known_epoch);
  }
  if (reserve_members(co, 1)) {
    refuse(co, s, FTC__PERR_INTERNAL, "the coordinator is out of memory");
    return;
  }
  member_t *m = ftc__calloc(1, sizeof(*m));
  if (!m) {
    refuse(co, s, FTC__PERR_INTERNAL, "the coordinator is out of memory");
    return;
  }
  /* A process that returns to a coordinator which has not formed an epoch
   * keeps its id (it is the same incarnation), so that a view brought by
   * another rank can name it; otherwise ids are fresh. */
  if (h->prev_member_id && !co->formed && !find_id(co, h->prev_member_id)) {
    m->id = h->prev_member_id;
    if (m->id > co->next_id) co->next_id = m->id;
  } else {
    m->id = ++co->next_id;
  }
  m->slot = h->slot;
  m->state = h->standby ? M_STANDBY : M_PENDING;
  m->rank = -1;
  m->pid = h->pid;
  m->dataplane = h->dataplane;
  m->delta = h->delta;
  m->deflate = h->deflate;
  m->probes = h->probes;
  m->last_seen_ns = ftc__now_ns();
  snprintf(m->addr, sizeof(m->addr), "%s", h->addr);
  snprintf(m->host, sizeof(m->host), "%s", h->pod ? h->pod : h->host ? h->host : "");
  m->sess = s;
  s->m = m;
  add_member(co, m);
  co->stats_dirty = 1;
  session_timeout(s, NO_PENDING_TIMEOUT, 0);
  FTC_INFO(FTC_SUB_COORD, "job %s: slot %d %s as member %llu from %s%s%s (data %s, %s)",
           co->job, m->slot, h->standby ? "registered (standby until it joins)" : "joined",
           (unsigned long long)m->id, m->host[0] ? m->host : "", m->host[0] ? " at " : "",
           s->peer, m->addr, h->joiner ? "joiner" : "initial");
  send_msg(s, welcome_for(co, m), 0);
  /* A standby member counts from its join; a detached member of the epoch
   * that its hello dropped above is announced now all the same. */
  if (m->state == M_PENDING || co->view_dirty) maybe_form_epoch(co);
  else send_prospect(co);
}

/* The epoch that the standby members' joins would form now, if nothing
 * changes first, told to the running ranks that take prospects: they
 * connect to the standby members ahead of the join (the handshake is for
 * that epoch, so nothing is used unless the coordinator forms exactly it;
 * docs/protocol.md, "prospect"). Sent when it changes; nothing while the
 * current epoch is being replaced (a drop, a report, a pending member). */
static void send_prospect(ftc__coord_t *co) {
  if (!co->formed || co->view_dirty || co->revoke_pending || co->view_n < 1) return;
  int standby = 0;
  for (int i = 0; i < co->nmembers; i++) {
    if (co->members[i]->state == M_PENDING) return;
    standby += co->members[i]->state == M_STANDBY;
  }
  for (int r = 0; r < co->view_n; r++)
    if (!co->view[r]) return;
  if (!standby) return;
  int n = co->view_n + standby;
  member_t **pm = ftc__calloc((size_t)n, sizeof(*pm));
  ftc__wire_member_t *wm = ftc__calloc((size_t)n, sizeof(*wm));
  if (!pm || !wm) {
    ftc__free(pm);
    ftc__free(wm);
    return; /* out of memory: the joins take the usual way */
  }
  int k = 0;
  for (int r = 0; r < co->view_n; r++) pm[k++] = co->view[r];
  for (int i = 0; i < co->nmembers; i++)
    if (co->members[i]->state == M_STANDBY) pm[k++] = co->members[i];
  qsort(pm, (size_t)n, sizeof(*pm), cmp_slot);
  /* As maybe_form_epoch would number and write it. */
  uint64_t e = next_epoch(co);
  uint64_t sig = 1469598103934665603ULL ^ e;
  for (int r = 0; r < n; r++) {
    const member_t *m = pm[r];
    wm[r] = wire_member(m, r, m->state == M_STANDBY ? e : m->joined_epoch);
    sig = (sig ^ m->id) * 1099511628211ULL;
  }
  if (sig == co->prospect_sig) {
    ftc__free(pm);
    ftc__free(wm);
    return;
  }
  co->prospect_sig = sig;
  ftc__frame_t *f = ftc__proto_encode(ftc__proto_prospect(e, wm, n), LWS_PRE);
  ftc__free(wm);
  ftc__free(pm);
  if (!f) return;
  FTC_DEBUG(FTC_SUB_COORD, "job %s: prospect of epoch %llu with %d members (%d standby)",
            co->job, (unsigned long long)e, n, standby);
  /* A whole list, as a view: deflated once for the ranks that take it so. */
  ftc__frame_t *fz = f->len >= DEFLATE_MIN ? ftc__proto_deflate(f, LWS_PRE) : NULL;
  for (int r = 0; r < co->view_n; r++) {
    member_t *m = co->view[r];
    session_t *s = m->sess;
    if (s && m->dataplane >= FTC__PROTO_DATAPLANE_PROSPECT)
      (void)queue_ref(s, fz && m->deflate ? fz : f); /* (out of memory: it connects at the join) */
  }
  ftc__frame_release(fz);
  ftc__frame_release(f);
}

/* A standby member is ready: admitted like a member whose hello just came. */
static void handle_join(ftc__coord_t *co, session_t *s) {
  member_t *m = s->m;
  if (m->state != M_STANDBY) {
    /* Sent once more after a reconnect that already joined: nothing to do. */
    FTC_DEBUG(FTC_SUB_COORD, "job %s: slot %d (member %llu) sent join but is not standby; "
              "ignored", co->job, m->slot, (unsigned long long)m->id);
    return;
  }
  mark_joining(co, m);
  maybe_form_epoch(co);
}

static void judge_suspects(ftc__coord_t *co, int64_t now);
static int probe_ask(ftc__coord_t *co, int64_t now);

/* Whether the kernel already says m's session is closed by its end (the
 * process died: end of stream or reset), before lws got to its close. */
static int session_gone(const member_t *m) {
  if (!m->sess) return 1;
  if (!m->sess->wsi) return 0; /* offline: open until closed */
  struct pollfd p = {lws_get_socket_fd(m->sess->wsi), POLLRDHUP, 0};
  return p.fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* How long a member must have been silent for a failure report to drop it:
 * two missed heartbeats and some slack (docs/recovery.md, the evidence rule). */
static int64_t evidence_ns(const ftc__coord_t *co) {
  return (2LL * co->heartbeat_ms + 100) * 1000000LL;
}

/* ---- incident records (incident.h) ---- */

/* A record of incident `name` about the current epoch: every member asked
 * (those with a session) or not, and those already dropped since the epoch
 * was formed, with the coordinator's words. Written at once. */
static void incident_open(ftc__coord_t *co, const char *name, const char *reason,
                          const member_t *silent) {
  if (!co->dump_dir) return; /* uploads are refused: no folder to describe */
  ftc__incident_t *inc = ftc__incident_new(co->dump_dir, co->job, name, co->epoch, reason,
                                           silent ? silent->rank : -1, silent ? silent->slot : -1);
  if (!inc) {
    FTC_ERROR(FTC_SUB_COORD, "job %s: out of memory recording incident %s", co->job, name);
    return;
  }
  for (int r = 0; r < co->view_n; r++) {
    const member_t *m = co->view[r];
    if (m)
      ftc__incident_add(inc, r, m->slot, m->id, m->host, m->sess != NULL,
                        "its coordinator session was closed at the request");
  }
  for (int i = 0; i < co->ndrops; i++) {
    const struct drop_rec *d = &co->drops[i];
    ftc__incident_add(inc, d->rank, d->slot, d->id, "", 0, NULL);
    ftc__incident_dropped(inc, d->id, d->reason, d->detail, 1);
  }
  if (co->nincidents == MAX_INCIDENTS) {
    ftc__incident_free(co->incidents[0]);
    memmove(co->incidents, co->incidents + 1, (MAX_INCIDENTS - 1) * sizeof(co->incidents[0]));
    co->nincidents--;
  }
  co->incidents[co->nincidents++] = inc;
  ftc__incident_write(inc);
}

static ftc__incident_t *incident_named(ftc__coord_t *co, const char *name) {
  for (int i = co->nincidents - 1; i >= 0; i--)
    if (!strcmp(ftc__incident_name(co->incidents[i]), name)) return co->incidents[i];
  return NULL;
}

/* m of the current epoch is dropped: the records about this epoch list it
 * in their verdict; those about an earlier one that still wait for its dump
 * say it will not come. */
static void incidents_dropped(ftc__coord_t *co, const member_t *m, const char *word,
                              const char *why) {
  for (int i = 0; i < co->nincidents; i++) {
    ftc__incident_t *inc = co->incidents[i];
    if (ftc__incident_dropped(inc, m->id, word, why, ftc__incident_epoch(inc) == co->epoch))
      ftc__incident_write(inc);
  }
}

/* Epoch e was announced: the verdict of the records about earlier epochs. */
static void incidents_epoch(ftc__coord_t *co, uint64_t e) {
  for (int i = 0; i < co->nincidents; i++) {
    ftc__incident_t *inc = co->incidents[i];
    if (ftc__incident_epoch(inc) >= e) continue;
    ftc__incident_next_epoch(inc, e);
    ftc__incident_write(inc);
  }
}

/* A hang (a timeout report, a member silent past the heartbeat timeout):
 * every rank of the epoch that still has a session writes a dump, once per
 * epoch. Queued before the next view, so ranks dump the epoch that hung. */
static void request_hang_dumps(ftc__coord_t *co, const member_t *silent, const char *reason) {
  if (!co->formed || co->dumps_epoch == co->epoch) return;
  co->dumps_epoch = co->epoch;
  char incident[96];
  snprintf(incident, sizeof(incident), "hang-e%llu-%lld", (unsigned long long)co->epoch,
           (long long)(ftc__wall_ns() / 1000000000LL));
  FTC_WARN(FTC_SUB_COORD, "job %s: %s; asking every rank of epoch %llu for a dump (incident %s)",
           co->job, reason, (unsigned long long)co->epoch, incident);
  int asked = 0;
  for (int r = 0; r < co->view_n; r++)
    if (co->view[r] && co->view[r]->sess) {
      send_msg(co->view[r]->sess, ftc__proto_dump_request(incident, reason, co->epoch), 0);
      asked++;
    }
  incident_open(co, incident, reason, silent);
  ftc__coord_event_t ev = {.kind = FTC__COORD_EV_HANG, .epoch = co->epoch, .size = asked,
                           .slot = silent ? silent->slot : -1, .rank = silent ? silent->rank : -1,
                           .member_id = silent ? silent->id : 0, .reason = reason,
                           .incident = incident};
  emit(co, &ev);
}

/*
 * A failure report is evidence, not a verdict: a rank that fails shuts its
 * sockets, so its peers may blame it. A named member is dropped when its
 * session is gone or it has missed two heartbeats (now, or while suspected);
 * otherwise it is suspected, and cleared if it keeps heartbeating. Either
 * way the reported epoch is broken for the reporter, so the next epoch is
 * formed once no suspect is left and the evidence had time to arrive (with
 * the same members if nobody was dropped).
 */
/* A member of the current epoch publishes the epoch's backend blob (e.g.
 * the NCCL unique id its rank made): the first one is kept and relayed to
 * every member of the epoch; later ones and other epochs' are ignored. */
static void handle_backend(ftc__coord_t *co, session_t *s, const ftc__msg_t *msg) {
  member_t *m = s->m;
  if (msg->epoch != co->epoch || m->state != M_ACTIVE || co->backend_epoch == co->epoch) {
    FTC_DEBUG(FTC_SUB_COORD, "job %s: slot %d: backend blob for epoch %llu ignored (epoch %llu%s)",
              co->job, m->slot, (unsigned long long)msg->epoch, (unsigned long long)co->epoch,
              co->backend_epoch == co->epoch ? ", already published" : "");
    return;
  }
  char *b = ftc__strdup(msg->backend);
  if (!b) {
    FTC_ERROR(FTC_SUB_COORD, "job %s: out of memory storing a backend blob", co->job);
    return;
  }
  ftc__free(co->backend_blob);
  co->backend_blob = b;
  co->backend_epoch = co->epoch;
  for (int r = 0; r < co->view_n; r++)
    if (co->view[r] && co->view[r]->sess)
      send_msg(co->view[r]->sess, ftc__proto_backend(co->epoch, b), 0);
}

static void handle_failure(ftc__coord_t *co, session_t *s, const ftc__msg_t *msg) {
  member_t *rep = s->m;
  co->counts.reports++;
  co->stats_dirty = 1;
  if (msg->epoch != co->epoch || rep->state != M_ACTIVE) {
    co->counts.reports_stale++;
    FTC_INFO(FTC_SUB_COORD,
             "job %s: slot %d reports failures in epoch %llu, the current is %llu; ignored",
             co->job, rep->slot, (unsigned long long)msg->epoch, (unsigned long long)co->epoch);
    return;
  }
  int64_t now = ftc__now_ns();
  if (!co->revoke_pending) co->revoke_ns = now;
  co->revoke_pending = 1;
  if (msg->status == FTC_ERR_TIMEOUT) {
    char why[128];
    snprintf(why, sizeof(why), "rank %d timed out in a collective of epoch %llu", rep->rank,
             (unsigned long long)co->epoch);
    request_hang_dumps(co, NULL, why);
  }
  for (int i = 0; i < msg->nranks; i++) {
    member_t *x = NULL;
    if (msg->nmember_ids == msg->nranks) {
      x = find_id(co, msg->member_ids[i]);
      if (x && x->state != M_ACTIVE) x = NULL;
    } else if (msg->ranks[i] >= 0 && msg->ranks[i] < co->view_n) {
      x = co->view[msg->ranks[i]];
    }
    if (!x || x == rep) continue;
    const char *what = msg->reason ? msg->reason : ftc_strerror((ftc_status_t)msg->status);
    int64_t silent = now - x->last_seen_ns;
    int gone = session_gone(x);
    if (gone || silent > evidence_ns(co)) {
      char why[192];
      if (gone)
        snprintf(why, sizeof(why), "was reported failed by rank %d (%s) and its session is closed",
                 rep->rank, what);
      else
        snprintf(why, sizeof(why), "was reported failed by rank %d (%s) and is silent for %lld ms",
                 rep->rank, what, (long long)(silent / 1000000));
      exclude_member(co, x, FTC__PERR_EXCLUDED, why);
    } else if (!x->suspect_ns) {
      x->suspect_ns = now;
      FTC_INFO(FTC_SUB_COORD,
               "job %s: rank %d reports rank %d failed (%s); it still heartbeats: suspected",
               co->job, rep->rank, x->rank, what);
      /* The probe runs while the evidence settles: a cut is known by then. */
      (void)probe_ask(co, now);
    }
  }
  /* A drop forms the next epoch now; a broken epoch without one waits for
   * the evidence to settle (judge_suspects): the session of a dead rank may
   * close a moment after its peers' reports. */
  judge_suspects(co, now);
  if (co->view_dirty) maybe_form_epoch(co);
}

/*
 * Partitions (docs/recovery.md, "Network faults"). An epoch reported broken
 * in which every member still heartbeats is either a blink (a connection
 * that dropped: the same members form the next epoch) or a partition of
 * the data plane that the coordinator's sessions do not see: forming the
 * same members again would break again, every time, until the ranks' recovery
 * timeout ends the job. So before that, every member is asked to probe the
 * others' data-plane addresses ("probe") and says whom it could not reach
 * ("reach"). Each unreachable pair (said by either side) is a cut; the
 * coordinator drops the member in the most cuts, the highest rank among
 * equals, until no cut is left: one rank cut from its peers goes, an
 * asymmetric cut between two costs the higher one, a minority cut from a
 * majority goes. Nobody is dropped when all reach all, nor when the rule
 * would leave fewer than two members or less than half (partition_drop).
 */

/* How long the coordinator waits for the members' reaches: a member's
 * probe bound (member.c, probe_ms) and the evidence time for the message. */
static int64_t probe_wait_ns(const ftc__coord_t *co) {
  int64_t ms = 2LL * co->heartbeat_ms + 100;
  ms = ms < 200 ? 200 : ms > 2000 ? 2000 : ms;
  return ms * 1000000LL + evidence_ns(co);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* The cuts among the current epoch's members that their reaches name, as
 * pairs lo * n + hi of ranks (lo < hi), sorted and unique: *out (the
 * caller frees), their count returned; -1 out of memory. */
static int partition_cuts(ftc__coord_t *co, uint64_t **out) {
  int n = co->view_n, total = 0, k = 0;
  *out = NULL;
  for (int r = 0; r < n; r++)
    if (co->view[r] && co->view[r]->reach_epoch == co->epoch) total += co->view[r]->nunreach;
  if (!total) return 0;
  uint64_t *pairs = ftc__calloc((size_t)total, sizeof(*pairs));
  if (!pairs) return -1;
  for (int r = 0; r < n; r++) {
    member_t *a = co->view[r];
    if (!a || a->reach_epoch != co->epoch) continue;
    for (int i = 0; i < a->nunreach; i++) {
      member_t *b = find_id(co, a->unreach[i]);
      if (!b || b == a || b->state != M_ACTIVE || b->rank < 0 || b->rank >= n || co->view[b->rank] != b)
        continue;
      int lo = r < b->rank ? r : b->rank, hi = r < b->rank ? b->rank : r;
      pairs[k++] = (uint64_t)lo * (uint64_t)n + (uint64_t)hi;
    }
  }
  qsort(pairs, (size_t)k, sizeof(*pairs), cmp_u64);
  int u = 0;
  for (int i = 0; i < k; i++)
    if (!u || pairs[u - 1] != pairs[i]) pairs[u++] = pairs[i];
  *out = pairs;
  return u;
}

/* The member the rule drops next among the cuts not yet struck out of
 * pairs (UINT64_MAX), its cut count in *deg_out; -1 when no cut is left. */
static int partition_worst(int n, const uint64_t *pairs, int npairs, int *deg, int *deg_out) {
  memset(deg, 0, (size_t)n * sizeof(*deg));
  int left = 0;
  for (int i = 0; i < npairs; i++) {
    if (pairs[i] == UINT64_MAX) continue;
    deg[pairs[i] / (uint64_t)n]++, deg[pairs[i] % (uint64_t)n]++, left++;
  }
  if (!left) return -1;
  int worst = 0;
  for (int r = 1; r < n; r++)
    if (deg[r] >= deg[worst]) worst = r;
  *deg_out = deg[worst];
  return worst;
}

/* Strike the cuts of rank r out of pairs. */
static void partition_strike(int n, uint64_t *pairs, int npairs, int r) {
  for (int i = 0; i < npairs; i++)
    if (pairs[i] != UINT64_MAX &&
        (pairs[i] / (uint64_t)n == (uint64_t)r || pairs[i] % (uint64_t)n == (uint64_t)r))
      pairs[i] = UINT64_MAX;
}

/*
 * Drop members until no cut is left (the rule above), but only when what
 * is left is a group that showed it works: at least two members that
 * reach each other, and at least half of the epoch. Where the rule would
 * leave less (every member reports every other unreachable: no data plane
 * is up at all, or it is shattered), the probe found no partition that
 * cuts some members off from the job, only a job whose data plane does
 * not work; dropping all but one would end the job's training quietly on
 * one rank. Nobody is dropped then: the same members form the next epoch,
 * and the ranks' own timeouts end the job if the data plane stays down.
 */
static void partition_drop(ftc__coord_t *co, uint64_t *pairs, int npairs) {
  int n = co->view_n, members = 0;
  for (int r = 0; r < n; r++) members += co->view[r] != NULL;
  int *deg = ftc__calloc((size_t)n, sizeof(*deg));
  uint64_t *trial = ftc__calloc((size_t)npairs, sizeof(*trial));
  if (!deg || !trial) {
    FTC_ERROR(FTC_SUB_COORD, "job %s: out of memory judging a partition; forming the next "
              "epoch with the same members", co->job);
    ftc__free(deg);
    ftc__free(trial);
    return;
  }
  memcpy(trial, pairs, (size_t)npairs * sizeof(*trial));
  int dropped = 0, worst, d;
  while ((worst = partition_worst(n, trial, npairs, deg, &d)) >= 0) {
    partition_strike(n, trial, npairs, worst);
    dropped += co->view[worst] != NULL;
  }
  ftc__free(trial);
  int kept = members - dropped;
  if (kept < 2 || 2 * kept < members) {
    FTC_WARN(FTC_SUB_COORD, "job %s: epoch %llu: the probe found %d cut%s among %d members and no "
             "group of two or more, at least half of them, that reach each other (the data plane is "
             "down, or no side can be told from the other): nobody is dropped for it", co->job,
             (unsigned long long)co->epoch, npairs, npairs == 1 ? "" : "s", members);
    ftc__free(deg);
    return;
  }
  while ((worst = partition_worst(n, pairs, npairs, deg, &d)) >= 0) {
    member_t *x = co->view[worst];
    char why[192];
    snprintf(why, sizeof(why), "cannot reach or be reached by %d member%s of epoch %llu over the "
             "data plane (a partition; its coordinator session still worked)", d,
             d == 1 ? "" : "s", (unsigned long long)co->epoch);
    FTC_WARN(FTC_SUB_COORD, "job %s: rank %d (slot %d) %s: dropping it", co->job, worst,
             x ? x->slot : -1, why);
    partition_strike(n, pairs, npairs, worst);
    if (x) exclude_member(co, x, FTC__PERR_EXCLUDED, why);
  }
  ftc__free(deg);
}

/* Ask every member of the current epoch that answers probes to probe, once
 * per epoch; returns how many were asked (fewer than 2: nobody to compare). */
static int probe_ask(ftc__coord_t *co, int64_t now) {
  int asked = 0;
  for (int r = 0; r < co->view_n; r++) {
    member_t *x = co->view[r];
    asked += x && x->sess && x->probes;
  }
  if (co->probe_epoch == co->epoch || asked < 2) return asked;
  co->probe_epoch = co->epoch;
  co->probe_ns = now;
  FTC_INFO(FTC_SUB_COORD, "job %s: epoch %llu was reported broken by members that heartbeat; "
           "asking %d to probe the data plane", co->job, (unsigned long long)co->epoch, asked);
  for (int r = 0; r < co->view_n; r++) {
    member_t *x = co->view[r];
    if (x && x->sess && x->probes) send_msg(x->sess, ftc__proto_probe(co->epoch), 0);
  }
  return asked;
}

/* Whether the probe of the current epoch is over: every member asked has
 * answered, or the wait is up. */
static int probe_complete(ftc__coord_t *co, int64_t now) {
  int asked = 0, answered = 0;
  for (int r = 0; r < co->view_n; r++) {
    member_t *x = co->view[r];
    if (!x || !x->sess || !x->probes) continue;
    asked++;
    answered += x->reach_epoch == co->epoch;
  }
  return answered == asked || now - co->probe_ns >= probe_wait_ns(co);
}

/* The partition rule on the answers (once per epoch). */
static void partition_apply(ftc__coord_t *co) {
  co->probe_decided_epoch = co->epoch;
  uint64_t *pairs;
  int npairs = partition_cuts(co, &pairs);
  FTC_INFO(FTC_SUB_COORD, "job %s: epoch %llu: the probe found %d cut%s", co->job,
           (unsigned long long)co->epoch, npairs < 0 ? 0 : npairs, npairs == 1 ? "" : "s");
  if (npairs > 0) partition_drop(co, pairs, npairs);
  ftc__free(pairs);
}

/* A broken epoch whose members all heartbeat: 1 once the partition rule
 * has decided (members dropped, or none cut), 0 while the probes run. */
static int partition_decided(ftc__coord_t *co, int64_t now) {
  if (co->probe_decided_epoch == co->epoch) return 1;
  if (probe_ask(co, now) < 2) return 1; /* (older ranks) */
  if (!probe_complete(co, now)) return 0;
  partition_apply(co);
  return 1;
}

/* A member's answer to a probe: kept for the epoch it names; the decision
 * is taken at once when it was the last one awaited. */
static void handle_reach(ftc__coord_t *co, session_t *s, const ftc__msg_t *msg) {
  member_t *m = s->m;
  if (msg->epoch != co->epoch || m->state != M_ACTIVE) return; /* (an old epoch's) */
  uint64_t *ids = NULL;
  if (msg->nmember_ids) {
    ids = ftc__calloc((size_t)msg->nmember_ids, sizeof(*ids));
    if (!ids) {
      FTC_ERROR(FTC_SUB_COORD, "job %s: out of memory keeping slot %d's probe", co->job, m->slot);
      return;
    }
    memcpy(ids, msg->member_ids, (size_t)msg->nmember_ids * sizeof(*ids));
  }
  ftc__free(m->unreach);
  m->unreach = ids;
  m->nunreach = msg->nmember_ids;
  m->reach_epoch = msg->epoch;
  FTC_INFO(FTC_SUB_COORD, "job %s: rank %d (slot %d) cannot reach %d member%s of epoch %llu",
           co->job, m->rank, m->slot, m->nunreach, m->nunreach == 1 ? "" : "s",
           (unsigned long long)co->epoch);
  if (co->revoke_pending) judge_suspects(co, ftc__now_ns());
}

/* The tick's half of the evidence rule: drop suspects that stopped
 * heartbeating, clear those that kept on, and re-form a broken epoch once
 * no suspect is left. */
static void judge_suspects(ftc__coord_t *co, int64_t now) {
  int suspects = 0;
  /* In a broken epoch a silent member is the likely culprit even when no
   * report names it (the reporters' failures cascade and blame each other):
   * it cannot take part in the next epoch anyway. */
  for (int r = 0; co->revoke_pending && r < co->view_n; r++) {
    member_t *x = co->view[r];
    int64_t silent = x ? now - x->last_seen_ns : 0;
    if (!x || silent <= evidence_ns(co)) continue;
    char why[128];
    snprintf(why, sizeof(why), "is silent for %lld ms while its epoch was reported broken",
             (long long)(silent / 1000000));
    exclude_member(co, x, FTC__PERR_EXCLUDED, why);
  }
  /* Every member answered the probe (a silent one cannot): the cut ones
   * are dropped, the others are live and reachable, so whatever their
   * peers said of them came from the cut: no longer suspects. */
  if (co->revoke_pending && co->probe_epoch == co->epoch &&
      co->probe_decided_epoch != co->epoch && probe_complete(co, now)) {
    partition_apply(co);
    for (int r = 0; r < co->view_n; r++)
      if (co->view[r]) co->view[r]->suspect_ns = 0;
  }
  for (int r = 0; r < co->view_n; r++) {
    member_t *x = co->view[r];
    if (!x || !x->suspect_ns) continue;
    int64_t silent = now - x->last_seen_ns;
    if (silent > evidence_ns(co)) {
      char why[128];
      snprintf(why, sizeof(why), "was reported failed and stopped heartbeating (silent %lld ms)",
               (long long)(silent / 1000000));
      exclude_member(co, x, FTC__PERR_EXCLUDED, why);
    } else if (now - x->suspect_ns > 2 * evidence_ns(co)) {
      FTC_INFO(FTC_SUB_COORD, "job %s: rank %d kept heartbeating; no longer suspected", co->job,
               x->rank);
      x->suspect_ns = 0;
    } else {
      suspects++;
    }
  }
  if (!co->view_dirty && co->revoke_pending && !suspects && now - co->revoke_ns > evidence_ns(co) &&
      !partition_decided(co, now))
    return;
  if (co->view_dirty ||
      (co->revoke_pending && !suspects && now - co->revoke_ns > evidence_ns(co))) {
    if (co->revoke_pending && !co->view_dirty)
      FTC_INFO(FTC_SUB_COORD, "job %s: epoch %llu was reported broken; forming the next one "
               "with the same members", co->job, (unsigned long long)co->epoch);
    maybe_form_epoch(co);
  }
}

static int safe_name(const char *s) {
  if (!*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '-' || *s == '_' || *s == '.'))
      return 0;
  return 1;
}

/* Write a complete dump as DIR/<incident>/rank-<r>.json, atomically and
 * never over an earlier one: when that name is taken, as
 * rank-<r>-<member id>.json, then rank-<r>-<member id>-<k>.json for k = 2
 * .. DUMP_MAX_COPIES. 1: stored; 0: every name of the member is taken
 * (not stored); -1: an error (logged). */
static int store_dump(ftc__coord_t *co, member_t *m, dump_asm_t *d) {
  char dir[4096], tmp[4200], path[4200];
  snprintf(dir, sizeof(dir), "%s/%s", co->dump_dir, d->incident);
  if (mkdir(co->dump_dir, 0755) && errno != EEXIST) goto out_log_errno;
  if (mkdir(dir, 0755) && errno != EEXIST) goto out_log_errno;
  snprintf(tmp, sizeof(tmp), "%s/.rank-%d.%llu.tmp", dir, d->rank, (unsigned long long)m->id);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) goto out_log_errno;
  size_t off = 0;
  while (off < d->len) {
    ssize_t w = write(fd, d->buf + off, d->len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      close(fd);
      unlink(tmp);
      goto out_log_errno;
    }
    off += (size_t)w;
  }
  close(fd);
  int k = 0;
  for (; k <= DUMP_MAX_COPIES; k++) {
    if (k == 0)
      snprintf(path, sizeof(path), "%s/rank-%d.json", dir, d->rank);
    else if (k == 1)
      snprintf(path, sizeof(path), "%s/rank-%d-%llu.json", dir, d->rank, (unsigned long long)m->id);
    else
      snprintf(path, sizeof(path), "%s/rank-%d-%llu-%d.json", dir, d->rank, (unsigned long long)m->id, k);
    if (link(tmp, path) == 0) break;
    if (errno != EEXIST) {
      int e = errno;
      unlink(tmp);
      errno = e;
      goto out_log_errno;
    }
  }
  unlink(tmp);
  if (k > DUMP_MAX_COPIES) return 0;
  FTC_INFO(FTC_SUB_COORD, "job %s: stored the dump of rank %d (%zu bytes) as %s", co->job,
           d->rank, d->len, path);
  ftc__incident_t *inc = incident_named(co, d->incident);
  if (inc) {
    /* The last answer is written at once (the host analyzes the folder when
     * every dump is in); those before it by the tick, once per tick. */
    ftc__incident_answered(inc, d->rank, m->id, strrchr(path, '/') + 1);
    if (ftc__incident_waiting(inc))
      ftc__incident_mark(inc);
    else
      ftc__incident_write(inc);
  }
  ftc__coord_event_t ev = {.kind = FTC__COORD_EV_DUMP, .epoch = co->epoch, .slot = m->slot,
                           .rank = d->rank, .member_id = m->id, .incident = d->incident};
  emit(co, &ev);
  return 1;
out_log_errno:
  FTC_ERROR(FTC_SUB_COORD, "job %s: cannot store the dump of rank %d under %s: %s", co->job,
            d->rank, dir, strerror(errno));
  return -1;
}

static void dump_free(dump_asm_t *d) {
  if (!d) return;
  ftc__free(d->buf);
  ftc__free(d);
}

static void handle_dump(ftc__coord_t *co, session_t *s, const ftc__msg_t *msg) {
  if (!co->dump_dir) {
    if (!s->dump_refused_logged)
      FTC_WARN(FTC_SUB_COORD, "job %s: slot %d uploads a dump but no dump directory is set",
               co->job, s->m->slot);
    s->dump_refused_logged = 1;
    return;
  }
  if (!safe_name(msg->incident)) {
    refuse(co, s, FTC__PERR_BAD_MESSAGE, "incident \"%.64s\" is not a plain name",
           msg->incident);
    return;
  }
  if (msg->total > DUMP_MAX_TOTAL) {
    refuse(co, s, FTC__PERR_TOO_LARGE, "a dump of %llu bytes is over the limit of %llu",
           (unsigned long long)msg->total, DUMP_MAX_TOTAL);
    return;
  }
  dump_asm_t *d = s->dump;
  if (msg->offset == 0) {
    dump_free(d);
    d = s->dump = ftc__calloc(1, sizeof(*d));
    if (d) d->buf = ftc__malloc(msg->total ? msg->total : 1);
    if (!d || !d->buf) {
      dump_free(d);
      s->dump = NULL;
      refuse(co, s, FTC__PERR_INTERNAL, "the coordinator is out of memory for a dump");
      return;
    }
    snprintf(d->incident, sizeof(d->incident), "%s", msg->incident);
    d->rank = msg->rank;
    d->total = msg->total;
  }
  if (!d || strcmp(d->incident, msg->incident) != 0 || d->rank != msg->rank ||
      d->total != msg->total || d->len != msg->offset) {
    refuse(co, s, FTC__PERR_BAD_MESSAGE, "dump fragment at offset %llu does not continue %s",
           (unsigned long long)msg->offset, d ? "the upload in progress" : "any upload");
    return;
  }
  memcpy(d->buf + d->len, msg->data, msg->data_len);
  d->len += msg->data_len;
  if (msg->last) {
    /* A member's uploads for one incident are bounded (a rank asked again
     * and again, or looping): the first ones are kept, as the controller
     * may have analyzed them already, and the rest dropped. */
    if (store_dump(co, s->m, d) == 0) {
      int lvl = s->dumps_dropped++ ? FTC_LOG_DEBUG : FTC_LOG_WARN;
      FTC_LOG(lvl, FTC_SUB_COORD,
              "job %s: a dump of rank %d for incident %s from slot %d (member %llu) is not "
              "stored: the names of that member's copies are taken, up to %s/%s/rank-%d-%llu-%d.json; "
              "the earlier copies stay as they are (the controller may have analyzed them)",
              co->job, d->rank, d->incident, s->m->slot, (unsigned long long)s->m->id,
              co->dump_dir, d->incident, d->rank, (unsigned long long)s->m->id, DUMP_MAX_COPIES);
    }
    dump_free(d);
    s->dump = NULL;
  }
}

/* Handle one complete text message. Returns -1 to close the session now. */
static int handle_message(ftc__coord_t *co, session_t *s, const char *text, size_t len) {
  ftc__msg_t msg;
  char why[256];
  ftc__perr_t perr = ftc__proto_decode(text, len, FTC__PROTO_MAX_RANK_MSG, &msg, why, sizeof(why));
  if (perr != FTC__PERR_NONE) {
    refuse(co, s, perr, "%s", why);
    return 0;
  }
  int rc = 0;
  if (!s->m) {
    if (msg.type == FTC__MSG_HELLO)
      handle_hello(co, s, &msg.hello);
    else
      refuse(co, s, FTC__PERR_NOT_AUTHENTICATED, "a \"%s\" message before hello",
             ftc__msg_type_name(msg.type));
    goto out_clear;
  }
  s->m->last_seen_ns = ftc__now_ns();
  switch (msg.type) {
    case FTC__MSG_HEARTBEAT:
      if (msg.ready && !s->m->ready_epoch) {
        s->m->ready_epoch = msg.ready;
        FTC_DEBUG(FTC_SUB_COORD, "job %s: slot %d (member %llu) holds state since epoch %llu",
                  co->job, s->m->slot, (unsigned long long)s->m->id,
                  (unsigned long long)msg.ready);
      }
      send_msg(s, ftc__proto_heartbeat(co->epoch), 0);
      break;
    case FTC__MSG_FAILURE: handle_failure(co, s, &msg); break;
    case FTC__MSG_LEAVE:
      drop_member(co, s->m, 1, "left");
      maybe_form_epoch(co);
      rc = -1;
      break;
    case FTC__MSG_DUMP: handle_dump(co, s, &msg); break;
    case FTC__MSG_BACKEND: handle_backend(co, s, &msg); break;
    case FTC__MSG_REACH: handle_reach(co, s, &msg); break;
    case FTC__MSG_JOIN: handle_join(co, s); break;
    case FTC__MSG_VIEW_REQUEST:
      /* A delta did not apply there (it missed one): the whole epoch. */
      if (s->m->state == M_ACTIVE && co->formed) {
        FTC_INFO(FTC_SUB_COORD, "job %s: slot %d asks for epoch %llu whole", co->job, s->m->slot,
                 (unsigned long long)co->epoch);
        send_current_view(co, s);
      }
      break;
    case FTC__MSG_ERROR:
      FTC_WARN(FTC_SUB_COORD, "job %s: slot %d sent error %s: %s", co->job, s->m->slot,
               msg.code_name, msg.reason ? msg.reason : "");
      rc = -1;
      break;
    default:
      refuse(co, s, FTC__PERR_UNEXPECTED, "a rank does not send \"%s\" messages%s",
             ftc__msg_type_name(msg.type), msg.type == FTC__MSG_HELLO ? " twice" : "");
      break;
  }
out_clear:
  ftc__msg_clear(&msg);
  return rc;
}

/* The hello in the upgrade request (subprotocol FTC__PROTO_WS_NAME_HELLO):
 * the header's value `hdr` (len bytes, NULL when absent) is decoded and
 * handled as a received hello frame, with the same checks and refusals. */
static int hello_header(ftc__coord_t *co, session_t *s, const char *hdr, size_t len) {
  if (!hdr) {
    refuse(co, s, FTC__PERR_BAD_MESSAGE,
           "the subprotocol %s carries the hello in the %s request header, which is missing",
           FTC__PROTO_WS_NAME_HELLO, FTC__PROTO_HELLO_HEADER);
    return 0;
  }
  if (len > FTC__PROTO_MAX_HELLO_HEADER) {
    refuse(co, s, FTC__PERR_TOO_LARGE, "the %s header has %zu bytes, more than %d",
           FTC__PROTO_HELLO_HEADER, len, FTC__PROTO_MAX_HELLO_HEADER);
    return 0;
  }
  unsigned char *text = ftc__malloc(len / 4 * 3 + 4);
  if (!text) {
    refuse(co, s, FTC__PERR_INTERNAL, "the coordinator is out of memory");
    return 0;
  }
  long n = ftc__b64url_decode(hdr, len, text);
  int rc = 0;
  if (n < 0) {
    refuse(co, s, FTC__PERR_BAD_JSON, "the %s header is not base64url (RFC 4648, section 5)",
           FTC__PROTO_HELLO_HEADER);
  } else {
    co->counts.hello_in_request++;
    co->stats_dirty = 1;
    FTC_DEBUG(FTC_SUB_COORD, "job %s: the hello of %s came in its upgrade request", co->job, s->peer);
    rc = handle_message(co, s, (const char *)text, (size_t)n);
  }
  ftc__free(text);
  return rc;
}

/* At LWS_CALLBACK_ESTABLISHED (the request's headers are still there). */
static int hello_header_from_request(ftc__coord_t *co, session_t *s) {
  static const char name[] = FTC__PROTO_HELLO_HEADER_LWS;
  int len = lws_hdr_custom_length(s->wsi, name, (int)sizeof(name) - 1);
  if (len < 0) return hello_header(co, s, NULL, 0);
  if (len > FTC__PROTO_MAX_HELLO_HEADER) return hello_header(co, s, "", (size_t)len);
  char *hdr = ftc__malloc((size_t)len + 1);
  if (!hdr) {
    refuse(co, s, FTC__PERR_INTERNAL, "the coordinator is out of memory");
    return 0;
  }
  int got = lws_hdr_custom_copy(s->wsi, hdr, len + 1, name, (int)sizeof(name) - 1);
  int rc = got < 0 ? hello_header(co, s, NULL, 0) : hello_header(co, s, hdr, (size_t)got);
  ftc__free(hdr);
  return rc;
}

static int on_receive(ftc__coord_t *co, session_t *s, const void *in, size_t len) {
  if (s->refused) return 0;
  if (lws_frame_is_binary(s->wsi)) {
    refuse(co, s, FTC__PERR_BAD_JSON, "binary frames are not part of the protocol");
    return 0;
  }
  size_t need = s->rx_len + len;
  if (need + lws_remaining_packet_payload(s->wsi) > FTC__PROTO_MAX_RANK_MSG) {
    refuse(co, s, FTC__PERR_TOO_LARGE, "a message of more than %d bytes",
           FTC__PROTO_MAX_RANK_MSG);
    s->rx_len = 0;
    return 0;
  }
  if (need > s->rx_cap) {
    size_t ncap = s->rx_cap ? s->rx_cap : 4096;
    while (ncap < need) ncap *= 2;
    char *nb = ftc__realloc(s->rx, ncap);
    if (!nb) {
      refuse(co, s, FTC__PERR_INTERNAL, "the coordinator is out of memory");
      return 0;
    }
    s->rx = nb;
    s->rx_cap = ncap;
  }
  memcpy(s->rx + s->rx_len, in, len);
  s->rx_len = need;
  if (!lws_is_final_fragment(s->wsi) || lws_remaining_packet_payload(s->wsi) > 0) return 0;
  size_t n = s->rx_len;
  s->rx_len = 0;
  return handle_message(co, s, s->rx, n);
}

/* Frames written per writeable callback at most: a joiner's welcome and
 * its first view go out together (one wake-up of the joiner, not one per
 * service pass after every other session's), without one session holding
 * the thread. */
#define WRITES_PER_CALLBACK 8
/* A frame larger than this (a whole view of a big job) goes in pieces of
 * this size, one WebSocket fragment each, each when the socket takes it:
 * lws keeps what the socket did not take of a write, so a whole 1.8 MB view
 * written at once to 16,384 sessions would sit in 16,384 copies; a piece of
 * 16 KiB bounds that to 16 KiB a session (4,096 simulated ranks' first
 * epoch: 289 MB resident with 64 KiB pieces, at 2,048 48 MB instead of 144). */
#define WRITE_PIECE (16 * 1024)

/* The next piece of the head frame, which continues at s->tx_off: 1 when
 * the frame is done, 0 when more is to come, -1 on a short write. A shared
 * frame's bytes are copied to the coordinator's scratch first: lws writes
 * a fragment's header into the LWS_PRE bytes before it, which would be the
 * view's own bytes, still to be sent to other sessions. */
static int write_piece(ftc__coord_t *co, session_t *s, ftc__frame_t *f) {
  const ftc__frame_t *b = f->ref ? f->ref : f;
  size_t left = b->len - s->tx_off, n = left < WRITE_PIECE ? left : WRITE_PIECE;
  int flags = (s->tx_off ? LWS_WRITE_CONTINUATION : b->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT) |
              (n < left ? LWS_WRITE_NO_FIN : 0);
  unsigned char *p = (unsigned char *)b->buf + LWS_PRE + s->tx_off;
  if (f->ref || s->tx_off) {
    memcpy(co->tx_scratch + LWS_PRE, p, n);
    p = co->tx_scratch + LWS_PRE;
  }
  if (lws_write(s->wsi, p, n, (enum lws_write_protocol)flags) < (int)n) return -1;
  s->tx_off += n;
  if (s->tx_off < b->len) return 0;
  s->tx_off = 0;
  return 1;
}

/* The writeable callback: up to WRITES_PER_CALLBACK queued frames, a large
 * one piece by piece. */
static int on_writeable(ftc__coord_t *co, session_t *s) {
  for (int i = 0; i < WRITES_PER_CALLBACK && s->outq.head; i++) {
    /* A later write only while the socket takes it whole: lws keeps the
     * rest of a partial write, and a write after that is refused. */
    if (i > 0 && lws_send_pipe_choked(s->wsi)) break;
    ftc__frame_t *f = s->outq.head;
    int done = write_piece(co, s, f);
    if (done < 0) return -1;
    if (!done) continue; /* the next piece when the socket takes it */
    f = ftc__frameq_pop(&s->outq);
    int close_after = f->close_after;
    ftc__frame_release(f);
    if (close_after) {
      static const char bye[] = "refused";
      lws_close_reason(s->wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION, (unsigned char *)bye,
                       sizeof(bye) - 1);
      return -1;
    }
  }
  if (s->outq.head) lws_callback_on_writable(s->wsi);
  return 0;
}

static void run_commands(ftc__coord_t *co) {
  pthread_mutex_lock(&co->lock);
  cmd_t *c = co->cmd_head;
  co->cmd_head = co->cmd_tail = NULL;
  pthread_mutex_unlock(&co->lock);
  while (c) {
    cmd_t *next = c->next;
    if (c->kind == CMD_DUMPS) {
      FTC_INFO(FTC_SUB_COORD, "job %s: asking the %d ranks of epoch %llu for dumps (%s)",
               co->job, co->view_n, (unsigned long long)co->epoch, c->incident);
      for (int r = 0; r < co->view_n; r++)
        if (co->view[r] && co->view[r]->sess)
          send_msg(co->view[r]->sess, ftc__proto_dump_request(c->incident, c->reason, co->epoch),
                   0);
      if (!incident_named(co, c->incident)) incident_open(co, c->incident, c->reason, NULL);
    } else {
      member_t *m = find_slot(co, c->slot);
      if (m) {
        exclude_member(co, m, FTC__PERR_EXCLUDED, c->reason ? c->reason : "was declared lost");
        maybe_form_epoch(co);
      }
    }
    ftc__free(c->incident);
    ftc__free(c->reason);
    ftc__free(c);
    c = next;
  }
}

/*
 * Silence alone drops a member of the epoch only while at least half of
 * the epoch's members are heard (docs/recovery.md, "Network faults"): when
 * most of them fall silent at once, it is far likelier that the coordinator
 * is cut off (its node, its link, a stopped process) than that most ranks
 * died together, and dropping them would end a job whose data plane still
 * trains. The members keep their places, the outage is logged once, and a
 * failure report still drops a silent member as before: a rank that stopped
 * is reported by its peers, whose reports arrive.
 */
/* Two connect attempts of a member that reconnects (member.c: each gives
 * up after 2 s, the next within 1 s), with room for a loaded host. */
#define REJOIN_GRACE_MS 6000

static int quorum_heard(ftc__coord_t *co, int64_t now) {
  int total = 0, heard = 0;
  for (int r = 0; r < co->view_n; r++) {
    const member_t *m = co->view[r];
    if (!m) continue;
    total++;
    /* Heard within half the timeout: members cut off together fall silent
     * together, one heartbeat interval apart, so when the first of them
     * reaches the timeout the others are past half of it, not heard. */
    heard += m->sess && 2 * (now - m->last_seen_ns) / 1000000 <= co->hb_timeout_ms;
  }
  int ok = !co->formed || total < 2 || 2 * heard >= total;
  if (!ok && !co->quorum_lost_logged)
    FTC_WARN(FTC_SUB_COORD, "job %s: only %d of the %d members of epoch %llu are heard; the "
             "coordinator is likely cut off from them: nobody is dropped for silence until half "
             "are heard again", co->job, heard, total, (unsigned long long)co->epoch);
  else if (ok && co->quorum_lost_logged) {
    FTC_WARN(FTC_SUB_COORD, "job %s: %d of the %d members of epoch %llu are heard again", co->job,
             heard, total, (unsigned long long)co->epoch);
    /* The others' sessions come back one by one, each on its own clock: a
     * connect attempt made during the outage gives up after 2 s and the
     * next starts within 1 s (member.c, CONNECT_ATTEMPT_S, RETRY_MAX_MS),
     * and an old session whose close (a FIN resent after the heal) arrives
     * before its new one would otherwise count as lost at once. So every
     * member of the epoch keeps its place for a heartbeat timeout plus
     * REJOIN_GRACE_MS from now; one still away then is dropped as usual. */
    co->rejoin_until_ns = now + ((int64_t)co->hb_timeout_ms + REJOIN_GRACE_MS) * 1000000LL;
    for (int r = 0; r < co->view_n; r++) {
      member_t *m = co->view[r];
      if (!m) continue;
      if (now - m->last_seen_ns > (int64_t)co->hb_timeout_ms * 1000000LL) m->last_seen_ns = now;
      if (m->detached_ns) m->detached_ns = now;
    }
  }
  co->quorum_lost_logged = !ok;
  return ok;
}

static void tick(ftc__coord_t *co) {
  int64_t now = ftc__now_ns();
  int dropped = 0;
  int quorum = quorum_heard(co, now) && now >= co->rejoin_until_ns;
  for (int i = 0; i < co->nmembers; i++) {
    member_t *m = co->members[i];
    if (!quorum && m->state == M_ACTIVE) continue;
    if (!m->sess && m->detached_ns && now - m->detached_ns > evidence_ns(co)) {
      char why[96];
      snprintf(why, sizeof(why), "lost its session and did not come back within %lld ms",
               (long long)(evidence_ns(co) / 1000000));
      drop_member(co, m, 0, why);
      dropped = 1;
      i--;
      continue;
    }
    int64_t silent_ms = (now - m->last_seen_ns) / 1000000;
    if (silent_ms <= co->hb_timeout_ms) continue;
    char why[96];
    snprintf(why, sizeof(why), "was silent for %lld ms (heartbeat timeout)", (long long)silent_ms);
    if (m->state == M_ACTIVE) {
      char hang[128];
      snprintf(hang, sizeof(hang), "rank %d stopped heartbeating (silent %lld ms)", m->rank,
               (long long)silent_ms);
      request_hang_dumps(co, m, hang);
    }
    /* Told why, in case it is alive after all (a host that starved it):
     * what it still sends is ignored, not refused as a stranger's. */
    exclude_member(co, m, FTC__PERR_EXCLUDED, why);
    dropped = 1;
    i--; /* drop_member moved the last member into slot i */
  }
  if (dropped || co->form_retry) {
    co->form_retry = 0;
    maybe_form_epoch(co);
  }
  if (co->formed) judge_suspects(co, now);
  for (int i = 0; i < co->nincidents; i++)
    if (ftc__incident_check(co->incidents[i], now))
      ftc__incident_write(co->incidents[i]);
    else
      ftc__incident_flush(co->incidents[i]);
  send_prospect(co); /* (a standby dropped: the others' prospect changed) */
  if (co->stats_dirty || co->view_pub_dirty) publish_stats(co);
}

static void on_tick(lws_sorted_usec_list_t *sul) {
  ftc__coord_t *co = lws_container_of(sul, ftc__coord_t, tick);
  tick(co);
  int tick_ms = co->heartbeat_ms < TICK_MS_MAX ? co->heartbeat_ms : TICK_MS_MAX;
  lws_sul_schedule(co->ctx, 0, &co->tick, on_tick, (lws_usec_t)tick_ms * 1000);
}

/* A member's session closed without a leave. When the host says its
 * process is exiting, it is dropped at once: a process's sockets close
 * during its exit, before any peer's report or its parent's SIGCHLD. A
 * member of the epoch keeps its place for the evidence time
 * (docs/recovery.md): a process whose connection blinked comes back with
 * its id and goes on; one that died is reported by its data-plane peers (a
 * member without a session is dropped at the first report) or does not
 * come back (on_tick). A member that was not in an epoch yet, or that a
 * peer already reported, is dropped at once. */
static void session_closed(ftc__coord_t *co, member_t *m) {
  m->sess = NULL;
  if ((m->state == M_ACTIVE || m->state == M_STANDBY) && m->pid > 0 && co->process_gone &&
      co->process_gone(co->process_gone_arg, m->slot, m->pid)) {
    exclude_member(co, m, FTC__PERR_EXCLUDED, "its process is exiting (its session closed as it died)");
    maybe_form_epoch(co);
    return;
  }
  if (m->state == M_ACTIVE && co->formed && !m->suspect_ns) {
    m->detached_ns = ftc__now_ns();
    co->stats_dirty = 1;
    FTC_INFO(FTC_SUB_COORD, "job %s: rank %d (slot %d, member %llu) lost its session; its place "
             "is kept for %lld ms", co->job, m->rank, m->slot, (unsigned long long)m->id,
             (long long)(evidence_ns(co) / 1000000));
    return;
  }
  if (m->state == M_STANDBY) {
    /* A standby member may wait for minutes while its process loads: a
     * connection that blinks meanwhile comes back with its id and is
     * standby again (or joins, handle_hello); a process that died is
     * declared by its host, or does not come back (on_tick). */
    m->detached_ns = ftc__now_ns();
    co->stats_dirty = 1;
    FTC_INFO(FTC_SUB_COORD, "job %s: slot %d (member %llu, standby) lost its session; its place "
             "is kept for %lld ms", co->job, m->slot, (unsigned long long)m->id,
             (long long)(evidence_ns(co) / 1000000));
    return;
  }
  drop_member(co, m, 0, "lost its session");
  maybe_form_epoch(co);
}

/* The session closed: its member (if any) is told, its buffers freed. */
static void session_end(ftc__coord_t *co, session_t *s) {
  if (s->m && !co->stopping) {
    session_closed(co, s->m);
  } else if (s->m) {
    s->m->sess = NULL;
  }
  ftc__frameq_clear(&s->outq);
  ftc__free(s->rx);
  dump_free(s->dump);
  s->rx = NULL;
  s->dump = NULL;
}

static int coord_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                          void *in, size_t len) {
  struct lws_context *ctx = lws_get_context(wsi);
  ftc__coord_t *co = ctx ? lws_context_user(ctx) : NULL;
  session_t *s = user;
  int rc = 0;
  switch (reason) {
    case LWS_CALLBACK_ESTABLISHED:
      memset(s, 0, sizeof(*s));
      s->wsi = wsi;
      struct sockaddr_storage pss;
      socklen_t psl = sizeof(pss);
      int pfd = (int)lws_get_socket_fd(wsi);
      if (pfd >= 0 && getpeername(pfd, (struct sockaddr *)&pss, &psl) == 0)
        ftc__addr_format((struct sockaddr *)&pss, psl, s->peer, sizeof(s->peer));
      else if (!lws_get_peer_simple(wsi, s->peer, sizeof(s->peer)))
        snprintf(s->peer, sizeof(s->peer), "?");
      lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, co->hello_timeout_s);
      FTC_DEBUG(FTC_SUB_COORD, "job %s: session from %s", co->job, s->peer);
      /* The 101 went out already: welcome (and a joiner's view) follow it. */
      const struct lws_protocols *pr = lws_get_protocol(wsi);
      if (pr && pr->name && !strcmp(pr->name, FTC__PROTO_WS_NAME_HELLO))
        rc = hello_header_from_request(co, s);
      break;
    case LWS_CALLBACK_RECEIVE: rc = on_receive(co, s, in, len); break;
    case LWS_CALLBACK_SERVER_WRITEABLE: rc = on_writeable(co, s); break;
    case LWS_CALLBACK_CLOSED: session_end(co, s); break;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
      if (co && !co->stopping) run_commands(co);
      break;
    default: return lws_callback_http_dummy(wsi, reason, user, in, len);
  }
  if (co) maybe_publish(co);
  return rc;
}

static void *service_main(void *arg) {
  ftc__coord_t *co = arg;
  pthread_setname_np(pthread_self(), "ftc-coord"); /* (by itself: see engine.c) */
  while (!__atomic_load_n(&co->stop, __ATOMIC_ACQUIRE)) {
    if (ftc__evloop_service(&co->ev, co->ctx) < 0) break;
  }
  return NULL;
}

static void free_config(ftc__coord_t *co) {
  ftc__free(co->tx_scratch);
  ftc__free(co->by_slot);
  ftc__free(co->job);
  ftc__free(co->token);
  ftc__free(co->bind_host);
  ftc__free(co->dump_dir);
}

/* A coordinator's state from cfg, without a context or a thread. */
static ftc_status_t coord_new(const ftc__coord_cfg_t *cfg, ftc__coord_t **out) {
  ftc_status_t st = FTC_OK;
  int64_t v;
  *out = NULL;
  if (!cfg || !cfg->job || !cfg->token || !*cfg->token || cfg->world_size < 1 ||
      cfg->min_size < 0 || cfg->min_size > cfg->world_size || cfg->port < 0 || cfg->port > 65535)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "coordinator config needs a job, a non-empty token, world_size >= 1, "
                      "0 <= min_size <= world_size and a port in 0..65535");
  ftc__proto_init();
  ftc__coord_t *co = ftc__calloc(1, sizeof(*co));
  if (!co) return ftc__error(FTC_ERR_NO_MEMORY, "out of memory creating the coordinator");
  co->job = ftc__strdup(cfg->job);
  co->token = ftc__strdup(cfg->token);
  co->bind_host = ftc__strdup(cfg->bind_host ? cfg->bind_host : "0.0.0.0");
  co->dump_dir = cfg->dump_dir ? ftc__strdup(cfg->dump_dir) : NULL;
  co->by_slot = ftc__calloc((size_t)cfg->world_size, sizeof(*co->by_slot));
  if (!co->job || !co->token || !co->bind_host || (cfg->dump_dir && !co->dump_dir) ||
      !co->by_slot) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "out of memory creating the coordinator");
    goto out_free_config;
  }
  co->world_size = cfg->world_size;
  co->min_size = cfg->min_size ? cfg->min_size : cfg->world_size;
  co->heartbeat_ms = cfg->heartbeat_ms;
  if (!co->heartbeat_ms) {
    FTC_CHECK_GOTO(ftc__param_int(FTC_P_HEARTBEAT_MS, &v), st, out_free_config);
    co->heartbeat_ms = (int)v;
  }
  co->hb_timeout_ms = cfg->heartbeat_timeout_ms;
  if (!co->hb_timeout_ms) {
    FTC_CHECK_GOTO(ftc__param_int(FTC_P_HEARTBEAT_TIMEOUT_MS, &v), st, out_free_config);
    co->hb_timeout_ms = (int)v;
  }
  int hello_ms = cfg->hello_timeout_ms ? cfg->hello_timeout_ms : 10000;
  co->hello_timeout_s = (hello_ms + 999) / 1000;
  co->epoch = cfg->first_epoch;
  co->on_event = cfg->on_event;
  co->event_arg = cfg->event_arg;
  co->process_gone = cfg->process_gone;
  co->process_gone_arg = cfg->process_gone_arg;
  /* Ids of a restarted coordinator must not repeat its predecessor's: the
   * default base is the start time in microseconds (far more than a job
   * ever hands out ids per microsecond of its coordinator's life). */
  co->next_id = cfg->member_id_base ? cfg->member_id_base : (uint64_t)(ftc__wall_ns() / 1000);
  pthread_mutex_init(&co->lock, NULL);
  *out = co;
  return FTC_OK;

out_free_config:
  free_config(co);
  ftc__free(co);
  return st;
}

ftc_status_t ftc__coord_create(const ftc__coord_cfg_t *cfg, ftc__coord_t **out) {
  ftc_status_t st = FTC_OK;
  *out = NULL;
  ftc__coord_t *co;
  if ((st = coord_new(cfg, &co)) != FTC_OK) return st;
  co->protocols[0] = (struct lws_protocols){
      .name = FTC__PROTO_WS_NAME,
      .callback = coord_callback,
      .per_session_data_size = sizeof(session_t),
      .rx_buffer_size = 0,
  };
  /* A client that offers both names lists the hello-in-request one first,
   * and lws selects the first name of the client's list that it serves. */
  if (!cfg->no_hello_in_request) {
    co->protocols[1] = co->protocols[0];
    co->protocols[1].name = FTC__PROTO_WS_NAME_HELLO;
  }
  co->tx_scratch = ftc__malloc(LWS_PRE + WRITE_PIECE);
  if (!co->tx_scratch) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "out of memory creating the coordinator");
    goto out_destroy_lock;
  }
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof(info));
  info.port = cfg->port;
  info.iface = co->bind_host;
  info.protocols = co->protocols;
  info.user = co;
  info.vhost_name = "ftcomm-coordinator";
  info.options = LWS_SERVER_OPTION_VALIDATE_UTF8;
  if (!strchr(co->bind_host, ':')) info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
  info.count_threads = 1;
  /* Room for a hello header of FTC__PROTO_MAX_HELLO_HEADER bytes and the
   * rest of the request (lws's default, 4096, is what clients stay within). */
  if (!cfg->no_hello_in_request) info.max_http_header_data = FTC__PROTO_COORD_HEADER_SPACE;
  /* lws sizes its fd tables from the process limit when this is 0: about
   * 16 MiB per coordinator under a container's limit of 2^20, and the
   * controller runs one coordinator per job. A job needs a session per
   * member plus joiners, reconnects and refused strangers in flight. */
  int fds = 4 * (cfg->world_size > 0 ? cfg->world_size : 1) + 64;
  info.fd_limit_per_thread = (unsigned int)(fds < 256 ? 256 : fds);
  /* Below the process's limit, lws finds a session from its descriptor
   * by walking that table on every event (wsi_from_fd); at or above it, by
   * indexing a table the size of the limit (16 bytes a descriptor: 16 MiB
   * under 2^20). A job of thousands of ranks takes the index. */
  if (cfg->world_size >= FD_INDEX_MIN_WORLD) info.fd_limit_per_thread = 0;
  /* No lws validity timer: lws re-files a session's timer in a sorted list
   * on every message it receives (a walk of up to every session: at 16,384
   * members 90% of the thread's time), to ping after 300 s of silence;
   * the coordinator's own heartbeat timeout covers a silent member. */
  info.retry_and_idle_policy = &no_validity_timer;
  int asked = ftc__evloop_open(&co->ev);
  if (asked > 0) {
    ftc__evloop_setup(&co->ev, &info);
  } else if (asked == 0) {
    FTC_WARN(FTC_SUB_COORD, "job %s: the coordinator waits in poll(2), which costs a walk of "
             "every session per wake-up: %s", co->job, co->ev.why);
  }
  co->ctx = lws_create_context(&info);
  if (!co->ctx) {
    st = ftc__error(FTC_ERR_SYSTEM,
                    "the coordinator cannot listen on %s port %d (address in use or not local?)",
                    co->bind_host, cfg->port);
    goto out_destroy_lock;
  }
  struct lws_vhost *vh = lws_get_vhost_by_name(co->ctx, "ftcomm-coordinator");
  co->port = vh ? lws_get_vhost_listen_port(vh) : -1;
  if (co->port <= 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "the coordinator did not get a port to listen on (%s port %d)",
                    co->bind_host, cfg->port);
    goto out_destroy_context;
  }
  publish_stats(co);
  lws_sul_schedule(co->ctx, 0, &co->tick, on_tick, 100 * 1000);
  int err = pthread_create(&co->thread, NULL, service_main, co);
  if (err) {
    st = ftc__error(FTC_ERR_SYSTEM, "cannot start the coordinator thread: %s", strerror(err));
    goto out_destroy_context;
  }
  char where[FTC__ADDR_MAX];
  ftc__addr_join(co->bind_host, co->port, where, sizeof(where));
  FTC_INFO(FTC_SUB_COORD, "job %s: coordinator listening on %s for %d ranks (min %d, %s)",
           co->job, where, co->world_size, co->min_size, ftc__evloop_name(&co->ev));
  *out = co;
  return FTC_OK;

out_destroy_context:
  co->stopping = 1;
  lws_context_destroy(co->ctx);
out_destroy_lock:
  ftc__evloop_close(&co->ev);
  ftc__free(co->pub_view.members);
  pthread_mutex_destroy(&co->lock);
  free_config(co);
  ftc__free(co);
  return st;
}

int ftc__coord_port(const ftc__coord_t *co) { return co->port; }

const char *ftc__coord_loop(const ftc__coord_t *co) { return ftc__evloop_name(&co->ev); }

ftc_status_t ftc__coord_get_view(ftc__coord_t *co, ftc__coord_view_t **out) {
  if (!co || !out) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "get_view: NULL argument");
  *out = NULL;
  ftc__coord_view_t *v = ftc__calloc(1, sizeof(*v));
  if (!v) return ftc__error(FTC_ERR_NO_MEMORY, "out of memory copying the epoch");
  pthread_mutex_lock(&co->lock);
  size_t n = (size_t)co->pub_view.size;
  v->members = ftc__malloc((n ? n : 1) * sizeof(*v->members));
  if (v->members) {
    v->epoch = co->pub_view.epoch;
    v->size = co->pub_view.size;
    if (n) memcpy(v->members, co->pub_view.members, n * sizeof(*v->members));
  }
  pthread_mutex_unlock(&co->lock);
  if (!v->members) {
    ftc__free(v);
    return ftc__error(FTC_ERR_NO_MEMORY, "out of memory copying the epoch");
  }
  *out = v;
  return FTC_OK;
}

void ftc__coord_view_free(ftc__coord_view_t *v) {
  if (!v) return;
  ftc__free(v->members);
  ftc__free(v);
}

void ftc__coord_stats(ftc__coord_t *co, ftc__coord_stats_t *out) {
  pthread_mutex_lock(&co->lock);
  *out = co->stats;
  pthread_mutex_unlock(&co->lock);
}

static ftc_status_t push_cmd(ftc__coord_t *co, cmd_t *c) {
  pthread_mutex_lock(&co->lock);
  if (co->cmd_tail)
    co->cmd_tail->next = c;
  else
    co->cmd_head = c;
  co->cmd_tail = c;
  pthread_mutex_unlock(&co->lock);
  lws_cancel_service(co->ctx);
  return FTC_OK;
}

ftc_status_t ftc__coord_request_dumps(ftc__coord_t *co, const char *incident,
                                      const char *reason) {
  if (!co || !incident || !safe_name(incident))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "an incident must be a plain name");
  cmd_t *c = ftc__calloc(1, sizeof(*c));
  if (!c) goto out_no_memory;
  c->kind = CMD_DUMPS;
  c->incident = ftc__strdup(incident);
  c->reason = ftc__strdup(reason ? reason : "");
  if (!c->incident || !c->reason) goto out_free_cmd;
  return push_cmd(co, c);
out_free_cmd:
  ftc__free(c->incident);
  ftc__free(c->reason);
  ftc__free(c);
out_no_memory:
  return ftc__error(FTC_ERR_NO_MEMORY, "out of memory queueing a dump request");
}

ftc_status_t ftc__coord_slot_lost(ftc__coord_t *co, int slot, const char *reason) {
  if (!co || slot < 0) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "bad slot %d", slot);
  cmd_t *c = ftc__calloc(1, sizeof(*c));
  if (!c) goto out_no_memory;
  c->kind = CMD_SLOT_LOST;
  c->slot = slot;
  c->reason = ftc__strdup(reason ? reason : "was declared lost");
  if (!c->reason) goto out_free_cmd;
  return push_cmd(co, c);
out_free_cmd:
  ftc__free(c);
out_no_memory:
  return ftc__error(FTC_ERR_NO_MEMORY, "out of memory queueing a lost slot");
}

static void coord_free(ftc__coord_t *co);

void ftc__coord_destroy(ftc__coord_t *co) {
  if (!co) return;
  __atomic_store_n(&co->stop, 1, __ATOMIC_RELEASE);
  lws_cancel_service(co->ctx);
  pthread_join(co->thread, NULL);
  co->stopping = 1;
  lws_context_destroy(co->ctx);
  ftc__evloop_close(&co->ev);
  coord_free(co);
}

/* What coord_new and the sessions left: the members, epochs, commands. */
static void coord_free(ftc__coord_t *co) {
  /* What never answered is said so in the records, which stay as written. */
  for (int i = 0; i < co->nincidents; i++) {
    ftc__incident_close(co->incidents[i]);
    ftc__incident_write(co->incidents[i]);
    ftc__incident_free(co->incidents[i]);
  }
  for (int i = 0; i < co->nmembers; i++) {
    ftc__free(co->members[i]->unreach);
    ftc__free(co->members[i]);
  }
  ftc__free(co->members);
  ftc__free(co->view);
  cmd_t *c = co->cmd_head;
  while (c) {
    cmd_t *next = c->next;
    ftc__free(c->incident);
    ftc__free(c->reason);
    ftc__free(c);
    c = next;
  }
  ftc__free(co->pub_view.members);
  ftc__free(co->backend_blob);
  ftc__free(co->left_ids);
  ftc__free(co->epoch_left);
  ftc__free(co->drops);
  ftc__free(co->epoch_drops);
  ftc__free(co->sent);
  pthread_mutex_destroy(&co->lock);
  free_config(co);
  ftc__free(co);
}

/* ---- offline: no network, no thread (the fuzz target) ---- */

ftc_status_t ftc__coord_offline_create(const ftc__coord_cfg_t *cfg, ftc__coord_t **out) {
  ftc_status_t st = coord_new(cfg, out);
  if (st == FTC_OK) publish_stats(*out);
  return st;
}

ftc__coord_session_t *ftc__coord_offline_open(ftc__coord_t *co, const char *peer) {
  (void)co;
  session_t *s = ftc__calloc(1, sizeof(*s));
  if (s) snprintf(s->peer, sizeof(s->peer), "%s", peer ? peer : "offline");
  return (ftc__coord_session_t *)s;
}

int ftc__coord_offline_receive(ftc__coord_t *co, ftc__coord_session_t *sess, const char *text,
                               size_t len) {
  session_t *s = (session_t *)sess;
  if (s->refused) return 0;
  if (len > FTC__PROTO_MAX_RANK_MSG) {
    refuse(co, s, FTC__PERR_TOO_LARGE, "a message of more than %d bytes", FTC__PROTO_MAX_RANK_MSG);
    return 0;
  }
  int rc = handle_message(co, s, text, len);
  if (co->stats_dirty) publish_stats(co);
  return rc < 0 || s->refused ? -1 : 0;
}

int ftc__coord_offline_hello_header(ftc__coord_t *co, ftc__coord_session_t *sess, const char *hdr,
                                    size_t len) {
  session_t *s = (session_t *)sess;
  int rc = hello_header(co, s, hdr, len);
  if (co->stats_dirty) publish_stats(co);
  return rc < 0 || s->refused ? -1 : 0;
}

size_t ftc__coord_offline_sent(ftc__coord_session_t *sess, char *buf, size_t len, int *close_after) {
  session_t *s = (session_t *)sess;
  ftc__frame_t *f = ftc__frameq_pop(&s->outq);
  if (!f) return 0;
  const ftc__frame_t *b = f->ref ? f->ref : f;
  size_t n = b->len < len ? b->len : len;
  memcpy(buf, b->buf + LWS_PRE, n);
  *close_after = f->close_after;
  n = b->len;
  ftc__frame_release(f);
  return n;
}

void ftc__coord_offline_tick(ftc__coord_t *co) {
  run_commands(co);
  tick(co);
}

void ftc__coord_offline_close(ftc__coord_t *co, ftc__coord_session_t *sess) {
  session_t *s = (session_t *)sess;
  if (!s) return;
  session_end(co, s); /* co is not touched once the session has no member */
  if (co && co->stats_dirty && !co->stopping) publish_stats(co);
  ftc__free(s);
}

void ftc__coord_offline_destroy(ftc__coord_t *co) {
  if (!co) return;
  co->stopping = 1;
  for (int i = 0; i < co->nmembers; i++) /* their sessions are the caller's, closed or not */
    if (co->members[i]->sess) co->members[i]->sess->m = NULL;
  coord_free(co);
}
