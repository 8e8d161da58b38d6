/*
 * ftc_proto_wire.h - what a front-end needs of the membership protocol to
 * route a session before it is one: the WebSocket subprotocol names and
 * request path, the hello carried in the upgrade request, and its
 * base64url. The controller's router (controller/src/coord/router.c) reads
 * the job's name from it; the rest of the protocol stays in proto.h, which
 * includes this.
 */
#ifndef FTC_PROTO_WIRE_H
#define FTC_PROTO_WIRE_H

#include <stddef.h>

/* WebSocket subprotocol name (Sec-WebSocket-Protocol) and request path. */
#define FTC__PROTO_WS_NAME "ftcomm.membership.v1"
#define FTC__PROTO_WS_PATH "/ftcomm/v1"
/* The hello in the upgrade request (docs/protocol.md, "The hello in the
 * request"): a client offers FTC__PROTO_WS_NAME_HELLO first, with its hello
 * (the same message as the frame's) base64url-encoded in the request header
 * FTC__PROTO_HELLO_HEADER; a coordinator that selects that subprotocol took
 * the header as the session's hello, and the client sends no hello frame.
 * Messages are the same version-1 ones either way. */
#define FTC__PROTO_WS_NAME_HELLO "ftcomm.membership.v1-hello"
#define FTC__PROTO_HELLO_HEADER "X-Ftcomm-Hello"
#define FTC__PROTO_HELLO_HEADER_LWS "x-ftcomm-hello:" /* as lws_hdr_custom_* name it */
/* The longest header value the coordinator decodes (too_large above it; its
 * lws request-header space, FTC__PROTO_COORD_HEADER_SPACE, holds it whole). */
#define FTC__PROTO_MAX_HELLO_HEADER 4096
#define FTC__PROTO_COORD_HEADER_SPACE 8192
/* A client puts its hello in the header only when its whole upgrade request
 * stays within this: half of lws's default request-header space (4096), so
 * that a coordinator from before (which ignores the header but must still
 * hold it) accepts the request too. */
#define FTC__PROTO_HELLO_REQUEST_BUDGET 2048

/* base64url (RFC 4648 section 5, no padding) of src[0..n) into dst, which
 * holds ftc__b64url_len(n) + 1 bytes; NUL-terminated. Returns the length. */
size_t ftc__b64url_len(size_t n);
size_t ftc__b64url_encode(const void *src, size_t n, char *dst);
/* Decode base64url (padding '=' at the end accepted) of src[0..n) into dst
 * (at least n * 3 / 4 + 1 bytes). Returns the decoded length, or -1 when
 * src has a character outside the alphabet or an impossible length. */
long ftc__b64url_decode(const char *src, size_t n, unsigned char *dst);

#endif
