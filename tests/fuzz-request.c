/*
 * fuzz-request.c - libFuzzer target for the request parser (daemon/service/request.c):
 * every input, however malformed, must give 0 with a sane struct request or
 * a negative errno with a NUL-terminated message, and never crash, leak or
 * read out of bounds (built with -fsanitize=fuzzer,address,undefined).
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "protocol.h"
#include "service/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct request req;
	char err[256];
	int r;

	memset(err, 'x', sizeof(err));
	r = request__parse((const char *)data, size, &req, err, sizeof(err));
	if (r < 0) {
		/* An error says why, in one terminated sentence. */
		assert(memchr(err, '\0', sizeof(err)) != NULL && err[0] != '\0');
		return 0;
	}
	assert(r == 0);
	/* What the parser accepted is within the ranges it promises (request.h). */
	assert(req.freq_hz <= PROFD_MAX_FREQ_HZ);
	assert(memchr(req.label, '\0', sizeof(req.label)) != NULL);
	assert(memchr(req.events_str, '\0', sizeof(req.events_str)) != NULL);
	if (req.cmd == CMD_ATTACH)
		assert(req.pid >= 1 && (req.events & EVENT_CPU));
	if (req.session)
		assert(req.session >= 1);
	return 0;
}
