// The CUDA suites' skip: without a usable device a test skips and says why (CI builds them everywhere).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/cuda_backend.h"

#define SKIP_WITHOUT_GPU()                                                                              \
  do {                                                                                                  \
    std::string why_;                                                                                   \
    if (!::tf::backend::cuda::cuda_available(&why_)) GTEST_SKIP() << "no usable CUDA device: " << why_; \
  } while (0)
