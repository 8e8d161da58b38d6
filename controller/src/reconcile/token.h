/*
 * token.h - the per-job token that ranks present to their coordinator.
 *
 * A job's token is HMAC-SHA256(controller key, "ftcomm.dev/job-token/v1" NUL
 * job uid), in hex. The key is one Secret in the controller's own namespace,
 * made at first start, so every replica and every restart derives the same
 * token for a job without reading anything in the job's namespace: there the
 * controller may only create the token Secret its pods mount (RBAC: create,
 * never get, list or watch a user's Secrets). A job made again under the
 * same name has another uid, hence another token.
 */
#ifndef FTCK_TOKEN_H
#define FTCK_TOKEN_H

#include <stddef.h>

#include "ftc_error.h"
#include "kube_client.h"

#define FTCK_TOKEN_KEY_BYTES 32
#define FTCK_TOKEN_HEX (2 * 32 + 1) /* a token and its NUL */

/* Read the key from Secret ns/name (data.key, FTCK_TOKEN_KEY_BYTES bytes),
 * making it with fresh random bytes when it does not exist; a replica that
 * loses the race to make it reads the winner's. */
ftc_status_t ftck_token_key_load(ftck_client_t *c, const char *ns, const char *name,
                                 unsigned char key[FTCK_TOKEN_KEY_BYTES]);

/* The token of the job with this uid, 64 lowercase hex digits. */
void ftck_job_token(const unsigned char key[FTCK_TOKEN_KEY_BYTES], const char *uid, char out[FTCK_TOKEN_HEX]);

#endif
