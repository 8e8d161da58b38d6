/*
 * fuzz_coord.c - the coordinator's handling of its sessions' messages
 * (runtime/src/coordinator/coordinator.c), in-process and without a
 * network: the offline coordinator (ftc__coord_offline_*) is the same code
 * behind the libwebsockets callbacks, with sessions that have no
 * connection. A job of 3 slots (min 2), token "fuzz-token", job "fuzz";
 * member ids from 1001.
 *
 * Input: lines, each one step:
 *   N<text>   session N (0 to 3; opened at its first use) sends <text> as
 *             one message
 *   hN<text>  session N opens with the hello-in-request subprotocol and
 *             <text> as its X-Ftcomm-Hello header (base64url of a hello);
 *             "hN" alone: the header is missing. Ignored if N is open.
 *   xN        session N closes (as a process that dies: no leave)
 *   t         the coordinator's tick (timeouts, the evidence rule)
 *
 * Checks: every message the coordinator sends is one that a rank's decoder
 * accepts (ftc__proto_decode, the rank's limit), and one that closes the
 * session is an error; the announced epoch has at most 3 members, in rank
 * order, each a distinct slot of the job; at most as many sessions are
 * connected as are open.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftc_coord.h"
#include "fuzz.h"
#include "proto/proto.h"

#define NSESS 4
#define WORLD 3

static char *sent;
static const size_t sent_cap = 1 << 20;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  /* Every refusal is a warning: not at this rate (FUZZ_COORD_LOG=1 keeps them). */
  if (!getenv("FUZZ_COORD_LOG")) setenv("FTCOMM_LOG_LEVEL", "none", 1);
  sent = malloc(sent_cap);
  return 0;
}

/* What s was sent: each message decodes on the rank's side. 1: s is to be
 * closed (an error was sent with it). */
static int drain(ftc__coord_session_t *s) {
  int closing = 0, close_after;
  size_t n;
  while ((n = ftc__coord_offline_sent(s, sent, sent_cap, &close_after)) > 0) {
    FUZZ_CHECK(n <= sent_cap); /* a job of 3: views are small */
    ftc__msg_t msg;
    char why[256];
    ftc__perr_t perr = ftc__proto_decode(sent, n, FTC__PROTO_MAX_COORD_MSG, &msg, why, sizeof(why));
    if (perr != FTC__PERR_NONE) {
      fprintf(stderr, "the coordinator sent what a rank refuses (%s): %.*s\n", why, (int)n, sent);
      FUZZ_CHECK(!"a rank accepts what the coordinator sends");
    }
    FUZZ_CHECK(!close_after || msg.type == FTC__MSG_ERROR);
    ftc__msg_clear(&msg);
    closing |= close_after;
  }
  return closing;
}

static void check_epoch(ftc__coord_t *co, int open) {
  ftc__coord_view_t *v = NULL;
  if (ftc__coord_get_view(co, &v) != FTC_OK) return; /* out of memory */
  FUZZ_CHECK(v->size >= 0 && v->size <= WORLD);
  int seen[WORLD] = {0};
  for (int r = 0; r < v->size; r++) {
    FUZZ_CHECK(v->members[r].rank == r);
    FUZZ_CHECK(v->members[r].slot >= 0 && v->members[r].slot < WORLD);
    FUZZ_CHECK(!seen[v->members[r].slot]);
    seen[v->members[r].slot] = 1;
  }
  ftc__coord_view_free(v);
  ftc__coord_stats_t st;
  ftc__coord_stats(co, &st);
  FUZZ_CHECK(st.connected >= 0 && st.connected <= open);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ftc__coord_cfg_t cfg = {0};
  cfg.job = "fuzz";
  cfg.token = "fuzz-token";
  cfg.world_size = WORLD;
  cfg.min_size = 2;
  cfg.heartbeat_ms = 1000;
  cfg.heartbeat_timeout_ms = 600000; /* no member times out while an input runs */
  cfg.member_id_base = 1000;
  cfg.dump_dir = "/proc/ftc-fuzz-no-dumps"; /* reassembled, then not stored */
  ftc__coord_t *co = NULL;
  if (ftc__coord_offline_create(&cfg, &co) != FTC_OK) return 0;
  ftc__coord_session_t *sess[NSESS] = {0};
  char *text = malloc(size + 1);
  FUZZ_CHECK(text);
  memcpy(text, data, size);
  text[size] = '\0';
  char peer[16];
  for (char *line = text, *next; line && *line; line = next) {
    size_t len = strcspn(line, "\n");
    next = line[len] ? line + len + 1 : NULL;
    line[len] = '\0';
    int i = line[0] >= '0' && line[0] < '0' + NSESS ? line[0] - '0' : -1;
    if (i >= 0) {
      if (!sess[i]) {
        snprintf(peer, sizeof(peer), "fuzz-%d", i);
        if (!(sess[i] = ftc__coord_offline_open(co, peer))) break;
      }
      if (ftc__coord_offline_receive(co, sess[i], line + 1, len - 1) < 0 || drain(sess[i])) {
        ftc__coord_offline_close(co, sess[i]);
        sess[i] = NULL;
      }
    } else if (line[0] == 'h' && line[1] >= '0' && line[1] < '0' + NSESS) {
      int k = line[1] - '0';
      if (!sess[k]) {
        snprintf(peer, sizeof(peer), "fuzz-h%d", k);
        if (!(sess[k] = ftc__coord_offline_open(co, peer))) break;
        if (ftc__coord_offline_hello_header(co, sess[k], len > 2 ? line + 2 : NULL,
                                            len > 2 ? len - 2 : 0) < 0 ||
            drain(sess[k])) {
          ftc__coord_offline_close(co, sess[k]);
          sess[k] = NULL;
        }
      }
    } else if (line[0] == 'x' && line[1] >= '0' && line[1] < '0' + NSESS) {
      ftc__coord_offline_close(co, sess[line[1] - '0']);
      sess[line[1] - '0'] = NULL;
    } else if (line[0] == 't') {
      ftc__coord_offline_tick(co);
    }
    int open = 0;
    for (int k = 0; k < NSESS; k++) {
      if (sess[k] && drain(sess[k])) { /* e.g. excluded on another's report */
        ftc__coord_offline_close(co, sess[k]);
        sess[k] = NULL;
      }
      open += sess[k] != NULL;
    }
    check_epoch(co, open);
  }
  ftc__coord_offline_destroy(co);
  for (int k = 0; k < NSESS; k++) ftc__coord_offline_close(NULL, sess[k]);
  free(text);
  return 0;
}
