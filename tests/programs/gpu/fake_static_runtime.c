/* Stands for CUDA's runtime linked statically into the program (nvcc's
 * default, libcudart_static): code inside the executable itself, without
 * debug information, between the program's call and the driver's API
 * callback. The capture test builds this file with -g0 -O0 (no line
 * information, and no tail call that would drop this frame) and links it
 * into fake_cuda_app: the first frame outside the CUDA libraries is then
 * here, and lockscope must name the program's own caller instead. */
#include <stdint.h>

typedef void (*api_fn)(uint32_t, const char *, const void *, uint32_t, uint32_t, const char *);

void static_runtime_call(api_fn api, uint32_t domain, const char *name, const void *params,
                         uint32_t corr, uint32_t site, const char *symbol) {
    api(domain, name, params, corr, site, symbol);
}
