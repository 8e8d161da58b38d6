/*
 * test_recorder_dump.c - dumps: a dump is valid JSON in the documented
 * format, never replaces an earlier file, leaves no temporary file, stays
 * under FTCOMM_DUMP_MAX_BYTES by dropping the oldest entries, reports an
 * unusable directory, and is written by the dump thread on FTCOMM_DUMP_SIGNAL;
 * a dump written before its verdict is replaced by the same dump with it,
 * under its name, and only that way.
 */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_param.h"
#include "ftc_recorder.h"

static char dir[256];

static int setup_dir(void **state) {
  (void)state;
  snprintf(dir, sizeof(dir), "/tmp/ftc-rec-dump-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  setenv("FTCOMM_DUMP_DIR", dir, 1);
  ftc__param_reset();
  return 0;
}

static int remove_dir(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* Names in dir (not . or ..), counted; the first `max` copied. */
static int list_dir(char names[][256], int max) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
      continue;
    if (n < max) snprintf(names[n], 256, "%s", de->d_name);
    n++;
  }
  if (d) closedir(d);
  return n;
}

static void a_dump_is_valid_json_with_every_communicator(void **state) {
  (void)state;
  ftc_rec_process_info_t info = FTC_REC_PROCESS_INFO_INIT;
  info.job = "train\"x";
  info.rank = 5;
  info.world_size = 8;
  info.epoch = 2;
  info.backend = "tcp";
  ftc_rec_set_process_info(&info);
  ftc_rec_t *a, *b;
  assert_int_equal(ftc_rec_create(4, 0x11, "world", 2, 5, 8, &a), FTC_OK);
  assert_int_equal(ftc_rec_create(4, 0x22, "tp", 2, 1, 2, &b), FTC_OK);
  for (uint64_t s = 1; s <= 6; s++) {
    uint64_t id = ftc_rec_schedule(a, 2, s, FTC_REC_ALLREDUCE, FTC_BF16, 10, 20, -1, 1000);
    ftc_rec_started(a, id, 0);
    if (s < 6) ftc_rec_completed(a, id, 0);
  }
  /* A binding's names: the entry's, and the group's (a quote made '?') */
  int bid = ftc_rec_name_id("nccl:broadcast");
  assert_true(bid > 0);
  assert_int_equal(ftc_rec_name_id("nccl:broadcast"), bid);
  assert_int_equal(ftc_rec_name_id("bad\"name"), -1);
  assert_int_equal(ftc_rec_name_id(""), 0);
  ftc_rec_set_coll_name(b, bid);
  ftc_rec_set_group(b, "1", "tensor \"parallel\"");
  ftc_rec_schedule(b, 2, 1, FTC_REC_BROADCAST, FTC_I64, 3, 24, 0, -1);
  char path[512];
  assert_int_equal(ftc_rec_dump(NULL, "api", path, sizeof(path)), FTC_OK);
  assert_non_null(strstr(path, dir));
  assert_non_null(strstr(path, "/rank-5-"));

  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root) fail_msg("%s: %s at line %d", path, err.text, err.line);
  assert_string_equal(json_string_value(json_object_get(root, "format")), "ftcomm-flight-recorder");
  assert_string_equal(json_string_value(json_object_get(root, "version")), "1.2");
  /* Not about a failed epoch: no outcome. */
  assert_null(json_object_get(root, "failure"));
  assert_null(json_object_get(root, "verdict"));
  assert_string_equal(json_string_value(json_object_get(root, "job")), "train\"x");
  assert_string_equal(json_string_value(json_object_get(root, "reason")), "api");
  assert_int_equal(json_integer_value(json_object_get(root, "rank")), 5);
  assert_int_equal(json_integer_value(json_object_get(root, "world_size")), 8);
  assert_true(json_is_false(json_object_get(root, "truncated")));
  json_t *fields = json_object_get(root, "entry_fields");
  assert_int_equal(json_array_size(fields), 17);
  assert_string_equal(json_string_value(json_array_get(fields, 16)), "name");
  json_t *comms = json_object_get(root, "communicators");
  assert_int_equal(json_array_size(comms), 2);
  size_t i;
  json_t *c;
  int seen = 0;
  json_array_foreach(comms, i, c) {
    const char *id = json_string_value(json_object_get(c, "id"));
    if (!strcmp(id, "0000000000000011")) {
      seen |= 1;
      assert_int_equal(json_integer_value(json_object_get(c, "last_enqueued_seq")), 6);
      assert_int_equal(json_integer_value(json_object_get(c, "last_started_seq")), 6);
      assert_int_equal(json_integer_value(json_object_get(c, "last_completed_seq")), 5);
      json_t *ents = json_object_get(c, "entries");
      assert_int_equal(json_array_size(ents), 4);
      json_t *last = json_array_get(ents, 3);
      assert_int_equal(json_array_size(last), json_array_size(fields));
      assert_int_equal(json_integer_value(json_array_get(last, 2)), 6);
      assert_string_equal(json_string_value(json_array_get(last, 3)), "allreduce");
      assert_string_equal(json_string_value(json_array_get(last, 4)), "bf16");
      assert_string_equal(json_string_value(json_array_get(last, 10)), "started");
      assert_string_equal(json_string_value(json_array_get(last, 16)), "");
      assert_string_equal(json_string_value(json_object_get(c, "pg_name")), "");
    } else if (!strcmp(id, "0000000000000022")) {
      seen |= 2;
      assert_string_equal(json_string_value(json_object_get(c, "name")), "tp");
      assert_string_equal(json_string_value(json_object_get(c, "pg_name")), "1");
      assert_string_equal(json_string_value(json_object_get(c, "pg_desc")), "tensor ?parallel?");
      json_t *ents = json_object_get(c, "entries");
      json_t *bc = json_array_get(ents, json_array_size(ents) - 1);
      assert_string_equal(json_string_value(json_array_get(bc, 3)), "broadcast");
      assert_string_equal(json_string_value(json_array_get(bc, 16)), "nccl:broadcast");
    }
  }
  assert_int_equal(seen, 3);
  json_decref(root);
  ftc_rec_destroy(a);
  ftc_rec_destroy(b);
}

