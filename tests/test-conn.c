/*
 * test-conn.c - profctl's reader of profd's answers (client/conn.c): a long
 * plain string as an answer's last member, read around jansson, must give
 * what jansson gives for the whole line, for lines whole, cut short, with
 * bytes after the end and garbled; never a read before or past the line;
 * and through a real socket, a clear error for a malformed, cut or
 * oversized answer. No root needed.
 */
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "../client/conn.c" /* parse_response() and plain_tail() are static */
#include "check.h"

/* A tail just long enough to be read around jansson, and one a byte short. */
#define TAIL_LONG (PROFD_PLAIN_TAIL_MIN_BYTES + 37)
#define TAIL_SHORT (PROFD_PLAIN_TAIL_MIN_BYTES - 1)

/* @n plain bytes as profd's packed rows look: digits, letters, ',' and ';'. */
static char *plain_string(size_t n)
{
	static const char alphabet[] = "0123456789abcdefXYZ,;:-_ ";
	char *s = malloc(n + 1);

	if (!s)
		SETUP_FAIL("out of memory");
	for (size_t i = 0; i < n; i++)
		s[i] = alphabet[(i * 7 + i / 13) % (sizeof(alphabet) - 1)];
	s[n] = '\0';
	return s;
}

/* @head, a tail of @tail_len plain bytes, then @end: a response line without its newline. */
static char *line_of(const char *head, size_t tail_len, const char *end, size_t *ret_len)
{
	_cleanup_free_ char *tail = plain_string(tail_len);
	char *s;

	if (asprintf(&s, "%s%s%s", head, tail, end) < 0)
		SETUP_FAIL("out of memory");
	*ret_len = strlen(s);
	return s;
}

/*
 * guarded_copy() - a copy of @len bytes of @src in a mapping where the page
 * before the copy's first byte (@at_end false) or after its last byte
 * (@at_end true) is inaccessible, so that reading before or past the line
 * faults. Unmap with munmap(*@ret_map, *@ret_map_len).
 */
