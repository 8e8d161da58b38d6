/*
 * test_coords.c - the controller's embedded coordinators, without an API
 * server: the WebSocket pieces of the router (RFC 6455 accept key, client
 * frames), real membership clients (runtime/src/membership) of two jobs
 * meeting their own coordinators through one port, a rank of an unknown job
 * turned away, a slot declared lost shrinking the epoch at once, and the
 * incident folder: ftcomm-trace's analysis written next to real dumps and
 * the job's uid stamped on it, and the sweep of deleted jobs' folders
 * sparing a job that has a coordinator (the rules: test_retention.c); the
 * sweeper thread removing a deleted job's folder in slices while a job of
 * that name is made again and the poll runs, neither waiting for it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_time.h"
#include "jobcoord.h"
#include "membership/member.h"
#include "router.h"
#include "proto/proto.h"
#include "../coord/coord_test_util.h"

#define WAIT_MS 10000

static void accept_key_is_the_rfc_example(void **state) {
  (void)state;
  char out[64];
  ftck_ws_accept("dGhlIHNhbXBsZSBub25jZQ==", out, sizeof out);
  assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

static void client_frames_are_unmasked_and_unmasked_frames_refused(void **state) {
  (void)state;
  /* RFC 6455 5.7: a masked "Hello". */
  const unsigned char f[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
  char payload[16];
  size_t plen = 0;
  int fin = 0, op = 0;
  assert_int_equal(ftck_ws_frame(f, 5, &fin, &op, payload, sizeof payload, &plen), 0); /* incomplete */
  assert_int_equal(ftck_ws_frame(f, sizeof f, &fin, &op, payload, sizeof payload, &plen), (long)sizeof f);
  assert_int_equal(fin, 1);
  assert_int_equal(op, 1);
  assert_int_equal(plen, 5);
  assert_memory_equal(payload, "Hello", 5);
  const unsigned char unmasked[] = {0x81, 0x05, 'H', 'e', 'l', 'l', 'o'};
  plen = 0;
  assert_int_equal(ftck_ws_frame(unmasked, sizeof unmasked, &fin, &op, payload, sizeof payload, &plen), -1);
}

static int no_route(void *ud, const char *job, const char *token) {
  (void)ud;
  (void)job;
  (void)token;
  return -1;
}

static void the_port_binds_every_address_or_one_and_refuses_bad_ones(void **state) {
  (void)state;
  const char *good[] = {":0", "127.0.0.1:0", "localhost:0"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    ftck_router_t *r = NULL;
    assert_int_equal(ftck_router_start(good[i], no_route, NULL, &r), FTC_OK);
    assert_true(ftck_router_port(r) > 0);
    ftck_router_stop(r);
  }
  ftck_router_t *r = NULL;
  assert_int_equal(ftck_router_start("7470", no_route, NULL, &r), FTC_ERR_CONFIG); /* no colon */
  assert_null(r);
  assert_int_equal(ftck_router_start("127.0.0.1:notaport", no_route, NULL, &r), FTC_ERR_CONFIG);
  ftck_router_stop(NULL);
}

typedef struct fixture {
  char dir[PATH_MAX];
  ftck_coords_t *cs;
  char addr[64];
  int notified; /* atomic */
} fixture_t;

static void on_news(void *ud, const char *key) {
  (void)key;
  __atomic_add_fetch(&((fixture_t *)ud)->notified, 1, __ATOMIC_RELAXED);
}

static void bin_path(const char *name, char *out, size_t n);

static int setup(void **state) {
  fixture_t *fx = calloc(1, sizeof *fx);
  char trace[PATH_MAX + 32];
  bin_path("ftcomm-trace", trace, sizeof trace);
  snprintf(fx->dir, sizeof fx->dir, "%s/ftck-coords.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  assert_non_null(mkdtemp(fx->dir));
  ftck_coords_opts_t o = {.bind = "127.0.0.1:0", .dump_volume = fx->dir, .dump_retention = 2,
                          .analyzer = trace, .notify = on_news, .ud = fx};
  assert_int_equal(ftck_coords_create(&o, &fx->cs), FTC_OK);
  assert_int_equal(ftck_coords_port(fx->cs), -1); /* not before listen */
  assert_int_equal(ftck_coords_listen(fx->cs), FTC_OK);
  snprintf(fx->addr, sizeof fx->addr, "127.0.0.1:%d", ftck_coords_port(fx->cs));
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture_t *fx = *state;
  ftck_coords_destroy(fx->cs);
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx->dir);
  assert_int_equal(system(cmd), 0);
  free(fx);
  return 0;
}