static void dumps_never_replace_an_earlier_file(void **state) {
  (void)state;
  ftc_rec_t *a;
  assert_int_equal(ftc_rec_create(4, 0x11, "world", 0, 0, 1, &a), FTC_OK);
  /* Occupy the names the next dump would take in this second and the next. */
  ftc_rec_process_info_t info = FTC_REC_PROCESS_INFO_INIT;
  info.rank = 3;
  ftc_rec_set_process_info(&info);
  time_t now = time(NULL);
  char occupied[4][512];
  for (int k = 0; k < 2; k++) {
    time_t t = now + k;
    struct tm tm;
    gmtime_r(&t, &tm);
    char stamp[32];
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
    for (int j = 0; j < 2; j++) {
      snprintf(occupied[2 * k + j], 512, "%s/rank-3-%s-%ld-%llu.json", dir, stamp, (long)getpid(),
               (unsigned long long)ftc_rec_dump_count() + (unsigned)j);
      FILE *f = fopen(occupied[2 * k + j], "w");
      assert_non_null(f);
      fputs("precious", f);
      fclose(f);
    }
  }
  char p1[512], p2[512];
  assert_int_equal(ftc_rec_dump(NULL, "api", p1, sizeof(p1)), FTC_OK);
  assert_int_equal(ftc_rec_dump(NULL, "api", p2, sizeof(p2)), FTC_OK);
  assert_string_not_equal(p1, p2);
  for (int k = 0; k < 4; k++) {
    assert_string_not_equal(p1, occupied[k]);
    FILE *f = fopen(occupied[k], "r");
    char buf[32] = "";
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_string_equal(buf, "precious");
  }
  char names[16][256];
  int n = list_dir(names, 16);
  assert_int_equal(n, 6); /* 4 occupied + 2 dumps, and no temporary file */
  for (int k = 0; k < n && k < 16; k++) assert_true(names[k][0] != '.');
  ftc_rec_destroy(a);
}

