/*
 * member_probe.c - a rank for the ftcomm-run suite that uses only the
 * membership client: joins the job described by the FTCOMM_* environment,
 * prints "rank R of N epoch E slot S", optionally sleeps, and leaves. Its
 * exit code is the ftc_status_t of the first failing call (so a refused
 * token exits with FTC_ERR_AUTH = 7).
 *   member_probe [SLEEP_MS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ftc_error.h"
#include "ftc_param.h"
#include "membership/member.h"

int main(int argc, char **argv) {
  int64_t slot, world, min, timeout;
  ftc_status_t st;
  if ((st = ftc__param_int(FTC_P_SLOT, &slot)) || (st = ftc__param_int(FTC_P_WORLD_SIZE, &world)) ||
      (st = ftc__param_int(FTC_P_MIN_SIZE, &min)) ||
      (st = ftc__param_int(FTC_P_CONNECT_TIMEOUT_MS, &timeout))) {
    fprintf(stderr, "member_probe: %s\n", ftc_last_error());
    return st;
  }
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", 30000 + (int)slot);
  ftc__member_cfg_t cfg = {
      .coordinator = ftc__param_str(FTC_P_COORDINATOR),
      .job = ftc__param_str(FTC_P_JOB),
      .token = ftc__param_str(FTC_P_TOKEN),
      .slot = (int)slot,
      .world_size = (int)world,
      .min_size = (int)min,
      .data_addr = addr,
      .connect_timeout_ms = (int)timeout,
  };
  ftc__member_t *m;
  if ((st = ftc__member_open(&cfg, &m)) != FTC_OK) {
    fprintf(stderr, "member_probe: join failed: %s: %s\n", ftc_strerror(st), ftc_last_error());
    return st;
  }
  ftc__view_t *v;
  if ((st = ftc__member_wait_view(m, 0, (int)timeout, &v)) != FTC_OK) {
    fprintf(stderr, "member_probe: no epoch: %s: %s\n", ftc_strerror(st), ftc_last_error());
    ftc__member_close(m);
    return st;
  }
  printf("rank %d of %d epoch %llu slot %d\n", v->my_rank, v->size,
         (unsigned long long)v->epoch, v->members[v->my_rank].slot);
  fflush(stdout);
  ftc__view_free(v);
  if (argc > 1) usleep((useconds_t)atoi(argv[1]) * 1000);
  ftc__member_close(m);
  return 0;
}