static ftc__member_t *join(fixture_t *fx, const char *job, const char *token, int slot, int world, int timeout_ms,
                           ftc_status_t *st) {
  char data[32];
  snprintf(data, sizeof data, "127.0.0.1:%d", 41000 + slot);
  ftc__member_cfg_t c = {.coordinator = fx->addr, .job = job, .token = token, .slot = slot, .world_size = world,
                         .min_size = 1, .data_addr = data, .host = "test", .connect_timeout_ms = timeout_ms,
                         .heartbeat_ms = 100};
  ftc__member_t *m = NULL;
  *st = ftc__member_open(&c, &m);
  return m;
}

/* A member that the test needs: its join must succeed. */
static ftc__member_t *joined(fixture_t *fx, const char *job, const char *token, int slot, int world) {
  ftc_status_t st;
  ftc__member_t *m = join(fx, job, token, slot, world, WAIT_MS, &st);
  assert_int_equal(st, FTC_OK);
  return m;
}

static void start_job(fixture_t *fx, const char *key, const char *job, const char *token, int world) {
  char uid[64];
  snprintf(uid, sizeof uid, "uid-%s", job);
  ftck_coord_params_t p = {.job = job, .token = token, .uid = uid, .world_size = world, .min_size = 1,
                           .hang_timeout_ms = 60000};
  int created = 0;
  assert_int_equal(ftck_coords_ensure(fx->cs, key, &p, &created), FTC_OK);
  assert_int_equal(created, 1);
  assert_int_equal(ftck_coords_ensure(fx->cs, key, &p, &created), FTC_OK); /* same parameters: kept */
  assert_int_equal(created, 0);
}

static void two_jobs_share_one_port_and_a_lost_slot_shrinks_at_once(void **state) {
  fixture_t *fx = *state;
  start_job(fx, "ns/a", "a", "token-a", 2);
  start_job(fx, "ns/b", "b", "token-b", 1);
  ftc__member_t *a0 = joined(fx, "a", "token-a", 0, 2), *a1 = joined(fx, "a", "token-a", 1, 2);
  ftc__member_t *b0 = joined(fx, "b", "token-b", 0, 1);
  ftc__view_t *va = NULL, *vb = NULL;
  assert_int_equal(ftc__member_wait_view(a0, 0, WAIT_MS, &va), FTC_OK);
  assert_int_equal(ftc__member_wait_view(b0, 0, WAIT_MS, &vb), FTC_OK);
  assert_int_equal(va->size, 2);
  assert_int_equal(vb->size, 1);
  ftc__coord_view_t *cv = ftck_coords_view(fx->cs, "ns/a");
  assert_non_null(cv);
  assert_int_equal(cv->epoch, va->epoch);
  assert_int_equal(cv->size, 2);
  ftc__coord_view_free(cv);
  assert_true(__atomic_load_n(&fx->notified, __ATOMIC_RELAXED) >= 2); /* an epoch each */

  /* The wrong token reaches job a's coordinator, which refuses it. */
  ftc_status_t st;
  ftc__member_t *bad = join(fx, "a", "wrong", 0, 2, WAIT_MS, &st);
  assert_null(bad);
  assert_int_equal(st, FTC_ERR_AUTH);

  /* The process of slot 1 is gone (its pod died): a0 sees the next epoch
   * without it at once, long before the 60 s heartbeat timeout. */
  int64_t t0 = ftc__now_ns();
  assert_int_equal(ftck_coords_slot_lost(fx->cs, "ns/a", 1, "a-1-0", "pod a-1-0 failed"), FTC_OK);
  assert_int_equal(ftck_coords_slot_lost(fx->cs, "ns/a", 1, "a-1-0", "pod a-1-0 failed"), FTC_OK); /* once */
  ftc__view_t *va2 = NULL;
  assert_int_equal(ftc__member_wait_view(a0, va->epoch, WAIT_MS, &va2), FTC_OK);
  assert_int_equal(va2->size, 1);
  assert_true(ftc__now_ns() - t0 < 5000000000LL);
  ftck_coords_stats_t s;
  ftck_coords_get_stats(fx->cs, &s);
  assert_int_equal(s.slots_declared_lost, 1);
  assert_true(s.router_routed >= 4);
  assert_int_equal(s.listening, 1);
  ftc__view_free(va);
  ftc__view_free(va2);
  ftc__view_free(vb);
  ftc__member_close(a1);
  ftc__member_close(a0);
  ftc__member_close(b0);
}