static void a_dump_stays_under_the_size_limit_keeping_the_newest(void **state) {
  (void)state;
  setenv("FTCOMM_DUMP_MAX_BYTES", "65536", 1);
  ftc__param_reset();
  ftc_rec_t *a;
  assert_int_equal(ftc_rec_create(5000, 0x33, "big", 0, 0, 1, &a), FTC_OK);
  for (uint64_t s = 1; s <= 5000; s++)
    ftc_rec_completed(a, ftc_rec_schedule(a, 0, s, FTC_REC_ALLGATHER, FTC_F64, 1ull << 40,
                                          1ull << 43, -1, 600000000000),
                      0);
  char path[512];
  assert_int_equal(ftc_rec_dump(NULL, "api", path, sizeof(path)), FTC_OK);
  struct stat stt;
  assert_int_equal(stat(path, &stt), 0);
  assert_true(stt.st_size <= 65536);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  assert_non_null(root);
  assert_true(json_is_true(json_object_get(root, "truncated")));
  json_t *c = json_array_get(json_object_get(root, "communicators"), 0);
  json_t *ents = json_object_get(c, "entries");
  assert_true(json_array_size(ents) > 10);
  assert_int_equal(json_integer_value(json_object_get(c, "dropped")) + json_array_size(ents), 5000);
  json_t *last = json_array_get(ents, json_array_size(ents) - 1);
  assert_int_equal(json_integer_value(json_array_get(last, 2)), 5000);
  json_decref(root);
  ftc_rec_destroy(a);
  unsetenv("FTCOMM_DUMP_MAX_BYTES");
  ftc__param_reset();
}

static void an_unusable_directory_is_an_error_that_names_it(void **state) {
  (void)state;
  char file[300], sub[400];
  snprintf(file, sizeof(file), "%s/plainfile", dir);
  FILE *f = fopen(file, "w");
  fclose(f);
  snprintf(sub, sizeof(sub), "%s/under", file);
  assert_int_equal(ftc_rec_dump(sub, "api", NULL, 0), FTC_ERR_SYSTEM);
  assert_non_null(strstr(ftc_last_error(), "plainfile"));
}

static void the_dump_signal_makes_the_dump_thread_write_a_dump(void **state) {
  (void)state;
  setenv("FTCOMM_DUMP_SIGNAL", "10", 1);
  ftc__param_reset();
  ftc_rec_t *a;
  assert_int_equal(ftc_rec_create(4, 0x44, "sig", 0, 0, 1, &a), FTC_OK);
  ftc_rec_schedule(a, 0, 1, FTC_REC_BARRIER, FTC_DTYPE_COUNT, 0, 0, -1, -1);
  uint64_t before = ftc_rec_dump_count();
  assert_int_equal(raise(SIGUSR1), 0); /* would kill the process without the handler */
  for (int i = 0; i < 500 && ftc_rec_dump_count() == before; i++) usleep(10000);
  assert_int_equal(ftc_rec_dump_count(), before + 1);
  char names[8][256];
  int n = list_dir(names, 8);
  assert_int_equal(n, 1);
  char path[600];
  snprintf(path, sizeof(path), "%s/%s", dir, names[0]);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  assert_non_null(root);
  assert_string_equal(json_string_value(json_object_get(root, "reason")), "signal");
  json_decref(root);
  /* The request path (async-signal-safe) works the same way. */
  assert_int_equal(ftc_rec_request_dump(1), FTC_OK);
  for (int i = 0; i < 500 && ftc_rec_dump_count() == before + 1; i++) usleep(10000);
  assert_int_equal(ftc_rec_dump_count(), before + 2);
  ftc_rec_destroy(a);
  /* The last recorder restores the default disposition. */
  struct sigaction cur;
  sigaction(SIGUSR1, NULL, &cur);
  assert_true(cur.sa_handler == SIG_DFL);
  assert_int_equal(ftc_rec_request_dump(0), FTC_ERR_NOT_SUPPORTED);
}

/* Dumps taken while another thread records: every dumped entry is whole. */
static ftc_rec_t *busy_rec;
static int busy_stop;

