/*
 * options.h - the controller's command line and environment.
 *
 * Flags win over the environment; the environment uses the names operators
 * already set: KUBECONFIG, WATCH_NAMESPACE (empty: all namespaces),
 * POD_NAME (leader identity, and the pod that gets the leader label) and
 * POD_NAMESPACE (lease namespace).
 */
#ifndef FTCK_OPTIONS_H
#define FTCK_OPTIONS_H

#include <stdint.h>

#include "ftcomm.h"

typedef struct ftck_options {
  char kubeconfig[1024];        /* empty: $KUBECONFIG, in-cluster, ~/.kube/config */
  char context[256];            /* empty: current-context */
  char service_account_dir[512]; /* in-cluster files; empty: the standard folder */
  char watch_namespace[256];    /* empty: all namespaces */
  char listen_addr[256];        /* health and metrics, host:port */
  int leader_elect;             /* 1: hold a Lease before reconciling */
  char lease_name[256];
  char lease_namespace[256];    /* empty: POD_NAMESPACE, else the kubeconfig's namespace */
  char identity[256];           /* leader identity; empty: POD_NAME, else hostname_pid */
  int lease_duration_s;
  int renew_deadline_s;
  int retry_period_s;
  int workers;
  int resync_s;
  int watch_nodes;               /* 1: Node informer (needs the nodes ClusterRole) */
  char coordinator_address[256]; /* FTCOMM_COORDINATOR injected into pods */
  char dump_dir[512];            /* FTCOMM_DUMP_DIR injected into pods */
  char coordinator_bind[256];    /* the coordinator port: [host]:port */
  char dump_volume[512];         /* incidents: <volume>/<ns>/<job>/<incident>/ */
  int dump_retention;            /* incidents kept per job */
  int64_t dump_ttl_after_deletion_s; /* a deleted job's dump folder goes this long after; 0: kept forever */
  int dump_wait_s;               /* how long an incident waits for the ranks' dumps */
  char analyzer[512];            /* ftcomm-trace; empty: next to the binary, else $PATH */
  int token_check_s;             /* --token-check: deprecated and ignored (0 unless given) */
  char token_key_secret[254];    /* the token key Secret's name, in lease_namespace */
  int leader_label;              /* 1: label our own pod ftcomm.dev/leader=true while leading */
  char pod_name[256];            /* $POD_NAME: our pod (for the leader label) */
  char pod_namespace[256];       /* $POD_NAMESPACE: its namespace */
  int show_help;
} ftck_options_t;

/* Defaults, then environment, then argv. FTC_ERR_CONFIG with a message
 * naming the flag on a bad or unknown flag. */
ftc_status_t ftck_options_parse(int argc, char **argv, ftck_options_t *o);
void ftck_options_usage(const char *argv0);
/* A duration as the flags take it: whole numbers with a unit each, s, m, h
 * or d ("90s", "1h30m", "7d"), or "0". Seconds into *out; FTC_ERR_CONFIG
 * with a message naming `what` otherwise. */
ftc_status_t ftck_parse_duration(const char *what, const char *v, int64_t *out);

#endif
