/*
 * fuzz_proto.c - the membership protocol's decoder (runtime/src/proto/),
 * which both the coordinator (messages from ranks, up to 256 KiB) and the
 * ranks (messages from the coordinator, up to 64 MiB) run on every
 * WebSocket message they receive.
 *
 * Checks besides the sanitizers': a refusal has a known error code and a
 * reason that says something; a message that decodes is rebuilt with the
 * protocol's own builders, encoded as the sender would and decoded again,
 * and must come back the same (what one side accepts, the other side's
 * builders can say, and nothing is lost in between). Each input is also
 * decoded by the general decoder alone (ftc__proto_fast_views 0): the
 * views' fast path must give the same result, reason and fields.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftc_alloc.h"
#include "fuzz.h"
#include "proto/proto.h"

static json_t *rebuild(const ftc__msg_t *m) {
  switch (m->type) {
    case FTC__MSG_HELLO: return ftc__proto_hello(&m->hello);
    case FTC__MSG_WELCOME:
      return ftc__proto_welcome(m->member_id, m->epoch, m->heartbeat_ms, m->max_message);
    case FTC__MSG_VIEW: {
      json_t *v = ftc__proto_view(m->epoch, m->members, m->nmembers, m->backend);
      v = ftc__proto_view_left(v, m->left, m->nleft);
      return ftc__proto_view_dropped(v, m->dropped, m->ndropped);
    }
    case FTC__MSG_HEARTBEAT: return ftc__proto_heartbeat_ready(m->epoch, m->ready);
    case FTC__MSG_BACKEND: return ftc__proto_backend(m->epoch, m->backend);
    case FTC__MSG_DUMP_REQUEST: return ftc__proto_dump_request(m->incident, m->reason, m->epoch);
    case FTC__MSG_DUMP:
      return ftc__proto_dump(m->incident, m->rank, m->offset, m->total, m->data, m->data_len,
                             m->last);
    case FTC__MSG_LEAVE: return ftc__proto_leave(m->reason);
    case FTC__MSG_VIEW_DELTA: {
      json_t *v = ftc__proto_view_delta(m->epoch, m->base_epoch, m->view_hash, m->view_size,
                                        m->removed, m->nremoved, m->members, m->nmembers,
                                        m->ready_ids, m->ready_all ? -1 : m->nready);
      v = ftc__proto_view_left(v, m->left, m->nleft);
      return ftc__proto_view_dropped(v, m->dropped, m->ndropped);
    }
    case FTC__MSG_VIEW_REQUEST: return ftc__proto_view_request();
    default: return NULL; /* failure and error: the builders take other inputs */
  }
}

static int same_str(const char *a, const char *b) {
  return (!a || !*a) ? (!b || !*b) : b && !strcmp(a, b);
}

static void same_members(const ftc__wire_member_t *a, const ftc__wire_member_t *b, int n) {
  for (int i = 0; i < n; i++) {
    FUZZ_CHECK(a[i].rank == b[i].rank && a[i].slot == b[i].slot);
    FUZZ_CHECK(a[i].member_id == b[i].member_id && a[i].joined_epoch == b[i].joined_epoch);
    FUZZ_CHECK(same_str(a[i].addr, b[i].addr) && a[i].state == b[i].state);
  }
}