static void *busy_writer(void *arg) {
  (void)arg;
  for (uint64_t s = 1; !__atomic_load_n(&busy_stop, __ATOMIC_ACQUIRE); s++) {
    uint64_t id = ftc_rec_schedule(busy_rec, 0, s, FTC_REC_ALLREDUCE, FTC_F32, 3 * s, 12 * s, -1, (int64_t)s);
    ftc_rec_started(busy_rec, id, 0);
    ftc_rec_completed(busy_rec, id, 0);
  }
  return NULL;
}

static void dumps_taken_while_recording_hold_whole_entries(void **state) {
  (void)state;
  assert_int_equal(ftc_rec_create(256, 0x66, "busy", 0, 0, 1, &busy_rec), FTC_OK);
  __atomic_store_n(&busy_stop, 0, __ATOMIC_RELEASE);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, busy_writer, NULL), 0);
  size_t checked = 0;
  for (int k = 0; k < 20; k++) {
    char path[512];
    assert_int_equal(ftc_rec_dump(NULL, "api", path, sizeof(path)), FTC_OK);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    assert_non_null(root);
    json_t *ents = json_object_get(json_array_get(json_object_get(root, "communicators"), 0), "entries");
    size_t i;
    json_t *e;
    json_array_foreach(ents, i, e) {
      json_int_t seq = json_integer_value(json_array_get(e, 2));
      assert_int_equal(json_integer_value(json_array_get(e, 5)), 3 * seq);
      assert_int_equal(json_integer_value(json_array_get(e, 6)), 12 * seq);
      assert_int_equal(json_integer_value(json_array_get(e, 15)), seq);
      checked++;
    }
    json_decref(root);
  }
  __atomic_store_n(&busy_stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  assert_true(checked > 0);
  ftc_rec_destroy(busy_rec);
}

static volatile sig_atomic_t app_got_signal;
static void app_handler(int sig) {
  (void)sig;
  app_got_signal = 1;
}

static void an_application_signal_handler_is_left_alone(void **state) {
  (void)state;
  setenv("FTCOMM_DUMP_SIGNAL", "10", 1);
  ftc__param_reset();
  struct sigaction sa, cur;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = app_handler;
  sigaction(SIGUSR1, &sa, NULL);
  ftc_rec_t *a;
  assert_int_equal(ftc_rec_create(4, 0x55, "app", 0, 0, 1, &a), FTC_OK);
  sigaction(SIGUSR1, NULL, &cur);
  assert_true(cur.sa_handler == app_handler);
  uint64_t before = ftc_rec_dump_count();
  raise(SIGUSR1);
  usleep(100000);
  assert_int_equal(app_got_signal, 1);
  assert_int_equal(ftc_rec_dump_count(), before);
  ftc_rec_destroy(a);
  sigaction(SIGUSR1, NULL, &cur);
  assert_true(cur.sa_handler == app_handler);
  signal(SIGUSR1, SIG_DFL);
}

/* A capture of one recorder with one failed collective, for the outcome tests. */
static ftc_rec_capture_t *failed_epoch_capture(ftc_rec_t **rec) {
  ftc_rec_process_info_t info = FTC_REC_PROCESS_INFO_INIT;
  info.rank = 0;
  info.world_size = 4;
  info.epoch = 3;
  ftc_rec_set_process_info(&info);
  assert_int_equal(ftc_rec_create(8, 0x33, "world", 3, 0, 4, rec), FTC_OK);
  uint64_t id = ftc_rec_schedule(*rec, 3, 1, FTC_REC_ALLREDUCE, FTC_F32, 1, 4, -1, -1);
  ftc_rec_failed(*rec, id, 0);
  ftc_rec_capture_t *c = ftc_rec_capture();
  assert_non_null(c);
  return c;
}

static json_t *load(const char *path) {
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root) fail_msg("%s: %s at line %d", path, err.text, err.line);
  return root;
}

/* Allocations a capture of one recorder makes (counted with a failure armed
 * too late to fire). */
static long capture_allocs(ftc_rec_capture_t **out) {
  ftc__alloc_fail_at(1000000);
  *out = ftc_rec_capture();
  long n = ftc__alloc_count();
  ftc__alloc_fail_at(0);
  assert_non_null(*out);
  return n;
}

