// The wgmma causal attention forward for d = 64 (attention_wgmma.cu): host declaration only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/decoder_kernels.cuh"

namespace tf::backend::cuda {

// attention_forward with ForwardTiles::kWgmma: the arguments are checked by attention_forward (d = 64, a
// compute-capability-9.0 device, a build with sm_90a code: the file is compiled only when
// CMAKE_CUDA_ARCHITECTURES holds 90, and attention.cu sees TF_HAVE_WGMMA_ATTENTION then). scale_log2:
// d^-½·log2 e as attention.cu's scale_log2_of rounds it.
void attention_forward_wgmma64(const uint16_t* qkv, const AttentionDims& d, uint16_t* o, float* lse,
                               cudaStream_t stream, float scale_log2);

}  // namespace tf::backend::cuda