static void same_msg(const ftc__msg_t *a, const ftc__msg_t *b) {
  FUZZ_CHECK(a->type == b->type);
  switch (a->type) {
    case FTC__MSG_HELLO:
      FUZZ_CHECK(same_str(a->hello.job, b->hello.job) && same_str(a->hello.token, b->hello.token));
      FUZZ_CHECK(same_str(a->hello.addr, b->hello.addr) && same_str(a->hello.pod, b->hello.pod));
      FUZZ_CHECK(same_str(a->hello.node, b->hello.node) && same_str(a->hello.host, b->hello.host));
      FUZZ_CHECK(a->hello.slot == b->hello.slot && a->hello.world_size == b->hello.world_size);
      FUZZ_CHECK(a->hello.min_size == b->hello.min_size && a->hello.joiner == b->hello.joiner);
      FUZZ_CHECK(a->hello.pid == b->hello.pid && a->hello.known_epoch == b->hello.known_epoch);
      FUZZ_CHECK(a->hello.prev_member_id == b->hello.prev_member_id);
      FUZZ_CHECK(a->hello.view_n == b->hello.view_n);
      same_members(a->hello.view, b->hello.view, a->hello.view_n);
      break;
    case FTC__MSG_WELCOME:
      FUZZ_CHECK(a->member_id == b->member_id && a->epoch == b->epoch);
      FUZZ_CHECK(a->heartbeat_ms == b->heartbeat_ms && a->max_message == b->max_message);
      break;
    case FTC__MSG_VIEW:
      FUZZ_CHECK(a->epoch == b->epoch && a->nmembers == b->nmembers);
      FUZZ_CHECK(a->nleft == b->nleft && a->ndropped == b->ndropped);
      FUZZ_CHECK((a->backend == NULL) == (b->backend == NULL) && same_str(a->backend, b->backend));
      same_members(a->members, b->members, a->nmembers);
      for (int i = 0; i < a->nleft; i++) FUZZ_CHECK(a->left[i] == b->left[i]);
      for (int i = 0; i < a->ndropped; i++) {
        FUZZ_CHECK(a->dropped[i].member_id == b->dropped[i].member_id);
        FUZZ_CHECK(same_str(a->dropped[i].reason, b->dropped[i].reason));
        FUZZ_CHECK(same_str(a->dropped[i].detail, b->dropped[i].detail));
      }
      break;
    case FTC__MSG_HEARTBEAT: FUZZ_CHECK(a->epoch == b->epoch && a->ready == b->ready); break;
    case FTC__MSG_BACKEND:
      FUZZ_CHECK(a->epoch == b->epoch && same_str(a->backend, b->backend));
      break;
    case FTC__MSG_DUMP_REQUEST:
      FUZZ_CHECK(a->epoch == b->epoch && same_str(a->incident, b->incident));
      FUZZ_CHECK(same_str(a->reason, b->reason));
      break;
    case FTC__MSG_DUMP:
      FUZZ_CHECK(same_str(a->incident, b->incident) && a->rank == b->rank);
      FUZZ_CHECK(a->offset == b->offset && a->total == b->total && a->last == b->last);
      FUZZ_CHECK(a->data_len == b->data_len && !memcmp(a->data, b->data, a->data_len));
      break;
    case FTC__MSG_LEAVE: FUZZ_CHECK(same_str(a->reason, b->reason)); break;
    case FTC__MSG_VIEW_DELTA:
      FUZZ_CHECK(a->epoch == b->epoch && a->base_epoch == b->base_epoch);
      FUZZ_CHECK(a->view_hash == b->view_hash && a->view_size == b->view_size);
      FUZZ_CHECK(a->nremoved == b->nremoved && a->ready_all == b->ready_all);
      FUZZ_CHECK(a->ready_all || a->nready == b->nready);
      FUZZ_CHECK(a->nmembers == b->nmembers && a->nleft == b->nleft);
      FUZZ_CHECK(a->ndropped == b->ndropped);
      same_members(a->members, b->members, a->nmembers);
      for (int i = 0; i < a->nremoved; i++) FUZZ_CHECK(a->removed[i] == b->removed[i]);
      for (int i = 0; i < a->nready; i++) FUZZ_CHECK(a->ready_ids[i] == b->ready_ids[i]);
      for (int i = 0; i < a->nleft; i++) FUZZ_CHECK(a->left[i] == b->left[i]);
      break;
    default: break;
  }
}

static void one(const uint8_t *data, size_t size, size_t max) {
  ftc__msg_t m;
  char why[512];
  why[0] = '\0';
  ftc__perr_t e = ftc__proto_decode((const char *)data, size, max, &m, why, sizeof(why));
  FUZZ_CHECK(e >= FTC__PERR_NONE && e < FTC__PERR_COUNT);
  {
    ftc__msg_t g;
    char whyg[512] = "";
    ftc__proto_fast_views = 0;
    ftc__perr_t eg = ftc__proto_decode((const char *)data, size, max, &g, whyg, sizeof(whyg));
    ftc__proto_fast_views = 1;
    FUZZ_CHECK(eg == e && strcmp(whyg, why) == 0);
    if (e == FTC__PERR_NONE) same_msg(&m, &g);
    ftc__msg_clear(&g);
  }
  if (e != FTC__PERR_NONE) {
    FUZZ_CHECK(why[0] != '\0' && strlen(why) < sizeof(why));
    FUZZ_CHECK(m.root == NULL && m.members == NULL && m.type == FTC__MSG_NONE);
    ftc__msg_clear(&m);
    return;
  }
  FUZZ_CHECK(m.type > FTC__MSG_NONE && m.type < FTC__MSG_TYPE_COUNT);
  FUZZ_CHECK(strcmp(ftc__msg_type_name(m.type), "?") != 0);
  if (m.type == FTC__MSG_ERROR) (void)ftc__perr_status(m.code);
  json_t *j = rebuild(&m);
  if (j) {
    ftc__frame_t *f = ftc__proto_encode(j, 16);
    FUZZ_CHECK(f != NULL);
    ftc__msg_t m2;
    char why2[512] = "";
    ftc__perr_t e2 = ftc__proto_decode((const char *)f->buf + 16, f->len, FTC__PROTO_MAX_COORD_MSG,
                                       &m2, why2, sizeof(why2));
    if (e2 != FTC__PERR_NONE) {
      fprintf(stderr, "rebuilt %s does not decode: %s\n%.*s\n", ftc__msg_type_name(m.type), why2,
              (int)f->len, (const char *)f->buf + 16);
      FUZZ_CHECK(!"a rebuilt message decodes");
    }
    same_msg(&m, &m2);
    ftc__msg_clear(&m2);
    ftc__free(f);
  }
  ftc__msg_clear(&m);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  ftc__proto_init();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  one(data, size, FTC__PROTO_MAX_RANK_MSG);  /* the coordinator's bound */
  if (size > FTC__PROTO_MAX_RANK_MSG) one(data, size, FTC__PROTO_MAX_COORD_MSG); /* a rank's */
  return 0;
}