/* The entries of a failure's capture go into memory the recorder mapped at
 * its creation, and back there when the capture is freed: a capture at a
 * failure allocates no entry array. A second capture while the first is
 * held allocates one; freed, both are kept for the next ones. */
static void a_capture_reuses_the_entry_memory_kept_for_it(void **state) {
  (void)state;
  ftc_rec_t *rec;
  assert_int_equal(ftc_rec_create(2000, 0x44, "world", 1, 0, 2, &rec), FTC_OK);
  for (int i = 0; i < 2500; i++) {
    uint64_t id = ftc_rec_schedule(rec, 1, (uint64_t)i + 1, FTC_REC_ALLREDUCE, FTC_F32, 1, 4, -1, -1);
    ftc_rec_completed(rec, id, 0);
  }
  ftc_rec_capture_t *a, *b, *c;
  long first = capture_allocs(&a);
  long second = capture_allocs(&b); /* a holds the kept array */
  assert_int_equal(second, first + 1);
  ftc_rec_capture_free(a);
  ftc_rec_capture_free(b);
  long third = capture_allocs(&c);
  assert_int_equal(third, first);
  /* and it holds what the ring holds: the last 2000, oldest first */
  char path[512];
  assert_int_equal(ftc_rec_capture_write(c, NULL, "api", path, sizeof(path)), FTC_OK);
  json_t *root = load(path);
  json_t *entries = json_object_get(json_array_get(json_object_get(root, "communicators"), 0), "entries");
  assert_int_equal(json_array_size(entries), 2000);
  json_decref(root);
  ftc_rec_capture_free(c);
  ftc_rec_destroy(rec);
}


/* Every live recorder has its array kept: a capture of several
 * communicators, a large ring's and a small one's, allocates none (the
 * small one's capture takes the smallest array that fits, not the large
 * ring's). */
static void every_recorder_has_its_capture_memory_kept(void **state) {
  (void)state;
  ftc_rec_t *big, *small;
  assert_int_equal(ftc_rec_create(2000, 0x45, "world", 1, 0, 2, &big), FTC_OK);
  assert_int_equal(ftc_rec_create(100, 0x46, "tp", 1, 0, 2, &small), FTC_OK);
  for (int i = 0; i < 2000; i++) {
    ftc_rec_t *r = i % 2 ? small : big;
    uint64_t id = ftc_rec_schedule(r, 1, (uint64_t)i + 1, FTC_REC_ALLREDUCE, FTC_F32, 1, 4, -1, -1);
    ftc_rec_completed(r, id, 0);
  }
  ftc_rec_capture_t *a, *b;
  long first = capture_allocs(&a);
  long second = capture_allocs(&b); /* a holds both kept arrays */
  assert_int_equal(second, first + 2);
  ftc_rec_capture_free(a);
  ftc_rec_capture_free(b);
  ftc_rec_destroy(small);
  ftc_rec_destroy(big);
}

/* A ring larger than a kept array may be (FTC__REC_POOL_MAX_BYTES, 4 MiB)
 * has none reserved, and its capture's array is freed, not kept. */
static void a_large_rings_capture_memory_is_not_kept(void **state) {
  (void)state;
  const int cap = 60000; /* 96-byte entries: 5.8 MB */
  ftc_rec_t *rec;
  assert_int_equal(ftc_rec_create(cap, 0x47, "world", 1, 0, 2, &rec), FTC_OK);
  for (int i = 0; i < cap; i++) {
    uint64_t id = ftc_rec_schedule(rec, 1, (uint64_t)i + 1, FTC_REC_ALLREDUCE, FTC_F32, 1, 4, -1, -1);
    ftc_rec_completed(rec, id, 0);
  }
  ftc_rec_capture_t *a, *b;
  long first = capture_allocs(&a);
  ftc_rec_capture_free(a);
  long second = capture_allocs(&b);
  assert_int_equal(second, first);
  ftc_rec_capture_free(b);
  ftc_rec_destroy(rec);
}


