/*
 * leader.h - leader election with a coordination.k8s.io/v1 Lease, following
 * client-go's leaderelection: a candidate takes the Lease when it is free or
 * its holder has not renewed it for leaseDurationSeconds (measured on the
 * local clock from when this candidate last saw it change); the leader
 * renews it every retry period and gives up leadership when it could not
 * renew for renew_deadline; on shutdown the leader releases it (empty
 * holder, duration 1s) so a successor takes over at once.
 */
#ifndef FTCK_LEADER_H
#define FTCK_LEADER_H

#include <stdint.h>

#include "ftcomm.h"
#include "kube_client.h"

typedef struct ftck_leader ftck_leader_t;

typedef struct ftck_leader_opts {
  const char *ns, *name, *identity;
  int lease_duration_s, renew_deadline_s, retry_period_s;
  void (*on_lost)(void *ud); /* called on the renew thread when leadership is lost */
  void *ud;
} ftck_leader_opts_t;

ftc_status_t ftck_leader_create(ftck_client_t *c, const ftck_leader_opts_t *o, ftck_leader_t **out);
/* One attempt to take or renew the Lease: 1 leader, 0 someone else holds
 * it, -1 the API call failed (ftc_last_error()). */
int ftck_leader_try(ftck_leader_t *le);
/* Block until this candidate leads (FTC_OK) or *stop (FTC_ERR_ABORTED). */
ftc_status_t ftck_leader_acquire(ftck_leader_t *le, const volatile int *stop);
/* Start the renew thread ("ftck-lease"). */
ftc_status_t ftck_leader_start_renewing(ftck_leader_t *le);
int ftck_leader_is_leader(ftck_leader_t *le);
/* Stop renewing (flag + wakeup + join) and release the Lease if held. */
void ftck_leader_release(ftck_leader_t *le);
/* Requests this candidate sent for its Lease, by verb (all outcomes). */
typedef struct ftck_leader_stats {
  uint64_t gets, puts, posts;
} ftck_leader_stats_t;
void ftck_leader_get_stats(ftck_leader_t *le, ftck_leader_stats_t *out);
void ftck_leader_destroy(ftck_leader_t *le);

#endif
