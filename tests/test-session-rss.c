/*
 * test-session-rss.c - a session's RSS series over an hour of readings
 * (session__read_memory(), daemon/session/memory.c), as memory_samples
 * stores it: a reading of this process every second, each with its RSS;
 * the split by mapping kind (smaps) at every reading for the first 20 s,
 * then thinning out with the session's age (each round waits at least a
 * twentieth of it), so that an always-on session does not read smaps every
 * second; never a gap longer than that, and the last split close to the
 * end. The clock is the test's (readings at t0 + k s): an hour takes a few
 * seconds. Needs neither root nor BPF.
 */
#include <stdio.h>
#include <unistd.h>

#include "check.h"
#include "check_session.h"
#include "check_store.h"
#include "service/request.h"
#include "session/session.h"
#include "store/store.h"
#include "util.h"

#define READINGS 3600

int main(void)
{
	char dir[] = "/tmp/test-session-rss-XXXXXX", path[64];
	struct session_params params = test_session_params("rss", EVENT_RSS);
	struct session_env env;
	struct session *s;
	long long split, early, gaps, last;
	uint64_t t0;
	int64_t sid;

	params.memory_interval_ns = NSEC_PER_SEC;
	test_db_path(dir, path, sizeof(path));
	test_session_open(path, &params, &env, &s);
	if (!s)
		return 1;
	sid = session__id(s);
	t0 = now_ns(CLOCK_MONOTONIC); /* just after the session's start: its first reading is due */
	for (int k = 0; k < READINGS; k++) {
		CHECK_INT_EQ(session__read_memory(s, t0 + (uint64_t)k * NSEC_PER_SEC), 1);
		if (k % 600 == 599)
			CHECK_INT_EQ(test_session_flush(s, &env), 0);
	}

	CHECK_INT_EQ(test_session_scalar(env.store, sid,
					 "SELECT count(*) FROM memory_samples WHERE session_id = ?1 "
					 "AND rss_bytes > 0"),
		     READINGS);
	split = test_session_scalar(env.store, sid,
				    "SELECT count(*) FROM memory_samples WHERE session_id = ?1 "
				    "AND map_heap_bytes IS NOT NULL");
	/* Every reading of the first 20 s; the first at the start (memory_samples' time
	 * is CLOCK_REALTIME: seconds from the first reading). */
	early = test_session_scalar(env.store, sid,
				    "SELECT count(*) FROM memory_samples WHERE session_id = ?1 "
				    "AND map_heap_bytes IS NOT NULL AND time_ns < "
				    "(SELECT min(time_ns) FROM memory_samples "
				    "WHERE session_id = ?1) + 20000000000");
	/* Gaps between split readings longer than a twentieth of the age, + 1 s of grid. */
	gaps = test_session_scalar(env.store, sid,
				   "WITH r AS (SELECT time_ns - (SELECT min(time_ns) "
				   "FROM memory_samples WHERE session_id = ?1) AS t "
				   "FROM memory_samples WHERE session_id = ?1 "
				   "AND map_heap_bytes IS NOT NULL), "
				   "g AS (SELECT t, lead(t) OVER (ORDER BY t) AS nxt FROM r) "
				   "SELECT count(*) FROM g WHERE nxt - t > t / 20 + 1000000000");
	last = test_session_scalar(env.store, sid,
				   "SELECT (max(time_ns) - min(time_ns)) / 1000000000 "
				   "FROM memory_samples "
				   "WHERE session_id = ?1 AND map_heap_bytes IS NOT NULL");
	printf("%d readings over an hour: %lld with the smaps split, %lld of them in the first "
	       "20 s, the last at %lld s\n",
	       READINGS, split, early, last);
	CHECK_INT_EQ(early, 20);
	/* ~20 + 20 ln(3600 / 20) = ~124 */
	CHECK(split >= 100 && split <= 160);
	CHECK_INT_EQ(gaps, 0);
	/* the wait at an hour is 180 s */
	CHECK(last >= READINGS - 1 - 190);
	test_session_close(&env, s, dir, path);
	return check_exit("session-rss");
}