static void a_failure_dump_carries_the_failure_and_the_verdict(void **state) {
  (void)state;
  ftc_rec_t *rec;
  ftc_rec_capture_t *c = failed_epoch_capture(&rec);
  ftc_rec_dropped_t dropped[2] = {
      {2, 2, 1001, "hung", "is silent for 412 ms while its epoch was reported \"broken\""},
      {1, 1, 1000, "crashed", NULL},
  };
  ftc_rec_outcome_t o = FTC_REC_OUTCOME_INIT;
  o.epoch = 3;
  o.failed = 1;
  o.status = FTC_ERR_PEER_LOST;
  o.peer = 1;
  o.next_epoch = 4;
  o.dropped = dropped;
  o.ndropped = 2;
  char path[512];
  assert_int_equal(ftc_rec_capture_write_outcome(c, NULL, "error", &o, path, sizeof(path)), FTC_OK);
  json_t *root = load(path);
  json_t *f = json_object_get(root, "failure"), *v = json_object_get(root, "verdict");
  assert_int_equal(json_integer_value(json_object_get(f, "epoch")), 3);
  assert_string_equal(json_string_value(json_object_get(f, "status")), "peer_lost");
  assert_int_equal(json_integer_value(json_object_get(f, "code")), FTC_ERR_PEER_LOST);
  assert_string_equal(json_string_value(json_object_get(f, "message")), ftc_strerror(FTC_ERR_PEER_LOST));
  assert_int_equal(json_integer_value(json_object_get(f, "peer")), 1);
  assert_int_equal(json_integer_value(json_object_get(v, "epoch")), 3);
  assert_true(json_is_true(json_object_get(v, "decided")));
  assert_int_equal(json_integer_value(json_object_get(v, "next_epoch")), 4);
  assert_null(json_object_get(v, "pending"));
  json_t *d = json_object_get(v, "dropped");
  assert_int_equal(json_array_size(d), 2);
  json_t *d0 = json_array_get(d, 0), *d1 = json_array_get(d, 1);
  assert_int_equal(json_integer_value(json_object_get(d0, "rank")), 2);
  assert_int_equal(json_integer_value(json_object_get(d0, "slot")), 2);
  assert_int_equal(json_integer_value(json_object_get(d0, "member_id")), 1001);
  assert_string_equal(json_string_value(json_object_get(d0, "reason")), "hung");
  assert_string_equal(json_string_value(json_object_get(d0, "detail")),
                      "is silent for 412 ms while its epoch was reported \"broken\"");
  assert_string_equal(json_string_value(json_object_get(d1, "reason")), "crashed");
  assert_null(json_object_get(d1, "detail"));
  /* The rest of the dump is the capture's. */
  assert_string_equal(json_string_value(json_object_get(root, "reason")), "error");
  json_t *ent = json_array_get(json_object_get(json_array_get(json_object_get(root, "communicators"), 0), "entries"), 0);
  assert_string_equal(json_string_value(json_array_get(ent, 10)), "failed");
  json_decref(root);
  ftc_rec_capture_free(c);
  ftc_rec_destroy(rec);
}

static void a_dump_without_a_verdict_says_why(void **state) {
  (void)state;
  ftc_rec_t *rec;
  ftc_rec_capture_t *c = failed_epoch_capture(&rec);
  ftc_rec_outcome_t o = FTC_REC_OUTCOME_INIT;
  o.epoch = 3;
  o.pending = "the coordinator had announced no epoch after 3";
  char path[512];
  assert_int_equal(ftc_rec_capture_write_outcome(c, NULL, "coordinator", &o, path, sizeof(path)), FTC_OK);
  json_t *root = load(path);
  assert_null(json_object_get(root, "failure")); /* not this rank's failure */
  json_t *v = json_object_get(root, "verdict");
  assert_true(json_is_false(json_object_get(v, "decided")));
  assert_true(json_is_null(json_object_get(v, "next_epoch")));
  assert_int_equal(json_array_size(json_object_get(v, "dropped")), 0);
  assert_string_equal(json_string_value(json_object_get(v, "pending")), o.pending);
  json_decref(root);
  /* A verdict that kept every member: decided, nobody dropped. */
  o.next_epoch = 4;
  o.pending = NULL;
  assert_int_equal(ftc_rec_capture_write_outcome(c, NULL, "coordinator", &o, path, sizeof(path)), FTC_OK);
  root = load(path);
  v = json_object_get(root, "verdict");
  assert_true(json_is_true(json_object_get(v, "decided")));
  assert_int_equal(json_array_size(json_object_get(v, "dropped")), 0);
  json_decref(root);
  ftc_rec_capture_free(c);
  ftc_rec_destroy(rec);
}