static char *guarded_copy(const char *src, size_t len, bool at_end, void **ret_map,
			  size_t *ret_map_len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t data = (len + page - 1) / page * page + page;
	char *map =
	    mmap(NULL, data + 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *p;

	if (map == MAP_FAILED)
		SETUP_FAIL("mmap: %m");
	if (mprotect(map, page, PROT_NONE) < 0 || mprotect(map + page + data, page, PROT_NONE) < 0)
		SETUP_FAIL("mprotect: %m");
	p = at_end ? map + page + data - len : map + page;
	memcpy(p, src, len);
	*ret_map = map;
	*ret_map_len = data + 2 * page;
	return p;
}

/*
 * check_like_jansson() - parse_response() on the @len bytes at @text, laid
 * against a guard page at either end, refuses it (with a reason) when
 * jansson refuses the whole line, and otherwise gives an object equal to
 * jansson's. @what names the case in a failure.
 */
static void check_like_jansson_at(const char *text, size_t len, const char *what, int line_no)
{
	json_error_t want_err, err;
	json_t *want = json_loadb(text, len, JSON_REJECT_DUPLICATES, &want_err);

	for (int at_end = 0; at_end < 2; at_end++) {
		void *map;
		size_t map_len;
		char *p = guarded_copy(text, len, at_end, &map, &map_len);
		json_t *got;

		memset(&err, 0, sizeof(err));
		got = parse_response(p, len, &err);
		if (!want && got)
			check_fail(__FILE__, line_no, "%s (%zu bytes): accepted, jansson says %s",
				   what, len, want_err.text);
		else if (want && !got)
			check_fail(__FILE__, line_no,
				   "%s (%zu bytes): refused (%s), jansson accepts", what, len,
				   err.text);
		else if (want && !json_equal(want, got))
			check_fail(__FILE__, line_no, "%s (%zu bytes): not what jansson reads",
				   what, len);
		else if (!got && !err.text[0])
			check_fail(__FILE__, line_no, "%s (%zu bytes): refused without a reason",
				   what, len);
		/* The line is given back as it came (parse_response() borrows a byte). */
		if (memcmp(p, text, len) != 0)
			check_fail(__FILE__, line_no, "%s: the line was changed", what);
		json_decref(got);
		munmap(map, map_len);
	}
	json_decref(want);
}
#define check_like_jansson(text, len, what) check_like_jansson_at(text, len, what, __LINE__)

/* Whether the fast path takes @len bytes at @text (else jansson reads it whole). */
static bool read_around_jansson(const char *text, size_t len)
{
	const char *key, *val;
	size_t key_len, val_len;

	return plain_tail(text, len, &key, &key_len, &val, &val_len) > 0;
}

/* Whole answers: a long tail read around jansson, a short one through it, the same objects. */
static void test_whole(void)
{
	static const char head[] = "{\"v\":1,\"ok\":true,\"rows\":3,\"samples_packed\":\"";
	size_t len;
	_cleanup_free_ char *a = line_of(head, TAIL_LONG, "\"}", &len);
	_cleanup_free_ char *b = NULL, *c = NULL;
	json_error_t err;
	json_t *o;

	CHECK(read_around_jansson(a, len));
	check_like_jansson(a, len, "a long plain tail");
	o = parse_response(a, len, &err);
	CHECK(o && json_string_length(json_object_get(o, "samples_packed")) == TAIL_LONG);
	CHECK(o && json_integer_value(json_object_get(o, "rows")) == 3);
	json_decref(o);

	b = line_of(head, TAIL_SHORT, "\"}", &len);
	CHECK(!read_around_jansson(b, len));
	check_like_jansson(b, len, "a tail a byte short of the fast path");

	/* The only member: no ',' before it, jansson reads it all. */
	c = line_of("{\"samples_packed\":\"", TAIL_LONG, "\"}", &len);
	CHECK(!read_around_jansson(c, len));
	check_like_jansson(c, len, "a long plain string as the only member");
}

/* Cut short anywhere: in the head, at the member's start, inside the tail, before its end. */
static void test_truncated(void)
{
	static const char head[] = "{\"v\":1,\"ok\":true,\"rows\":[1,2],\"samples_packed\":\"";
	size_t len, head_len = strlen(head);
	_cleanup_free_ char *a = line_of(head, TAIL_LONG, "\"}", &len);
	char what[64];

	for (size_t n = 0; n < len; n++) {
		/* Every cut near the member's start and the line's end; a few inside the tail. */
		if (n > head_len + 8 && n < len - 8 && n % 9973 != 0)
			continue;
		snprintf(what, sizeof(what), "cut to %zu bytes", n);
		check_like_jansson(a, n, what);
	}
}

/* A tail longer or shorter than its closing: bytes after the object, a brace or a quote missing. */
static void test_ends(void)
{
	static const char head[] = "{\"v\":1,\"ok\":true,\"samples_packed\":\"";
	static const char *const ends[] = {
	    "\"}}", "\"} ", "\"}x", "\"}\"", "\"}\"}", "\"\"}", "\"}\r",
	    "\"]",  "}",    "\"",   "\" }",  "\"\t}",  "\",}",	"\",\"x\":1}",
	};

	for (size_t i = 0; i < ARRAY_SIZE(ends); i++) {
		size_t len;
		_cleanup_free_ char *a = line_of(head, TAIL_LONG, ends[i], &len);
		char what[64];

		snprintf(what, sizeof(what), "tail ended by '%s'", ends[i]);
		check_like_jansson(a, len, what);
	}
}

/*
 * Garbage that ends as a long plain member would: a head that is not an
 * object's start, a member that is not at the top level, a duplicate key,
 * bytes in the tail or key that need escaping.
 */
static void test_garbage(void)
{
	static const struct {
		const char *head, *end;
	} cases[] = {
	    {"{,\"k\":\"", "\"}"},
	    {"{ ,\"k\":\"", "\"}"},
	    {"{\"a\":1,,\"k\":\"", "\"}"},
	    {"{\"a\":[1,\"k\":\"", "\"}"},
	    {"{\"a\":{\"b\":1,\"k\":\"", "\"}"},
	    {"{\"a\":\"x,\"k\":\"", "\"}"},
	    {"{\"a\":1},\"k\":\"", "\"}"},
	    {"[1,\"k\":\"", "\"}"},
	    {"1,\"k\":\"", "\"}"},
	    {",\"k\":\"", "\"}"},
	    {"\"k\":\"", "\"}"},
	    {"{\"k\":1,\"k\":\"", "\"}"},
	    {"{\"a\":1 \"k\":\"", "\"}"},
	    {"{\"a\":1,\"k\" :\"", "\"}"},
	    {"{\"a\":1,\"k\":\"\\", "\"}"},
	    {"{\"a\":1,\"k\\\"\":\"", "\"}"},
	    {"{\"a\":1,\"k\":\"x\\\"", "\"}"},
	    {"{\"a\":1,\"k\":\"x\"", "\"}"},
	    {"{\"a\":1,\"k\":\"\xc3\xa9", "\"}"},
	    {"{\"a\":1,\"k\":\"\x01", "\"}"},
	    {"{\"a\":1,\"k\":\"", "\xc3\xa9\"}"},
	    {"{\"a\":1,\"k\":\"", "\\n\"}"},
	    {"{\"a\":\"", "\",\"k\":\"x\"}"},
	    {"{\"a\":1,\"\":\"", "\"}"},
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		size_t len;
		_cleanup_free_ char *a = line_of(cases[i].head, TAIL_LONG, cases[i].end, &len);
		char what[96];

		snprintf(what, sizeof(what), "garbage case %zu (%s...%s)", i, cases[i].head,
			 cases[i].end);
		check_like_jansson(a, len, what);
	}

	/* A NUL inside the tail: jansson refuses it, so must the fast path. */
	{
		size_t len;
		_cleanup_free_ char *a = line_of("{\"a\":1,\"k\":\"", TAIL_LONG, "\"}", &len);

		a[len - 100] = '\0';
		check_like_jansson(a, len, "a NUL in the tail");
	}

	/* Random bytes over the places the fast path reads: the member's start, the end. */
	{
		static const char head[] = "{\"v\":1,\"ok\":true,\"n\":[1,{\"x\":\"y\"}],\"k\":\"";
		static const char bytes[] = "{}[],:\"\\ x1\x01\xc3\n";
		size_t len, head_len = strlen(head);
		_cleanup_free_ char *a = line_of(head, TAIL_LONG, "\"}", &len);
		_cleanup_free_ char *b = malloc(len);
		uint64_t rng = 88172645463325252ULL;

		if (!b)
			SETUP_FAIL("out of memory");
		for (int trial = 0; trial < 400; trial++) {
			char what[64];

			memcpy(b, a, len);
			for (int k = 0; k < 1 + trial % 3; k++) {
				size_t at;

				rng ^= rng << 13;
				rng ^= rng >> 7;
				rng ^= rng << 17;
				at = (rng >> 8) % 24;
				at = (rng & 1) ? len - 1 - at : head_len - 12 + at;
				b[at] = bytes[(rng >> 32) % (sizeof(bytes) - 1)];
			}
			snprintf(what, sizeof(what), "random garbage, trial %d", trial);
			check_like_jansson(b, len, what);
		}
	}
}

/*
 * serve() - a child that accepts one connection on @listen_fd and answers
 * each request line with the next of @answers (@lens bytes each, sent as
 * they are), then closes. Returns the child's pid.
 */
static pid_t serve(int listen_fd, const char *const *answers, const size_t *lens, size_t n)
{
	pid_t pid = fork();

	if (pid < 0)
		SETUP_FAIL("fork: %m");
	if (pid > 0)
		return pid;
	signal(SIGPIPE, SIG_IGN);
	{
		int fd = accept(listen_fd, NULL, NULL);
		FILE *in = fd >= 0 ? fdopen(dup(fd), "r") : NULL;
		char req[4096];

		for (size_t i = 0; in && i < n && fgets(req, sizeof(req), in); i++)
			if (send_all(fd, answers[i], lens[i], -1) < 0)
				break;
		_exit(0);
	}
}

/* Through the socket: a clear error for each bad answer, and the good answer after one. */
static void test_socket(void)
{
	char dir[] = "/tmp/test-conn-XXXXXX", path[64];
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	_cleanup_free_ char *good = NULL, *bad = NULL, *cut = NULL, *huge = NULL;
	size_t good_len, bad_len, cut_len;
	json_t *request = json_pack("{s:s}", "cmd", "ping");
	int listen_fd, status;
	pid_t pid;

	if (!mkdtemp(dir))
		SETUP_FAIL("mkdtemp: %m");
	snprintf(path, sizeof(path), "%s/sock", dir);
	memcpy(addr.sun_path, path, strlen(path) + 1);
	listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    listen(listen_fd, 4) < 0)
		SETUP_FAIL("listen on %s: %m", path);

	good = line_of("{\"v\":1,\"ok\":true,\"rows\":2,\"samples_packed\":\"", TAIL_LONG, "\"}\n",
		       &good_len);
	/* The tail's closing quote and brace lost, the line's end there. */
	bad = line_of("{\"v\":1,\"ok\":true,\"rows\":2,\"samples_packed\":\"", TAIL_LONG, "\n",
		      &bad_len);

	/* A malformed answer, then a good one on the same connection. */
	{
		const char *const answers[] = {bad, good};
		const size_t lens[] = {bad_len, good_len};
		_cleanup_(conn__freep) struct conn *c = NULL;
		json_t *reply = NULL;
		char *detail = NULL;

		pid = serve(listen_fd, answers, lens, 2);
		CHECK_INT_EQ(conn__open(path, &c), 0);
		CHECK_INT_EQ(conn__call(c, request, &reply, &detail), -EBADMSG);
		CHECK(detail && strncmp(detail, "malformed response from profd: ", 31) == 0);
		free(detail);
		detail = NULL;
		CHECK_INT_EQ(conn__call(c, request, &reply, &detail), 0);
		CHECK(!detail);
		CHECK(reply && !json_object_get(reply, "v") && !json_object_get(reply, "ok"));
		CHECK(reply && json_integer_value(json_object_get(reply, "rows")) == 2);
		CHECK(reply &&
		      json_string_length(json_object_get(reply, "samples_packed")) == TAIL_LONG);
		json_decref(reply);
		waitpid(pid, &status, 0);
	}

	/* Cut in the tail and the connection closed: said as such, not taken for an answer. */
	{
		const char *answers[1];
		size_t lens[1];
		_cleanup_(conn__freep) struct conn *c = NULL;
		json_t *reply = NULL;
		char *detail = NULL;

		cut_len = good_len / 2;
		cut = strndup(good, cut_len);
		answers[0] = cut;
		lens[0] = cut_len;
		pid = serve(listen_fd, answers, lens, 1);
		CHECK_INT_EQ(conn__open(path, &c), 0);
		CHECK_INT_EQ(conn__call(c, request, &reply, &detail), -ECONNRESET);
		CHECK(!detail);
		waitpid(pid, &status, 0);
	}

	/* An answer past PROFCTL_MAX_RESPONSE_BYTES without its end: refused, not read on. */
	{
		const char *answers[1];
		size_t lens[1] = {PROFCTL_MAX_RESPONSE_BYTES + 4096};
		_cleanup_(conn__freep) struct conn *c = NULL;
		json_t *reply = NULL;
		char *detail = NULL;

		huge = line_of("{\"v\":1,\"ok\":true,\"samples_packed\":\"", lens[0], "", &lens[0]);
		answers[0] = huge;
		pid = serve(listen_fd, answers, lens, 1);
		CHECK_INT_EQ(conn__open(path, &c), 0);
		CHECK_INT_EQ(conn__call(c, request, &reply, &detail), -EMSGSIZE);
		CHECK(!detail);
		conn__free(TAKE_PTR(c));
		waitpid(pid, &status, 0);
	}

	json_decref(request);
	close(listen_fd);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	test_whole();
	test_truncated();
	test_ends();
	test_garbage();
	test_socket();
	return check_exit("conn");
}