/* The poll queues a job once per published change (an epoch, its size,
 * sessions), and not again while nothing changes; nothing before any rank. */
/* Through the router: a hello in the upgrade request is routed by its job
 * and taken by the job's coordinator (welcome and view without a hello
 * frame, a wrong token refused with auth_failed); a client that offers only
 * the old subprotocol sends its hello as a frame, as before. */
/* Job h's hello (token, slot) as the router sees it: its text in buf. */
static const char *h_hello(char *buf, size_t len, const char *token, int slot) {
  snprintf(buf, len,
           "{\"v\":1,\"type\":\"hello\",\"job\":\"h\",\"token\":\"%s\",\"slot\":%d,\"world_size\":2,"
           "\"min_size\":1,\"addr\":\"127.0.0.1:9\"}", token, slot);
  return buf;
}

/* A session offering both subprotocols with that hello in its request: the
 * router must select the hello-in-request one; the first frame's text. */
static int connect_with_hello_header(int port, const char *token, int slot, char **first) {
  char hello[512], enc[1024], sel[64];
  h_hello(hello, sizeof hello, token, slot);
  ftc__b64url_encode(hello, strlen(hello), enc);
  int fd = raw_ws_connect_ex(port, FTC__PROTO_WS_NAME_HELLO ", " FTC__PROTO_WS_NAME, enc, sel, sizeof sel);
  assert_true(fd >= 0);
  assert_string_equal(sel, FTC__PROTO_WS_NAME_HELLO);
  assert_int_equal(raw_ws_recv(fd, first, WAIT_MS), WS_TEXT);
  return fd;
}

static void the_router_routes_a_hello_in_the_upgrade_request(void **state) {
  fixture_t *fx = *state;
  start_job(fx, "ns/h", "h", "token-h", 2);
  int port = ftck_coords_port(fx->cs);
  char hello[512], sel[64], *text = NULL;
  int fd = connect_with_hello_header(port, "wrong", 0, &text);
  assert_non_null(strstr(text, "\"auth_failed\""));
  free(text);
  close(fd);
  int a = connect_with_hello_header(port, "token-h", 0, &text);
  assert_non_null(strstr(text, "\"welcome\""));
  free(text);
  /* Slot 1 the old way: only the old name, the hello as a frame. */
  int b = raw_ws_connect_ex(port, FTC__PROTO_WS_NAME, NULL, sel, sizeof sel);
  assert_true(b >= 0);
  assert_string_equal(sel, FTC__PROTO_WS_NAME);
  assert_int_equal(raw_ws_send_text(b, h_hello(hello, sizeof hello, "token-h", 1)), 0);
  assert_int_equal(raw_ws_recv(b, &text, WAIT_MS), WS_TEXT);
  assert_non_null(strstr(text, "\"welcome\""));
  free(text);
  for (int i = 0; i < 2; i++) { /* epoch 1 for both */
    int s = i ? b : a;
    assert_int_equal(raw_ws_recv(s, &text, WAIT_MS), WS_TEXT);
    if (!strstr(text, "\"view\"")) fail_msg("expected the first view, got %s", text);
    free(text);
  }
  close(a);
  close(b);
}

static void the_poll_queues_a_job_when_its_coordinator_publishes_a_change(void **state) {
  fixture_t *fx = *state;
  start_job(fx, "ns/p", "p", "token-p", 1);
  ftck_coords_poll(fx->cs);
  int before = __atomic_load_n(&fx->notified, __ATOMIC_RELAXED);
  ftck_coords_poll(fx->cs);
  assert_int_equal(__atomic_load_n(&fx->notified, __ATOMIC_RELAXED), before); /* no rank yet: nothing new */
  ftc__member_t *m = joined(fx, "p", "token-p", 0, 1);
  ftc__view_t *v = NULL;
  assert_int_equal(ftc__member_wait_view(m, 0, WAIT_MS, &v), FTC_OK);
  /* The epoch's event has queued it already; the view may be published a
   * moment after: wait for it, then the poll queues the job once more. */
  ftc__coord_view_t *cv = NULL;
  for (int i = 0; i < 200; i++) {
    cv = ftck_coords_view(fx->cs, "ns/p");
    if (cv && cv->epoch == v->epoch) break;
    ftc__coord_view_free(cv);
    cv = NULL;
    usleep(10000);
  }
  assert_non_null(cv);
  ftc__coord_view_free(cv);
  before = __atomic_load_n(&fx->notified, __ATOMIC_RELAXED);
  ftck_coords_poll(fx->cs);
  assert_int_equal(__atomic_load_n(&fx->notified, __ATOMIC_RELAXED), before + 1);
  ftck_coords_poll(fx->cs);
  assert_int_equal(__atomic_load_n(&fx->notified, __ATOMIC_RELAXED), before + 1); /* nothing changed since */
  ftc__view_free(v);
  ftc__member_close(m);
}