static void an_outcome_that_makes_no_sense_is_refused_and_nothing_written(void **state) {
  (void)state;
  ftc_rec_t *rec;
  ftc_rec_capture_t *c = failed_epoch_capture(&rec);
  ftc_rec_dropped_t ok1 = {1, 1, 7, "crashed", NULL};
  ftc_rec_dropped_t neg = {-1, 1, 7, "crashed", NULL};
  ftc_rec_dropped_t odd = {1, 1, 7, "vanished", NULL};
  ftc_rec_dropped_t noreason = {1, 1, 7, NULL, NULL};
  ftc_rec_dropped_t badslot = {1, -5, 7, "left", NULL};
  ftc_rec_dropped_t twice[2] = {{1, 1, 7, "crashed", NULL}, {1, 1, 7, "hung", NULL}};
  static const ftc_rec_outcome_t base = {3, 1, FTC_ERR_TIMEOUT, -1, 4, NULL, 0, NULL};
  struct {
    ftc_rec_outcome_t o;
    const char *says;
  } cases[] = {
      {{-1, 0, 0, -1, 4, NULL, 0, NULL}, "epoch -1"},
      {{3, 1, FTC_OK, -1, 4, NULL, 0, NULL}, "status 0"},
      {{3, 1, FTC_STATUS_COUNT, -1, 4, NULL, 0, NULL}, "want an error code"},
      {{3, 1, FTC_ERR_TIMEOUT, -7, 4, NULL, 0, NULL}, "peer -7"},
      {{3, 0, 0, -1, 3, NULL, 0, NULL}, "next epoch 3 is not after epoch 3"},
      {{3, 0, 0, -1, -2, NULL, 0, "x"}, "next epoch -2"},
      {{3, 0, 0, -1, -1, &ok1, 1, "x"}, "names no next epoch"},
      {{3, 0, 0, -1, -1, NULL, 0, NULL}, "does not say why"},
      {{3, 0, 0, -1, -1, NULL, 0, ""}, "does not say why"},
      {{3, 0, 0, -1, 4, NULL, 2, NULL}, "no list of them"},
      {{3, 0, 0, -1, 4, &ok1, -1, NULL}, "-1 dropped members"},
      {{3, 0, 0, -1, 4, &neg, 1, NULL}, "has rank -1"},
      {{3, 0, 0, -1, 4, &odd, 1, NULL}, "dropped for \"vanished\"; want crashed, hung, left or lost"},
      {{3, 0, 0, -1, 4, &noreason, 1, NULL}, "dropped for \"(null)\""},
      {{3, 0, 0, -1, 4, &badslot, 1, NULL}, "slot -5"},
      {{3, 0, 0, -1, 4, twice, 2, NULL}, "names rank 1 twice"},
  };
  uint64_t before = ftc_rec_dump_count();
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char path[512] = "";
    ftc_status_t st = ftc_rec_capture_write_outcome(c, NULL, "error", &cases[i].o, path, sizeof(path));
    if (st != FTC_ERR_INVALID_ARGUMENT || !strstr(ftc_last_error(), cases[i].says))
      fail_msg("case %zu: status %d, message \"%s\", want one saying \"%s\"", i, st,
               ftc_last_error(), cases[i].says);
    assert_string_equal(path, "");
  }
  assert_int_equal(ftc_rec_dump_count(), before);
  char names[4][256];
  assert_int_equal(list_dir(names, 4), 0);
  /* The same capture with a sound outcome is written. */
  assert_int_equal(ftc_rec_capture_write_outcome(c, NULL, "timeout", &base, NULL, 0), FTC_OK);
  assert_int_equal(list_dir(names, 4), 1);
  ftc_rec_capture_free(c);
  ftc_rec_destroy(rec);
}

