/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The first-bytes classifier: is the first data seen on a socket HTTP/1.x, an
 * SSE stream (possibly joined mid-way), HTTP/2 from its start (h2c: the
 * client preface, or a server's first SETTINGS frame), or a WebSocket session
 * joined after its upgrade (an uncompressed text frame carrying a JSON
 * object)? Reads only the first ITAP_CLASSIFY_BYTES bytes, held little-endian
 * in two u64 (no indexed memory access for the verifier to bound).
 *
 * Verdicts: FOLLOW for those; TLS for a TLS record while the TLS library
 * probes run; MUTED for anything else (binary protocols, WebSocket frames that
 * are compressed, binary, control or continuation frames, or whose payload is
 * not a JSON object).
 *
 * Built for the host too (tests/unit/classify_test.cpp), without the kernel's
 * headers.
 */
#ifndef INFERTAP_CLASSIFY_BPF_H
#define INFERTAP_CLASSIFY_BPF_H

#ifdef __BPF__
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#define ITAP_UNROLL _Pragma("unroll")
#else
#include <linux/types.h>
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#define ITAP_UNROLL /* the host's compiler needs no help */
#endif

#include "infertap/abi.h"

#define ITAP_CLASSIFY_BYTES 16

/* little-endian u64 of a string literal's first (up to 8) bytes, folded at compile time */
#define LIT_C(s, i) ((i) < sizeof(s) - 1 ? (__u64)(__u8)(s)[(i) < sizeof(s) - 1 ? (i) : 0] << (8 * (i)) : 0)
#define LIT(s)                                                                                     \
	(LIT_C(s, 0) | LIT_C(s, 1) | LIT_C(s, 2) | LIT_C(s, 3) | LIT_C(s, 4) | LIT_C(s, 5) |       \
	 LIT_C(s, 6) | LIT_C(s, 7))
#define LIT_MASK(s) (sizeof(s) - 1 >= 8 ? ~0ULL : ((1ULL << (8 * (sizeof(s) - 1))) - 1))
/* does the (n-byte) text whose first 8 bytes are v start with literal s */
#define PFX(v, n, s) ((n) >= sizeof(s) - 1 && ((v) & LIT_MASK(s)) == LIT(s))

/* byte k (< 16) of the 16 bytes held little-endian in v, v2 */
static __always_inline __u8 byte_at(__u64 v, __u64 v2, __u32 k)
{
	return k < 8 ? (__u8)(v >> (8 * k)) : (__u8)(v2 >> (8 * ((k - 8) & 7)));
}

static __always_inline bool is_hex(__u8 c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/*
 * A server's first HTTP/2 frame: SETTINGS (type 4), flags 0, stream 0, a
 * length that is a multiple of 6 up to 96 (16 settings). Conservative: a
 * connection joined mid-way at any other frame is not recognised here.
 */
static __always_inline bool is_h2_server_settings(__u64 v, __u64 v2, __u32 n)
{
	__u8 len = (__u8)(v >> 16);

	return n >= 9 && (v & 0xffff) == 0 && len <= 96 && len % 6 == 0 && (__u8)(v >> 24) == 4 &&
	       (v >> 32) == 0 && (__u8)v2 == 0;
}

/*
 * Does the text start like an HTTP/1.x request or status line, or an SSE
 * field line? When it starts with the CRLF that ends a chunk, *chunk_start is
 * where the next chunk-size line begins (else 0).
 */
static __always_inline bool starts_like_http_or_sse(__u64 v, __u64 v2, __u32 n, __u32 *chunk_start)
{
	switch ((__u8)v) {
	case 'G':
		return PFX(v, n, "GET ");
	case 'P':
		/* HTTP/2's client preface "PRI * HTTP/2.0\r\n..." (h2c with prior knowledge) */
		if (PFX(v, n, "PRI * HT"))
			return n < 16 || v2 == LIT("TP/2.0\r\n");
		return PFX(v, n, "POST ") || PFX(v, n, "PUT ") || PFX(v, n, "PATCH ");
	case 0:
		return is_h2_server_settings(v, v2, n);
	case 'D':
		return PFX(v, n, "DELETE ");
	case 'H':
		return PFX(v, n, "HEAD ") || PFX(v, n, "HTTP/1.");
	case 'O':
		return PFX(v, n, "OPTIONS ");
	case ':':
		return true; /* SSE comment line */
	case 'd':
		return PFX(v, n, "data:");
	case 'e':
		return PFX(v, n, "event:");
	case 'i':
		return PFX(v, n, "id:");
	case 'r':
		return PFX(v, n, "retry:");
	case '\r':
		/* CRLF ending the previous chunk, then the next chunk-size line */
		if (n >= 2 && byte_at(v, v2, 1) == '\n')
			*chunk_start = 2;
		return false;
	}
	return false;
}

/* A chunk-size line at start: 1..8 hex digits then CRLF (16 bytes: no overflow). */
static __always_inline bool is_chunk_size_line(__u64 v, __u64 v2, __u32 n, __u32 start)
{
	__u32 k = start;

	ITAP_UNROLL
	for (__u32 i = 0; i < 8; i++) {
		if (k == start + i && k < n && is_hex(byte_at(v, v2, k)))
			k++;
	}
	if (k == start || k + 1 >= n)
		return false;
	return byte_at(v, v2, k) == '\r' && byte_at(v, v2, k + 1) == '\n';
}

/*
 * A TLS record header: content type change_cipher_spec, alert, handshake or
 * application data (20..23), then protocol version 3.x (SSL 3.0 to TLS 1.3).
 */
static __always_inline bool is_tls_record(__u64 v, __u32 n)
{
	__u8 type = (__u8)v;

	return n >= 3 && type >= 20 && type <= 23 && (__u8)(v >> 8) == 3 && (__u8)(v >> 16) <= 4;
}

/* The first character of a JSON object's first key, as realtime APIs name them */
static __always_inline bool is_json_key_start(__u8 c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
	       c == '@';
}

/*
 * The payload length of a 64-bit length form (bytes 2..9, big-endian) when
 * it is minimal (above 0xffff) and below 16 MiB (bytes 2..6 zero); else 0.
 */
static __always_inline __u32 ws_length64(__u64 v, __u64 v2)
{
	__u32 len = ((__u32)(__u8)(v >> 56) << 16) | ((__u32)(__u8)v2 << 8) | (__u8)(v2 >> 8);

	if (((v >> 16) & 0xffffffffffULL) != 0 || len <= 0xffff)
		return 0;
	return len;
}

/*
 * A WebSocket (RFC 6455) frame a realtime session joined after its upgrade
 * can start with: opcode text, FIN either way (a whole message or its first
 * fragment); RSV1..3 clear (RSV1 marks a permessage-deflate message, whose
 * window went by before the agent started: unreadable); a minimal length
 * form, the 64-bit one below 16 MiB; its payload (unmasked with the key in
 * these bytes when the client sent it) opens a JSON object: `{"`, then a key
 * character when the 16 bytes hold it (all but the masked 64-bit form).
 * Continuation frames are excluded (their message began unseen) and binary
 * ones (realtime JSON travels in text frames; userspace reads only those).
 */
static __always_inline bool is_ws_json_text_frame(__u64 v, __u64 v2, __u32 n)
{
	__u8 len7 = (__u8)(v >> 8) & 0x7f;
	bool masked = (v >> 15) & 1;
	__u32 len = len7, key = 2, p;
	__u8 c0, c1, c2;

	if (((__u8)v & 0x7f) != 0x01)
		return false;
	if (len7 == 126) {
		len = ((__u32)byte_at(v, v2, 2) << 8) | byte_at(v, v2, 3);
		if (len < 126)
			return false;
		key = 4;
	} else if (len7 == 127) {
		len = ws_length64(v, v2);
		key = 10;
	}
	if (len < 2)
		return false;
	/* the payload's first byte: past the mask key when there is one (at most byte 14) */
	p = masked ? key + 4 : key;
	c0 = byte_at(v, v2, p);
	c1 = byte_at(v, v2, p + 1);
	c2 = p + 2 < ITAP_CLASSIFY_BYTES ? byte_at(v, v2, p + 2) : 0;
	if (masked) {
		c0 ^= byte_at(v, v2, key);
		c1 ^= byte_at(v, v2, key + 1);
		c2 ^= byte_at(v, v2, key + 2);
	}
	if (n < p + 2 || c0 != '{' || c1 != '"')
		return false;
	/* the masked 64-bit form leaves no room for the key's first character */
	return p + 2 >= ITAP_CLASSIFY_BYTES || (len >= 3 && n > p + 2 && is_json_key_start(c2));
}

/*
 * FOLLOW when the first bytes of the first data seen on a socket look like
 * HTTP/1.x (request line, status line), like an SSE/chunked stream joined
 * mid-way, like the start of HTTP/2 (client preface, server SETTINGS), or
 * like a WebSocket text frame of JSON (a realtime session joined after its
 * upgrade); TLS for TLS records when the TLS library probes run (`tls`);
 * MUTED otherwise; 0 (no verdict yet) without bytes. v, v2 hold the first
 * n (<= 16) bytes, little-endian.
 */
static __always_inline __u8 classify_first_bytes(__u64 v, __u64 v2, __u32 n, bool tls)
{
	__u32 chunk_start = 0;

	if (n == 0)
		return 0;
	if (tls && is_tls_record(v, n))
		return ITAP_VERDICT_TLS;
	if (starts_like_http_or_sse(v, v2, n, &chunk_start) || is_ws_json_text_frame(v, v2, n))
		return ITAP_VERDICT_FOLLOW;
	return is_chunk_size_line(v, v2, n, chunk_start) ? ITAP_VERDICT_FOLLOW : ITAP_VERDICT_MUTED;
}

#endif /* INFERTAP_CLASSIFY_BPF_H */
