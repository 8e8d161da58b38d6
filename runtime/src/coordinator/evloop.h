/*
 * evloop.h - an epoll event loop for a libwebsockets context, from libev,
 * when the host has it.
 *
 * libwebsockets' own loop waits in poll(2) and walks every descriptor it
 * holds on each wake-up: with thousands of sessions (a coordinator of a
 * large job, the scale simulator) that walk is most of the service
 * thread's time. Its libev event library (the plugin libwebsockets-evlib_ev,
 * Debian's libwebsockets-evlib-ev) waits in epoll(7) instead and costs per
 * ready descriptor. libev is loaded at run time (dlopen), so a host or an
 * image without the plugin still runs, on poll(2), said once in a log line.
 *
 * Use: ftc__evloop_open() (it checks that the plugin is installed); if it
 * returns 1, ftc__evloop_setup(info) before lws_create_context(); a context
 * that fails then fails for its own reason (ftc__evloop_close() after). The service thread calls
 * ftc__evloop_service() where it would call lws_service(); lws_cancel_service()
 * wakes it as before. After lws_context_destroy(): ftc__evloop_close().
 */
#ifndef FTC_COORD_EVLOOP_H
#define FTC_COORD_EVLOOP_H

#include <libwebsockets.h>

typedef struct ftc__evloop {
  void *lib;  /* dlopen handle of libev, NULL: poll(2) */
  void *loop; /* struct ev_loop * */
  void *foreign[1];
  int (*run)(void *loop, int flags);
  void (*destroy)(void *loop);
  char why[160]; /* when open returned 0: why not */
} ftc__evloop_t;

/* 1: libev's epoll loop is ready for setup; 0: not here (e->why says why,
 * the context uses lws's poll(2) loop); -1: FTCOMM_COORD_LOOP=poll asked
 * for poll(2) (the scale benchmark compares the two). */
int ftc__evloop_open(ftc__evloop_t *e);
/* Make `info` create its context on the loop (LWS_SERVER_OPTION_LIBEV,
 * one foreign loop). */
void ftc__evloop_setup(ftc__evloop_t *e, struct lws_context_creation_info *info);
/* One wait and the work it found (as lws_service(ctx, 0)): < 0 on error. */
int ftc__evloop_service(ftc__evloop_t *e, struct lws_context *ctx);
/* Release the loop (after the context is destroyed); idempotent. */
void ftc__evloop_close(ftc__evloop_t *e);
/* "epoll" or "poll", for log lines. */
const char *ftc__evloop_name(const ftc__evloop_t *e);

#endif
