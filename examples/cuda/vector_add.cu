/* A small CUDA program whose device buffers come from gpumem instead of
 * cudaMalloc: it lets GPU 0 grow on demand, takes three vectors from the default
 * runtime with gpumem_malloc, adds two of them in a kernel, checks the result on
 * the host, and gives the memory back. gpumem uses the device's primary context,
 * which is the one the CUDA runtime uses too, so the pointers work in kernels as
 * they are. Build: meson with -Dexamples_cuda=enabled (nvcc on PATH). Run on a
 * machine with an NVIDIA GPU and driver (on others it says so and exits 77). */
#include <gpumem.h>

#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

__global__ void add(const float *a, const float *b, float *c, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

static int fail(const char *what)
{
    fprintf(stderr, "%s: %s\n", what, gpumem_last_error());
    return 1;
}

int main(void)
{
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
        fprintf(stderr,
                "no CUDA device here: nothing to run (it runs on a machine with an "
                "NVIDIA GPU and its driver)\n");
        return 77;
    }
    /* Without this, GPU 0 would reserve nearly all its memory at the first
     * gpumem_malloc, as TensorFlow does. */
    if (gpumem_set_memory_growth(NULL, 0, true) != GPUMEM_OK)
        return fail("gpumem_set_memory_growth");

    const size_t n = (size_t)1 << 24; /* 16 Mi floats, 64 MiB per vector */
    const size_t bytes = n * sizeof(float);
    float *a = NULL, *b = NULL, *c = NULL;
    if (gpumem_malloc(NULL, 0, bytes, (void **)&a) != GPUMEM_OK ||
        gpumem_malloc(NULL, 0, bytes, (void **)&b) != GPUMEM_OK ||
        gpumem_malloc(NULL, 0, bytes, (void **)&c) != GPUMEM_OK)
        return fail("gpumem_malloc");

    float *host = (float *)malloc(bytes);
    if (!host)
        return 1;
    for (size_t i = 0; i < n; i++)
        host[i] = (float)i;
    cudaMemcpy(a, host, bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(b, host, bytes, cudaMemcpyHostToDevice);
    add<<<(unsigned)((n + 255) / 256), 256>>>(a, b, c, n);
    cudaError_t e = cudaMemcpy(host, c, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        fprintf(stderr, "CUDA: %s\n", cudaGetErrorString(e));
        return 1;
    }
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += host[i] != 2.0f * (float)i;
    free(host);

    gpumem_memory_info info = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    gpumem_get_memory_info(NULL, 0, &info);
    printf("/device:GPU:0: %llu MiB in use, %llu MiB reserved, limit %llu MiB\n",
           (unsigned long long)(info.current_bytes >> 20),
           (unsigned long long)(info.reserved_bytes >> 20),
           (unsigned long long)(info.limit_bytes >> 20));
    gpumem_free(NULL, a);
    gpumem_free(NULL, b);
    gpumem_free(NULL, c);
    uint64_t released = 0;
    gpumem_release_unused(NULL, 0, &released);
    printf("%s: %zu of %zu sums wrong; released %llu MiB to the GPU\n",
           wrong ? "FAILED" : "ok", wrong, n, (unsigned long long)(released >> 20));
    return wrong ? 1 : 0;
}
