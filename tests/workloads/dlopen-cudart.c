/*
 * dlopen-cudart.c - loads a CUDA runtime library after the attach
 * (test-uprobes). Prints "ready" and waits for a line on stdin; dlopen()s
 * argv[1], prints "loaded" and waits for another line; then allocates
 * 3 x 2 MiB with its cudaMalloc (never freed), prints "done" and exits.
 */
#include <dlfcn.h>
#include <stdio.h>

#include "handshake.h"

int main(int argc, char **argv)
{
	int (*alloc)(void **, size_t);
	void *lib, *p;

	if (argc != 2)
		return 2;
	if (!say_and_wait("ready"))
		return 1;
	lib = dlopen(argv[1], RTLD_NOW);
	if (!lib || !(alloc = (int (*)(void **, size_t))dlsym(lib, "cudaMalloc"))) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	if (!say_and_wait("loaded"))
		return 1;
	for (int i = 0; i < 3; i++)
		alloc(&p, 2 << 20);
	printf("done\n");
	fflush(stdout);
	return 0;
}