static void a_late_verdict_replaces_the_dump_under_its_name(void **state) {
  (void)state;
  ftc_rec_t *rec;
  ftc_rec_capture_t *c = failed_epoch_capture(&rec);
  ftc_rec_outcome_t o = FTC_REC_OUTCOME_INIT;
  o.epoch = 3;
  o.failed = 1;
  o.status = FTC_ERR_PEER_LOST;
  o.peer = 1;
  o.pending = "the coordinator had announced no epoch after 3";
  char path[512];
  assert_int_equal(ftc_rec_capture_write_outcome(c, NULL, "error", &o, path, sizeof(path)), FTC_OK);
  json_t *before = load(path);
  uint64_t written = ftc_rec_dump_count();
  /* A verdict that makes no sense changes nothing. */
  ftc_rec_outcome_t bad = o;
  bad.next_epoch = 2;
  assert_int_equal(ftc_rec_capture_rewrite_outcome(c, path, "error", &bad), FTC_ERR_INVALID_ARGUMENT);
  /* Nor may it name a folder or a hidden file. */
  ftc_rec_dropped_t gone = {1, 1, 7, "crashed", "its session closed"};
  o.next_epoch = 4;
  o.dropped = &gone;
  o.ndropped = 1;
  o.pending = NULL;
  assert_int_equal(ftc_rec_capture_rewrite_outcome(c, dir, "error", &o), FTC_ERR_SYSTEM);
  char hidden[600];
  snprintf(hidden, sizeof(hidden), "%s/.x.json", dir);
  assert_int_equal(ftc_rec_capture_rewrite_outcome(c, hidden, "error", &o), FTC_ERR_INVALID_ARGUMENT);
  assert_int_equal(ftc_rec_capture_rewrite_outcome(c, path, "error", &o), FTC_OK);
  char names[4][256];
  assert_int_equal(list_dir(names, 4), 1); /* the same file, no temporary left */
  json_t *after = load(path);
  json_t *v = json_object_get(after, "verdict");
  assert_true(json_is_true(json_object_get(v, "decided")));
  assert_int_equal(json_integer_value(json_object_get(v, "next_epoch")), 4);
  assert_null(json_object_get(v, "pending"));
  json_t *d = json_array_get(json_object_get(v, "dropped"), 0);
  assert_string_equal(json_string_value(json_object_get(d, "reason")), "crashed");
  /* Everything but the verdict is as it was. */
  json_object_del(before, "verdict");
  json_object_del(after, "verdict");
  assert_true(json_equal(before, after));
  assert_int_equal(ftc_rec_dump_count(), written);
  json_decref(before);
  json_decref(after);
  /* A dump removed meanwhile is not written again. */
  assert_int_equal(unlink(path), 0);
  assert_int_equal(ftc_rec_capture_rewrite_outcome(c, path, "error", &o), FTC_ERR_SYSTEM);
  assert_non_null(strstr(ftc_last_error(), "it is gone"));
  assert_int_equal(list_dir(names, 4), 0);
  ftc_rec_capture_free(c);
  ftc_rec_destroy(rec);
}

int main(void) {
  setenv("FTCOMM_DUMP_SIGNAL", "0", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(a_dump_is_valid_json_with_every_communicator, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(dumps_never_replace_an_earlier_file, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(a_dump_stays_under_the_size_limit_keeping_the_newest, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(an_unusable_directory_is_an_error_that_names_it, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(dumps_taken_while_recording_hold_whole_entries, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(the_dump_signal_makes_the_dump_thread_write_a_dump, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(an_application_signal_handler_is_left_alone, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(a_failure_dump_carries_the_failure_and_the_verdict, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(a_dump_without_a_verdict_says_why, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(an_outcome_that_makes_no_sense_is_refused_and_nothing_written, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(a_late_verdict_replaces_the_dump_under_its_name, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(a_capture_reuses_the_entry_memory_kept_for_it, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(every_recorder_has_its_capture_memory_kept, setup_dir, remove_dir),
      cmocka_unit_test_setup_teardown(a_large_rings_capture_memory_is_not_kept, setup_dir, remove_dir),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
