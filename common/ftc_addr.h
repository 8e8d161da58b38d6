/*
 * ftc_addr.h - network addresses as users write them and as the runtime
 * prints them, for both address families: "host:port" with a name or an
 * IPv4 literal, "[IPv6]:port" with an IPv6 literal (brackets required, as in
 * URLs, since the port would otherwise be ambiguous), and the address family
 * selection of FTCOMM_SOCKET_FAMILY. Every parser names the setting it
 * parses (`what`, e.g. "FTCOMM_COORDINATOR") in its error, with the form
 * expected. Thread-safe; no allocation.
 */
#ifndef FTC_ADDR_H
#define FTC_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

#include "ftcomm.h"

/* Longest host text (an IPv6 literal with a zone, or a DNS name) and the
 * longest "[host]:port". */
#define FTC__ADDR_HOST_MAX 256
#define FTC__ADDR_MAX (FTC__ADDR_HOST_MAX + 8)

/* "auto" (AF_UNSPEC), "ipv4"/"inet"/"4" (AF_INET), "ipv6"/"inet6"/"6"
 * (AF_INET6), case-insensitive; NULL or "" is auto. */
ftc_status_t ftc__addr_family_parse(const char *what, const char *s, int *family);
/* "auto", "ipv4", "ipv6". */
const char *ftc__addr_family_name(int family);

/* AF_INET or AF_INET6 when host (brackets already stripped) is an IP
 * literal of that family, AF_UNSPEC for anything else (a name). */
int ftc__addr_literal_family(const char *host);

/* A host without a port: a name, an IPv4 literal, or an IPv6 literal bare
 * or in brackets ("fd00::1" or "[fd00::1]"). out gets it without brackets. */
ftc_status_t ftc__addr_host(const char *what, const char *s, char *out, size_t outlen);

/* Split "host:port" or "[IPv6]:port" (port 1..65535). host gets the host
 * without brackets. An unbracketed IPv6 literal, a missing or bad port, an
 * empty host or a character no host name has is an error saying so. */
ftc_status_t ftc__addr_split(const char *what, const char *s, char *host, size_t hostlen,
                             int *port);

/* Print host and port as "host:port", or "[host]:port" when host is an IPv6
 * literal. Returns snprintf's count (>= outlen: truncated). */
int ftc__addr_join(const char *host, int port, char *out, size_t outlen);

/* A socket address as "1.2.3.4:80" or "[fd00::1]:80" (an IPv4-mapped IPv6
 * address as its IPv4 form); "?" for anything else. */
void ftc__addr_format(const struct sockaddr *sa, socklen_t len, char *out, size_t outlen);

#endif
