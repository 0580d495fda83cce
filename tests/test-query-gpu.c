/*
 * test-query-gpu.c - the gpu and ranges reports (daemon/report/gpu.c) over a
 * synthetic session written with the store's own functions and the rows
 * gpu_acc.c writes: totals summed over flushes, min/max over them, live
 * GPU bytes and their peak from allocations and matched frees, live bytes
 * per allocating stack, the NVTX tree's order and % of session time, and
 * a session that does not exist. Needs neither root nor a GPU.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <jansson.h>

#include "check_json.h"
#include "check_store.h"
#include "report/gpu.h"
#include "store/store.h"

int main(void)
{
	char dir[] = "/tmp/test-query-gpu-XXXXXX", path[64], sql[2048];
	struct store *st = NULL;
	int64_t sid, f_malloc, f_cache, f_temp, f_main, s_cache, s_temp;
	json_t *g = NULL, *r = NULL, *mem, *x;
	const int64_t t0 = 1000000000000LL, mib = 1 << 20;
	sqlite3 *db;

	test_db_path(dir, path, sizeof(path));
	if (store__open(path, &st) < 0)
		return 99;
	db = store__db(st);

	/* A session of 10 s, two allocating stacks: cudaMalloc < alloc_cache < main,
	 * cudaMalloc < alloc_temp < main. */
	struct store_session row = test_session_row(77, "train", "cpu,cuda,nvtx", (uint64_t)t0);
	CHECK_INT_EQ(store__begin(st), 0);
	CHECK_INT_EQ(store__session_insert(st, &row, &sid), 0);
	CHECK_INT_EQ(test_frame_id(st, "/lib/libcudart.so.13", 0x100, "cudaMalloc", &f_malloc), 0);
	CHECK_INT_EQ(test_frame_id(st, "/app/train", 0x200, "alloc_cache", &f_cache), 0);
	CHECK_INT_EQ(test_frame_id(st, "/app/train", 0x300, "alloc_temp", &f_temp), 0);
	CHECK_INT_EQ(test_frame_id(st, "/app/train", 0x400, "main", &f_main), 0);
	CHECK_INT_EQ(store__stack_id(st, (int64_t[]){ f_malloc, f_cache, f_main }, 3, false, true,
				     &s_cache),
		     0);
	CHECK_INT_EQ(store__stack_id(st, (int64_t[]){ f_malloc, f_temp, f_main }, 3, false, true,
				     &s_temp),
		     0);
	CHECK_INT_EQ(store__session_end(st, sid, "detached", (uint64_t)(t0 + 10000000000LL)), 0);
	CHECK_INT_EQ(store__commit(st), 0);

	/* Two flushes' rows of API calls, a kernel in two rows, copies. */
	snprintf(sql, sizeof(sql),
		 "INSERT INTO gpu_api_calls VALUES (%1$lld, 1, 'cudaMalloc', 3, 1, 3000, 500, 2000),"
		 " (%1$lld, 2, 'cudaMalloc', 2, 0, 1000, 400, 600),"
		 " (%1$lld, 1, 'cudaDeviceSynchronize', 1, 0, 9000000, 9000000, 9000000);"
		 "INSERT INTO gpu_kernels VALUES (%1$lld, 1, 'scale(float*)', '__cudaLaunchKernel',"
		 " '4,1,1', '128,1,1', %2$lld, 5, 0), (%1$lld, 2, 'scale(float*)',"
		 " '__cudaLaunchKernel', '4,1,1', '128,1,1', %2$lld, 7, 1);"
		 "INSERT INTO gpu_copies VALUES (%1$lld, 1, 'cudaMemcpy', 'HtoD', 2, 8192, 0),"
		 " (%1$lld, 2, 'cudaMemcpy', 'HtoD', 1, 4096, 0),"
		 " (%1$lld, 2, 'cudaMemcpy', 'DtoH', 1, 100, 1);"
		 "INSERT INTO gpu_probes VALUES (%1$lld, 77, 'cudaMalloc', '/lib/libcudart.so.13',"
		 " 'attached'), (%1$lld, 77, 'cuMemAlloc', '', 'missing'),"
		 " (%1$lld, 77, 'cudaFree', '', 'missing'),"
		 " (%1$lld, 77, 'cudaFree', '/lib/libcuda2.so', 'attached');",
		 (long long)sid, (long long)s_cache);
	exec_sql(db, sql);
	/*
	 * Memory: at 1 s alloc_cache 1 MiB, at 1.5 s alloc_temp 2 MiB, at 2 s the
	 * temp block freed (matched: carries alloc_temp's stack), at 3 s a failed
	 * 4 MiB alloc_cache, at 3.5 s alloc_cache 1 MiB more, and a free of a
	 * pointer never seen (0 delta). Live: 1, 3 (peak), 1, 1, 2 MiB.
	 */
	snprintf(sql, sizeof(sql),
		 "INSERT INTO gpu_mem_events VALUES"
		 " (%1$lld, %3$lld + 1000000000, 'cudaMalloc', 'device', %4$lld, %4$lld, 1, 16, %2$lld),"
		 " (%1$lld, %3$lld + 1500000000, 'cudaMalloc', 'device', 2 * %4$lld, 2 * %4$lld, 1, 32,"
		 " %5$lld),"
		 " (%1$lld, %3$lld + 2000000000, 'cudaFree', 'device', 2 * %4$lld, -2 * %4$lld, 1, 32,"
		 " %5$lld),"
		 " (%1$lld, %3$lld + 3000000000, 'cudaMalloc', 'device', 4 * %4$lld, 0, 0, 0, %2$lld),"
		 " (%1$lld, %3$lld + 3500000000, 'cudaMalloc', 'device', %4$lld, %4$lld, 1, 48, %2$lld),"
		 " (%1$lld, %3$lld + 3600000000, 'cudaFree', 'device', 0, 0, 1, 99, %2$lld);",
		 (long long)sid, (long long)s_cache, (long long)t0, (long long)mib, (long long)s_temp);
	exec_sql(db, sql);
	/* NVTX: train (1 call, 8 s), train > step (2 flushes: 3 + 2 calls), a mark. */
	snprintf(sql, sizeof(sql),
		 "INSERT INTO nvtx_ranges VALUES"
		 " (%1$lld, 2, 'push', 'train', 'train', 0, 1, 8000000000, 8000000000, 8000000000),"
		 " (%1$lld, 1, 'push', 'train > step', 'step', 1, 3, 3000000000, 900000000, 1100000000),"
		 " (%1$lld, 2, 'push', 'train > step', 'step', 1, 2, 2000000000, 800000000, 1200000000),"
		 " (%1$lld, 2, 'mark', 'checkpoint', 'checkpoint', 0, 1, 0, 0, 0);"
		 "UPDATE sessions SET gpu_lost_calls = 4, nvtx_unmatched = 1 WHERE id = %1$lld;",
		 (long long)sid);
	exec_sql(db, sql);

	CHECK_INT_EQ(query__gpu(db, sid, 10, &g), 0);
	CHECK_INT_EQ(gi(g, "lost_calls"), 4);
	x = json_array_get(json_object_get(g, "api"), 1);
	CHECK_STR_EQ(gs(x, "api"), "cudaMalloc"); /* by total time: the sync first */
	CHECK_INT_EQ(gi(x, "calls"), 5);
	CHECK_INT_EQ(gi(x, "errors"), 1);
	CHECK(gr(x, "total_ms") == 0.004 && gr(x, "min_ms") == 0.0 && gr(x, "max_ms") == 0.002);
	x = json_array_get(json_object_get(g, "kernels"), 0);
	CHECK_INT_EQ(json_array_size(json_object_get(g, "kernels")), 1);
	CHECK_INT_EQ(gi(x, "launches"), 12);
	CHECK_INT_EQ(gi(x, "errors"), 1);
	CHECK_STR_EQ(gs(x, "grid"), "4,1,1");
	CHECK_STR_EQ(json_string_value(json_array_get(json_object_get(x, "stack"), 1)),
		     "alloc_cache");
	x = json_array_get(json_object_get(g, "copies"), 0);
	CHECK_STR_EQ(gs(x, "direction"), "HtoD");
	CHECK_INT_EQ(gi(x, "bytes"), 12288);
	CHECK_INT_EQ(gi(x, "calls"), 3);
	/* A symbol attached in some file is not also listed missing. */
	CHECK_INT_EQ(json_array_size(json_object_get(g, "probes")), 3);
	for (size_t i = 0; i < json_array_size(json_object_get(g, "probes")); i++) {
		x = json_array_get(json_object_get(g, "probes"), i);
		CHECK(!(strcmp(gs(x, "what"), "cudaFree") == 0 &&
			strcmp(gs(x, "status"), "missing") == 0));
	}

	mem = json_object_get(g, "memory");
	CHECK_INT_EQ(gi(mem, "allocations"), 4);
	CHECK_INT_EQ(gi(mem, "failed_allocations"), 1);
	CHECK_INT_EQ(gi(mem, "requested_bytes"), 8 * mib);
	CHECK_INT_EQ(gi(mem, "allocated_bytes"), 4 * mib);
	CHECK_INT_EQ(gi(mem, "frees"), 2);
	CHECK_INT_EQ(gi(mem, "freed_bytes"), 2 * mib);
	CHECK_INT_EQ(gi(mem, "live_bytes"), 2 * mib);
	CHECK_INT_EQ(gi(mem, "peak_live_bytes"), 3 * mib);
	/* By stack: alloc_cache keeps 2 MiB of the 2 MiB it got (and asked 6), alloc_temp 0. */
	x = json_array_get(json_object_get(mem, "by_stack"), 0);
	CHECK_INT_EQ(gi(x, "live_bytes"), 2 * mib);
	CHECK_INT_EQ(gi(x, "allocated_bytes"), 2 * mib);
	CHECK_INT_EQ(gi(x, "requested_bytes"), 6 * mib);
	CHECK_INT_EQ(gi(x, "failed"), 1);
	CHECK_STR_EQ(json_string_value(json_array_get(json_object_get(x, "stack"), 1)),
		     "alloc_cache");
	x = json_array_get(json_object_get(mem, "by_stack"), 1);
	CHECK_INT_EQ(gi(x, "live_bytes"), 0);
	CHECK_INT_EQ(gi(x, "allocated_bytes"), 2 * mib);
	/* Timeline: the live bytes at the end of seconds 1, 2 and 3. */
	CHECK_INT_EQ(json_array_size(json_object_get(mem, "timeline")), 3);
	CHECK_INT_EQ(gi(json_array_get(json_object_get(mem, "timeline"), 0), "t_s"), 1);
	CHECK_INT_EQ(gi(json_array_get(json_object_get(mem, "timeline"), 0), "live_bytes"),
		     3 * mib);
	CHECK_INT_EQ(gi(json_array_get(json_object_get(mem, "timeline"), 1), "live_bytes"), mib);
	CHECK_INT_EQ(gi(json_array_get(json_object_get(mem, "timeline"), 2), "live_bytes"),
		     2 * mib);

	/* --limit bounds each list. */
	json_decref(g);
	CHECK_INT_EQ(query__gpu(db, sid, 1, &g), 0);
	CHECK_INT_EQ(json_array_size(json_object_get(g, "api")), 1);
	CHECK_INT_EQ(json_array_size(json_object_get(json_object_get(g, "memory"), "by_stack")), 1);

	CHECK_INT_EQ(query__ranges(db, sid, &r), 0);
	CHECK_INT_EQ(gi(r, "nvtx_unmatched"), 1);
	CHECK(gr(r, "session_s") == 10.0);
	CHECK_INT_EQ(json_array_size(json_object_get(r, "ranges")), 3);
	x = json_array_get(json_object_get(r, "ranges"), 0);
	CHECK_STR_EQ(gs(x, "path"), "train");
	CHECK(gr(x, "pct") == 80.0);
	x = json_array_get(json_object_get(r, "ranges"), 1);
	CHECK_STR_EQ(gs(x, "path"), "train > step");
	CHECK_INT_EQ(gi(x, "depth"), 1);
	CHECK_INT_EQ(gi(x, "calls"), 5);
	CHECK(gr(x, "total_ms") == 5000.0 && gr(x, "avg_ms") == 1000.0 && gr(x, "min_ms") == 800.0 &&
	      gr(x, "max_ms") == 1200.0 && gr(x, "pct") == 50.0);
	CHECK_STR_EQ(gs(json_array_get(json_object_get(r, "ranges"), 2), "kind"), "mark");

	/* No such session. */
	json_decref(g);
	json_decref(r);
	g = r = NULL;
	CHECK_INT_EQ(query__gpu(db, sid + 100, 10, &g), -ENOENT);
	CHECK_INT_EQ(query__ranges(db, sid + 100, &r), -ENOENT);

	store__close(st);
	test_db_remove(dir, path);
	return check_exit("test-query-gpu");
}
