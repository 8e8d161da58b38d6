/*
 * httpd.h - a very small HTTP/1.0 server for /healthz, /readyz and
 * /metrics: one named thread ("ftck-httpd"), one request per connection,
 * GET only, requests bounded in size and time. Stop = flag + eventfd
 * wakeup + join.
 */
#ifndef FTCK_HTTPD_H
#define FTCK_HTTPD_H

#include "ftcomm.h"

typedef struct ftck_httpd ftck_httpd_t;

/* Answer one GET: set *status (200, 404, 503...), *content_type (static
 * string) and *body (allocated with ftc__malloc; the server frees it). */
typedef void (*ftck_http_handler)(const char *path, int *status, const char **content_type, char **body,
                                  void *ud);

/* addr "host:port", ":port" (all interfaces) or port 0 for any free port. */
ftc_status_t ftck_httpd_start(const char *addr, ftck_http_handler h, void *ud, ftck_httpd_t **out);
int ftck_httpd_port(const ftck_httpd_t *s);
void ftck_httpd_stop(ftck_httpd_t *s); /* stops and frees; NULL is a no-op */

#endif