static void a_rank_of_a_job_without_coordinator_is_turned_away(void **state) {
  fixture_t *fx = *state;
  ftc_status_t st;
  ftc__member_t *m = join(fx, "nobody", "t", 0, 1, 1500, &st);
  assert_null(m);
  assert_int_not_equal(st, FTC_OK);
  ftck_coords_stats_t s;
  ftck_coords_get_stats(fx->cs, &s);
  assert_true(s.router_unrouted >= 1);
  assert_int_equal(s.router_routed, 0);
}

static void a_job_that_is_removed_stops_its_coordinator(void **state) {
  fixture_t *fx = *state;
  start_job(fx, "ns/a", "a", "token-a", 1);
  assert_true(ftck_coords_has(fx->cs, "ns/a"));
  ftck_coords_remove(fx->cs, "ns/a");
  assert_false(ftck_coords_has(fx->cs, "ns/a"));
  assert_null(ftck_coords_view(fx->cs, "ns/a"));
  char path[PATH_MAX + 16];
  struct stat sb;
  snprintf(path, sizeof path, "%s/ns/a", fx->dir);
  assert_int_equal(stat(path, &sb), 0); /* its dump folder was made */
  assert_true(S_ISDIR(sb.st_mode));
}

/* The whole contents of a file (malloc'd), its length in *len. */
static char *slurp(const char *pattern, size_t *len) {
  char cmd[PATH_MAX + 32], path[PATH_MAX];
  snprintf(cmd, sizeof cmd, "ls %s", pattern);
  FILE *ls = popen(cmd, "r");
  assert_non_null(ls);
  assert_non_null(fgets(path, sizeof path, ls));
  pclose(ls);
  path[strcspn(path, "\n")] = '\0';
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static int take_request(ftc__member_t *m, char *incident, size_t n) {
  int64_t until = ftc__now_ns() + (int64_t)WAIT_MS * 1000000;
  while (ftc__now_ns() < until) {
    if (ftc__member_take_dump_request(m, incident, n)) return 1;
    usleep(10000);
  }
  return 0;
}

/* A rank reports a collective timeout: every rank is asked for a dump, the
 * dumps land in <volume>/<ns>/<job>/<incident>/, and the incident comes out
 * analyzed, its culprit named by the analysis and mapped to its slot. */
static void a_timeout_report_becomes_an_analyzed_incident(void **state) {
  fixture_t *fx = *state;
  start_job(fx, "ns/t", "t", "token-t", 2);
  ftc__member_t *m0 = joined(fx, "t", "token-t", 0, 2), *m1 = joined(fx, "t", "token-t", 1, 2);
  ftc__view_t *v = NULL;
  assert_int_equal(ftc__member_wait_view(m0, 0, WAIT_MS, &v), FTC_OK);
  ftc__coord_view_free(ftck_coords_view(fx->cs, "ns/t")); /* what a reconcile reads: ranks to slots */
  ftck_incident_t *inc = NULL;
  size_t n = 9;
  int64_t wait_ms = 0;
  assert_int_equal(ftck_coords_take_incidents(fx->cs, "ns/t", &inc, &n, &wait_ms), FTC_OK);
  assert_int_equal(n, 0);
  assert_int_equal(wait_ms, -1);

  int culprit = 1;
  assert_int_equal(ftc__member_report_failure(m0, v->epoch, &culprit, 1, FTC_ERR_TIMEOUT), FTC_OK);
  char name0[128], name1[128];
  assert_true(take_request(m0, name0, sizeof name0));
  assert_true(take_request(m1, name1, sizeof name1));
  assert_string_equal(name0, name1);
  /* Not ready before the dumps are in: it says when to look again. */
  assert_int_equal(ftck_coords_take_incidents(fx->cs, "ns/t", &inc, &n, &wait_ms), FTC_OK);
  assert_int_equal(n, 0);
  assert_true(wait_ms > 0);
  /* Dumps of a 6-rank job where ranks 1 and 3-5 sent none. */
  size_t l0, l2;
  char *d0 = slurp("tests/recorder/cases/missing-dump/rank-0-*.json", &l0);
  char *d2 = slurp("tests/recorder/cases/missing-dump/rank-2-*.json", &l2);
  assert_int_equal(ftc__member_upload_dump(m0, name0, 0, d0, l0), FTC_OK);
  assert_int_equal(ftc__member_upload_dump(m1, name1, 2, d2, l2), FTC_OK);
  int64_t until = ftc__now_ns() + (int64_t)WAIT_MS * 1000000;
  do {
    usleep(20000);
    assert_int_equal(ftck_coords_take_incidents(fx->cs, "ns/t", &inc, &n, &wait_ms), FTC_OK);
  } while (n == 0 && ftc__now_ns() < until);
  assert_int_equal(n, 1);
  assert_string_equal(inc[0].kind, "CollectiveTimeout");
  assert_string_equal(inc[0].name, name0);
  assert_int_equal(inc[0].dumps, 2);
  assert_int_equal(inc[0].culprit_rank, 1); /* the analysis' first missing rank */
  assert_int_equal(inc[0].culprit_slot, 1); /* ... which was slot 1 in the epoch that hung */
  assert_non_null(strstr(inc[0].headline, "MISSING: no dump from ranks 1,3-5"));
  char path[PATH_MAX + 256];
  snprintf(path, sizeof path, "%s/ns/t/%s", fx->dir, name0);
  assert_string_equal(inc[0].dump_path, path);
  struct stat sb;
  snprintf(path, sizeof path, "%s/ns/t/%s/analysis.json", fx->dir, name0);
  assert_int_equal(stat(path, &sb), 0);
  snprintf(path, sizeof path, "%s/ns/t/%s/rank-2.json", fx->dir, name0);
  assert_int_equal(stat(path, &sb), 0);
  /* Whose incident it is, for a job re-created under this name later. */
  snprintf(path, sizeof path, "%s/ns/t/%s/.job-uid", fx->dir, name0);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char uid[64] = "";
  assert_non_null(fgets(uid, sizeof uid, f));
  fclose(f);
  assert_string_equal(uid, "uid-t\n");
  ftck_coords_stats_t s;
  ftck_coords_get_stats(fx->cs, &s);
  assert_int_equal(s.hangs, 1);
  assert_int_equal(s.dumps, 2);
  ftc__free(inc);
  free(d0);
  free(d2);
  ftc__view_free(v);
  ftc__member_close(m1);
  ftc__member_close(m0);
}

/* The files of pattern (glob), counted. */
static int count_files(const char *pattern) {
  glob_t g;
  int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
  globfree(&g);
  return n;
}

/* A rank that uploads its dump for an incident again and again: the first
 * nine copies are stored under names nothing replaces, the rest are not
 * (each upload was stored or failed with an error before: the third
 * failed), and the incident still waits for the other rank: a copy is not
 * another rank's dump. */
static void a_rank_that_uploads_again_keeps_its_first_copies_and_counts_once(void **state) {
  fixture_t *fx = *state;
  start_job(fx, "ns/u", "u", "token-u", 2);
  ftc__member_t *m0 = joined(fx, "u", "token-u", 0, 2), *m1 = joined(fx, "u", "token-u", 1, 2);
  ftc__view_t *v = NULL;
  assert_int_equal(ftc__member_wait_view(m0, 0, WAIT_MS, &v), FTC_OK);
  int culprit = 1;
  assert_int_equal(ftc__member_report_failure(m0, v->epoch, &culprit, 1, FTC_ERR_TIMEOUT), FTC_OK);
  char name0[128], name1[128];
  assert_true(take_request(m0, name0, sizeof name0));
  assert_true(take_request(m1, name1, sizeof name1));
  size_t l0, l2;
  char *d0 = slurp("tests/recorder/cases/missing-dump/rank-0-*.json", &l0);
  char *d2 = slurp("tests/recorder/cases/missing-dump/rank-2-*.json", &l2);
  for (int i = 0; i < 11; i++) assert_int_equal(ftc__member_upload_dump(m0, name0, 0, d0, l0), FTC_OK);
  char pattern[PATH_MAX + 256];
  snprintf(pattern, sizeof pattern, "%s/ns/u/%s/rank-0*.json", fx->dir, name0);
  int64_t until = ftc__now_ns() + (int64_t)WAIT_MS * 1000000;
  while (count_files(pattern) < 9 && ftc__now_ns() < until) usleep(20000);
  usleep(300000); /* the last two uploads, after the ninth on the same session */
  assert_int_equal(count_files(pattern), 9);
  snprintf(pattern, sizeof pattern, "%s/ns/u/%s/rank-0.json", fx->dir, name0);
  assert_int_equal(count_files(pattern), 1);
  snprintf(pattern, sizeof pattern, "%s/ns/u/%s/rank-0-*[0-9]-[2-8].json", fx->dir, name0);
  assert_int_equal(count_files(pattern), 7);
  ftck_coords_stats_t st;
  ftck_coords_get_stats(fx->cs, &st);
  assert_int_equal(st.dumps, 9);
  /* One rank of two is in: not ready. */
  ftck_incident_t *inc = NULL;
  size_t n = 9;
  int64_t wait_ms = 0;
  assert_int_equal(ftck_coords_take_incidents(fx->cs, "ns/u", &inc, &n, &wait_ms), FTC_OK);
  assert_int_equal(n, 0);
  assert_int_equal(ftc__member_upload_dump(m1, name1, 2, d2, l2), FTC_OK);
  until = ftc__now_ns() + (int64_t)WAIT_MS * 1000000;
  do {
    usleep(20000);
    assert_int_equal(ftck_coords_take_incidents(fx->cs, "ns/u", &inc, &n, &wait_ms), FTC_OK);
  } while (n == 0 && ftc__now_ns() < until);
  assert_int_equal(n, 1);
  assert_int_equal(inc[0].dumps, 2);
  ftc__free(inc);
  free(d0);
  free(d2);
  ftc__view_free(v);
  ftc__member_close(m1);
  ftc__member_close(m0);
}

/* The build directory's bin/, from this binary's path ($(BUILD)/tests/controller/). */
static void bin_path(const char *name, char *out, size_t n) {
  char self[PATH_MAX];
  ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
  assert_true(l > 0);
  self[l] = '\0';
  for (int i = 0; i < 3; i++) *strrchr(self, '/') = '\0';
  snprintf(out, n, "%s/bin/%s", self, name);
}

static void the_analysis_goes_next_to_the_dumps(void **state) {
  fixture_t *fx = *state;
  char trace[PATH_MAX + 32], inc[PATH_MAX + 32], cmd[3 * PATH_MAX], headline[1024], path[PATH_MAX + 64];
  bin_path("ftcomm-trace", trace, sizeof trace);
  snprintf(inc, sizeof inc, "%s/hang-e1-1", fx->dir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp tests/recorder/cases/never-entered/rank-*.json '%s'", inc, inc);
  assert_int_equal(system(cmd), 0);
  int rank = -1;
  assert_int_equal(ftck_analyze_dir(trace, inc, headline, sizeof headline, &rank), 0);
  assert_string_equal(headline, "DIVERGENCE: rank 4 never entered world epoch 0 seq 21 (allreduce bf16 x2048) "
                                "(last entered seq 20 barrier, completed); 5 of 6 ranks entered it");
  assert_int_equal(rank, 4);
  const char *files[] = {"analysis.json", "analysis.txt", "analysis.html"};
  for (size_t i = 0; i < 3; i++) {
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", inc, files[i]);
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_size > 0);
  }
  /* Run again over its own output: the analysis files are not taken for dumps. */
  assert_int_equal(ftck_analyze_dir(trace, inc, headline, sizeof headline, &rank), 0);
  assert_int_equal(rank, 4);
  /* No analyzer: says so, returns -1. */
  assert_int_equal(ftck_analyze_dir("/nonexistent/ftcomm-trace", inc, headline, sizeof headline, &rank), -1);
  assert_non_null(strstr(headline, "could not read the dumps"));
}

/* ftcomm-trace's headline with the coordinator's verdict runs up to
 * FTC_TRACE_HEADLINE_MAX - 1 bytes: the incident keeps all of it (it was
 * cut at 1023). An analyzer that prints one such line stands in for it. */
static void a_headline_as_long_as_ftcomm_trace_prints_is_kept_whole(void **state) {
  fixture_t *fx = *state;
  char script[PATH_MAX + 32], inc[PATH_MAX + 32], cmd[3 * PATH_MAX], want[FTC_TRACE_HEADLINE_MAX];
  size_t n = sizeof want - 1;
  memset(want, 'x', n);
  want[n] = '\0';
  memcpy(want, "VERDICT: rank 3 hung", 20);
  memcpy(want + n - 9, " (agrees)", 9);
  snprintf(script, sizeof script, "%s/long-analyzer", fx->dir);
  FILE *f = fopen(script, "w");
  assert_non_null(f);
  fprintf(f, "#!/bin/sh\n[ \"$1\" = --json ] && { echo '{}'; exit 1; }\necho '%s'\necho 'more'\nexit 1\n", want);
  fclose(f);
  assert_int_equal(chmod(script, 0755), 0);
  snprintf(inc, sizeof inc, "%s/hang-e1-long", fx->dir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", inc);
  assert_int_equal(system(cmd), 0);
  ftck_incident_t incident;
  int rank = 0;
  assert_int_equal(ftck_analyze_dir(script, inc, incident.headline, sizeof incident.headline, &rank), 0);
  assert_int_equal(strlen(incident.headline), n);
  assert_string_equal(incident.headline, want);
  assert_int_equal(rank, -1);
}

static int no_job(void *ud, const char *ns, const char *name, ftck_job_ref_t *ref) {
  (void)ud;
  (void)ns;
  (void)name;
  (void)ref;
  return 0;
}

static void a_job_with_a_coordinator_keeps_its_folder_and_a_sweep_removes_the_rest(void **state) {
  fixture_t *fx = *state;
  char path[PATH_MAX + 64], cmd[3 * PATH_MAX + 128];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s/ns/run' '%s/ns/old/hang-e1-1' && echo 1000 >'%s/ns/run/.deleted-at'", fx->dir,
           fx->dir, fx->dir);
  assert_int_equal(system(cmd), 0);
  /* Making its coordinator drops the mark an earlier deletion left. */
  start_job(fx, "ns/run", "run", "token-run", 2);
  snprintf(path, sizeof path, "%s/ns/run/.deleted-at", fx->dir);
  assert_int_equal(access(path, F_OK), -1);
  /* Not in the cache (deleted, not reconciled yet), but it has a coordinator: left alone. */
  ftck_coords_sweep_opts_t o = {.ttl_s = 60, .now_s = 2000000000, .lookup = no_job};
  assert_int_equal(ftck_coords_sweep(fx->cs, &o), FTC_OK);
  assert_int_equal(access(path, F_OK), -1);
  snprintf(path, sizeof path, "%s/ns/old/.deleted-at", fx->dir);
  assert_int_equal(access(path, F_OK), 0);
  o.now_s += 60;
  assert_int_equal(ftck_coords_sweep(fx->cs, &o), FTC_OK);
  snprintf(path, sizeof path, "%s/ns/old", fx->dir);
  assert_int_equal(access(path, F_OK), -1);
  snprintf(path, sizeof path, "%s/ns/run", fx->dir);
  assert_int_equal(access(path, F_OK), 0);
  ftck_coords_stats_t s;
  ftck_coords_get_stats(fx->cs, &s);
  assert_int_equal(s.sweeps, 2);
  assert_int_equal(s.dirs_removed_deleted, 1);
  assert_int_equal(s.dirs_waiting, 0);
}

/* The sweeper's yield, held at its first call until the test lets go. */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int yields, open;
} gate_t;

