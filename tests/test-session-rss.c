/*
 * test-session-rss.c - a session's RSS series over an hour of readings
 * (session__read_memory(), daemon/session/memory.c), as memory_samples
 * stores it: a reading of this process every second, each with its RSS;
 * the split by mapping kind (smaps) at every reading for the first 20 s,
 * then thinning out with the session's age (each round waits at least a
 * twentieth of it), so that an always-on session does not read smaps every
 * second; never a gap longer than that, and the last split close to the
 * end. The clock is the test's (readings at t0 + k s): an hour takes a few
 * seconds. A round's CPU time is the machine's, not the test's: the series
 * that checks the age rule sets the cost rule aside (a factor of 1), and a
 * second series checks that a round costly enough for the rule waits.
 * Needs neither root nor BPF.
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

/* What a series of READINGS readings stored, in splits and their times. */
struct series {
	long long split; /* readings with the smaps split */
	long long early; /* of them in the first 20 s */
	long long gaps;	 /* gaps between splits longer than a twentieth of the age + 1 s */
	long long last;	 /* s from the first reading to the last split */
};

/*
 * series() - READINGS readings of this process a second apart, by a session
 * whose rounds of smaps reads wait at least @cost_factor times their CPU
 * time, into *@ret. Returns 0, or -1 if the session did not open (a failed
 * check).
 */
static int series(unsigned cost_factor, struct series *ret)
{
	char dir[] = "/tmp/test-session-rss-XXXXXX", path[64];
	struct session_params params = test_session_params("rss", EVENT_RSS);
	struct session_env env;
	struct session *s;
	uint64_t t0;
	int64_t sid;

	params.memory_interval_ns = NSEC_PER_SEC;
	params.maps_cost_factor = cost_factor;
	test_db_path(dir, path, sizeof(path));
	test_session_open(path, &params, &env, &s);
	if (!s)
		return -1;
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
	ret->split =
	    test_session_scalar(env.store, sid,
				"SELECT count(*) FROM memory_samples WHERE session_id = ?1 "
				"AND map_heap_bytes IS NOT NULL");
	/* memory_samples' time is CLOCK_REALTIME: seconds from the first reading. */
	ret->early =
	    test_session_scalar(env.store, sid,
				"SELECT count(*) FROM memory_samples WHERE session_id = ?1 "
				"AND map_heap_bytes IS NOT NULL AND time_ns < "
				"(SELECT min(time_ns) FROM memory_samples "
				"WHERE session_id = ?1) + 20000000000");
	ret->gaps =
	    test_session_scalar(env.store, sid,
				"WITH r AS (SELECT time_ns - (SELECT min(time_ns) "
				"FROM memory_samples WHERE session_id = ?1) AS t "
				"FROM memory_samples WHERE session_id = ?1 "
				"AND map_heap_bytes IS NOT NULL), "
				"g AS (SELECT t, lead(t) OVER (ORDER BY t) AS nxt FROM r) "
				"SELECT count(*) FROM g WHERE nxt - t > t / 20 + 1000000000");
	ret->last = test_session_scalar(env.store, sid,
					"SELECT (max(time_ns) - min(time_ns)) / 1000000000 "
					"FROM memory_samples "
					"WHERE session_id = ?1 AND map_heap_bytes IS NOT NULL");
	test_session_close(&env, s, dir, path);
	return 0;
}

int main(void)
{
	struct series age, cost;

	/* The age rule alone. */
	if (series(1, &age) < 0)
		return check_exit("session-rss");
	printf("%d readings over an hour: %lld with the smaps split, %lld of them in the first "
	       "20 s, the last at %lld s\n",
	       READINGS, age.split, age.early, age.last);
	/* Every reading of the first 20 s; the first at the start. */
	CHECK_INT_EQ(age.early, 20);
	/* ~20 + 20 ln(3600 / 20) = ~124 */
	CHECK(age.split >= 100 && age.split <= 160);
	CHECK_INT_EQ(age.gaps, 0);
	/* the wait at an hour is 180 s */
	CHECK(age.last >= READINGS - 1 - 190);

	/* A round of this process's smaps takes well over 2 us of CPU: at 10^7 times that,
	 * the next round waits past the first 20 s. */
	if (series(10000000, &cost) < 0)
		return check_exit("session-rss");
	printf("with rounds waiting 10^7 times their CPU time: %lld with the split, %lld in the "
	       "first 20 s\n",
	       cost.split, cost.early);
	CHECK_INT_EQ(cost.early, 1);
	CHECK(cost.split < age.split);
	return check_exit("session-rss");
}
