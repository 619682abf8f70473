// The wgmma causal attention kernels for d = 64 (attention_wgmma.cu's forward, attention_wgmma_bwd.cu's dK/dV):
// host declarations only.
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

// The dK/dV pass of attention_backward with BackwardKernel::kWgmma (the same checks as above, by
// attention_backward): writes the dk and dv columns of dqkv from qkv, dout, the forward's lse and D = rowsum(dO∘O)
// in delta, as attention.cu's attention_dkdv_kernel does. scale_log2, scale: d^-½·log2 e and d^-½ as attention.cu's
// scale_log2_of and scale_of round them.
void attention_dkdv_wgmma64(const uint16_t* qkv, const uint16_t* dout, const float* lse, const float* delta,
                            const AttentionDims& d, uint16_t* dqkv, cudaStream_t stream, float scale_log2, float scale);

}  // namespace tf::backend::cuda