static int gate_yield(void *ud) {
  gate_t *g = ud;
  pthread_mutex_lock(&g->mu);
  g->yields++;
  pthread_cond_broadcast(&g->cv);
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  return 0;
}

static int has_entries(const char *dir) {
  char cmd[2 * PATH_MAX + 64];
  snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -gt 0", dir);
  return system(cmd) == 0;
}

static void the_sweeper_removes_in_slices_while_a_job_of_that_name_is_made_again(void **state) {
  fixture_t *fx = *state;
  char cmd[3 * PATH_MAX + 128], path[PATH_MAX + 64];
  /* ns/old: deleted long ago; 5 incidents of 8 dumps. */
  snprintf(cmd, sizeof cmd,
           "cd '%s' && mkdir -p ns/old && echo 1000 >ns/old/.deleted-at && for i in 1 2 3 4 5; do "
           "mkdir ns/old/hang-e$i-1 && for r in 0 1 2 3 4 5 6 7; do echo {} >ns/old/hang-e$i-1/rank-$r.json; "
           "done; done", fx->dir);
  assert_int_equal(system(cmd), 0);
  gate_t g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
  ftck_coords_sweep_opts_t o = {.ttl_s = 60, .lookup = no_job, .slice_entries = 4, .yield = gate_yield, .ud = &g};
  assert_int_equal(ftck_coords_start_sweeper(fx->cs, &o, 3600LL * 1000000000LL), FTC_OK);
  /* The sweeper stops between its first two slices (the test holds it). */
  pthread_mutex_lock(&g.mu);
  int64_t deadline = ftc__now_ns() + WAIT_MS * 1000000LL;
  while (!g.yields && ftc__now_ns() < deadline) {
    pthread_mutex_unlock(&g.mu);
    usleep(1000);
    pthread_mutex_lock(&g.mu);
  }
  assert_int_equal(g.yields, 1);
  pthread_mutex_unlock(&g.mu);
  /* Mid-removal: the job's folder has left its name; a job of that name is
   * made again (its reconcile takes the volume lock) and the poll runs. */
  snprintf(path, sizeof path, "%s/ns/old", fx->dir);
  assert_int_equal(access(path, F_OK), -1);
  start_job(fx, "ns/old", "old", "token-old", 1);
  assert_int_equal(access(path, F_OK), 0);
  ftck_coords_poll(fx->cs);
  snprintf(path, sizeof path, "%s/ns", fx->dir);
  assert_true(has_entries(path)); /* the new folder, and the old one's trash */
  pthread_mutex_lock(&g.mu);
  g.open = 1;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  /* The removal finishes; the new job's folder stays, empty of the old incidents. */
  ftck_coords_stats_t s;
  deadline = ftc__now_ns() + WAIT_MS * 1000000LL;
  snprintf(cmd, sizeof cmd, "test \"$(ls -A '%s/ns')\" = old", fx->dir);
  while (system(cmd) != 0 && ftc__now_ns() < deadline) usleep(10000);
  assert_int_equal(system(cmd), 0);
  snprintf(path, sizeof path, "%s/ns/old/hang-e1-1", fx->dir);
  assert_int_equal(access(path, F_OK), -1);
  ftck_coords_stop_sweeper(fx->cs);
  ftck_coords_get_stats(fx->cs, &s);
  assert_int_equal(s.sweeps, 1);
  assert_int_equal(s.dirs_removed_deleted, 1);
  assert_true(g.yields >= 45 / 4);
}

