__global__ void k_sqrt(float* a) { a[threadIdx.x] = __fsqrt_rn(a[threadIdx.x]); }
__global__ void k_div(float* a, const float* b) { a[threadIdx.x] = __fdiv_rn(a[threadIdx.x], b[threadIdx.x]); }
