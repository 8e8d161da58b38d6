/*
 * evloop.c - libev's epoll loop under a libwebsockets context (evloop.h).
 * libev is opened with dlopen so that nothing links it: its library comes
 * with libwebsockets' libev plugin, which libwebsockets itself loads the
 * same way when a context asks for LWS_SERVER_OPTION_LIBEV.
 */
#include "coordinator/evloop.h"

#include "ftc_param.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* libev 4's ABI (ev.h): not included, so that building needs no libev-dev. */
#define EV_BACKEND_EPOLL 0x00000004U
#define EV_FLAG_NOENV 0x01000000U /* (LIBEV_FLAGS in the environment does not pick another) */
#define EV_RUN_ONCE 2

int ftc__evloop_open(ftc__evloop_t *e) {
  memset(e, 0, sizeof(*e));
  const char *want = ftc__param_str(FTC_P_COORD_LOOP);
  if (want && !strcmp(want, "poll")) {
    snprintf(e->why, sizeof(e->why), "FTCOMM_COORD_LOOP=poll");
    return -1;
  }
  if (want && *want && strcmp(want, "epoll")) {
    snprintf(e->why, sizeof(e->why),
             "FTCOMM_COORD_LOOP=%.40s is neither epoll nor poll; using poll", want);
    return 0;
  }
#ifdef LWS_INSTALL_LIBDIR
  /* Checked here, so that a context that fails on the loop fails for its
   * own reason (a port in use), not for a missing plugin. */
  if (access(LWS_INSTALL_LIBDIR "/libwebsockets-evlib_ev.so", R_OK)) {
    snprintf(e->why, sizeof(e->why), "no %s/libwebsockets-evlib_ev.so (install "
             "libwebsockets-evlib-ev)", LWS_INSTALL_LIBDIR);
    return 0;
  }
#endif
  e->lib = dlopen("libev.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!e->lib) {
    snprintf(e->why, sizeof(e->why), "no libev.so.4 (install libev4 and libwebsockets-evlib-ev)");
    return 0;
  }
  void *(*loop_new)(unsigned int) = (void *(*)(unsigned int))dlsym(e->lib, "ev_loop_new");
  e->run = (int (*)(void *, int))dlsym(e->lib, "ev_run");
  e->destroy = (void (*)(void *))dlsym(e->lib, "ev_loop_destroy");
  if (!loop_new || !e->run || !e->destroy) {
    snprintf(e->why, sizeof(e->why), "libev.so.4 lacks ev_loop_new/ev_run/ev_loop_destroy");
    ftc__evloop_close(e);
    return 0;
  }
  e->loop = loop_new(EV_BACKEND_EPOLL | EV_FLAG_NOENV);
  if (!e->loop) {
    snprintf(e->why, sizeof(e->why), "libev has no epoll loop here");
    ftc__evloop_close(e);
    return 0;
  }
  return 1;
}

void ftc__evloop_setup(ftc__evloop_t *e, struct lws_context_creation_info *info) {
  e->foreign[0] = e->loop;
  info->options |= LWS_SERVER_OPTION_LIBEV;
  info->foreign_loops = e->foreign;
}

int ftc__evloop_service(ftc__evloop_t *e, struct lws_context *ctx) {
  if (!e->loop) return lws_service(ctx, 0);
  e->run(e->loop, EV_RUN_ONCE);
  return 0;
}

void ftc__evloop_close(ftc__evloop_t *e) {
  if (e->loop && e->destroy) e->destroy(e->loop);
  e->loop = NULL;
  /* libev stays loaded: libwebsockets' plugin links it too, and a later
   * context opens it again. */
  e->lib = NULL;
}

const char *ftc__evloop_name(const ftc__evloop_t *e) { return e->loop ? "epoll" : "poll"; }
