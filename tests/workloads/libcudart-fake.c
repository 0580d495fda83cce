/*
 * libcudart-fake.c - a stand-in libcudart.so.1 whose cudaMalloc and cudaFree
 * succeed (host memory), for test-uprobes: a CUDA library dlopen()ed after
 * the attach, as cuInit() loads libcuda.so, must get its probes too.
 */
#include <stdlib.h>

__attribute__((noinline)) int cudaMalloc(void **p, size_t size)
{
	*p = malloc(size);
	__asm__ volatile("" ::: "memory");
	return *p ? 0 : 2;
}

__attribute__((noinline)) int cudaFree(void *p)
{
	free(p);
	__asm__ volatile("" ::: "memory");
	return 0;
}
