/*
 * jit-map.c - a tiny "JIT": copies machine code for a counting loop into an
 * anonymous executable mapping, announces it in /tmp/perf-PID.map (the perf
 * JIT map format: "START SIZE NAME", hex) as jit_hot_loop, and runs it for
 * --seconds. The generated code keeps a frame pointer, so the stack goes on
 * into main. x86-64 only.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "timing.h"

/* push %rbp; mov %rsp,%rbp; mov %rdi,%rax; 1: dec %rax; jnz 1b; pop %rbp; ret */
static const unsigned char code[] = {
	0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xf8, 0x48, 0xff, 0xc8, 0x75, 0xfb, 0x5d, 0xc3,
};

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5, t0;
	uint64_t (*fn)(uint64_t);
	char path[64];
	void *mem;
	FILE *f;

#if !defined(__x86_64__)
	fprintf(stderr, "jit-map: x86-64 only\n");
	return 77;
#endif
	mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return 1;
	/* Place the code off the page start, as a JIT would, to check offsets. */
	memcpy((char *)mem + 256, code, sizeof(code));
	if (mprotect(mem, 4096, PROT_READ | PROT_EXEC) < 0)
		return 1;
	fn = (uint64_t(*)(uint64_t))((char *)mem + 256);

	snprintf(path, sizeof(path), "/tmp/perf-%d.map", getpid());
	f = fopen(path, "w");
	if (!f)
		return 1;
	fprintf(f, "%lx %zx jit_hot_loop\n", (unsigned long)fn, sizeof(code));
	fclose(f);
	printf("jit-map: pid %d, jit_hot_loop at %p\n", getpid(), (void *)fn);
	fflush(stdout);

	t0 = now_s();
	while (now_s() - t0 < seconds)
		fn(10000000);
	unlink(path);
	return 0;
}