/* The sweeper sweeps at once, then once per period (its wait is on the
 * monotonic clock, so a wall clock step neither stalls nor hurries it):
 * over 1 s with a 200 ms period, about 6 sweeps, not hundreds, not one. */
static void the_sweeper_sweeps_once_per_period(void **state) {
  fixture_t *fx = *state;
  ftck_coords_sweep_opts_t o = {.ttl_s = 60, .lookup = no_job};
  assert_int_equal(ftck_coords_start_sweeper(fx->cs, &o, 200LL * 1000000), FTC_OK);
  assert_int_equal(ftck_coords_start_sweeper(fx->cs, &o, 200LL * 1000000), FTC_ERR_INVALID_ARGUMENT);
  usleep(1000 * 1000);
  ftck_coords_stop_sweeper(fx->cs);
  ftck_coords_stats_t s;
  ftck_coords_get_stats(fx->cs, &s);
  assert_in_range(s.sweeps, 3, 8);
  int64_t t0 = ftc__now_ns();
  assert_int_equal(ftck_coords_start_sweeper(fx->cs, &o, 3600LL * 1000000000LL), FTC_OK);
  ftck_coords_stop_sweeper(fx->cs); /* wakes it from its wait at once */
  assert_true(ftc__now_ns() - t0 < 2000000000LL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(accept_key_is_the_rfc_example),
      cmocka_unit_test(client_frames_are_unmasked_and_unmasked_frames_refused),
      cmocka_unit_test(the_port_binds_every_address_or_one_and_refuses_bad_ones),
      cmocka_unit_test_setup_teardown(two_jobs_share_one_port_and_a_lost_slot_shrinks_at_once, setup, teardown),
      cmocka_unit_test_setup_teardown(the_router_routes_a_hello_in_the_upgrade_request, setup, teardown),
      cmocka_unit_test_setup_teardown(the_poll_queues_a_job_when_its_coordinator_publishes_a_change, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_rank_of_a_job_without_coordinator_is_turned_away, setup, teardown),
      cmocka_unit_test_setup_teardown(a_job_that_is_removed_stops_its_coordinator, setup, teardown),
      cmocka_unit_test_setup_teardown(a_timeout_report_becomes_an_analyzed_incident, setup, teardown),
      cmocka_unit_test_setup_teardown(a_rank_that_uploads_again_keeps_its_first_copies_and_counts_once, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(the_analysis_goes_next_to_the_dumps, setup, teardown),
      cmocka_unit_test_setup_teardown(a_headline_as_long_as_ftcomm_trace_prints_is_kept_whole, setup, teardown),
      cmocka_unit_test_setup_teardown(the_sweeper_removes_in_slices_while_a_job_of_that_name_is_made_again, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(the_sweeper_sweeps_once_per_period, setup, teardown),
      cmocka_unit_test_setup_teardown(a_job_with_a_coordinator_keeps_its_folder_and_a_sweep_removes_the_rest, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
