/*
 * cuda-work.cu - a CUDA program with a known pattern of runtime calls, for
 * the CUDA/NVTX probe tests (test-cuda). Built twice by nvcc: with
 * -cudart shared (libcudart.so) and with the static runtime.
 *
 * Prints "ready", waits for a line on stdin (the test attaches meanwhile),
 * then runs ITERATIONS iterations of:
 *   nvtx "train" > "step" > "forward": 3 launches of scale_kernel <<<(4,2,1),(128,1,1)>>>
 *                                      cudaMalloc(1 MiB) (freed), cudaMalloc(64 KiB) (leaked)
 *                                      cudaMemcpy 4096 bytes HtoD
 *   nvtx "train" > "step" > "backward": 2 launches of add_kernel <<<8, 64>>>
 *                                      1 of add_kernel by cudaLaunchKernel(), grid 2, block 32
 *                                      cudaMemcpy 1024 bytes DtoH, cudaDeviceSynchronize
 * and one nvtxMarkA("checkpoint"), prints "done" and exits.
 * Without a GPU every call fails (no device) and cudaMalloc returns no
 * pointer: the probes still see each call, its arguments and its error.
 */
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>

#define ITERATIONS 5

__global__ void scale_kernel(float *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] *= 2;
}

__global__ void add_kernel(float *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] += 1;
}

static char host_buf[4096];

__attribute__((noinline)) static void forward(void)
{
	void *tmp = NULL, *leak = NULL, *dev = NULL;

	nvtxRangePushA("forward");
	cudaMalloc(&tmp, 1 << 20);
	cudaMalloc(&leak, 64 << 10);
	cudaMemcpy(dev, host_buf, 4096, cudaMemcpyHostToDevice);
	for (int k = 0; k < 3; k++)
		scale_kernel<<<dim3(4, 2, 1), dim3(128, 1, 1)>>>((float *)dev, 1024);
	cudaFree(tmp);
	nvtxRangePop();
}

__attribute__((noinline)) static void backward(void)
{
	void *dev = NULL;
	int n = 512;
	void *args[] = { &dev, &n };

	nvtxRangePushA("backward");
	for (int k = 0; k < 2; k++)
		add_kernel<<<8, 64>>>((float *)dev, 512);
	/* The runtime API launch, with the host function: named from its symbol. */
	cudaLaunchKernel((const void *)add_kernel, dim3(2), dim3(32), args, 0, 0);
	cudaMemcpy(host_buf, dev, 1024, cudaMemcpyDeviceToHost);
	cudaDeviceSynchronize();
	nvtxRangePop();
}

int main(void)
{
	char line[64];

	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	nvtxRangePushA("train");
	for (int i = 0; i < ITERATIONS; i++) {
		nvtxRangePushA("step");
		forward();
		backward();
		nvtxRangePop();
	}
	nvtxRangePop();
	nvtxMarkA("checkpoint");
	printf("done\n");
	fflush(stdout);
	return 0;
}
