/* SPDX-License-Identifier: MIT */
/*
 * Test harness: what crosses loopback, read off the wire with a packet
 * socket (AF_PACKET, cooked, IPv4) whose classic BPF filter keeps the TCP
 * segments from or to one port. Needs CAP_NET_RAW; without it the caller
 * skips, with the reason. th_wire_read() fails the test if the socket
 * dropped a packet, so a string it did not see did not cross.
 */
#ifndef RINGPIPE_TEST_WIRE_H
#define RINGPIPE_TEST_WIRE_H

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "bytebuf.h"

/* IPv4 TCP segments from or to one port, as the kernel sees them cross lo */
struct th_wire {
	int fd;
	uint16_t port;
};

/* Starts capturing, or skips without the right to (CAP_NET_RAW) */
static inline void th_wire_open(struct th_wire *w, uint16_t port)
{
	/* cooked packets start at the IP header: IPv4, TCP, not a later
	 * fragment, then the source or destination port */
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 9),			/* protocol */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 6, 0, 8),
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 6),			/* fragment */
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, 6, 0),
		BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 0),			/* IP header length */
		BPF_STMT(BPF_LD | BPF_H | BPF_IND, 0),			/* source port */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, port, 2, 0),
		BPF_STMT(BPF_LD | BPF_H | BPF_IND, 2),			/* destination port */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, port, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, 0x40000),
		BPF_STMT(BPF_RET | BPF_K, 0),
	};
	struct sock_fprog prog = { .len = sizeof(code) / sizeof(code[0]), .filter = code };
	struct sockaddr_ll at = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IP),
				  .sll_ifindex = (int)if_nametoindex("lo") };
	int size = 64 << 20;
	char scratch[65536];

	w->port = port;
	w->fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_IP));
	if (w->fd < 0)
		cr_skip_test("reading loopback needs CAP_NET_RAW (a packet socket): %s",
			     strerror(errno));
	cr_assert_eq(setsockopt(w->fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)), 0,
		     "SO_ATTACH_FILTER: %s", strerror(errno));
	if (setsockopt(w->fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)))
		setsockopt(w->fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
	cr_assert_eq(bind(w->fd, (struct sockaddr *)&at, sizeof(at)), 0, "bind lo: %s",
		     strerror(errno));
	/* what came before the filter was attached */
	while (recv(w->fd, scratch, sizeof(scratch), 0) > 0)
		;
}

/* Every packet captured so far, one after the other, into out; none lost */
static inline void th_wire_read(struct th_wire *w, struct bytebuf *out)
{
	struct tpacket_stats st;
	socklen_t len = sizeof(st);
	char pkt[65536];
	ssize_t n;

	while ((n = recv(w->fd, pkt, sizeof(pkt), 0)) > 0)
		bb_append(out, pkt, (size_t)n);
	bb_append(out, "", 1);
	out->len--;
	cr_assert_eq(getsockopt(w->fd, SOL_PACKET, PACKET_STATISTICS, &st, &len), 0);
	cr_assert_eq(st.tp_drops, 0u, "the packet socket dropped %u packets", st.tp_drops);
	cr_assert_gt(out->len, 0u, "nothing crossed port %u", w->port);
	close(w->fd);
}

static inline bool th_has_bytes(const struct bytebuf *b, const char *s)
{
	return b->len && memmem(b->p, b->len, s, strlen(s)) != NULL;
}

#endif /* RINGPIPE_TEST_WIRE_H */
